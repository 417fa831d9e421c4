"""The widget kinds of the synthetic GUI and their mouse and keyboard semantics: the base and form controls.

A widget has a role (its accessibility role), a label, a rectangle in screen pixels and a
``name`` the task uses to find it. Behaviour follows HTML forms: a click focuses a focusable
widget and activates it (a button fires, a checkbox toggles, a text field takes the caret);
``Space``/``Enter`` on a focused button fire it, ``Space`` toggles a focused checkbox, typing
edits the focused text field and ``Enter`` in a text field submits its window's default button.
Radio buttons select one option of their group; a slider follows a ``drag`` and the arrow keys;
a draggable box moves by a ``drag``'s travel.
What a widget does is reported to the :class:`~omnigym.envs.gui.screen.Screen` as an
:class:`Event`, which tasks read to decide success.

This module holds the base (:class:`Rect`, :class:`Event`, :class:`Widget`), the root
:class:`Window` and the form controls. Widgets painted over the page (a dropdown's list, a modal
dialog) are in :mod:`~omnigym.envs.gui.layers`; widgets that show only part of their content
(tab strips, scroll areas, list boxes, overlapping windows) in :mod:`~omnigym.envs.gui.containers`.
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
    """Something a widget did: an event ``kind`` on the widget ``name``.

    Kinds: ``click`` (a button fired; the one kind that commits a task), ``toggle`` (a
    checkbox), ``select`` (a radio or dropdown option or a tab chosen), ``change`` (a slider moved),
    ``close`` (a dialog closed), ``move`` (a draggable item dropped somewhere else).
    """

    kind: str
    name: str


@dataclass(eq=False)
class Widget:
    """Base of every widget: geometry, label and the default (inert) input handlers."""

    role: ClassVar[str] = "widget"
    focusable: ClassVar[bool] = False
    pinned: ClassVar[bool] = False
    """Inside a :class:`~omnigym.envs.gui.containers.ScrollArea`: stays put when the content scrolls
    (a list's frame)."""

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

    def drag(self, x: int, y: int, screen: Screen) -> None:
        """The pointer was pressed on this widget and released at ``(x, y)`` (a no-op by default).

        A click is a press and release at one point, so the screen calls this after
        :meth:`click` too, with the click's point.
        """

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


@dataclass(eq=False)
class RadioButton(Widget):
    """A radio button with its label to the right; selecting it deselects the rest of its ``group``.

    Clicking the button or its label, or ``Space`` on it, selects it. The arrow keys move focus to
    the next (``ArrowDown``/``ArrowRight``) or previous (``ArrowUp``/``ArrowLeft``) radio of the
    group, wrapping around, and select it, as in HTML.
    """

    role: ClassVar[str] = "radio"
    focusable: ClassVar[bool] = True
    group: str = ""
    checked: bool = False

    def click(self, screen: Screen) -> None:
        """Select this radio (and deselect its group's others)."""
        for other in self._group(screen):
            other.checked = other is self
        screen.emit(Event("select", self.name))

    def key(self, key: str, screen: Screen) -> None:
        """``Space`` selects; arrow keys select and focus a neighbour in the group."""
        if key == "Space":
            self.click(screen)
        elif key in ("ArrowDown", "ArrowRight", "ArrowUp", "ArrowLeft"):
            group = self._group(screen)
            step = 1 if key in ("ArrowDown", "ArrowRight") else -1
            neighbour = group[(group.index(self) + step) % len(group)]
            screen.focus = neighbour
            neighbour.click(screen)

    def _group(self, screen: Screen) -> list[RadioButton]:
        return [w for w in screen.widgets if isinstance(w, RadioButton) and w.group == self.group]

    def states(self) -> list[str]:
        """``checked`` or ``unchecked``."""
        return ["checked" if self.checked else "unchecked"]


@dataclass(eq=False)
class Slider(Widget):
    """A horizontal range input over the integers ``minimum..maximum`` in steps of ``step``.

    Values map linearly onto the rectangle's width: ``minimum`` at its left pixel, ``maximum``
    at its right one. A click sets the value under the pointer; a drag that starts anywhere on
    the slider sets the value under the release point (clamped), as a browser's range input
    does. Keyboard: ``ArrowRight``/``ArrowUp`` add a step, ``ArrowLeft``/``ArrowDown`` remove
    one, ``Home``/``End`` jump to the ends.
    """

    role: ClassVar[str] = "slider"
    focusable: ClassVar[bool] = True
    minimum: int = 0
    maximum: int = 100
    step: int = 1
    value: int = 0

    def x_of(self, value: int) -> int:
        """The pixel column of ``value``."""
        fraction = (value - self.minimum) / (self.maximum - self.minimum)
        return self.rect.x + round(fraction * (self.rect.w - 1))

    def value_at(self, x: int) -> int:
        """The value at pixel column ``x`` (clamped to the range, rounded to a step)."""
        fraction = min(1.0, max(0.0, (x - self.rect.x) / (self.rect.w - 1)))
        steps = round(fraction * (self.maximum - self.minimum) / self.step)
        return min(self.maximum, self.minimum + steps * self.step)

    def set_value(self, value: int, screen: Screen) -> None:
        """Set ``value`` (clamped), recording a ``change`` when it differs."""
        value = min(self.maximum, max(self.minimum, value))
        if value != self.value:
            self.value = value
            screen.emit(Event("change", self.name))

    def drag(self, x: int, y: int, screen: Screen) -> None:
        """Move the thumb to column ``x``."""
        self.set_value(self.value_at(x), screen)

    def key(self, key: str, screen: Screen) -> None:
        """Arrows step the value; ``Home``/``End`` jump to the ends."""
        moves = {
            "ArrowRight": self.step,
            "ArrowUp": self.step,
            "ArrowLeft": -self.step,
            "ArrowDown": -self.step,
        }
        if key in moves:
            self.set_value(self.value + moves[key], screen)
        elif key in ("Home", "End"):
            self.set_value(self.minimum if key == "Home" else self.maximum, screen)

    def states(self) -> list[str]:
        """``value="..."``, ``min=...`` and ``max=...``."""
        return [f'value="{self.value}"', f"min={self.minimum}", f"max={self.maximum}"]


@dataclass(eq=False)
class DropZone(Widget):
    """A labelled area items can be dropped into; inert itself."""

    role: ClassVar[str] = "region"


@dataclass(eq=False)
class Draggable(Widget):
    """A draggable box: a drag started on it moves it by the pointer's travel, kept on the screen.

    It follows the pointer from where it was pressed (``Screen.press_point``) to the release
    point and records a ``move`` event; a click (no travel) leaves it in place.
    """

    role: ClassVar[str] = "draggable"
    focusable: ClassVar[bool] = True

    def drag(self, x: int, y: int, screen: Screen) -> None:
        """Move by the travel from the press point to ``(x, y)``."""
        px, py = screen.press_point
        if (x, y) == (px, py):
            return
        r = self.rect
        nx = min(max(0, r.x + x - px), screen.width - r.w)
        ny = min(max(0, r.y + y - py), screen.height - r.h)
        self.rect = Rect(nx, ny, r.w, r.h)
        screen.emit(Event("move", self.name))
