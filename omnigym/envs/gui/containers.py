"""Widgets that show only part of their content: tab strips, scroll areas, list boxes, app windows.

A tab strip shows one page of widgets at a time: a click on a tab, or the arrow keys, ``Enter``
or ``Space`` on a focused tab, switch pages; the hidden pages' widgets are neither reachable nor
listed. A scroll area shows the part of its content inside its viewport (``scroll`` moves it); a
list box selects one of its rows by click or the arrow keys. Overlapping application windows are
painted in order, the front one occluding the others. The base widgets and form controls are in
:mod:`~omnigym.envs.gui.widgets`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from omnigym.envs.gui.widgets import Event, Rect, Widget

if TYPE_CHECKING:
    from omnigym.envs.gui.screen import Screen


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
class AppWindow(Widget):
    """An overlapping application window: a title bar (its ``label``) over its ``children``.

    Windows are children of the screen's root :class:`~omnigym.envs.gui.widgets.Window`, painted
    in order: the last is in front and occludes the others, so a point reaches only the frontmost
    window there. A press anywhere on a window (its title bar, body or a widget in it) brings it
    to the front first (:meth:`~omnigym.envs.gui.screen.Screen.raise_window`). The tree marks it
    ``front`` or ``back``.
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
