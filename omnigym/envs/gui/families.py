"""MiniWoB-style task families, each generated from the reset seed with a verifiable success check.

A family builds a :class:`~omnigym.envs.gui.screen.Screen` from a NumPy generator and judges it
after every step: success (True), failure (False) or still running (None). Each episode ends at
the first *commit* (the target button, or a form's submit button, is activated), as in MiniWoB.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from omnigym.envs.gui import layout
from omnigym.envs.gui.render import Theme
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.widgets import (
    AppWindow,
    Button,
    Checkbox,
    CloseButton,
    Dialog,
    Draggable,
    Dropdown,
    DropZone,
    Label,
    Layer,
    RadioButton,
    Rect,
    Slider,
    TabStrip,
    TextField,
    Widget,
    Window,
)

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
PASSWORD_CHARS = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
DROPDOWN_LABELS = ("Choice", "Option", "Item", "Pick one", "Category")
DIALOG_TITLES = ("Notice", "Alert", "Info", "Warning", "Message")
DIALOG_MESSAGES = (
    "File saved.", "Welcome back!", "New update.", "Session ended.", "Link copied.", "Done!",
    "Changes applied.", "Item deleted.", "Draft stored.",
)  # fmt: skip
DIALOG_BUTTONS = ("OK", "Close", "Cancel", "Dismiss")


def _quoted(labels: list[str]) -> str:
    return ", ".join(f'"{label}"' for label in labels)


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

        The :class:`~omnigym.envs.gui.widgets.Layer` s among the built widgets (a dialog) open
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


class ClickButton(Task):
    """Click the button with a given label among 2-6 scattered buttons; a wrong click fails."""

    name: ClassVar[str] = "ClickButton"
    max_steps: ClassVar[int] = 5

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        count = int(rng.integers(2, 7))
        labels = [str(label) for label in rng.choice(BUTTON_WORDS, size=count, replace=False)]
        self.target = f"button{int(rng.integers(count))}"
        rects = layout.scatter(rng, area, [layout.button_size(self.theme, label) for label in labels])
        buttons: list[Widget] = [
            Button(f"button{i}", rect, label)
            for i, (rect, label) in enumerate(zip(rects, labels, strict=True))
        ]
        target_label = labels[int(self.target.removeprefix("button"))]
        return f'Click the button "{target_label}".', buttons, None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        return clicked == self.target


class ClickCheckboxes(Task):
    """Tick exactly the named boxes among 2-6, then click Submit."""

    name: ClassVar[str] = "ClickCheckboxes"
    max_steps: ClassVar[int] = 12

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        count = int(rng.integers(2, 7))
        labels = [str(label) for label in rng.choice(WORDS, size=count, replace=False)]
        wanted = rng.choice(count, size=int(rng.integers(0, min(count, 3) + 1)), replace=False)
        self.wanted = {f"box{i}" for i in wanted}
        row = layout.list_row_height(t)
        submit_h = layout.button_size(t, "Submit")[1]
        tops = layout.stack(rng, area, [row] * count + [submit_h], gap=t.pad // 2)
        x = area.x + int(rng.integers(0, area.w // 3))
        widgets: list[Widget] = [
            Checkbox(f"box{i}", Rect(x, top, t.font_size + t.pad + t.text_width(label), row), label)
            for i, (top, label) in enumerate(zip(tops[:count], labels, strict=True))
        ]
        widgets.append(self._button("submit", "Submit", x, tops[-1]))
        chosen = [labels[i] for i in sorted(wanted)]
        what = f"Select {_quoted(chosen)}" if chosen else "Select nothing"
        return f"{what} and click Submit.", widgets, None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        ticked = {w.name for w in screen.widgets if isinstance(w, Checkbox) and w.checked}
        return clicked == "submit" and ticked == self.wanted


class EnterText(Task):
    """Type a given word into the text field and submit (button, or Enter in the field)."""

    name: ClassVar[str] = "EnterText"
    max_steps: ClassVar[int] = 10

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        word = str(rng.choice(WORDS + NAMES))
        self.target = word.capitalize() if rng.random() < 0.3 else word
        row = layout.row_height(t)
        submit_h = layout.button_size(t, "Submit")[1]
        top, button_top = layout.stack(rng, area, [row, submit_h], gap=t.pad)
        width = int(area.w * rng.uniform(0.6, 0.9))
        x = area.x + int(rng.integers(0, area.w - width + 1))
        field = TextField("field", Rect(x, top, width, row), placeholder="Type here")
        return (
            f'Enter "{self.target}" in the text field and press Submit.',
            [field, self._button("submit", "Submit", x, button_top)],
            "submit",
        )

    def _judge(self, screen: Screen, clicked: str) -> bool:
        field = screen["field"]
        return clicked == "submit" and isinstance(field, TextField) and field.value == self.target


class LoginUser(Task):
    """Fill in a username and a (masked) password, then click Login."""

    name: ClassVar[str] = "LoginUser"
    max_steps: ClassVar[int] = 15

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        self.username = str(rng.choice(NAMES))
        self.password = "".join(rng.choice(list(PASSWORD_CHARS), size=int(rng.integers(4, 9))))
        row = layout.row_height(t)
        login_h = layout.button_size(t, "Login")[1]
        tops = layout.stack(rng, area, [row, row, row, row, login_h], gap=t.pad // 2)
        x = area.x + int(rng.integers(0, area.w // 5))
        width = min(area.w - (x - area.x), int(area.w * 0.75))
        widgets: list[Widget] = [
            Label("username_label", Rect(x, tops[0], t.text_width("Username"), row), "Username"),
            TextField("username", Rect(x, tops[1], width, row), "Username"),
            Label("password_label", Rect(x, tops[2], t.text_width("Password"), row), "Password"),
            TextField("password", Rect(x, tops[3], width, row), "Password", password=True),
            self._button("login", "Login", x, tops[4]),
        ]
        instruction = f'Log in with username "{self.username}" and password "{self.password}".'
        return instruction, widgets, "login"

    def _judge(self, screen: Screen, clicked: str) -> bool:
        user, password = screen["username"], screen["password"]
        assert isinstance(user, TextField) and isinstance(password, TextField)
        return clicked == "login" and user.value == self.username and password.value == self.password


class SelectOption(Task):
    """Choose the named option of a dropdown or of a radio group (3-5 options), then click Submit.

    Half the episodes draw a dropdown (its list opens on click), half a radio group; a third
    start with some option already chosen (possibly the target).
    """

    name: ClassVar[str] = "SelectOption"
    max_steps: ClassVar[int] = 8

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        count = int(rng.integers(3, 6))
        options = [str(option) for option in rng.choice(WORDS, size=count, replace=False)]
        self.target = options[int(rng.integers(count))]
        initial = int(rng.integers(count)) if rng.random() < 1 / 3 else None
        submit_h = layout.button_size(t, "Submit")[1]
        x = area.x + int(rng.integers(0, area.w // 3))
        widgets: list[Widget]
        if rng.random() < 0.5:
            row = layout.list_row_height(t)
            tops = layout.stack(rng, area, [row] * count + [submit_h], gap=t.pad // 2)
            widgets = [
                RadioButton(
                    f"radio{i}", Rect(x, top, t.font_size + t.pad + t.text_width(label), row), label,
                    group="choice", checked=i == initial,
                )
                for i, (top, label) in enumerate(zip(tops[:count], options, strict=True))
            ]  # fmt: skip
        else:
            row, label = layout.row_height(t), str(rng.choice(DROPDOWN_LABELS))
            tops = layout.stack(rng, area, [row, row, submit_h], gap=t.pad // 2)
            text_w = max(t.text_width(option) for option in [*options, "Select..."])
            width = min(area.x + area.w - x, max(text_w + t.font_size + 3 * t.pad, area.w // 2))
            widgets = [
                Label("label", Rect(x, tops[0], t.text_width(label), row), label),
                Dropdown(
                    "dropdown", Rect(x, tops[1], width, row), label, options=options, selected=initial,
                    option_height=layout.list_row_height(t),
                ),
            ]  # fmt: skip
        widgets.append(self._button("submit", "Submit", x, tops[-1]))
        return f'Choose "{self.target}" and click Submit.', widgets, None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        chosen = [
            widget.value if isinstance(widget, Dropdown) else widget.label
            for widget in screen.window.walk()
            if isinstance(widget, Dropdown) or (isinstance(widget, RadioButton) and widget.checked)
        ]
        return clicked == "submit" and chosen == [self.target]


class UseSlider(Task):
    """Set a slider (range 0-10, 20, 50 or 100) to a named value, then click Submit."""

    name: ClassVar[str] = "UseSlider"
    max_steps: ClassVar[int] = 10

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        maximum = int(rng.choice((10, 20, 50, 100)))
        start = int(rng.integers(0, maximum + 1))
        self.target = (start + int(rng.integers(1, maximum + 1))) % (maximum + 1)
        submit_h = layout.button_size(t, "Submit")[1]
        slider_h = layout.slider_height(t)
        top, button_top = layout.stack(rng, area, [slider_h, submit_h], gap=t.pad)
        # keep a pad either side: the thumb is painted centred on the end columns
        inner = area.w - 2 * t.pad
        width = int(inner * rng.uniform(0.6, 1.0))
        x = area.x + t.pad + int(rng.integers(0, inner - width + 1))
        slider = Slider("slider", Rect(x, top, width, slider_h), "Value", maximum=maximum, value=start)
        widgets: list[Widget] = [slider, self._button("submit", "Submit", area.x, button_top)]
        return f"Set the slider to {self.target} and click Submit.", widgets, None

    def _judge(self, screen: Screen, clicked: str) -> bool:
        slider = screen["slider"]
        return clicked == "submit" and isinstance(slider, Slider) and slider.value == self.target


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


FORM_TEXT_LABELS = ("Name", "City", "Pet", "Nick", "Code")
FORM_DROPDOWNS = (("Size", ("S", "M", "L", "XL")), ("Color", ("red", "blue", "green", "gray")))
FORM_CHECKBOXES = ("Agree", "News", "Remember")
SEARCH_SUFFIXES = ("pie", "tree", "park", "farm", "shop", "wiki", "news", "map")
ORDINALS = ("1st", "2nd", "3rd", "4th")


class FillForm(Task):
    """Fill a form of 3-5 fields (text fields, a checkbox, a dropdown) with named values; Submit.

    The instruction names every field's value: a text or a dropdown option, ``"yes"``/``"no"``
    for the checkbox. Text fields and the dropdown have a label to their left.
    """

    name: ClassVar[str] = "FillForm"
    max_steps: ClassVar[int] = 20

    def _build(self, rng: np.random.Generator, area: Rect) -> tuple[str, list[Widget], str | None]:
        t = self.theme
        for _ in range(100):  # redraw until the instruction fits the bar
            count = int(rng.integers(3, 6))
            has_box, has_dropdown = bool(rng.random() < 0.7), bool(rng.random() < 0.7)
            texts = count - has_box - has_dropdown
            labels = [str(label) for label in rng.choice(FORM_TEXT_LABELS, size=texts, replace=False)]
            values = [str(rng.choice([w for w in WORDS + NAMES if len(w) <= 5])) for _ in labels]
            kinds = ["text"] * texts
            if has_dropdown:
                label, options = FORM_DROPDOWNS[int(rng.integers(len(FORM_DROPDOWNS)))]
                labels.append(label)
                values.append(str(rng.choice(options)))
                kinds.append("dropdown")
            if has_box:
                labels.append(str(rng.choice(FORM_CHECKBOXES)))
                values.append("yes" if rng.random() < 0.5 else "no")
                kinds.append("checkbox")
            order = rng.permutation(len(labels))
            labels, values, kinds = ([x[i] for i in order] for x in (labels, values, kinds))
            parts = ", ".join(f'{label} "{value}"' for label, value in zip(labels, values, strict=True))
            instruction = f"Fill: {parts}; Submit."
            lines = t.wrap(instruction, self.width - 2 * t.pad)
            if t.pad + len(lines) * t.line_height <= t.instruction_height:
                break
        self.wanted = dict(zip(labels, values, strict=True))
        row, box_row = layout.row_height(t), layout.list_row_height(t)
        submit_h = layout.button_size(t, "Submit")[1]
        heights = [box_row if kind == "checkbox" else row for kind in kinds]
        tops = layout.stack(rng, area, [*heights, submit_h], gap=t.pad // 2)
        label_w = max(t.text_width(label) for label in [*FORM_TEXT_LABELS, "Color", "Size"]) + t.pad
        x = area.x + int(rng.integers(0, area.w // 8 + 1))
        field_x = x + label_w
        field_w = area.x + area.w - field_x
        widgets: list[Widget] = []
        for i, (label, kind, top) in enumerate(zip(labels, kinds, tops, strict=False)):
            if kind == "checkbox":
                width = t.font_size + t.pad + t.text_width(label)
                widgets.append(Checkbox(f"field{i}", Rect(x, top, width, box_row), label))
                continue
            widgets.append(Label(f"label{i}", Rect(x, top, t.text_width(label), row), label))
            if kind == "text":
                widgets.append(TextField(f"field{i}", Rect(field_x, top, field_w, row), label))
            else:
                choices = [str(option) for option in dict(FORM_DROPDOWNS)[label]]
                widgets.append(
                    Dropdown(
                        f"field{i}", Rect(field_x, top, field_w, row), label, options=choices,
                        option_height=layout.list_row_height(t),
                    )
                )  # fmt: skip
        widgets.append(self._button("submit", "Submit", x, tops[-1]))
        return instruction, widgets, "submit"

    def _judge(self, screen: Screen, clicked: str) -> bool:
        got: dict[str, str] = {}
        for widget in screen.window.walk():
            if isinstance(widget, TextField | Dropdown):
                got[widget.label] = widget.value
            elif isinstance(widget, Checkbox):
                got[widget.label] = "yes" if widget.checked else "no"
        return clicked == "submit" and got == self.wanted


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


FAMILIES: dict[str, type[Task]] = {
    task.name: task
    for task in (
        ClickButton,
        ClickCheckboxes,
        EnterText,
        LoginUser,
        SelectOption,
        UseSlider,
        CloseDialog,
        FillForm,
        SearchAndClick,
        NavigateTabs,
        DragItem,
        MultiWindow,
    )
}
"""Every family by name."""
