"""The form families: fill in controls with named values, then submit.

Buttons, checkboxes, text fields (a login's masked password too), a dropdown or a radio group, a
slider, and a whole form of them. Each episode ends at the first button click: success iff it is
the named button, or the form's submit button once every control holds what the instruction
names. The base class is :class:`~omnigym.envs.gui.task.Task`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from omnigym.envs.gui import layout
from omnigym.envs.gui.layers import Dropdown
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.task import BUTTON_WORDS, NAMES, WORDS, Task
from omnigym.envs.gui.widgets import Button, Checkbox, Label, RadioButton, Rect, Slider, TextField, Widget

PASSWORD_CHARS = "abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
DROPDOWN_LABELS = ("Choice", "Option", "Item", "Pick one", "Category")
FORM_TEXT_LABELS = ("Name", "City", "Pet", "Nick", "Code")
FORM_DROPDOWNS = (("Size", ("S", "M", "L", "XL")), ("Color", ("red", "blue", "green", "gray")))
FORM_CHECKBOXES = ("Agree", "News", "Remember")


def _quoted(labels: list[str]) -> str:
    return ", ".join(f'"{label}"' for label in labels)


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
