"""Widgets painted over the page: a dropdown's list of options and modal dialogs.

A :class:`Layer` is topmost on the screen while open and takes the pointer: a dropdown opens a
list of options (a non-modal layer over the page) on click, and a modal dialog (another layer)
blocks the page until one of its buttons, or ``Escape``, closes it. The base widgets and form
controls are in :mod:`~omnigym.envs.gui.widgets`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from omnigym.envs.gui.widgets import Button, Event, Rect, Widget

if TYPE_CHECKING:
    from omnigym.envs.gui.screen import Screen


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
