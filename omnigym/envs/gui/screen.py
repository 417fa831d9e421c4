"""The screen: a widget tree with focus, dispatching :class:`GUIAction` s to widgets.

The screen is the simulator's whole state. It knows no task: a task builds its widgets, then
reads the screen's widgets and :class:`~omnigym.envs.gui.widgets.Event` log to judge success.
"""

from __future__ import annotations

import itertools

from omnigym.envs.gui.actions import GUIAction
from omnigym.envs.gui.widgets import Button, Event, Rect, Widget, Window

_SERIALS = itertools.count()


class Screen:
    """A ``width`` x ``height`` screen: an instruction bar at the top and one window below it.

    Args:
        width, height: screen size in pixels.
        instruction: the task's instruction, painted in the bar and given in ``text``.
        instruction_rect: where the instruction bar is painted.
        window: the root of the widget tree.
    """

    def __init__(
        self, width: int, height: int, instruction: str, instruction_rect: Rect, window: Window
    ) -> None:
        self.width, self.height = width, height
        self.instruction = instruction
        self.instruction_rect = instruction_rect
        self.window = window
        self.widgets: list[Widget] = list(window.walk())
        self._by_name = {widget.name: widget for widget in self.widgets}
        self.focus: Widget | None = None
        self.events: list[Event] = []
        self.serial = next(_SERIALS)
        """Unique per screen in this process, so a renderer never mistakes a new screen for an old one."""
        self.version = 0
        """Incremented by every action that may change what is painted (renderer cache key)."""

    def __getitem__(self, name: str) -> Widget:
        return self._by_name[name]

    def on_screen(self, x: int, y: int) -> bool:
        """Whether ``(x, y)`` is a pixel of the screen."""
        return 0 <= x < self.width and 0 <= y < self.height

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
        """The topmost widget under ``(x, y)`` (the last painted), or None."""
        for widget in reversed(self.widgets):
            if widget.rect.contains(x, y):
                return widget
        return None

    def apply(self, action: GUIAction) -> None:
        """Carry out ``action`` (its points must be on the screen).

        ``scroll`` and ``drag`` reach widgets that scroll or drag; none of the current families
        has one, so there they change nothing.
        """
        self.version += 1
        if action.kind in ("click", "double_click"):
            for _ in range(2 if action.kind == "double_click" else 1):
                self._click(action.x, action.y)
        elif action.kind == "type":
            if self.focus is not None:
                self.focus.type_text(action.text, self)
        elif action.kind == "key":
            self._key(action.text)

    def _click(self, x: int, y: int) -> None:
        """Focus what is under the pointer (or clear focus), then activate it."""
        target = self.hit(x, y)
        self.focus = target if target is not None and target.focusable else None
        if target is not None:
            target.click(self)

    def _key(self, key: str) -> None:
        """``Tab``/``Shift+Tab`` move focus; other keys go to the focused widget."""
        if key in ("Tab", "Shift+Tab"):
            self._move_focus(1 if key == "Tab" else -1)
        elif self.focus is not None:
            self.focus.key(key, self)

    def _move_focus(self, step: int) -> None:
        """Focus the next (``step`` 1) or previous (-1) focusable widget, wrapping around."""
        order = [widget for widget in self.widgets if widget.focusable]
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
