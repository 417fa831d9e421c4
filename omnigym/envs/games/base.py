"""What every omnigym game shares: observations, the two action spaces, invalid actions.

A game is a :class:`GameEnv` subclass that implements a few hooks (new game, apply one discrete
action, describe and draw the state). The base class turns them into a Gymnasium env with

- a ``Dict`` observation of the well-known keys the config asks for: ``image`` (uint8
  ``[H, W, 3]``), ``text`` (the game, its rules, the action vocabulary, then the state) and, where
  the game has one, ``state`` (a float32 vector for MLP policies);
- ``action_space="discrete"`` (``Discrete(n)``, for MLP/CNN policies) or ``"text"`` (a ``Text``
  space parsed by the game's grammar, for language-model policies). Both name the same discrete
  actions, so a solver or a learned policy plays either;
- invalid actions as a defined outcome: text that does not parse, or a move the rules forbid
  (a card that is not on the table), changes nothing, costs ``invalid_action_penalty`` and sets
  ``info["action_valid"] = False`` with the reason in ``info["action_error"]``.

``info`` always holds ``is_success``, ``action_valid`` and ``action_error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.text_actions import ACTION_TEXT_CHARSET, ACTION_TEXT_MAX_LENGTH, ActionParseError
from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT
from omnigym.envs.latency import LatencyModel, LatencySpec, StepDelay

OBS_KEYS = (OBS_IMAGE, OBS_TEXT, OBS_STATE)
"""The observation keys a game can emit (``state`` only where the game defines one)."""
ACTION_SPACES = ("discrete", "text")
"""Values of ``GameConfig.action_space``."""
TEXT_CHARSET = "".join(chr(c) for c in range(32, 127)) + "\n"
TEXT_MAX_LENGTH = 4096
"""Longest ``text`` observation; games stay far below it."""


class ActionGrammar(Protocol):
    """How a game reads text actions: one answer -> one or more discrete action indices."""

    @property
    def num_actions(self) -> int:
        """Size of the discrete action space the grammar names."""
        ...

    def word(self, index: int) -> str:
        """The canonical text of action ``index``."""
        ...

    def describe(self) -> str:
        """One line for the ``text`` observation.

        Every action's word in index order joined by ``" | "``, optionally followed by ``"; "``
        and a note on how to answer.
        """
        ...

    def parse(self, text: str) -> list[int]:
        """The action indices ``text`` names; raises ``ActionParseError`` when it names none."""
        ...


@dataclass
class GameConfig:
    """Options every game has (``gym.make`` keyword arguments); games extend it."""

    obs_keys: tuple[str, ...] = (OBS_IMAGE, OBS_TEXT)
    """Keys to emit: any of ``image``, ``text`` and (games with one) ``state``."""
    action_space: str = "discrete"
    """``"discrete"``: ``Discrete(n)``; ``"text"``: a ``Text`` space read by the game's grammar."""
    invalid_action_penalty: float = -0.1
    """Reward of a step whose action does not parse or breaks the rules (it changes nothing)."""
    instructions: bool = True
    """Start the ``text`` observation with the rules and the action vocabulary (a prompt)."""
    latency: LatencySpec = 0.0
    """Simulated server latency each step sleeps (a game behind a socket or a browser): seconds, a
    ``(low, high)`` range, or a distribution such as ``{dist: lognormal, median_ms: 20, sigma: 1}``
    (``envs/latency.py``); it never changes the game."""

    def __post_init__(self) -> None:
        LatencyModel.parse(self.latency)  # raises on a malformed latency
        self.obs_keys = tuple(self.obs_keys)
        if self.action_space not in ACTION_SPACES:
            raise ValueError(f"action_space must be one of {ACTION_SPACES}, got {self.action_space!r}")
        if not self.obs_keys or set(self.obs_keys) - set(OBS_KEYS):
            raise ValueError(f"obs_keys must be a non-empty subset of {OBS_KEYS}, got {self.obs_keys}")


@dataclass(frozen=True)
class Outcome:
    """What one discrete action did.

    Attributes:
        reward: the game's reward for it (the base adds ``invalid_action_penalty`` on an error).
        terminated: the game is over (won or lost).
        success: the game was won.
        error: why the rules forbid the action ("" when it was legal); a forbidden action must
            leave the game unchanged.
    """

    reward: float = 0.0
    terminated: bool = False
    success: bool = False
    error: str = ""


class GameEnv(gym.Env[dict[str, Any], Any]):
    """Base of every game: subclasses implement the hooks below, the base does the rest.

    Hooks: ``make_grammar`` (the action vocabulary), ``new_game`` (draw a game from the env's
    generator), ``apply`` (one discrete action -> :class:`Outcome`), ``draw`` (the ``image``),
    ``state_text`` (the state part of ``text``), and, for games with a ``state`` key,
    ``state_vector`` with ``state_size``. Class attributes: ``game`` (name in the text header),
    ``rules`` (one paragraph), ``config_class``, ``image_shape(config)``.
    """

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 4}  # noqa: RUF012  (gymnasium's)
    game: ClassVar[str] = ""
    rules: ClassVar[str] = ""
    config_class: ClassVar[type[GameConfig]] = GameConfig
    has_state: ClassVar[bool] = False

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, *self.metadata["render_modes"]):
            modes = self.metadata["render_modes"]
            raise ValueError(f"render_mode must be None or one of {modes}, got {render_mode!r}")
        self.render_mode = render_mode
        self.config = self.config_class(**kwargs)
        if OBS_STATE in self.config.obs_keys and not self.has_state:
            raise ValueError(f"{self.game} has no 'state' observation; use obs_keys from ('image', 'text')")
        self.grammar: ActionGrammar = self.make_grammar()
        self._text_actions = self.config.action_space == "text"
        self.action_space: spaces.Space[Any] = (
            spaces.Text(max_length=ACTION_TEXT_MAX_LENGTH, min_length=0, charset=ACTION_TEXT_CHARSET)
            if self._text_actions
            else spaces.Discrete(self.grammar.num_actions)
        )
        every: dict[str, spaces.Space] = {
            OBS_IMAGE: spaces.Box(0, 255, self.image_shape(), np.uint8),
            OBS_TEXT: spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET),
        }
        if self.has_state:
            every[OBS_STATE] = spaces.Box(-np.inf, np.inf, (self.state_size(),), np.float32)
        self._emit = tuple(key for key in OBS_KEYS if key in self.config.obs_keys)
        self.observation_space = spaces.Dict({key: every[key] for key in self._emit})
        self._delay = StepDelay(self.config.latency)
        self._started = False

    # --- hooks ------------------------------------------------------------------------------
    def make_grammar(self) -> ActionGrammar:
        """The game's action vocabulary (called once, after ``self.config`` is set)."""
        raise NotImplementedError

    def image_shape(self) -> tuple[int, int, int]:
        """``(H, W, 3)`` of the ``image`` observation under ``self.config``."""
        raise NotImplementedError

    def state_size(self) -> int:
        """Length of the ``state`` vector (games with ``has_state``)."""
        raise NotImplementedError

    def new_game(self, rng: np.random.Generator) -> None:
        """Draw a fresh game from ``rng`` (everything random must come from it)."""
        raise NotImplementedError

    def apply(self, action: int) -> Outcome:
        """Play one discrete action."""
        raise NotImplementedError

    def draw(self) -> np.ndarray:
        """The ``image`` observation: uint8 ``image_shape()``."""
        raise NotImplementedError

    def state_text(self) -> str:
        """The state part of the ``text`` observation (what a solver reads)."""
        raise NotImplementedError

    def state_vector(self) -> np.ndarray:
        """The ``state`` observation: float32 ``[state_size()]``."""
        raise NotImplementedError

    @classmethod
    def solve(cls, state: str) -> int:
        """The solver's next discrete action for a state text (``state_text()``'s output).

        Optimal where the issue asks for it (BFS for Sokoban and Maze, search for Points24, value
        iteration for FrozenLake, basic strategy for Blackjack). Everything the solver needs is in
        the text, so ``game_solver`` plays from observations alone.

        A finished game (won or lost) gets action 0: evaluation keeps feeding the last
        observation of a finished episode and ignores the action.

        Raises:
            ValueError: the state has no solution (or is not this game's).
        """
        raise NotImplementedError(f"{cls.game} has no solver")

    # --- the Gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Draw a new game from the seed (same seed -> same game)."""
        super().reset(seed=seed)
        self.new_game(self.np_random)
        self._delay.reseed(seed)
        self._started = True
        return self._observation(), {"is_success": False, "action_valid": True, "action_error": ""}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Play ``action`` (an index, or text in the game's grammar).

        Text that does not parse, and moves the rules forbid, change nothing and cost
        ``invalid_action_penalty``; they never raise. An index outside the discrete space raises.
        """
        if not self._started:
            raise RuntimeError("call reset() before step()")
        indices, error = self._indices(action)
        latency = self._delay()
        reward, terminated, success = 0.0, False, False
        for index in indices:
            outcome = self.apply(index)
            reward += outcome.reward
            terminated, success = outcome.terminated, outcome.success
            if outcome.error:
                error = outcome.error
                break
            if terminated:
                break
        if error:
            reward += self.config.invalid_action_penalty
        info = {"is_success": success, "action_valid": not error, "action_error": error}
        if not self._delay.model.is_zero:
            info["latency_s"] = latency
        return self._observation(), float(reward), terminated, False, info

    def _indices(self, action: Any) -> tuple[list[int], str]:
        if self._text_actions:
            try:
                return self.grammar.parse(action), ""
            except ActionParseError as exc:
                return [], str(exc)
        index = int(np.asarray(action).reshape(()))
        if not 0 <= index < self.grammar.num_actions:
            raise ValueError(f"{self.game}: action {index} is outside Discrete({self.grammar.num_actions})")
        return [index], ""

    def text(self) -> str:
        """The ``text`` observation: ``game:`` header, rules and actions (if enabled), state."""
        lines = [f"game: {self.game}"]
        if self.config.instructions:
            lines += [f"rules: {self.rules}", f"actions: {self.grammar.describe()}"]
        lines.append(self.state_text())
        return "\n".join(lines)

    def _observation(self) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        for key in self._emit:
            if key == OBS_IMAGE:
                obs[key] = self.draw()
            elif key == OBS_TEXT:
                obs[key] = self.text()
            else:
                obs[key] = self.state_vector()
        return obs

    def render(self) -> Any:
        """``rgb_array``: the ``image``; ``ansi``: the ``text`` observation."""
        if not self._started or self.render_mode is None:
            return None
        return self.draw() if self.render_mode == "rgb_array" else self.text()

    def action_word(self, index: int) -> str:
        """The text of discrete action ``index`` (what a solver answers in text mode)."""
        return self.grammar.word(index)


def solver_text_state(text: str) -> str:
    """The state part of a game's ``text`` observation (after the header, rules and actions)."""
    lines = text.split("\n")
    body = [line for line in lines[1:] if not line.startswith(("rules: ", "actions: "))]
    return "\n".join(body)


def game_name(text: str) -> str:
    """The game a ``text`` observation comes from (its ``game:`` header)."""
    first = text.split("\n", 1)[0]
    if not first.startswith("game: "):
        raise ValueError(f"not a game's text observation (no 'game:' header): {first[:60]!r}")
    return first[len("game: ") :].strip()
