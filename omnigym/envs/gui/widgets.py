"""The widget kinds of the synthetic GUI and their mouse and keyboard semantics.

A widget has a role (its accessibility role), a label, a rectangle in screen pixels and a
``name`` the task uses to find it. Behaviour follows HTML forms: a click focuses a focusable
widget and activates it (a button fires, a checkbox toggles, a text field takes the caret);
``Space``/``Enter`` on a focused button fire it, ``Space`` toggles a focused checkbox, typing
edits the focused text field and ``Enter`` in a text field submits its window's default button.
Radio buttons select one option of their group; a dropdown opens a list of options (a *layer*
over the page) on click; a slider follows a ``drag`` and the arrow keys; a modal dialog (another
layer) blocks the page until one of its buttons, or ``Escape``, closes it. A tab strip shows one
page of widgets at a time: a click on a tab, or the arrow keys, ``Enter`` or ``Space`` on a
focused tab, switch pages; the hidden pages' widgets are neither reachable nor listed. A scroll
area shows the part of its content inside its viewport (``scroll`` moves it); a list box selects
one of its rows by click or the arrow keys.
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
    """Inside a :class:`ScrollArea`: stays put when the content scrolls (a list's frame)."""

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
class Layer(Widget):
    """A container painted over the page (a dropdown's list, a dialog), topmost of the screen.

    While a layer is open, clicks and drags reach only its widgets. Outside it, a ``modal`` layer
    blocks them (nothing happens); a non-modal one closes and swallows the click, as a browser's
    open ``<select>`` list does. ``Escape`` dismisses the topmost layer.
    """

    modal: ClassVar[bool] = False
    children: list[Widget] = field(default_factory=list)

    def dismiss(self, screen: Screen) -> None:
        """Close this layer."""
        screen.close_layer(self)

    def walk(self) -> Iterator[Widget]:
        """The layer, then each child's subtree."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass(eq=False)
class OptionList(Layer):
    """The open list of a :class:`Dropdown`: a non-modal layer of :class:`Option` rows."""

    role: ClassVar[str] = "listbox"
    dropdown: Dropdown | None = None

    def dismiss(self, screen: Screen) -> None:
        """Close the list through its dropdown."""
        assert self.dropdown is not None
        self.dropdown.close(screen)


@dataclass(eq=False)
class Option(Widget):
    """One entry of an open dropdown's list; a click chooses it and closes the list."""

    role: ClassVar[str] = "option"
    dropdown: Dropdown | None = None
    index: int = 0

    def click(self, screen: Screen) -> None:
        """Choose this option; focus returns to the dropdown."""
        assert self.dropdown is not None
        self.dropdown.choose(self.index, screen)
        self.dropdown.close(screen)
        screen.focus = self.dropdown

    def states(self) -> list[str]:
        """``selected`` for the dropdown's current option."""
        assert self.dropdown is not None
        return ["selected"] if self.dropdown.selected == self.index else []


@dataclass(eq=False)
class Dropdown(Widget):
    """A ``<select>``: shows its chosen option; a click opens (or closes) the list of ``options``.

    The list opens below the dropdown (above it when it would leave the screen) as an
    :class:`OptionList` of :class:`Option` rows as tall as ``option_height``. Keyboard, with focus:
    ``ArrowDown``/``ArrowUp`` choose the next/previous option directly, ``Home``/``End`` the
    first/last, ``Enter``/``Space`` open or close the list, ``Escape`` closes it.
    """

    role: ClassVar[str] = "combobox"
    focusable: ClassVar[bool] = True
    options: list[str] = field(default_factory=list)
    selected: int | None = None
    """Index of the chosen option; None shows the ``placeholder``."""
    placeholder: str = "Select..."
    option_height: int = 16
    popup: OptionList | None = None
    """The open list, or None while closed."""

    @property
    def value(self) -> str:
        """The chosen option ("" for none)."""
        return "" if self.selected is None else self.options[self.selected]

    def click(self, screen: Screen) -> None:
        """Open the list, or close it when open."""
        if self.popup is None:
            self.open(screen)
        else:
            self.close(screen)

    def key(self, key: str, screen: Screen) -> None:
        """Arrows, ``Home``/``End`` choose; ``Enter``/``Space`` toggle the list; ``Escape`` closes."""
        last = len(self.options) - 1
        if key in ("ArrowDown", "ArrowUp"):
            current = -1 if self.selected is None and key == "ArrowDown" else (self.selected or 0)
            self.choose(min(last, max(0, current + (1 if key == "ArrowDown" else -1))), screen)
        elif key in ("Home", "End"):
            self.choose(0 if key == "Home" else last, screen)
        elif key in ("Enter", "Space"):
            self.click(screen)
        elif key == "Escape":
            self.close(screen)

    def choose(self, index: int, screen: Screen) -> None:
        """Make option ``index`` the chosen one."""
        self.selected = index
        screen.emit(Event("select", self.name))

    def open(self, screen: Screen) -> None:
        """Open the list of options over the page."""
        r, h = self.rect, self.option_height
        total = h * len(self.options)
        top = r.y + r.h
        if top + total > screen.height:
            top = r.y - total if r.y - total >= 0 else screen.height - total
        rows: list[Widget] = [
            Option(f"{self.name}.option{i}", Rect(r.x, top + i * h, r.w, h), label, dropdown=self, index=i)
            for i, label in enumerate(self.options)
        ]
        self.popup = OptionList(f"{self.name}.list", Rect(r.x, top, r.w, total), children=rows, dropdown=self)
        screen.open_layer(self.popup)

    def close(self, screen: Screen) -> None:
        """Close the list (nothing when closed)."""
        if self.popup is not None:
            popup, self.popup = self.popup, None
            screen.close_layer(popup)

    def states(self) -> list[str]:
        """``value="..."`` and ``expanded`` or ``collapsed``."""
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return [f'value="{escaped}"', "expanded" if self.popup is not None else "collapsed"]


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
class Dialog(Layer):
    """A modal dialog: a title bar (its ``label``), then its children (text and close buttons)."""

    role: ClassVar[str] = "dialog"
    modal: ClassVar[bool] = True

    def dismiss(self, screen: Screen) -> None:
        """Close the dialog, recording a ``close`` event."""
        screen.close_layer(self)
        screen.emit(Event("close", self.name))


@dataclass(eq=False)
class CloseButton(Button):
    """A dialog's button: closes its dialog (``close`` event, not a ``click``: no commit)."""

    dialog: Dialog | None = None

    def click(self, screen: Screen) -> None:
        """Close the dialog."""
        assert self.dialog is not None
        self.dialog.dismiss(screen)


@dataclass(eq=False)
class Tab(Widget):
    """One tab of a :class:`TabStrip`; a click (or ``Enter``/``Space``) shows its page.

    ``ArrowRight``/``ArrowLeft`` move focus to the next/previous tab, wrapping, and show its page
    (automatic activation, as in the ARIA tabs pattern).
    """

    role: ClassVar[str] = "tab"
    focusable: ClassVar[bool] = True
    strip: TabStrip | None = None
    index: int = 0

    def click(self, screen: Screen) -> None:
        """Show this tab's page."""
        assert self.strip is not None
        self.strip.choose(self.index, screen)

    def key(self, key: str, screen: Screen) -> None:
        """``Enter``/``Space`` show this page; ``ArrowLeft``/``ArrowRight`` focus and show a neighbour."""
        assert self.strip is not None
        if key in ("Enter", "Space"):
            self.click(screen)
        elif key in ("ArrowLeft", "ArrowRight"):
            tabs = self.strip.tabs
            neighbour = tabs[(self.index + (1 if key == "ArrowRight" else -1)) % len(tabs)]
            screen.focus = neighbour
            neighbour.click(screen)

    def states(self) -> list[str]:
        """``selected`` or ``unselected``."""
        assert self.strip is not None
        return ["selected" if self.strip.selected == self.index else "unselected"]


@dataclass(eq=False)
class TabStrip(Widget):
    """A row of :class:`Tab` s (its ``rect``), each with a page of widgets shown below it.

    Only the ``selected`` tab's page is on the screen: the strip walks itself, its tabs, then
    that page's widgets, so the others are not reachable, focusable or in the accessibility
    tree. Choosing a tab records a ``select`` event on the strip.
    """

    role: ClassVar[str] = "tablist"
    tabs: list[Tab] = field(default_factory=list)
    pages: list[list[Widget]] = field(default_factory=list)
    """One list of widgets per tab."""
    selected: int = 0

    @classmethod
    def build(
        cls, name: str, rect: Rect, tabs: list[tuple[Rect, str]], pages: list[list[Widget]], selected: int = 0
    ) -> TabStrip:
        """A strip of tabs ``(rect, label)`` named ``<name>.tab<i>``, with their ``pages``."""
        strip = cls(name, rect, pages=pages, selected=selected)
        strip.tabs = [
            Tab(f"{name}.tab{i}", tab_rect, label, strip=strip, index=i)
            for i, (tab_rect, label) in enumerate(tabs)
        ]
        return strip

    def choose(self, index: int, screen: Screen) -> None:
        """Show page ``index``."""
        self.selected = index
        screen.refresh()
        screen.emit(Event("select", self.name))

    def walk(self) -> Iterator[Widget]:
        """The strip, its tabs, then the shown page's widgets (with their subtrees)."""
        yield self
        yield from self.tabs
        if self.pages:
            for widget in self.pages[self.selected]:
                yield from widget.walk()


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


@dataclass(eq=False)
class AppWindow(Widget):
    """An overlapping application window: a title bar (its ``label``) over its ``children``.

    Windows are children of the screen's root :class:`Window`, painted in order: the last is in
    front and occludes the others, so a point reaches only the frontmost window there. A press
    anywhere on a window (its title bar, body or a widget in it) brings it to the front first
    (:meth:`~omnigym.envs.gui.screen.Screen.raise_window`). The tree marks it ``front`` or ``back``.
    """

    role: ClassVar[str] = "window"
    children: list[Widget] = field(default_factory=list)
    front: bool = False

    def walk(self) -> Iterator[Widget]:
        """The window, then each child's subtree."""
        yield self
        for child in self.children:
            yield from child.walk()

    def states(self) -> list[str]:
        """``front`` or ``back``."""
        return ["front" if self.front else "back"]


@dataclass(eq=False)
class ListItem(Widget):
    """One row of a :class:`ListBox`; a click selects it (and focuses its list)."""

    role: ClassVar[str] = "listitem"
    listbox: ListBox | None = None
    index: int = 0

    def click(self, screen: Screen) -> None:
        """Select this row; focus goes to the list."""
        assert self.listbox is not None
        self.listbox.choose(self.index, screen)
        screen.focus = self.listbox

    def states(self) -> list[str]:
        """``selected`` for the list's selected row."""
        assert self.listbox is not None
        return ["selected"] if self.listbox.selected == self.index else []


@dataclass(eq=False)
class ListBox(Widget):
    """A vertical list of selectable :class:`ListItem` rows (its ``rect`` is the list's frame).

    A click on a row selects it (a ``select`` event on the list) and focuses the list; with
    focus, ``ArrowDown``/``ArrowUp`` select the next/previous row (no wrapping) and scroll it
    into view when the list is in a :class:`ScrollArea`. Put it in a scroll area with its
    ``rect`` equal to the area's: the frame stays put while its rows scroll.
    """

    role: ClassVar[str] = "list"
    focusable: ClassVar[bool] = True
    pinned: ClassVar[bool] = True
    items: list[ListItem] = field(default_factory=list)
    selected: int | None = None

    @classmethod
    def build(
        cls, name: str, rect: Rect, labels: list[str], row_h: int, selected: int | None = None
    ) -> ListBox:
        """A list whose rows ``<name>.item<i>`` are ``row_h`` high, stacked from the top of ``rect``."""
        box = cls(name, rect, selected=selected)
        box.items = [
            ListItem(f"{name}.item{i}", Rect(rect.x, rect.y + i * row_h, rect.w, row_h), label, box, i)
            for i, label in enumerate(labels)
        ]
        return box

    @property
    def value(self) -> str:
        """The selected row's label, or ``""``."""
        return self.items[self.selected].label if self.selected is not None else ""

    def choose(self, index: int, screen: Screen) -> None:
        """Select row ``index`` and scroll it into view."""
        self.selected = index
        for area in screen.widgets:
            if isinstance(area, ScrollArea) and any(w is self for w in area.content()):
                area.reveal(self.items[index], screen)
        screen.emit(Event("select", self.name))

    def key(self, key: str, screen: Screen) -> None:
        """``ArrowDown``/``ArrowUp`` select the next/previous row."""
        if key in ("ArrowDown", "ArrowUp") and self.items:
            last = len(self.items) - 1
            if self.selected is None:
                index = 0 if key == "ArrowDown" else last
            else:
                index = min(max(0, self.selected + (1 if key == "ArrowDown" else -1)), last)
            if index != self.selected:
                self.choose(index, screen)

    def states(self) -> list[str]:
        """``value="..."`` of the selected row."""
        return [f'value="{self.value}"'] if self.selected is not None else []

    def walk(self) -> Iterator[Widget]:
        """The list, then its rows."""
        yield self
        yield from self.items


@dataclass(eq=False)
class ScrollArea(Widget):
    """A viewport (its ``rect``) over a taller column of ``children``.

    ``scroll(x, y, dy)`` over it moves the content up by ``dy`` pixels (down when negative),
    clamped so the content never leaves the top nor scrolls past its bottom (``offset`` is
    ``0..max_offset``). Only descendants that lie entirely inside the viewport are on the
    screen: the area walks itself then those, so the others are not painted, not reachable by
    pointer or ``Tab`` and absent from the accessibility tree. A descendant whose class sets
    ``pinned`` (a :class:`ListBox` frame) stays put and is always shown. The tree marks the
    area ``offset=N``.
    """

    role: ClassVar[str] = "scrollarea"
    children: list[Widget] = field(default_factory=list)
    offset: int = 0
    """How many pixels the content is scrolled up."""

    def content(self) -> Iterator[Widget]:
        """Every descendant, shown or not."""
        for child in self.children:
            yield from child.walk()

    def _moving(self) -> list[Widget]:
        return [w for w in self.content() if not w.pinned]

    @property
    def max_offset(self) -> int:
        """The largest offset: the content's bottom at the viewport's bottom (0 if it fits)."""
        bottoms = [w.rect.y + w.rect.h + self.offset for w in self._moving()]
        return max(0, max(bottoms, default=0) - (self.rect.y + self.rect.h))

    def scroll_by(self, dy: int, screen: Screen) -> bool:
        """Scroll the content up by ``dy`` pixels, clamped; whether the offset changed."""
        offset = min(max(0, self.offset + dy), self.max_offset)
        delta = offset - self.offset
        if delta == 0:
            return False
        for w in self._moving():
            w.rect = Rect(w.rect.x, w.rect.y - delta, w.rect.w, w.rect.h)
        self.offset = offset
        screen.version += 1
        screen.refresh()
        return True

    def reveal(self, widget: Widget, screen: Screen) -> None:
        """Scroll the least that brings ``widget`` fully into view."""
        r, v = widget.rect, self.rect
        if r.y < v.y:
            self.scroll_by(r.y - v.y, screen)
        elif r.y + r.h > v.y + v.h:
            self.scroll_by(r.y + r.h - (v.y + v.h), screen)

    def visible(self, widget: Widget) -> bool:
        """Whether ``widget`` lies entirely inside the viewport."""
        r, v = widget.rect, self.rect
        return v.x <= r.x and r.x + r.w <= v.x + v.w and v.y <= r.y and r.y + r.h <= v.y + v.h

    def states(self) -> list[str]:
        """``offset=N``."""
        return [f"offset={self.offset}"]

    def walk(self) -> Iterator[Widget]:
        """The area, then the descendants shown in the viewport (and pinned ones)."""
        yield self
        for w in self.content():
            if w.pinned or self.visible(w):
                yield w
