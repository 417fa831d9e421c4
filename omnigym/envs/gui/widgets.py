"""The widget kinds of the synthetic GUI and their mouse and keyboard semantics.

A widget has a role (its accessibility role), a label, a rectangle in screen pixels and a
``name`` the task uses to find it. Behaviour follows HTML forms: a click focuses a focusable
widget and activates it (a button fires, a checkbox toggles, a text field takes the caret);
``Space``/``Enter`` on a focused button fire it, ``Space`` toggles a focused checkbox, typing
edits the focused text field and ``Enter`` in a text field submits its window's default button.
What a widget does is reported to the :class:`~omnigym.envs.gui.screen.Screen` as an
:class:`Event`, which tasks read to decide success.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from omnigym.envs.gui.screen import Screen

TYPABLE = frozenset(chr(c) for c in range(32, 127))
"""Characters a text field accepts; others are dropped, as a browser drops control codes."""


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangle in screen pixels (``x``, ``y`` its top-left corner)."""

    x: int
    y: int
    w: int
    h: int

    def contains(self, px: int, py: int) -> bool:
        """Whether pixel ``(px, py)`` lies inside."""
        return self.x <= px < self.x + self.w and self.y <= py < self.y + self.h

    @property
    def center(self) -> tuple[int, int]:
        """The centre pixel."""
        return self.x + self.w // 2, self.y + self.h // 2


@dataclass(frozen=True)
class Event:
    """Something a widget did: ``kind`` (``click``, ``toggle``, ``submit``) on widget ``name``."""

    kind: str
    name: str


@dataclass(eq=False)
class Widget:
    """Base of every widget: geometry, label and the default (inert) input handlers."""

    role: ClassVar[str] = "widget"
    focusable: ClassVar[bool] = False

    name: str
    """Stable identifier the task uses; not shown."""
    rect: Rect
    label: str = ""
    """Visible text (and accessible name)."""

    def click(self, screen: Screen) -> None:
        """The primary button was pressed and released on this widget."""

    def key(self, key: str, screen: Screen) -> None:
        """A key (canonical name from ``actions.KEY_NAMES``) was pressed while this had focus."""

    def type_text(self, text: str, screen: Screen) -> None:
        """Text was typed while this had focus."""

    def states(self) -> list[str]:
        """Extra accessibility-tree attributes such as ``checked`` or ``value="..."``."""
        return []

    def walk(self) -> Iterator[Widget]:
        """This widget and its descendants, in paint (and tab) order."""
        yield self


@dataclass(eq=False)
class Label(Widget):
    """Static text."""

    role: ClassVar[str] = "text"


@dataclass(eq=False)
class Button(Widget):
    """A push button: fires a ``click`` event on click, ``Enter`` or ``Space``."""

    role: ClassVar[str] = "button"
    focusable: ClassVar[bool] = True

    def click(self, screen: Screen) -> None:
        """Fire."""
        screen.emit(Event("click", self.name))

    def key(self, key: str, screen: Screen) -> None:
        """Fire on ``Enter`` or ``Space``."""
        if key in ("Enter", "Space"):
            self.click(screen)


@dataclass(eq=False)
class Checkbox(Widget):
    """A checkbox with its label to the right; clicking the box or the label toggles it."""

    role: ClassVar[str] = "checkbox"
    focusable: ClassVar[bool] = True
    checked: bool = False

    def click(self, screen: Screen) -> None:
        """Toggle."""
        self.checked = not self.checked
        screen.emit(Event("toggle", self.name))

    def key(self, key: str, screen: Screen) -> None:
        """Toggle on ``Space``."""
        if key == "Space":
            self.click(screen)

    def states(self) -> list[str]:
        """``checked`` or ``unchecked``."""
        return ["checked" if self.checked else "unchecked"]


@dataclass(eq=False)
class TextField(Widget):
    """A single-line text input.

    ``label`` is its accessible name (the text of its HTML ``<label>``), ``placeholder`` the grey
    hint painted while it is empty. A ``password`` field paints and reports its value as ``*``
    characters, as browsers do.
    """

    role: ClassVar[str] = "textbox"
    focusable: ClassVar[bool] = True
    value: str = ""
    placeholder: str = ""
    password: bool = False
    max_length: int = 64

    def type_text(self, text: str, screen: Screen) -> None:
        """Append the typable characters of ``text``, up to ``max_length``."""
        typed = "".join(c for c in text if c in TYPABLE)
        self.value = (self.value + typed)[: self.max_length]

    def key(self, key: str, screen: Screen) -> None:
        """``Backspace`` deletes the last character; ``Enter`` submits the form."""
        if key == "Backspace":
            self.value = self.value[:-1]
        elif key == "Enter":
            screen.submit()

    @property
    def shown(self) -> str:
        """The value as painted and reported (masked for passwords)."""
        return "*" * len(self.value) if self.password else self.value

    def states(self) -> list[str]:
        """``value="..."`` (masked for passwords), and ``password``."""
        escaped = self.shown.replace("\\", "\\\\").replace('"', '\\"')
        return [f'value="{escaped}"', *(["password"] if self.password else [])]


@dataclass(eq=False)
class Window(Widget):
    """A container with a title; its ``default`` button is what ``Enter`` in a text field fires."""

    role: ClassVar[str] = "window"
    children: list[Widget] = field(default_factory=list)
    default: str | None = None
    """Name of the default button."""

    def walk(self) -> Iterator[Widget]:
        """The window, then each child's subtree."""
        yield self
        for child in self.children:
            yield from child.walk()
