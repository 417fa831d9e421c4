"""The page families: tasks about the page itself rather than a form's values.

Close a modal dialog before using the page, search and click a result that appears, switch tab
pages, drag an item into an area, and work across overlapping windows. Each episode ends at its
commit: the first button click (for a search, the first result clicked) or, for dragging, the
first item dropped wholly inside an area. The base class is :class:`~omnigym.envs.gui.task.Task`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from omnigym.envs.gui import layout
from omnigym.envs.gui.containers import AppWindow, TabStrip
from omnigym.envs.gui.layers import CloseButton, Dialog
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.task import BUTTON_WORDS, NAMES, WORDS, Task
from omnigym.envs.gui.widgets import Button, Checkbox, Draggable, DropZone, Label, Rect, TextField, Widget

DIALOG_TITLES = ("Notice", "Alert", "Info", "Warning", "Message")
DIALOG_MESSAGES = (
    "File saved.", "Welcome back!", "New update.", "Session ended.", "Link copied.", "Done!",
    "Changes applied.", "Item deleted.", "Draft stored.",
)  # fmt: skip
DIALOG_BUTTONS = ("OK", "Close", "Cancel", "Dismiss")
SEARCH_SUFFIXES = ("pie", "tree", "park", "farm", "shop", "wiki", "news", "map")
ORDINALS = ("1st", "2nd", "3rd", "4th")


class CloseDialog(Task):
    """Close a modal dialog (it blocks the page), then click the named one of 2-4 page buttons."""

    name: ClassVar[str] = "CloseDialog"
    max_steps: ClassVar[int] = 6

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        count = int(rng.integers(2, 5))
        page_words = [word for word in BUTTON_WORDS if word not in DIALOG_BUTTONS]
        labels = [str(label) for label in rng.choice(page_words, size=count, replace=False)]
        self.target = f"button{int(rng.integers(count))}"
        rects = layout.scatter(rng, area, [layout.button_size(t, label) for label in labels])
        widgets: list[Widget] = [
            Button(f"button{i}", rect, label)
            for i, (rect, label) in enumerate(zip(rects, labels, strict=True))
        ]
        widgets.append(self._dialog(rng, area))
        target_label = labels[int(self.target.removeprefix("button"))]
        return f'Close the dialog, then click "{target_label}".', widgets, None

    def _dialog(self, rng: np.random.Generator, area: Rect) -> Dialog:
        """A dialog with a title, a one-line message and a close button, somewhere over the page."""
        t = self.theme
        width = int(area.w * rng.uniform(0.7, 0.95))
        fitting = [m for m in DIALOG_MESSAGES if t.text_width(m) <= width - 2 * t.pad]
        message = str(rng.choice(fitting))
        button_label = str(rng.choice(DIALOG_BUTTONS))
        bw, bh = layout.button_size(t, button_label)
        bar, line = t.line_height + t.pad, layout.list_row_height(t)
        height = bar + t.pad + line + t.pad + bh + t.pad
        x = area.x + int(rng.integers(0, area.w - width + 1))
        y = area.y + int(rng.integers(0, area.h - height + 1))
        dialog = Dialog("dialog", Rect(x, y, width, height), str(rng.choice(DIALOG_TITLES)))
        text = Label("message", Rect(x + t.pad, y + bar + t.pad, t.text_width(message), line), message)
        close = CloseButton(
            "close", Rect(x + width - bw - t.pad, y + height - bh - t.pad, bw, bh), button_label
        )
        close.dialog = dialog
        dialog.children = [text, close]
        return dialog

    def _judge(self, screen: Screen, clicked: str) -> bool:
        return clicked == self.target


class SearchAndClick(Task):
    """Search for a word, then click the named one of the 3-4 result links that appear.

    The result titles are ``"<query> <suffix>"``, so results of a wrong query never match; the
    instruction names the result by position ("the 2nd result") or by title. Searching again
    replaces the results; the episode ends at the first result clicked.
    """

    name: ClassVar[str] = "SearchAndClick"
    max_steps: ClassVar[int] = 10

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        self.query = str(rng.choice([w for w in WORDS + NAMES if len(w) <= 5]))
        count = int(rng.integers(3, 5))
        self.suffixes = [str(s) for s in rng.choice(SEARCH_SUFFIXES, size=count, replace=False)]
        index = int(rng.integers(count))
        self.target = f"{self.query} {self.suffixes[index]}"
        self.target_name = f"result{index}"
        self._seen = 0
        row = layout.row_height(t)
        button_w, button_h = layout.button_size(t, "Search")
        link_h = layout.button_size(t, "x")[1]
        tops = layout.stack(rng, area, [row] + [link_h] * count, gap=t.pad // 2)
        self.result_tops = tops[1:]
        x = area.x + int(rng.integers(0, area.w // 8 + 1))
        self.result_x = x
        field_w = area.x + area.w - x - button_w - t.pad
        self.page: list[Widget] = [
            TextField("query", Rect(x, tops[0], field_w, row), "Search", placeholder="Search"),
            Button("search", Rect(x + field_w + t.pad, tops[0], button_w, button_h), "Search"),
        ]
        which = f"the {ORDINALS[index]} result" if rng.random() < 0.5 else f'"{self.target}"'
        return f'Search for "{self.query}" and click {which}.', list(self.page), "search"

    def outcome(self, screen: Screen) -> bool | None:
        """Each Search shows results for the field's text; a result click ends the episode."""
        events, self._seen = screen.events[self._seen :], len(screen.events)
        for event in events:
            if event.kind != "click":
                continue
            if event.name == "search":
                screen.set_children([*self.page, *self._results(screen)])
            elif event.name.startswith("result"):
                return self._judge(screen, event.name)
        return None

    def _results(self, screen: Screen) -> list[Widget]:
        field = screen["query"]
        assert isinstance(field, TextField)
        query = field.value.strip()
        if not query:
            return []
        links: list[Widget] = []
        for i, (top, suffix) in enumerate(zip(self.result_tops, self.suffixes, strict=True)):
            title = f"{query[:12]} {suffix}"
            w, h = layout.button_size(self.theme, title)
            links.append(Button(f"result{i}", Rect(self.result_x, top, w, h), title))
        return links

    def _judge(self, screen: Screen, clicked: str) -> bool:
        return clicked == self.target_name and screen[clicked].label == self.target


TAB_LABELS = ("Home", "Mail", "Files", "Tools", "View", "Help", "Info", "Edit")


class NavigateTabs(Task):
    """Switch to the named one of 2-4 tabs and click the named button of its page (2-3 buttons).

    One tab is shown at the start (sometimes the target's); the hidden pages' buttons are
    neither clickable nor listed. Half the episodes put a decoy button with the target's label
    on another page, so clicking it before switching fails.
    """

    name: ClassVar[str] = "NavigateTabs"
    max_steps: ClassVar[int] = 6

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        tab_h = layout.row_height(t)
        count = int(rng.integers(2, 5))
        while True:  # fewer tabs when their labels do not fit the strip
            labels = [str(label) for label in rng.choice(TAB_LABELS, size=count, replace=False)]
            widths = [t.text_width(label) + 2 * t.pad for label in labels]
            if sum(widths) <= area.w or count == 2:
                break
            count -= 1
        x, tabs = area.x, []
        for label, w in zip(labels, widths, strict=True):
            tabs.append((Rect(x, area.y, w, tab_h), label))
            x += w
        page_area = Rect(area.x, area.y + tab_h + t.pad, area.w, area.h - tab_h - t.pad)
        self.target_tab = int(rng.integers(count))
        words = [
            [str(w) for w in rng.choice(BUTTON_WORDS, size=int(rng.integers(2, 4)), replace=False)]
            for _ in range(count)
        ]
        button_index = int(rng.integers(len(words[self.target_tab])))
        target_label = words[self.target_tab][button_index]
        others = [p for p in range(count) if p != self.target_tab]
        if rng.random() < 0.5:  # a decoy with the target's label on another page
            decoy = others[int(rng.integers(len(others)))]
            if target_label not in words[decoy]:
                words[decoy][int(rng.integers(len(words[decoy])))] = target_label
        pages: list[list[Widget]] = []
        for p, page_words in enumerate(words):
            rects = layout.scatter(rng, page_area, [layout.button_size(t, w) for w in page_words])
            pages.append(
                [
                    Button(f"page{p}.button{i}", r, w)
                    for i, (r, w) in enumerate(zip(rects, page_words, strict=True))
                ]
            )
        self.target = f"page{self.target_tab}.button{button_index}"
        selected = self.target_tab if rng.random() < 0.25 else others[int(rng.integers(len(others)))]
        strip = TabStrip.build("tabs", Rect(area.x, area.y, area.w, tab_h), tabs, pages, selected)
        instruction = f'Switch to the "{labels[self.target_tab]}" tab and click "{target_label}".'
        return instruction, [strip], None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        return clicked == self.target


ZONE_LABELS = ("Box A", "Box B", "Box C", "Bin", "Tray", "Cart")


class DragItem(Task):
    """Drag the named one of 2-3 items into the named one of 2-3 areas with ``drag(x1, y1, x2, y2)``.

    The episode ends when an item is dropped wholly inside an area: success iff it is the named
    item in the named area. Items dropped elsewhere stay where they land.
    """

    name: ClassVar[str] = "DragItem"
    max_steps: ClassVar[int] = 6

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        items = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(2, 4)), replace=False)]
        sizes = [layout.button_size(t, label) for label in items]
        item_w = max(w for w, _ in sizes)
        zone_count = int(rng.integers(2, 4))
        while zone_count > 2 and (area.w - t.pad * (zone_count - 1)) // zone_count < item_w + 2 * t.pad:
            zone_count -= 1
        zones = [str(z) for z in rng.choice(ZONE_LABELS, size=zone_count, replace=False)]
        zone_w = (area.w - t.pad * (zone_count - 1)) // zone_count
        zone_h = t.line_height + 2 * t.pad + max(h for _, h in sizes) + t.pad
        top = Rect(area.x, area.y, area.w, area.h - zone_h - t.pad)
        rects = layout.scatter(rng, top, sizes)
        zone_y = area.y + area.h - zone_h
        widgets: list[Widget] = [
            DropZone(f"zone{i}", Rect(area.x + i * (zone_w + t.pad), zone_y, zone_w, zone_h), label)
            for i, label in enumerate(zones)
        ]
        widgets += [
            Draggable(f"item{i}", r, label) for i, (r, label) in enumerate(zip(rects, items, strict=True))
        ]
        self.item = f"item{int(rng.integers(len(items)))}"
        self.zone = f"zone{int(rng.integers(zone_count))}"
        item_label = items[int(self.item.removeprefix("item"))]
        zone_label = zones[int(self.zone.removeprefix("zone"))]
        return f'Drag "{item_label}" into "{zone_label}".', widgets, None

    def outcome(self, screen: Screen) -> bool | None:
        """Ends when an item lies wholly inside an area; success iff the named item in the named area."""
        zones = [w for w in screen.window.walk() if isinstance(w, DropZone)]
        for item in (w for w in screen.window.walk() if isinstance(w, Draggable)):
            r = item.rect
            for zone in zones:
                if zone.rect.contains(r.x, r.y) and zone.rect.contains(r.x + r.w - 1, r.y + r.h - 1):
                    return item.name == self.item and zone.name == self.zone
        return None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        return False  # no buttons: outcome decides


SETTINGS_LABELS = ("Dark mode", "Sound", "Sync", "Alerts", "Wi-Fi")
NOTE_WORDS = WORDS


class MultiWindow(Task):
    """A sequence of steps across 2-3 overlapping windows ("Notes", "Settings", maybe "Mail").

    Type a word into the field of Notes or Mail, tick or untick one named box in Settings, in
    the instructed order, then click the final button ("Save" in Notes or "Send" in Mail). A press on a window
    brings it to the front, and only the front window's widgets at a point receive clicks. The
    episode ends at the first button click: success iff it is the final button and every field
    and box then holds what the instruction asks (the others unchanged).
    """

    name: ClassVar[str] = "MultiWindow"
    max_steps: ClassVar[int] = 15

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        bar = t.line_height + t.pad
        row, list_row = layout.row_height(t), layout.list_row_height(t)
        count = int(rng.integers(2, 4))
        win_w = area.w * 3 // 4
        offset = bar + t.pad
        windows: list[AppWindow] = []
        self.fields: dict[str, str] = {}
        self.boxes: dict[str, bool] = {}
        steps: list[str] = []
        finals: list[tuple[str, str, str]] = []
        typed: list[tuple[str, str, str]] = []
        for i, title in enumerate(("Notes", "Settings", "Mail")[:count]):
            x = area.x + (i * (area.w - win_w)) // max(1, count - 1)
            y = area.y + i * offset
            inner = x + t.pad
            top = y + bar + t.pad
            children: list[Widget] = []
            if title == "Settings":
                labels = [str(w) for w in rng.choice(SETTINGS_LABELS, size=3, replace=False)]
                for j, label in enumerate(labels):
                    box = Checkbox(
                        f"settings.box{j}",
                        Rect(inner, top + j * list_row, win_w - 2 * t.pad, list_row),
                        label,
                        checked=bool(rng.random() < 0.5),
                    )
                    children.append(box)
                    self.boxes[box.name] = box.checked
                j = int(rng.integers(3))
                self.boxes[f"settings.box{j}"] = not self.boxes[f"settings.box{j}"]
                verb = "tick" if self.boxes[f"settings.box{j}"] else "untick"
                steps.append(f'Settings: {verb} "{labels[j]}"')
                button_label, height = "Apply", 3 * list_row + t.pad
            else:
                key = title.lower()
                label = "Title" if title == "Notes" else "To"
                field_name = f"{key}.field"
                children.append(
                    TextField(field_name, Rect(inner, top, win_w - 2 * t.pad, row), label, placeholder=label)
                )
                word = str(rng.choice(NOTE_WORDS if title == "Notes" else NAMES))
                self.fields[field_name] = ""
                typed.append((field_name, f'{title}: type "{word}"', word))
                button_label, height = ("Save" if title == "Notes" else "Send"), row + t.pad
                finals.append((f"{key}.button", button_label, title))
            button = self._button(f"{title.lower()}.button", button_label, inner, top + height)
            children.append(button)
            win_h = bar + t.pad + height + button.rect.h + t.pad
            windows.append(AppWindow(f"{title.lower()}", Rect(x, y, win_w, win_h), title, children=children))
        field_name, step, word = typed[int(rng.integers(len(typed)))]  # one field to type into
        self.fields[field_name] = word
        steps.append(step)
        self.target, final_label, final_title = finals[int(rng.integers(len(finals)))]
        order = rng.permutation(len(steps))
        ordered = [steps[int(k)] for k in order]
        instruction = "; ".join(ordered) + f'; then click "{final_label}" in {final_title}.'
        z = rng.permutation(len(windows))
        return instruction, [windows[int(k)] for k in z], None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        if clicked != self.target:
            return False
        for name, value in self.fields.items():
            field = screen[name]
            if not isinstance(field, TextField) or field.value != value:
                return False
        for name, checked in self.boxes.items():
            box = screen[name]
            if not isinstance(box, Checkbox) or box.checked != checked:
                return False
        return True
