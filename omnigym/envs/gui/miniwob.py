"""Real MiniWoB++ tasks in headless Chromium, with the synthetic GUI envs' conventions.

:class:`MiniWoBEnv` wraps one task of the ``miniwob`` package (``omnigym[gui]``): the same
``Dict`` observation as :class:`~omnigym.envs.gui.env.GUIEnv` (``image``: uint8 ``[H, W, 3]``
screenshot; ``text``: the utterance, then an accessibility tree built from the DOM elements miniwob
reports, in the line format of ``screen.py``) and the same ``Text`` action grammar
(:func:`~omnigym.envs.gui.actions.parse_action`), translated to miniwob's structured actions. So
one text policy acts in the synthetic families and in the browser.

The browser is Debian's ``chromium`` + ``chromium-driver`` (``scripts/setup.sh`` installs them as
root). ``MINIWOB_CHROME_BINARY`` / ``MINIWOB_CHROMEDRIVER`` are set to the binaries on ``PATH``
when both are unset, so Selenium never tries to download a driver. ``miniwob`` and Selenium are
imported only when an env is made: ``import omnigym.envs.gui.miniwob`` stays light.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import string
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

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
from omnigym.envs.gui.env import OBS_KEYS
from omnigym.envs.miniwob_ids import raw_miniwob_spec

STALE_RESET_S = 1.0
"""A page reset longer ago than this is reset again (same seed, same page) before the first
action, so its clock starts when the agent starts acting (see :class:`MiniWoBEnv`)."""
TEXT_MAX_LENGTH = 8192
"""Longest ``text`` observation (text-heavy tasks list a hundred DOM nodes)."""
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",  # Chromium refuses to start as root without it
    "--disable-gpu",
    "--disable-dev-shm-usage",  # Docker's 64 MB /dev/shm crashes tabs otherwise
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
)
"""Flags of the headless Chromium that :func:`make_miniwob_env` starts."""
KEY_CODES = {
    "Enter": "<Enter>",
    "Tab": "<Tab>",
    "Shift+Tab": "S-<Tab>",
    "Backspace": "<Backspace>",
    "Delete": "<Delete>",
    "Escape": "<Escape>",
    "Space": "<Space>",
    "ArrowUp": "<ArrowUp>",
    "ArrowDown": "<ArrowDown>",
    "ArrowLeft": "<ArrowLeft>",
    "ArrowRight": "<ArrowRight>",
    "Home": "<Home>",
    "End": "<End>",
}
"""The grammar's key names (``actions.KEY_NAMES``) in miniwob's ``PRESS_KEY`` spelling."""
_TEXTBOX_TAGS = frozenset(
    {"input_text", "input_password", "input_email", "input_number", "input_search", "input_tel", "textarea"}
)
_ROLES = {
    "button": "button",
    "input_submit": "button",
    "input_button": "button",
    "input_checkbox": "checkbox",
    "input_radio": "radio",
    "a": "link",
    "select": "combobox",
    "option": "option",
    "input_range": "slider",
    **dict.fromkeys(_TEXTBOX_TAGS, "textbox"),
}
_INSTALL_HINT = "the real-browser GUI envs need miniwob: pip install 'omnigym[gui]'"
_SELECT_VALUES_JS = (
    "return Array.from(document.querySelectorAll('select')).map(s => [Number(s.dataset.wob_ref), "
    "s.selectedIndex >= 0 ? s.options[s.selectedIndex].text : '']);"
)
"""The shown option of each ``<select>`` by its miniwob ref (miniwob's DOM info has no value for it)."""


class MiniWoBUnavailableError(gym.error.DependencyNotInstalled, RuntimeError):
    """``miniwob`` or the headless browser is missing; the message says what to install.

    A Gymnasium error, so the command line prints it as one line (a user's error, exit status 2).
    """


@dataclass
class MiniWoBConfig:
    """Options of :class:`MiniWoBEnv` (keyword arguments of :func:`make_miniwob_env`)."""

    task: str = "click-button"
    """MiniWoB++ task: ``click-button``, or the Gymnasium id ``miniwob/click-button-v1``."""
    obs_keys: tuple[str, ...] = OBS_KEYS
    """Keys to emit; without ``image`` no screenshot is taken (about 3x faster steps)."""
    accessibility_tree: bool = True
    """Append the element list (roles, labels, boxes, states) to ``text``."""
    invalid_action_penalty: float = -0.1
    """Reward of a malformed action or one with a point off the screen (nothing is sent)."""
    raw_reward: bool = False
    """Reward ``+1``/``-1`` (miniwob's raw reward) instead of the time-discounted
    ``1 - elapsed / limit`` on success."""

    def __post_init__(self) -> None:
        self.obs_keys = tuple(self.obs_keys)
        if not self.obs_keys or set(self.obs_keys) - set(OBS_KEYS):
            raise ValueError(f"obs_keys must be a non-empty subset of {OBS_KEYS}, got {self.obs_keys}")

    @property
    def gym_id(self) -> str:
        """The task's Gymnasium id in the ``miniwob`` namespace."""
        if self.task.startswith("miniwob/"):
            return self.task
        return f"miniwob/{self.task}-v1"


def browser_unavailable_reason() -> str | None:
    """Why a MiniWoB++ env cannot start here (``None`` when it can): a missing package or browser."""
    # find_spec, not import: importing miniwob registers its raw envs (raw_miniwob_spec does that)
    if importlib.util.find_spec("miniwob") is None or importlib.util.find_spec("selenium") is None:
        return _INSTALL_HINT
    _default_browser_env()
    for var in ("MINIWOB_CHROME_BINARY", "MINIWOB_CHROMEDRIVER"):
        path = os.environ.get(var)
        if not path or not os.access(path, os.X_OK):
            return f"no headless Chromium: {var}={path!r}; apt-get install chromium chromium-driver"
    return None


def _default_browser_env() -> None:
    """Point miniwob at the Chromium and ChromeDriver on ``PATH`` when neither variable is set."""
    if os.environ.get("MINIWOB_CHROME_BINARY") or os.environ.get("MINIWOB_CHROMEDRIVER"):
        return
    binary = chromium_path()
    driver = shutil.which("chromedriver")
    if binary and driver:
        os.environ["MINIWOB_CHROME_BINARY"] = binary
        os.environ["MINIWOB_CHROMEDRIVER"] = driver


def _install_headless_driver() -> None:
    """Make miniwob start Chromium with :data:`CHROME_FLAGS` and a profile it removes on close.

    miniwob has no option for browser flags, so its ``SeleniumInstance`` (which the env looks up
    in ``miniwob.environment`` whenever it starts a browser) is replaced by a subclass, once.
    """
    import miniwob.environment
    import miniwob.selenium_instance as si
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if getattr(miniwob.environment.SeleniumInstance, "omnigym_headless", False):
        return

    class HeadlessInstance(si.SeleniumInstance):
        omnigym_headless = True

        def create_driver(self) -> None:
            options = webdriver.ChromeOptions()
            options.binary_location = os.environ["MINIWOB_CHROME_BINARY"]
            self._profile = tempfile.mkdtemp(prefix="omnigym-chromium-")
            # Headless Chromium keeps ~143 px of the window for (invisible) browser UI: without
            # the extra height, the 667 px flight tasks render cut off.
            size = f"--window-size={self.window_width},{self.window_height + 200}"
            for flag in (*CHROME_FLAGS, f"--user-data-dir={self._profile}", size):
                options.add_argument(flag)
            service = Service(executable_path=os.environ["MINIWOB_CHROMEDRIVER"])
            self.driver = webdriver.Chrome(service=service, options=options)
            self.driver.implicitly_wait(5)
            self.driver.get(self.url)
            si.WebDriverWait(self.driver, 5).until(
                si.EC.element_to_be_clickable((si.By.ID, self.SYNC_SCREEN_ID))
            )
            self.inner_width, self.inner_height = self.driver.execute_script(
                "return [window.innerWidth, window.innerHeight];"
            )

        def close(self) -> None:
            super().close()
            shutil.rmtree(getattr(self, "_profile", ""), ignore_errors=True)

    miniwob.environment.SeleniumInstance = HeadlessInstance


def accessibility_tree(
    dom_elements: Any, width: int, height: int, select_values: Mapping[int, str] | None = None
) -> str:
    """One line per DOM element an agent can read or act on, in ``screen.py``'s format.

    ``[index] role "label" (x, y, w, h) states``: the page (``window``, the screen's size), then
    every element on the screen that has text or is a control, in document order; a checkbox or
    radio button is named by the text of its ``<label>``, a button or link without text of its own
    by its children's text, even off the screen (jQuery UI's icon-only close button is ``"Close"``,
    as a browser's accessibility tree names it). jQuery UI widgets get their ARIA roles: tab anchors
    are ``tab`` (``selected`` on the active one), slider handles ``slider``, dialogs ``dialog``
    (named by their title); a link inside an ``active`` item (a pager's current page) is
    ``selected``. Boxes are screenshot pixels (rounded). States: ``checked``/``unchecked``;
    ``value="..."`` (masked for passwords; a dropdown's shown option, from ``select_values``) and
    ``password``; ``focused``. Containers without text of their own are left out.

    Args:
        dom_elements: miniwob's ``dom_elements`` observation (dicts with ``tag``, ``text``,
            ``value``, ``classes``, ``left``/``top``/``width``/``height``, ``flags``).
        width: the screenshot's width in pixels.
        height: the screenshot's height in pixels.
        select_values: each ``<select>``'s shown option by its ref (its ``value`` state).
    """
    lines = [f'[0] window "" (0, 0, {width}, {height})']
    label_texts = _label_texts(dom_elements)
    child_texts = _child_texts(dom_elements)
    classes_of = {int(e["ref"]): str(e["classes"]).split() for e in dom_elements}
    for index, element in enumerate(dom_elements):
        tag, text = str(element["tag"]), str(element["text"]).strip()
        classes, parent = str(element["classes"]).split(), int(element["parent"])
        role = _role(tag, classes)
        if role in ("checkbox", "radio") and not text:
            text = label_texts.get(parent, "")  # named by its <label>, as in a browser
        elif role in ("button", "link", "tab") and not text:
            text = child_texts.get(int(element["ref"]), "")
        elif role == "dialog":
            text = _dialog_title(dom_elements, index)
        if role is None:
            if not text or tag == "body":
                continue
            role = "text"
        box = [
            round(float(np.asarray(element[k]).reshape(-1)[0])) for k in ("left", "top", "width", "height")
        ]
        x, y, w, h = box
        if w <= 0 or h <= 0 or x + w <= 0 or y + h <= 0 or x >= width or y >= height:
            continue  # empty, or moved off the page (hidden the way some tasks hide elements)
        states = _states(tag, element)
        parent_classes = classes_of.get(parent, [])
        if role in ("tab", "link") and {"ui-tabs-active", "active"} & set(parent_classes):
            states.insert(0, "selected")
        if tag == "select" and select_values is not None and int(element["ref"]) in select_values:
            value = select_values[int(element["ref"])].replace("\\", "\\\\").replace('"', '\\"')
            states.insert(0, f'value="{value}"')
        label = text.replace("\\", "\\\\").replace('"', '\\"')
        suffix = "".join(f" {state}" for state in states)
        lines.append(f'[{len(lines)}] {role} "{label}" ({x}, {y}, {w}, {h}){suffix}')
    return "\n".join(lines)


def _role(tag: str, classes: list[str]) -> str | None:
    """An element's role: jQuery UI's widgets by their classes, else by the tag (None: no control)."""
    if "ui-tabs-anchor" in classes:
        return "tab"
    if "ui-slider-handle" in classes:
        return "slider"
    if "ui-dialog" in classes:
        return "dialog"
    if "alink" in classes:
        return "link"
    return _ROLES.get(tag)


def _dialog_title(dom_elements: Any, index: int) -> str:
    """The text of the first jQuery UI dialog title after element ``index`` (its dialog's title bar)."""
    for element in list(dom_elements)[index + 1 :]:
        if "ui-dialog-title" in str(element["classes"]).split():
            return str(element["text"]).strip()
    return ""


def _child_texts(dom_elements: Any) -> dict[int, str]:
    """The text of each element's children (on the screen or not), by the element's ref."""
    texts: dict[int, list[str]] = {}
    for element in dom_elements:
        text = str(element["text"]).strip()
        if text:
            texts.setdefault(int(element["parent"]), []).append(text)
    return {ref: " ".join(parts) for ref, parts in texts.items()}


def _label_texts(dom_elements: Any) -> dict[int, str]:
    """The text inside each ``<label>`` element, by the label's ref."""
    labels = {int(e["ref"]) for e in dom_elements if str(e["tag"]) == "label"}
    texts: dict[int, list[str]] = {}
    for element in dom_elements:
        parent, text = int(element["parent"]), str(element["text"]).strip()
        if parent in labels and text:
            texts.setdefault(parent, []).append(text)
    return {ref: " ".join(parts) for ref, parts in texts.items()}


def _states(tag: str, element: Any) -> list[str]:
    """An element's states in the tree: checked, value (masked for passwords), focus."""
    value = element["value"]
    states = []
    if tag in ("input_checkbox", "input_radio"):
        states.append("checked" if value not in ("", "False", "false", None, False) else "unchecked")
    elif tag in _TEXTBOX_TAGS:
        shown = "*" * len(str(value)) if tag == "input_password" else str(value)
        states.append('value="{}"'.format(shown.replace("\\", "\\\\").replace('"', '\\"')))
        if tag == "input_password":
            states.append("password")
    if int(np.asarray(element["flags"]).reshape(-1)[0]):
        states.append("focused")
    return states


class MiniWoBEnv(gym.Env[dict[str, Any], str]):
    """A MiniWoB++ task in headless Chromium: screenshot + text in, one text action per step out.

    Actions follow ``actions.py``: ``click`` / ``double_click`` are miniwob's ``CLICK_COORDS`` /
    ``DBLCLICK_COORDS``, ``type`` is ``TYPE_TEXT`` into the focused element, ``key`` is
    ``PRESS_KEY`` (:data:`KEY_CODES`), ``scroll(x, y, dy)`` is one wheel scroll of ``|dy|`` pixels,
    and ``drag`` is ``MOUSEDOWN_COORDS`` then ``MOUSEUP_COORDS``. A malformed action or a point off
    the screen is not sent: the observation is the previous one, the reward
    ``invalid_action_penalty`` and ``info["action_valid"]`` False (never an exception).

    Rewards and episode ends are miniwob's: the task's reward when the page declares the episode
    done (success: ``1 - elapsed / limit``, or ``+1`` with ``raw_reward``; failure or the page's
    wall-clock limit: ``-1``), ``terminated`` then, 0 before. Episodes run in real time, so a slow
    policy times out. On the terminal step the page has moved on: ``image`` is miniwob's black
    frame and the tree only the window. The page's clock starts at ``reset``; when the first valid
    action comes more than :data:`STALE_RESET_S` later (batched evaluation resets every slot, then
    starts them one after another; browsers start slowly), the page is reset again with the same
    seed (the same page: the task is drawn from the seed) just before the action, so slow starts do
    not time episodes out. ``info``: ``is_success`` (raw reward > 0),
    ``action_valid``, ``action_error``, ``reason`` (the page's, on the terminal step).

    Args:
        render_mode: ``None`` or ``"rgb_array"`` (the last screenshot).
        **kwargs: :class:`MiniWoBConfig` fields.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        reason = browser_unavailable_reason()
        if reason is not None:
            raise MiniWoBUnavailableError(f"cannot start MiniWoB++: {reason}")
        self.config = MiniWoBConfig(**kwargs)
        # first: it imports miniwob with omnigym's miniwob/ ids kept in place
        raw_spec = raw_miniwob_spec(self.config.gym_id)  # miniwob's own env, not this wrapper
        from miniwob.action import ActionSpaceConfig, ActionTypes
        from miniwob.reward import get_raw_reward

        _install_headless_driver()
        self.render_mode = render_mode
        self._types = ActionTypes
        action_config = ActionSpaceConfig.get_preset("all_supported")
        action_config.allowed_keys = tuple(KEY_CODES.values())
        extra = {"reward_processor": get_raw_reward} if self.config.raw_reward else {}
        browser = gym.make(raw_spec, action_space_config=action_config, **extra).unwrapped
        self.browser: Any = cast(Any, browser)  # miniwob's MiniWoBEnvironment, beyond gym.Env's API
        self.width = int(self.browser.instance.task_width)
        self.height = int(self.browser.instance.task_height)
        self._key_index = {name: i for i, name in enumerate(KEY_CODES)}
        self.action_space = spaces.Text(max_length=ACTION_MAX_LENGTH, min_length=0, charset=ACTION_CHARSET)
        every: dict[str, spaces.Space] = {
            OBS_IMAGE: spaces.Box(0, 255, (self.height, self.width, 3), np.uint8),
            OBS_TEXT: spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=string.printable),
        }
        self.observation_space = spaces.Dict({k: every[k] for k in OBS_KEYS if k in self.config.obs_keys})
        self._utterance = ""
        self._reset_seed, self._reset_time, self._acted = 0, 0.0, False
        self._last: dict[str, Any] = {}
        self._done = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start a new episode; ``seed`` seeds the page's ``Math.random`` (the task instance)."""
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        record = {"record_screenshots": OBS_IMAGE in self.config.obs_keys}
        raw_obs, _ = self.browser.reset(seed=seed, options=record)
        self._reset_seed, self._reset_time, self._acted = seed, time.monotonic(), False
        self._utterance = str(raw_obs["utterance"])
        self._done = False
        self._last = self._observation(raw_obs)
        return self._last, {"is_success": False}

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Parse ``action``, send it to the browser and read back the page and its reward."""
        parsed, error = parse_on_screen(action, self.width, self.height)
        info: dict[str, Any] = {
            "is_success": False,
            "action_valid": parsed is not None,
            "action_error": error,
        }
        if parsed is None:
            return copy_observation(self._last), self.config.invalid_action_penalty, self._done, False, info
        if self._done:
            return copy_observation(self._last), 0.0, True, False, info
        if not self._acted and time.monotonic() - self._reset_time > STALE_RESET_S:
            record = {"record_screenshots": OBS_IMAGE in self.config.obs_keys}
            self.browser.reset(seed=self._reset_seed, options=record)  # restart the page's clock
        self._acted = True
        reward = 0.0
        for browser_action in self._browser_actions(parsed):
            raw_obs, raw_reward, done, _, raw_info = self.browser.step(browser_action)
            reward = float(raw_reward)
            if done:
                self._done = True
                info["is_success"] = float(raw_info.get("raw_reward", 0.0)) > 0
                info["reason"] = raw_info.get("reason")
                break
        self._last = self._observation(raw_obs)
        return self._last, reward, self._done, False, info

    def _browser_actions(self, action: GUIAction) -> list[dict[str, Any]]:
        """The miniwob actions for one grammar action (two for a drag, none for a zero scroll)."""
        create, T = self.browser.create_action, self._types
        coords = np.array([action.x, action.y], dtype=np.float32)
        if action.kind == "click":
            return [create(T.CLICK_COORDS, coords=coords)]
        if action.kind == "double_click":
            return [create(T.DBLCLICK_COORDS, coords=coords)]
        if action.kind == "type":
            return [create(T.TYPE_TEXT, text=action.text)]
        if action.kind == "key":
            return [create(T.PRESS_KEY, key=self._key_index[action.text])]
        if action.kind == "scroll":
            if action.dy == 0:
                return [create(T.NONE)]
            # The amount is a field of the shared action config, read when the action runs.
            self.browser.action_space_config.scroll_amount = abs(action.dy)
            kind = T.SCROLL_DOWN_COORDS if action.dy > 0 else T.SCROLL_UP_COORDS
            return [create(kind, coords=coords)]
        end = np.array([action.x2, action.y2], dtype=np.float32)
        return [create(T.MOUSEDOWN_COORDS, coords=coords), create(T.MOUSEUP_COORDS, coords=end)]

    def _observation(self, raw_obs: dict[str, Any]) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        if OBS_IMAGE in self.config.obs_keys:
            obs[OBS_IMAGE] = np.ascontiguousarray(raw_obs["screenshot"], dtype=np.uint8)
        if OBS_TEXT in self.config.obs_keys:
            text = f"instruction: {self._utterance}"
            if self.config.accessibility_tree:
                dom = raw_obs["dom_elements"]
                tree = accessibility_tree(dom, self.width, self.height, self._select_values(dom))
                text += "\nelements:\n" + tree
            obs[OBS_TEXT] = "".join(c for c in text if c in string.printable)[:TEXT_MAX_LENGTH]
        return obs

    def _select_values(self, dom_elements: Any) -> dict[int, str] | None:
        """The shown option of each dropdown on the page (one script call, only when there is one)."""
        if not any(str(e["tag"]) == "select" for e in dom_elements):
            return None
        # The browser thread is idle between steps, so the driver can be used from here.
        rows = self.browser.instance.driver.execute_script(_SELECT_VALUES_JS)
        return {int(ref): str(text) for ref, text in rows}

    def render(self) -> np.ndarray | None:
        """The last screenshot ``[H, W, 3]`` (``rgb_array``; needs ``image`` in ``obs_keys``)."""
        if self.render_mode != "rgb_array":
            return None
        return self._last.get(OBS_IMAGE)

    def close(self) -> None:
        """Quit Chromium and ChromeDriver (and remove the browser profile)."""
        browser = getattr(self, "browser", None)
        if browser is not None:
            browser.close()
            self.browser = None
        super().close()


def make_miniwob_env(task: str = "click-button", **kwargs: Any) -> MiniWoBEnv:
    """A MiniWoB++ task as an omnigym GUI env (starts a headless Chromium, about 1.5 s).

    Args:
        task: task name (``click-button``) or id (``miniwob/click-button-v1``).
        **kwargs: the other :class:`MiniWoBConfig` fields, and ``render_mode``.

    Raises:
        MiniWoBUnavailableError: when miniwob or the browser is missing (the message says how to
            install; a ``RuntimeError``).
    """
    return MiniWoBEnv(task=task, **kwargs)
