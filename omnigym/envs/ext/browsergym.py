"""BrowserGym's MiniWoB++ tasks (PyPI ``browsergym-miniwob``, Playwright) under omnigym's GUI conventions.

``omnigym/ext-browsergym-ClickButton-v0`` is BrowserGym's ``browsergym/miniwob.click-button``
(any other task by ``task=``), the MiniWoB++ setting BrowserGym and
AgentLab report on. The adapter gives them the synthetic GUI envs' conventions (``gui/env.py``), so
one text policy acts in omnigym's GUI families, in ``miniwob``'s Selenium envs and here:

* observations are a Dict: ``image`` = BrowserGym's screenshot (uint8 ``[321, 498, 3]``: the
  332 x 214 viewport at BrowserGym's 1.5 zoom), ``text`` = ``instruction: <goal>`` then
  ``elements:`` and one ``[i] role "label" (x, y, w, h) states`` line per element BrowserGym marks
  with a ``bid`` and a visible box (the accessibility tree's role and name; boxes in screenshot
  pixels), the format of ``gui/screen.py`` that ``gui_oracle`` parses;
* the action is omnigym's text grammar (:func:`~omnigym.envs.gui.actions.parse_action`), translated
  to BrowserGym's coordinate actions: ``click`` -> ``mouse_click``, ``double_click`` ->
  ``mouse_dblclick``, ``type`` -> ``keyboard_type``, ``key`` -> ``keyboard_press``, ``scroll`` ->
  ``scroll_at``, ``drag`` -> ``mouse_drag_and_drop`` (BrowserGym maps screenshot pixels back to the
  page); a malformed action or a point off the screen is not sent: the previous observation, the
  reward ``invalid_action_penalty`` and ``info["action_valid"]`` False, never an exception;
* rewards and ends are BrowserGym's (1 on success, 0 otherwise; ``terminated`` when the page says
  the episode is done); ``info``: ``is_success``, ``action_valid``, ``action_error`` and
  ``browser_error`` (BrowserGym's ``last_action_error``).

The browser: Playwright 1.44 wants its own Chromium build from a CDN. Where that is missing,
:func:`use_system_chromium` points ``PLAYWRIGHT_BROWSERS_PATH`` at a directory whose
``chromium-<rev>/chrome-linux/chrome`` is a link to Debian's ``/usr/bin/chromium`` (BrowserGym
launches two browsers, the task's and a chat window, and takes an ``executable_path`` for the first
only). The task pages are the ``miniwob`` package's (``MINIWOB_URL``, a ``file://`` URL, set when
unset). BrowserGym relaunches both browsers on every reset (about 3 s here).
"""

from __future__ import annotations

import json
import os
import string
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.types import OBS_IMAGE, OBS_TEXT
from omnigym.envs.ext_ids import chromium_path
from omnigym.envs.gui.actions import (
    ACTION_CHARSET,
    ACTION_MAX_LENGTH,
    GUIAction,
    copy_observation,
    parse_on_screen,
)

INSTALL_HINT = (
    "pip install --no-deps browsergym-miniwob==0.14.3 browsergym-core==0.14.3 playwright==1.44.0 "
    "greenlet==3.0.3 pyee==11.1.0 beautifulsoup4 soupsieve 'lxml<6' miniwob; apt-get install chromium"
)
OBS_KEYS = (OBS_IMAGE, OBS_TEXT)
SCREEN_WIDTH, SCREEN_HEIGHT = 498, 321
"""BrowserGym's MiniWoB screenshot: the 332 x 214 viewport at zoom 1.5."""
TEXT_MAX_LENGTH = 8192
_SKIPPED_ROLES = frozenset({"generic", "none", "RootWebArea", "InlineTextBox", "LineBreak", "paragraph"})


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def use_system_chromium() -> None:
    """Make Playwright find Chromium: ``PLAYWRIGHT_BROWSERS_PATH`` -> a link to the system's binary.

    Does nothing when ``PLAYWRIGHT_BROWSERS_PATH`` is set or Playwright's own build is installed.
    Call before Playwright starts (BrowserGym starts it at the first reset).

    Raises:
        RuntimeError: when no Chromium is on ``PATH``.
    """
    if os.environ.get("PLAYWRIGHT_BROWSERS_PATH"):
        return
    import playwright

    package = Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    revision = next(
        b["revision"] for b in json.loads(package.read_text())["browsers"] if b["name"] == "chromium"
    )
    own = Path.home() / ".cache" / "ms-playwright" / f"chromium-{revision}" / "chrome-linux" / "chrome"
    if own.exists():
        return
    binary = chromium_path()
    if binary is None:
        raise RuntimeError(f"BrowserGym needs Chromium and none is on PATH: {INSTALL_HINT}")
    root = Path(tempfile.gettempdir()) / f"omnigym-playwright-{os.getuid()}"
    link = root / f"chromium-{revision}" / "chrome-linux" / "chrome"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(binary)
    os.environ["PLAYWRIGHT_BROWSERS_PATH"] = str(root)


def _default_miniwob_url() -> None:
    """``MINIWOB_URL`` -> the task pages inside the installed ``miniwob`` package (when unset)."""
    if os.environ.get("MINIWOB_URL"):
        return
    spec = find_spec("miniwob")  # not imported: importing it registers its own Selenium ids
    if spec is None or spec.origin is None:
        raise ImportError(f"BrowserGym's MiniWoB tasks are the miniwob package's pages: {INSTALL_HINT}")
    pages = Path(spec.origin).parent / "html" / "miniwob"
    os.environ["MINIWOB_URL"] = pages.as_uri() + "/"


def to_browsergym_action(action: GUIAction) -> str:
    """One grammar action as BrowserGym's coordinate-action call (screenshot pixels)."""
    if action.kind == "click":
        return f"mouse_click({action.x}, {action.y})"
    if action.kind == "double_click":
        return f"mouse_dblclick({action.x}, {action.y})"
    if action.kind == "type":
        return f"keyboard_type({json.dumps(action.text)})"
    if action.kind == "key":
        return f"keyboard_press({json.dumps(action.text)})"
    if action.kind == "scroll":
        return f"scroll_at({action.x}, {action.y}, 0, {action.dy})"
    return f"mouse_drag_and_drop({action.x}, {action.y}, {action.x2}, {action.y2})"


def accessibility_tree(axtree: dict[str, Any], properties: dict[str, Any]) -> str:
    """The lines of BrowserGym's accessibility tree that have a ``bid`` and a visible box.

    Args:
        axtree: BrowserGym's ``axtree_object`` (Chrome DevTools ``getFullAXTree`` nodes).
        properties: BrowserGym's ``extra_element_properties`` (bid -> visibility, bbox in
            screenshot pixels).
    """
    lines = [f'[0] window "" (0, 0, {SCREEN_WIDTH}, {SCREEN_HEIGHT})']
    for node in axtree.get("nodes", []):
        bid = node.get("browsergym_id")
        role = str(node.get("role", {}).get("value", ""))
        prop = properties.get(str(bid)) if bid is not None else None
        if prop is None or role in _SKIPPED_ROLES or node.get("ignored"):
            continue
        box = prop.get("bbox")
        if box is None or float(prop.get("visibility", 0.0)) <= 0.0:
            continue
        x, y, w, h = (round(float(v)) for v in box)
        if w <= 0 or h <= 0 or x >= SCREEN_WIDTH or y >= SCREEN_HEIGHT or x + w <= 0 or y + h <= 0:
            continue
        name = str(node.get("name", {}).get("value", ""))
        states = {p["name"]: p.get("value", {}).get("value") for p in node.get("properties", [])}
        suffix = ""
        if role in ("checkbox", "radio"):
            suffix += " checked" if states.get("checked") in (True, "true") else " unchecked"
        if role in ("textbox", "searchbox"):
            suffix += f' value="{_quote(str(node.get("value", {}).get("value", "")))}"'
        if states.get("focused"):
            suffix += " focused"
        role = "text" if role == "StaticText" else role
        lines.append(f'[{len(lines)}] {role} "{_quote(name)}" ({x}, {y}, {w}, {h}){suffix}')
    return "\n".join(lines)


class BrowserGymMiniWoBEnv(gym.Env[dict[str, Any], str]):
    """A BrowserGym MiniWoB++ task: screenshot + instruction/tree in, one grammar action per step out.

    Args:
        task: MiniWoB++ task name (``click-button``).
        obs_keys: subset of ``("image", "text")``.
        render_mode: None or ``"rgb_array"`` (the last screenshot; needs ``image``).
        invalid_action_penalty: reward of an action that does not parse or points off the screen.
        pre_observation_delay: seconds BrowserGym waits before reading the page after an action.
        accessibility_tree: whether ``text`` lists the page's elements after the instruction (the
            synthetic GUI envs' option; ``gui_oracle`` asks for it).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(
        self,
        task: str = "click-button",
        obs_keys: tuple[str, ...] | list[str] = OBS_KEYS,
        render_mode: str | None = None,
        invalid_action_penalty: float = -0.1,
        pre_observation_delay: float = 0.5,
        accessibility_tree: bool = True,
    ) -> None:
        obs_keys = tuple(obs_keys)
        if not obs_keys or set(obs_keys) - set(OBS_KEYS):
            raise ValueError(f"obs_keys must be a non-empty subset of {OBS_KEYS}, got {obs_keys}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        try:
            import browsergym.miniwob  # noqa: F401  (registers browsergym/miniwob.* ids)
            from browsergym.core.action.highlevel import HighLevelActionSet
        except ImportError as exc:
            raise ImportError(
                f"the BrowserGym envs need browsergym-miniwob ({exc}): {INSTALL_HINT}"
            ) from None
        use_system_chromium()
        _default_miniwob_url()
        self.task, self.obs_keys, self.render_mode = task, obs_keys, render_mode
        self.with_tree = accessibility_tree
        self.invalid_action_penalty = invalid_action_penalty
        actions = HighLevelActionSet(subsets=["coord"], strict=False, multiaction=False)
        self._env: Any = gym.make(
            f"browsergym/miniwob.{task}",
            headless=True,
            action_mapping=actions.to_python_code,
            pre_observation_delay=pre_observation_delay,
        ).unwrapped
        self.action_space = spaces.Text(max_length=ACTION_MAX_LENGTH, min_length=0, charset=ACTION_CHARSET)
        every: dict[str, spaces.Space] = {
            OBS_IMAGE: spaces.Box(0, 255, (SCREEN_HEIGHT, SCREEN_WIDTH, 3), np.uint8),
            OBS_TEXT: spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=string.printable),
        }
        self.observation_space = spaces.Dict({key: every[key] for key in OBS_KEYS if key in obs_keys})
        self._last: dict[str, Any] = {}
        self._done = False

    def _observation(self, raw: dict[str, Any]) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        if OBS_IMAGE in self.obs_keys:
            shot = np.asarray(raw["screenshot"], dtype=np.uint8)[:SCREEN_HEIGHT, :SCREEN_WIDTH, :3]
            image = np.zeros((SCREEN_HEIGHT, SCREEN_WIDTH, 3), np.uint8)
            image[: shot.shape[0], : shot.shape[1]] = shot  # the page's size is fixed; never ragged
            obs[OBS_IMAGE] = image
        if OBS_TEXT in self.obs_keys:
            text = f"instruction: {raw['goal']}"
            if self.with_tree:  # else the instruction alone, as the synthetic envs' option gives
                tree = accessibility_tree(raw["axtree_object"], raw["extra_element_properties"])
                text += f"\nelements:\n{tree}"
            obs[OBS_TEXT] = "".join(c for c in text if c in string.printable)[:TEXT_MAX_LENGTH]
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A new task instance; ``seed`` seeds the page's ``Math.random`` (drawn here when None)."""
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        raw, _ = self._env.reset(seed=seed)
        self._done = False
        self._last = self._observation(raw)
        return self._last, {"is_success": False}

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Parse ``action``, send BrowserGym's equivalent, read back the page and its reward."""
        parsed, error = parse_on_screen(action, SCREEN_WIDTH, SCREEN_HEIGHT)
        info: dict[str, Any] = {
            "is_success": False,
            "action_valid": parsed is not None,
            "action_error": error,
        }
        if parsed is None:
            return copy_observation(self._last), self.invalid_action_penalty, self._done, False, info
        if self._done:
            return copy_observation(self._last), 0.0, True, False, info
        raw, reward, terminated, _, _ = self._env.step(to_browsergym_action(parsed))
        self._done = bool(terminated)
        info["is_success"] = float(reward) > 0
        info["browser_error"] = str(raw.get("last_action_error", ""))
        self._last = self._observation(raw)
        return self._last, float(reward), self._done, False, info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The last screenshot (``rgb_array``; needs ``image`` in ``obs_keys``)."""
        return self._last.get(OBS_IMAGE) if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        """Close BrowserGym's browsers."""
        env = getattr(self, "_env", None)
        if env is not None:
            env.close()
            self._env = None
        super().close()
