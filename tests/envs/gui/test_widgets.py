"""Widget and screen semantics: clicks, focus, typing and keys, as in HTML forms."""

from __future__ import annotations

from omnigym.envs.gui.actions import GUIAction
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.widgets import Button, Checkbox, Label, Rect, TextField, Window


def make_screen(default: str | None = "ok") -> Screen:
    widgets = [
        Label("title", Rect(10, 60, 50, 15), "Form"),
        TextField("name", Rect(10, 80, 100, 20), "Name"),
        TextField("secret", Rect(10, 105, 100, 20), "Secret", password=True),
        Checkbox("box", Rect(10, 130, 60, 15), "agree"),
        Button("ok", Rect(10, 150, 40, 20), "OK"),
    ]
    window = Window("window", Rect(0, 0, 160, 210), children=widgets, default=default)
    return Screen(160, 210, "Fill the form.", Rect(0, 0, 160, 50), window)


def click(screen: Screen, name: str) -> None:
    x, y = screen[name].rect.center
    screen.apply(GUIAction("click", x=x, y=y))


def key(screen: Screen, name: str) -> None:
    screen.apply(GUIAction("key", text=name))


def type_text(screen: Screen, text: str) -> None:
    screen.apply(GUIAction("type", text=text))


def test_click_on_checkbox_toggles_it_and_focuses_it() -> None:
    screen = make_screen()
    box = screen["box"]
    assert isinstance(box, Checkbox)
    click(screen, "box")
    assert box.checked and screen.focus is box
    click(screen, "box")
    assert not box.checked
    screen.apply(GUIAction("double_click", x=box.rect.x + 1, y=box.rect.y + 1))
    assert not box.checked  # two toggles
    key(screen, "Space")
    assert box.checked
    key(screen, "Enter")  # Enter does not toggle a checkbox
    assert box.checked


def test_typing_goes_into_the_focused_field_only() -> None:
    screen = make_screen()
    name, secret = screen["name"], screen["secret"]
    assert isinstance(name, TextField) and isinstance(secret, TextField)
    type_text(screen, "nobody has focus")
    assert name.value == "" and secret.value == ""
    click(screen, "name")
    assert screen.focus is name
    type_text(screen, "al")
    type_text(screen, "ice\x00\u00e9")  # control and non-ASCII characters are dropped
    assert name.value == "alice"
    key(screen, "Backspace")
    assert name.value == "alic"
    click(screen, "secret")
    type_text(screen, "pw")
    assert name.value == "alic" and secret.value == "pw"
    type_text(screen, "x" * 100)
    assert len(secret.value) == secret.max_length


def test_clicking_elsewhere_or_on_a_label_clears_focus() -> None:
    screen = make_screen()
    click(screen, "name")
    click(screen, "title")
    assert screen.focus is None
    click(screen, "name")
    screen.apply(GUIAction("click", x=150, y=200))  # empty window area
    assert screen.focus is None


def test_tab_and_shift_tab_cycle_focus_over_focusable_widgets() -> None:
    screen = make_screen()
    order = []
    for _ in range(5):
        key(screen, "Tab")
        order.append(screen.focus.name if screen.focus else None)
    assert order == ["name", "secret", "box", "ok", "name"]
    key(screen, "Shift+Tab")
    assert screen.focus is screen["ok"]


def test_enter_on_focused_button_and_in_a_field_fire_the_button() -> None:
    screen = make_screen()
    click(screen, "name")
    key(screen, "Enter")  # submits: the window's default button fires
    assert [e.kind + ":" + e.name for e in screen.events] == ["click:ok"]
    for _ in range(3):
        key(screen, "Tab")
    assert screen.focus is screen["ok"]
    key(screen, "Enter")
    key(screen, "Space")
    assert [e.name for e in screen.events if e.kind == "click"] == ["ok", "ok", "ok"]


def test_enter_in_a_field_without_default_button_does_nothing() -> None:
    screen = make_screen(default=None)
    click(screen, "name")
    key(screen, "Enter")
    assert screen.events == []


def test_accessibility_tree_reports_roles_boxes_states_and_masks_passwords() -> None:
    screen = make_screen()
    click(screen, "secret")
    type_text(screen, 'p"w')
    click(screen, "box")
    lines = screen.accessibility_tree().splitlines()
    assert lines[0] == '[0] window "" (0, 0, 160, 210)'
    assert lines[1] == '[1] text "Form" (10, 60, 50, 15)'
    assert lines[3] == '[3] textbox "Secret" (10, 105, 100, 20) value="***" password'
    assert lines[4] == '[4] checkbox "agree" (10, 130, 60, 15) checked focused'
    assert lines[5] == '[5] button "OK" (10, 150, 40, 20)'


def test_scroll_and_drag_without_scrollables_change_nothing() -> None:
    screen = make_screen()
    before = screen.accessibility_tree()
    screen.apply(GUIAction("scroll", x=20, y=90, dy=30))
    screen.apply(GUIAction("drag", x=20, y=90, x2=60, y2=140))
    assert screen.accessibility_tree() == before and screen.events == []
