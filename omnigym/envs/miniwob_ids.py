"""Which real MiniWoB++ tasks omnigym registers, under which ids, and how the raw envs are reached.

Two id families, both made by :class:`~omnigym.envs.gui.miniwob.MiniWoBEnv` (so both give the
synthetic GUI envs' ``Dict`` observation and text actions):

- ``omnigym/MiniWoB-<Task>-v0`` (``omnigym/MiniWoB-ClickButton-v0``): the curated suite,
  :data:`MINIWOB_SUITE`, the real counterparts of the synthetic families
  (``omnigym/GUI-<Family>-v0``) that ``gui_oracle`` solves; ``omnigym eval-agent --suite
  miniwob`` runs them all.
- ``miniwob/<task>-v1`` (``miniwob/click-button-v1``): every task of the ``miniwob`` package under
  the package's own ids, wrapped in omnigym's conventions.

Everything here is plain data and string entry points: registering imports neither ``miniwob``
nor Selenium, and works (with a one-line install hint when an env is made) where they are
missing. The ``miniwob`` package registers its *raw* envs under the same ``miniwob/`` ids when it
is first imported; :func:`raw_miniwob_spec` imports it with omnigym's ids kept in place and hands
out the raw specs, which only ``MiniWoBEnv`` uses.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

MINIWOB_ENTRY_POINT = "omnigym.envs.gui.miniwob:MiniWoBEnv"
"""The class behind every id registered here."""
DEFAULT_MAX_EPISODE_STEPS = 100
"""Step limit of a ``miniwob/`` id outside the suite. The page's own clock (10 s for most tasks)
ends an episode too, but only when an action reaches the page: a policy writing nothing but
malformed actions would otherwise never finish."""
MINIWOB_TASK_NAMES = (
    "bisect-angle", "book-flight", "book-flight-nodelay", "choose-date", "choose-date-easy",
    "choose-date-medium", "choose-date-nodelay", "choose-list", "circle-center", "click-button",
    "click-button-sequence", "click-checkboxes", "click-checkboxes-large", "click-checkboxes-soft",
    "click-checkboxes-transfer", "click-collapsible", "click-collapsible-2", "click-collapsible-2-nodelay",
    "click-collapsible-nodelay", "click-color", "click-dialog", "click-dialog-2", "click-link", "click-menu",
    "click-menu-2", "click-option", "click-pie", "click-pie-nodelay", "click-scroll-list", "click-shades",
    "click-shape", "click-tab", "click-tab-2", "click-tab-2-easy", "click-tab-2-hard", "click-tab-2-medium",
    "click-test", "click-test-2", "click-test-transfer", "click-widget", "copy-paste", "copy-paste-2",
    "count-shape", "count-sides", "drag-box", "drag-circle", "drag-cube", "drag-items", "drag-items-grid",
    "drag-shapes", "drag-sort-numbers", "email-inbox", "email-inbox-delete", "email-inbox-forward",
    "email-inbox-forward-nl", "email-inbox-forward-nl-turk", "email-inbox-important", "email-inbox-nl-turk",
    "email-inbox-noscroll", "email-inbox-reply", "email-inbox-star-reply", "enter-date", "enter-password",
    "enter-text", "enter-text-2", "enter-text-dynamic", "enter-time", "find-midpoint", "find-word",
    "focus-text", "focus-text-2", "grid-coordinate", "guess-number", "highlight-text", "highlight-text-2",
    "identify-shape", "login-user", "login-user-popup", "multi-layouts", "multi-orderings", "navigate-tree",
    "number-checkboxes", "read-table", "read-table-2", "resize-textarea", "right-angle", "scroll-text",
    "scroll-text-2", "search-engine", "simple-algebra", "simple-arithmetic", "social-media",
    "social-media-all", "social-media-some", "terminal", "text-editor", "text-transform", "tic-tac-toe",
    "unicode-test", "use-autocomplete", "use-autocomplete-nodelay", "use-colorwheel", "use-colorwheel-2",
    "use-slider", "use-slider-2", "use-spinner", "visual-addition", "flight.Alaska", "flight.Alaska-auto",
    "flight.AA", "ascending-numbers", "buy-ticket", "daily-calendar", "drag-shapes-2", "drag-single-shape",
    "draw-circle", "draw-line", "find-greatest", "form-sequence", "form-sequence-2", "form-sequence-3",
    "generate-number", "hot-cold", "odd-or-even", "order-food", "phone-book", "sign-agreement",
    "stock-market",
)  # fmt: skip
"""Every task ``miniwob`` 1.1.0 registers (``miniwob/<name>-v1``), in its registration order."""


@dataclass(frozen=True)
class MiniWoBTask:
    """One task of the curated suite."""

    name: str
    """The MiniWoB++ task name (``click-button``)."""
    counterpart: str
    """The synthetic family it is the real counterpart of (``ClickButton``)."""
    max_episode_steps: int
    """Step limit of its ids (the page's clock ends most episodes first)."""

    @property
    def env_id(self) -> str:
        """``omnigym/MiniWoB-<Task>-v0``."""
        return miniwob_env_id(self.name)


MINIWOB_SUITE: tuple[MiniWoBTask, ...] = (
    MiniWoBTask("click-button", "ClickButton", 5),
    MiniWoBTask("click-link", "ClickButton", 5),
    MiniWoBTask("click-checkboxes", "ClickCheckboxes", 12),
    MiniWoBTask("click-checkboxes-large", "ClickCheckboxes", 20),
    MiniWoBTask("click-checkboxes-transfer", "ClickCheckboxes", 12),
    MiniWoBTask("enter-text", "EnterText", 10),
    MiniWoBTask("enter-text-2", "EnterText", 10),
    MiniWoBTask("enter-text-dynamic", "EnterText", 10),
    MiniWoBTask("focus-text", "EnterText", 5),
    MiniWoBTask("focus-text-2", "EnterText", 5),
    MiniWoBTask("enter-password", "LoginUser", 15),
    MiniWoBTask("login-user", "LoginUser", 15),
    MiniWoBTask("login-user-popup", "LoginUser", 15),
    MiniWoBTask("click-option", "SelectOption", 8),
    MiniWoBTask("choose-list", "SelectOption", 8),
    MiniWoBTask("use-slider", "UseSlider", 150),  # one arrow key per value: up to ~100 steps
    MiniWoBTask("click-dialog", "CloseDialog", 5),
    MiniWoBTask("click-dialog-2", "CloseDialog", 5),
    MiniWoBTask("multi-orderings", "FillForm", 20),
    MiniWoBTask("multi-layouts", "FillForm", 20),
    MiniWoBTask("search-engine", "SearchAndClick", 15),
    MiniWoBTask("click-tab", "NavigateTabs", 5),
    MiniWoBTask("click-tab-2", "NavigateTabs", 10),
    MiniWoBTask("drag-items", "DragItem", 6),
)
"""The real counterparts of the synthetic families (MultiWindow has none: a MiniWoB++ task is one
page). ``omnigym eval-agent --suite miniwob`` runs these."""
_SUITE_BY_NAME = {task.name: task for task in MINIWOB_SUITE}


def miniwob_env_id(task: str) -> str:
    """``omnigym/MiniWoB-<Task>-v0`` for a task name: ``click-tab-2`` -> ``omnigym/MiniWoB-ClickTab2-v0``."""
    camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[-.]", task))
    return f"omnigym/MiniWoB-{camel}-v0"


def miniwob_suite_ids() -> list[str]:
    """The ids of :data:`MINIWOB_SUITE`, in its order."""
    return [task.env_id for task in MINIWOB_SUITE]


def miniwob_registrations() -> list[tuple[str, str, dict]]:
    """``(id, entry point, gym.register kwargs)`` of the suite's ids and of every ``miniwob/`` id."""
    rows = []
    for task in MINIWOB_SUITE:
        kwargs = {"kwargs": {"task": task.name}, "max_episode_steps": task.max_episode_steps}
        rows.append((task.env_id, MINIWOB_ENTRY_POINT, kwargs))
    for name in MINIWOB_TASK_NAMES:
        steps = (
            _SUITE_BY_NAME[name].max_episode_steps if name in _SUITE_BY_NAME else DEFAULT_MAX_EPISODE_STEPS
        )
        rows.append(
            (
                f"miniwob/{name}-v1",
                MINIWOB_ENTRY_POINT,
                {"kwargs": {"task": name}, "max_episode_steps": steps},
            )
        )
    return rows


def register_miniwob_ids() -> None:
    """Register the suite's ids and the wrapped ``miniwob/`` ids (idempotent, imports nothing).

    A ``miniwob/`` id that holds the package's raw env (``miniwob`` was imported first) is
    replaced quietly by the wrapped one; the raw spec stays reachable through :func:`raw_miniwob_spec`.
    """
    for env_id, entry_point, kwargs in miniwob_registrations():
        spec = gym.registry.get(env_id)
        if spec is not None and spec.entry_point == entry_point:
            continue
        if spec is not None and env_id.startswith("miniwob/"):
            _RAW_SPECS.setdefault(env_id, spec)
        gym.registry[env_id] = EnvSpec(id=env_id, entry_point=entry_point, **kwargs)


_RAW_SPECS: dict[str, EnvSpec] = {}


def raw_miniwob_spec(gym_id: str) -> EnvSpec:
    """The ``miniwob`` package's own spec of ``gym_id`` (``miniwob/click-button-v1``): its raw env.

    Imports ``miniwob`` (which registers its raw envs over omnigym's ``miniwob/`` ids), keeps the raw
    specs aside and puts omnigym's back, so ``gym.make("miniwob/...")`` keeps giving the wrapped env.

    Raises:
        ImportError: ``miniwob`` is not installed.
        KeyError: the package has no such task.
    """
    if gym_id not in _RAW_SPECS:
        ours = {
            k: v
            for k, v in gym.registry.items()
            if k.startswith("miniwob/") and v.entry_point == MINIWOB_ENTRY_POINT
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gymnasium's "Overriding environment ..." for each id
            import miniwob.registration

            miniwob.registration.register_miniwob_envs()
        for env_id, spec in list(gym.registry.items()):
            if env_id.startswith("miniwob/") and spec.entry_point != MINIWOB_ENTRY_POINT:
                _RAW_SPECS[env_id] = spec
        gym.registry.update(ours)
    if gym_id not in _RAW_SPECS:
        raise KeyError(f"miniwob has no task {gym_id!r}")
    return _RAW_SPECS[gym_id]
