"""``GUIEnv``: one synthetic GUI task family as a Gymnasium env with text actions.

Observations are a ``Dict`` with the well-known keys: ``image`` (uint8 ``[H, W, 3]``
screenshot) and ``text`` (the instruction, then the accessibility tree). Actions are text in the
grammar of ``actions.py`` (or, with ``action_space="structured"``, a ``Dict`` read by
``GUIAction.from_structured``); a reply with a thought reads its ``<answer>...</answer>`` part, as
every text-action env does (``core/text_actions.py``). The screenshot is painted only when
``image`` is emitted or ``render()`` is called, and repainted only when an action may have changed
it.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.text_actions import answer_text
from omnigym.core.types import OBS_IMAGE, OBS_TEXT
from omnigym.envs.gui.actions import (
    ACTION_CHARSET,
    ACTION_KINDS,
    ACTION_MAX_LENGTH,
    KEYS,
    ActionParseError,
    GUIAction,
    parse_action,
)
from omnigym.envs.gui.families import FAMILIES
from omnigym.envs.gui.render import Renderer, Theme
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.task import Task
from omnigym.envs.latency import LatencyModel, LatencySpec, StepDelay

OBS_KEYS = (OBS_IMAGE, OBS_TEXT)
"""The observation keys a GUI env can emit."""
TEXT_CHARSET = string.printable
TEXT_MAX_LENGTH = 4096
"""Longest ``text`` observation; the families stay far below it (a dozen widgets)."""
SUCCESS_REWARD, FAILURE_REWARD = 1.0, -1.0
MIN_SIZE = 160
"""Smallest screen side: every family's widgets fit from 160x160 up (tested)."""
ACTION_SPACES = ("text", "structured")
"""Values of ``GUIConfig.action_space``."""


@dataclass
class GUIConfig:
    """Options of every GUI env (``gym.make`` keyword arguments)."""

    task: str = "ClickButton"
    """Family name (``families.FAMILIES``); set by the registered id."""
    width: int = 160
    """Screen width in pixels (MiniWoB's 160 by default)."""
    height: int = 210
    """Screen height in pixels (MiniWoB's 210 by default)."""
    obs_keys: tuple[str, ...] = OBS_KEYS
    """Keys to emit, any of ``image``, ``text``; without ``image`` no screenshot is painted."""
    accessibility_tree: bool = True
    """Append the accessibility tree (roles, labels, boxes, states) to ``text``."""
    invalid_action_penalty: float = -0.1
    """Reward of a step whose action is malformed or points off the screen (the action does
    nothing; ``info["action_valid"]`` is False)."""
    action_space: str = "text"
    """``"text"``: one call of the grammar per step (``Text`` space). ``"structured"``: a
    ``Dict`` of ``kind`` (index into ``ACTION_KINDS``), ``x``, ``y``, ``x2``, ``y2``, ``dy``,
    ``text`` and ``key`` (index into ``KEYS``), read by ``GUIAction.from_structured``."""
    latency: LatencySpec = 0.0
    """Simulated UI latency each step sleeps: seconds, a ``(low, high)`` uniform range, or a
    distribution such as ``{dist: lognormal, median_ms: 20, sigma: 1.0}`` (``envs/latency.py``),
    drawn from a generator of its own (observations never depend on it)."""

    def __post_init__(self) -> None:
        if self.task not in FAMILIES:
            raise ValueError(f"unknown GUI task {self.task!r}; known: {', '.join(FAMILIES)}")
        self.obs_keys = tuple(self.obs_keys)
        if self.action_space not in ACTION_SPACES:
            raise ValueError(f"action_space must be one of {ACTION_SPACES}, got {self.action_space!r}")
        if not self.obs_keys or set(self.obs_keys) - set(OBS_KEYS):
            raise ValueError(f"obs_keys must be a non-empty subset of {OBS_KEYS}, got {self.obs_keys}")
        if self.width < MIN_SIZE or self.height < MIN_SIZE:
            raise ValueError(f"screen must be at least {MIN_SIZE}x{MIN_SIZE}, got {self.width}x{self.height}")
        LatencyModel.parse(self.latency)  # raises on a malformed latency


def structured_action_space(width: int, height: int) -> spaces.Dict:
    """The ``action_space="structured"`` space of a ``width`` x ``height`` screen."""

    def coordinate(size: int) -> spaces.Box:
        return spaces.Box(0, size - 1, (), np.int64)

    return spaces.Dict(
        {
            "kind": spaces.Discrete(len(ACTION_KINDS)),
            "x": coordinate(width),
            "y": coordinate(height),
            "x2": coordinate(width),
            "y2": coordinate(height),
            "dy": spaces.Box(-height, height, (), np.int64),
            "text": spaces.Text(max_length=ACTION_MAX_LENGTH, min_length=0, charset=ACTION_CHARSET),
            "key": spaces.Discrete(len(KEYS)),
        }
    )


class GUIEnv(gym.Env[dict[str, Any], Any]):
    """A synthetic GUI task: instruction + screenshot in, one text action per step out.

    Rewards: ``+1`` when the task is solved, ``-1`` when it is committed wrongly (wrong button,
    form submitted with wrong values); both end the episode (``terminated``). Every other step
    gives 0, or ``invalid_action_penalty`` when the action was malformed or pointed off the
    screen. ``info``: ``is_success``, ``action_valid``, ``action_error`` (why the action was
    invalid, "" otherwise), ``latency_s`` (the delay slept).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.config = GUIConfig(**kwargs)
        self.render_mode = render_mode
        width, height = self.config.width, self.config.height
        self.theme = Theme(width, height)
        self.task: Task = FAMILIES[self.config.task](width, height, self.theme)
        self.renderer = Renderer(self.theme)
        self._structured = self.config.action_space == "structured"
        self.action_space: spaces.Space[Any] = (
            structured_action_space(width, height)
            if self._structured
            else spaces.Text(max_length=ACTION_MAX_LENGTH, min_length=0, charset=ACTION_CHARSET)
        )
        every: dict[str, spaces.Space] = {
            OBS_IMAGE: spaces.Box(0, 255, (height, width, 3), np.uint8),
            OBS_TEXT: spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET),
        }
        self._emit = {key: key in self.config.obs_keys for key in OBS_KEYS}
        self.observation_space = spaces.Dict({key: every[key] for key in OBS_KEYS if self._emit[key]})
        self.screen: Screen | None = None
        self._delay = StepDelay(self.config.latency)
        self._done = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Draw a new task instance (instruction, widgets, layout) from the seed."""
        super().reset(seed=seed)
        self.screen = self.task.build(self.np_random)
        # Drawn after the task, always: the latency setting never shifts the task's draws.
        self._delay.reseed(int(self.np_random.integers(2**63)))
        self._done = False
        return self._observation(), {"is_success": False}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Parse ``action``, apply it to the screen and judge the task.

        ``action`` is a text, or a ``Dict`` sample with ``action_space="structured"``.

        A malformed action or one with a point off the screen changes nothing and costs
        ``invalid_action_penalty``; it never raises.
        """
        if self.screen is None:
            raise RuntimeError("call reset() before step()")
        latency = self._delay()
        error = ""
        try:
            parsed: GUIAction | None = (
                GUIAction.from_structured(action) if self._structured else parse_action(answer_text(action))
            )
        except ActionParseError as exc:
            parsed, error = None, str(exc)
        if parsed is not None and not all(self.screen.on_screen(x, y) for x, y in parsed.points()):
            parsed, error = None, f"point off the {self.screen.width}x{self.screen.height} screen"
        reward, success = 0.0, False
        if parsed is None:
            reward = self.config.invalid_action_penalty
        elif not self._done:
            self.screen.apply(parsed)
            outcome = self.task.outcome(self.screen)
            if outcome is not None:
                self._done, success = True, outcome
                reward = SUCCESS_REWARD if outcome else FAILURE_REWARD
        info = {
            "is_success": success,
            "action_valid": parsed is not None,
            "action_error": error,
            "latency_s": latency,
        }
        return self._observation(), reward, self._done, False, info

    def _observation(self) -> dict[str, Any]:
        assert self.screen is not None
        obs: dict[str, Any] = {}
        if self._emit[OBS_IMAGE]:
            obs[OBS_IMAGE] = self.renderer.render(self.screen)
        if self._emit[OBS_TEXT]:
            obs[OBS_TEXT] = self.text()
        return obs

    def text(self) -> str:
        """The ``text`` observation: instruction, then (if enabled) the accessibility tree."""
        assert self.screen is not None
        text = f"instruction: {self.screen.instruction}"
        if self.config.accessibility_tree:
            text += "\nelements:\n" + self.screen.accessibility_tree()
        return text

    def render(self) -> np.ndarray | None:
        """The current screenshot ``[H, W, 3]`` (``rgb_array``)."""
        if self.render_mode != "rgb_array" or self.screen is None:
            return None
        return self.renderer.render(self.screen)
