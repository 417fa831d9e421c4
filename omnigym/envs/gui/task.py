"""The base of the GUI task families, and the words they draw labels from.

A family (a :class:`Task` subclass) builds a :class:`~omnigym.envs.gui.screen.Screen` from a
NumPy generator and judges it after every step: success (True), failure (False) or still running
(None). Each episode ends at the first *commit* (the target button, or a form's submit button, is
activated), as in MiniWoB. The families themselves are in :mod:`~omnigym.envs.gui.form_families`
and :mod:`~omnigym.envs.gui.page_families`; :data:`~omnigym.envs.gui.families.FAMILIES` names them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from omnigym.envs.gui import layout
from omnigym.envs.gui.layers import Layer
from omnigym.envs.gui.render import Theme
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.widgets import Button, Rect, Widget, Window

BUTTON_WORDS = (
    "OK", "Submit", "Cancel", "Yes", "No", "Next", "Back", "Save", "Delete", "Open", "Close",
    "Apply", "Reset", "Search", "Send", "Done", "Edit", "Copy", "Print", "Help", "Start", "Stop",
)  # fmt: skip
WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "amber", "crane", "delta",
    "ember", "frost", "grape", "honey", "ivory", "jelly", "koala", "lunar", "maple", "noble",
    "olive", "pearl", "quill", "robin", "solar", "tulip", "umbra", "vivid", "wheat", "zebra",
)  # fmt: skip
NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "zoe",
)  # fmt: skip


class Task(ABC):
    """Base of the families: size-dependent theme and the per-episode build and judgement."""

    name: ClassVar[str] = ""
    """Family name, as in the env id ``omnigym/GUI-<name>-v0``."""
    max_steps: ClassVar[int] = 10
    """Step limit (the registered ``max_episode_steps``)."""

    def __init__(self, width: int, height: int, theme: Theme) -> None:
        self.width, self.height, self.theme = width, height, theme

    def build(self, rng: np.random.Generator) -> Screen:
        """A new episode's screen, drawn from ``rng``.

        The :class:`~omnigym.envs.gui.layers.Layer` s among the built widgets (a dialog) open
        over the window, in their order; the rest are the window's children.
        """
        instruction, widgets, default = self._build(
            rng, layout.task_area(self.theme, self.width, self.height)
        )
        layers = [widget for widget in widgets if isinstance(widget, Layer)]
        children = [widget for widget in widgets if not isinstance(widget, Layer)]
        window = Window("window", Rect(0, 0, self.width, self.height), children=children, default=default)
        bar = layout.instruction_rect(self.theme, self.width)
        return Screen(self.width, self.height, instruction, bar, window, layers)

    def outcome(self, screen: Screen) -> bool | None:
        """True on success, False on failure, None while the episode runs."""
        clicked = next((e.name for e in screen.events if e.kind == "click"), None)
        return None if clicked is None else self._judge(screen, clicked)

    @abstractmethod
    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        """``(instruction, widgets, default button name)`` for a new episode inside ``area``."""

    @abstractmethod
    def _judge(self, screen: Screen, clicked: str) -> bool:
        """Success once button ``clicked`` was activated (the first button activation)."""

    def _button(self, name: str, label: str, x: int, y: int) -> Button:
        w, h = layout.button_size(self.theme, label)
        return Button(name, Rect(x, y, w, h), label)
