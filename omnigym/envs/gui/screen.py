"""The screen: a widget tree with focus and layers, dispatching :class:`GUIAction` s to widgets.

The screen is the simulator's whole state. It knows no task: a task builds its widgets, then
reads the screen's widgets and :class:`~omnigym.envs.gui.widgets.Event` log to judge success.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from omnigym.envs.gui.actions import GUIAction
from omnigym.envs.gui.containers import AppWindow, ScrollArea
from omnigym.envs.gui.layers import Layer
from omnigym.envs.gui.widgets import Button, Event, Rect, Widget, Window

_SERIALS = itertools.count()


class Screen:
    """A ``width`` x ``height`` screen: an instruction bar, one window, and layers over it.

    ``widgets`` lists the window's widgets, then each open layer's (a dropdown's list, a modal
    dialog), in paint order: the last is on top. While a layer is open, pointer actions reach
    only the topmost layer (see :class:`~omnigym.envs.gui.layers.Layer`).

    Args:
        width, height: screen size in pixels.
        instruction: the task's instruction, painted in the bar and given in ``text``.
        instruction_rect: where the instruction bar is painted.
        window: the root of the widget tree.
        layers: layers open from the start (a dialog), bottom first.
    """

    def __init__(
        self,
        width: int,
        height: int,
        instruction: str,
        instruction_rect: Rect,
        window: Window,
        layers: Sequence[Layer] = (),
    ) -> None:
        self.width, self.height = width, height
        self.instruction = instruction
        self.instruction_rect = instruction_rect
        self.window = window
        self.layers: list[Layer] = list(layers)
        self.widgets: list[Widget] = []
        self._by_name: dict[str, Widget] = {}
        self._refresh()
        self._mark_front()
        self.focus: Widget | None = None
        self.events: list[Event] = []
        self.press_point: tuple[int, int] = (0, 0)
        """Where the last press (of a click or drag) happened; a dragged item moves from it."""
        self.serial = next(_SERIALS)
        """Unique per screen in this process, so a renderer never mistakes a new screen for an old one."""
        self.version = 0
        """Incremented by every action that may change what is painted (renderer cache key)."""

    def __getitem__(self, name: str) -> Widget:
        return self._by_name[name]

    def on_screen(self, x: int, y: int) -> bool:
        """Whether ``(x, y)`` is a pixel of the screen."""
        return 0 <= x < self.width and 0 <= y < self.height

    def _refresh(self) -> None:
        """Recompute ``widgets`` after the layers changed."""
        self.widgets = [*self.window.walk(), *(w for layer in self.layers for w in layer.walk())]
        self._by_name.update((widget.name, widget) for widget in self.widgets)

    def open_layer(self, layer: Layer) -> None:
        """Open ``layer`` on top of everything."""
        self.layers.append(layer)
        self._refresh()

    def close_layer(self, layer: Layer) -> None:
        """Close ``layer``; focus inside it is cleared."""
        if layer in self.layers:
            if self.focus is not None and self.focus in list(layer.walk()):
                self.focus = None
            self.layers.remove(layer)
            self._refresh()

    def set_children(self, children: Sequence[Widget]) -> None:
        """Replace the window's children (a task whose page changes, e.g. search results)."""
        if self.focus is not None and not any(self.focus in list(c.walk()) for c in children):
            self.focus = None
        self.window.children = list(children)
        self.version += 1
        self._refresh()

    def refresh(self) -> None:
        """Recompute ``widgets`` after a container changed what it shows (a tab strip's page).

        Focus on a widget no longer shown is cleared.
        """
        self._refresh()
        if self.focus is not None and self.focus not in self.widgets:
            self.focus = None

    def _mark_front(self) -> None:
        windows = [w for w in self.window.children if isinstance(w, AppWindow)]
        for w in windows:
            w.front = w is windows[-1]

    def raise_window(self, window: AppWindow) -> None:
        """Bring ``window`` (a child of the root window) to the front: painted last, hit first."""
        children = self.window.children
        if window in children and children[-1] is not window:
            children.remove(window)
            children.append(window)
            self.version += 1
            self._refresh()
            self._mark_front()

    def _owner(self, widget: Widget) -> AppWindow | None:
        """The :class:`AppWindow` that holds ``widget`` (or is it), if any."""
        for child in self.window.children:
            if isinstance(child, AppWindow) and any(w is widget for w in child.walk()):
                return child
        return None

    def _scope(self) -> list[Widget]:
        """The widgets pointer and focus actions can reach: the topmost layer's, else the window's."""
        return list(self.layers[-1].walk()) if self.layers else list(self.window.walk())

    def emit(self, event: Event) -> None:
        """Record what a widget did."""
        self.events.append(event)

    def submit(self) -> None:
        """Fire the window's default button (``Enter`` in a text field)."""
        if self.window.default is not None:
            default = self._by_name[self.window.default]
            if isinstance(default, Button):
                default.click(self)

    def hit(self, x: int, y: int) -> Widget | None:
        """The topmost reachable widget under ``(x, y)`` (the last painted), or None.

        With a layer open, only its widgets are reachable.
        """
        for widget in reversed(self._scope()):
            if widget.rect.contains(x, y):
                return widget
        return None

    def apply(self, action: GUIAction) -> None:
        """Carry out ``action`` (its points must be on the screen).

        ``drag`` moves a slider; ``scroll`` scrolls the topmost reachable
        :class:`~omnigym.envs.gui.containers.ScrollArea` under the point and elsewhere changes
        nothing; it bumps ``version`` only when an offset changed.
        """
        if action.kind == "scroll":
            self._scroll(action.x, action.y, action.dy)
            return
        if action.kind in ("click", "double_click", "drag") and self._changes_nothing(action.x, action.y):
            return  # the last frame still shows the screen
        self.version += 1
        if action.kind in ("click", "double_click"):
            for _ in range(2 if action.kind == "double_click" else 1):
                self._press(action.x, action.y, action.x, action.y)
        elif action.kind == "drag":
            self._press(action.x, action.y, action.x2, action.y2)
        elif action.kind == "type":
            if self.focus is not None:
                self.focus.type_text(action.text, self)
        elif action.kind == "key":
            self._key(action.text)

    def _scroll(self, x: int, y: int, dy: int) -> None:
        """Scroll the topmost reachable scroll area under ``(x, y)`` by ``dy`` pixels, if any."""
        for widget in reversed(self._scope()):
            if isinstance(widget, ScrollArea) and widget.rect.contains(x, y):
                widget.scroll_by(dy, self)
                return

    def _changes_nothing(self, x: int, y: int) -> bool:
        """Whether a press at ``(x, y)`` hits no widget with nothing to close or unfocus."""
        return self.focus is None and not self.layers and self.hit(x, y) is None

    def _press(self, x: int, y: int, x2: int, y2: int) -> None:
        """Press at ``(x, y)`` and release at ``(x2, y2)``: a click when the points are equal.

        The pressed widget takes focus (or focus is cleared) and is activated when released on
        it, then told where the pointer was released. Outside an open layer, a modal layer
        blocks the press; any other closes and swallows it.
        """
        self.press_point = (x, y)
        target = self.hit(x, y)
        if target is None and self.layers:
            if not self.layers[-1].modal:
                self.layers[-1].dismiss(self)
            return
        self.focus = target if target is not None and target.focusable else None
        owner = self._owner(target) if target is not None else None
        if owner is not None:
            self.raise_window(owner)
        if target is not None:
            if target.rect.contains(x2, y2):
                target.click(self)
            target.drag(x2, y2, self)

    def _key(self, key: str) -> None:
        """``Tab``/``Shift+Tab`` move focus, ``Escape`` closes the topmost layer; others go to focus."""
        if key == "Escape" and self.layers:
            self.layers[-1].dismiss(self)
        elif key in ("Tab", "Shift+Tab"):
            if self.layers and not self.layers[-1].modal:
                self.layers[-1].dismiss(self)
            self._move_focus(1 if key == "Tab" else -1)
        elif self.focus is not None:
            self.focus.key(key, self)

    def _move_focus(self, step: int) -> None:
        """Focus the next (``step`` 1) or previous (-1) reachable focusable widget, wrapping around."""
        order = [widget for widget in self._scope() if widget.focusable]
        if not order:
            return
        if self.focus not in order:
            self.focus = order[0 if step > 0 else -1]
            return
        self.focus = order[(order.index(self.focus) + step) % len(order)]

    def accessibility_tree(self) -> str:
        """One line per widget: ``[index] role "label" (x, y, w, h)`` plus its states.

        Focus is marked ``focused``. Bounding boxes are pixel rectangles of the screenshot, so
        an agent can click the centre of an element it reads here.
        """
        lines = []
        for index, widget in enumerate(self.widgets):
            r = widget.rect
            label = widget.label.replace("\\", "\\\\").replace('"', '\\"')
            states = [*widget.states(), *(["focused"] if widget is self.focus else [])]
            suffix = "".join(f" {state}" for state in states)
            lines.append(f'[{index}] {widget.role} "{label}" ({r.x}, {r.y}, {r.w}, {r.h}){suffix}')
        return "\n".join(lines)
