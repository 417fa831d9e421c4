"""Widget and screen semantics: clicks, focus, typing and keys, as in HTML forms."""

from __future__ import annotations

from omnigym.envs.gui.actions import GUIAction
from omnigym.envs.gui.containers import AppWindow, ListBox, ScrollArea, Tab, TabStrip
from omnigym.envs.gui.layers import CloseButton, Dialog, Dropdown
from omnigym.envs.gui.screen import Screen
from omnigym.envs.gui.widgets import (
    Button,
    Checkbox,
    Draggable,
    DropZone,
    Event,
    Label,
    RadioButton,
    Rect,
    Slider,
    TextField,
    Widget,
    Window,
)


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


def test_scroll_and_drags_of_inert_widgets_change_nothing() -> None:
    screen = make_screen()
    before = screen.accessibility_tree()
    screen.apply(GUIAction("scroll", x=20, y=90, dy=30))
    screen.apply(GUIAction("drag", x=20, y=65, x2=60, y2=140))  # from the label
    screen.apply(GUIAction("drag", x=150, y=200, x2=20, y2=90))  # from the empty window
    assert screen.accessibility_tree() == before and screen.events == []


def test_a_drag_off_a_button_focuses_it_without_firing() -> None:
    screen = make_screen()
    screen.apply(GUIAction("drag", x=20, y=160, x2=100, y2=200))
    assert screen.focus is screen["ok"] and screen.events == []
    screen.apply(GUIAction("drag", x=20, y=160, x2=22, y2=162))  # released on it: a click
    assert [e.name for e in screen.events] == ["ok"]


def make_layer_screen(*widgets: Widget, dialog: Dialog | None = None) -> Screen:
    window = Window("window", Rect(0, 0, 160, 210), children=list(widgets))
    return Screen(160, 210, "Do it.", Rect(0, 0, 160, 50), window, [dialog] if dialog else [])


def radios() -> Screen:
    return make_layer_screen(
        *(
            RadioButton(f"r{i}", Rect(10, 60 + 20 * i, 60, 15), label, group="g")
            for i, label in enumerate("abc")
        ),
        RadioButton("other", Rect(10, 130, 60, 15), "z", group="h", checked=True),
    )


def checked(screen: Screen) -> list[str]:
    return [w.name for w in screen.widgets if isinstance(w, RadioButton) and w.checked]


def test_radio_click_selects_one_of_its_group_only() -> None:
    screen = radios()
    click(screen, "r1")
    assert checked(screen) == ["r1", "other"] and screen.focus is screen["r1"]
    click(screen, "r2")
    click(screen, "r2")  # clicking a selected radio keeps it selected
    assert checked(screen) == ["r2", "other"]
    assert [e.kind for e in screen.events] == ["select"] * 3
    assert screen.accessibility_tree().splitlines()[3].endswith("checked focused")


def test_radio_arrow_keys_move_and_select_within_the_group_and_space_selects() -> None:
    screen = radios()
    key(screen, "Tab")
    assert screen.focus is screen["r0"] and checked(screen) == ["other"]
    key(screen, "Space")
    assert checked(screen) == ["r0", "other"]
    key(screen, "ArrowDown")
    assert screen.focus is screen["r1"] and checked(screen) == ["r1", "other"]
    key(screen, "ArrowUp")
    key(screen, "ArrowLeft")  # wraps to the last of the group
    assert screen.focus is screen["r2"] and checked(screen) == ["r2", "other"]


def dropdown_screen() -> tuple[Screen, Dropdown]:
    dropdown = Dropdown(
        "dd", Rect(10, 60, 80, 20), "Pick", options=["red", "green", "blue"], option_height=15
    )
    screen = make_layer_screen(dropdown, Button("ok", Rect(10, 180, 40, 20), "OK"))
    return screen, dropdown


def test_dropdown_click_opens_a_list_and_clicking_an_option_chooses_it() -> None:
    screen, dropdown = dropdown_screen()
    assert 'value="" collapsed' in screen.accessibility_tree()
    click(screen, "dd")
    tree = screen.accessibility_tree().splitlines()
    assert "expanded focused" in tree[1]
    assert tree[3:] == [
        '[3] listbox "" (10, 80, 80, 45)',
        '[4] option "red" (10, 80, 80, 15)',
        '[5] option "green" (10, 95, 80, 15)',
        '[6] option "blue" (10, 110, 80, 15)',
    ]
    click(screen, "dd.option2")
    assert dropdown.value == "blue" and dropdown.popup is None and screen.focus is dropdown
    assert len(screen.widgets) == 3 and screen.events == [Event("select", "dd")]
    click(screen, "dd")
    assert "selected" in screen.accessibility_tree().splitlines()[-1]


def test_an_open_list_swallows_a_click_outside_and_closes() -> None:
    screen, dropdown = dropdown_screen()
    click(screen, "dd")
    click(screen, "ok")  # closes the list; the button does not fire
    assert dropdown.popup is None and screen.events == []
    click(screen, "ok")
    assert screen.events == [Event("click", "ok")]


def test_dropdown_opens_upwards_near_the_bottom() -> None:
    dropdown = Dropdown("dd", Rect(10, 180, 80, 20), options=["a", "b"], option_height=15)
    screen = make_layer_screen(dropdown)
    click(screen, "dd")
    assert screen["dd.option0"].rect == Rect(10, 150, 80, 15)


def test_dropdown_keys_choose_and_toggle_the_list() -> None:
    screen, dropdown = dropdown_screen()
    key(screen, "Tab")
    key(screen, "ArrowDown")
    assert dropdown.value == "red"
    key(screen, "ArrowDown")
    key(screen, "ArrowDown")
    key(screen, "ArrowDown")  # stays at the last
    assert dropdown.value == "blue"
    key(screen, "Home")
    assert dropdown.value == "red"
    key(screen, "Enter")
    assert dropdown.popup is not None
    key(screen, "ArrowDown")  # arrows choose with the list open too
    assert dropdown.value == "green"
    key(screen, "Escape")
    assert dropdown.popup is None and screen.focus is dropdown
    key(screen, "Space")
    key(screen, "Tab")  # Tab closes the list and moves on
    assert dropdown.popup is None and screen.focus is screen["ok"]


def slider_screen() -> tuple[Screen, Slider]:
    slider = Slider("s", Rect(20, 80, 101, 20), maximum=50, value=10)
    return make_layer_screen(slider, Button("ok", Rect(10, 180, 40, 20), "OK")), slider


def test_slider_follows_a_drag_started_anywhere_on_it_and_clamps() -> None:
    screen, slider = slider_screen()
    assert slider.x_of(10) == 40 and slider.value_at(40) == 10
    screen.apply(GUIAction("drag", x=40, y=85, x2=80, y2=150))  # released below the slider
    assert slider.value == 30 and screen.focus is slider
    screen.apply(GUIAction("drag", x=100, y=95, x2=5, y2=95))  # from the track, past the left end
    assert slider.value == 0
    screen.apply(GUIAction("drag", x=30, y=90, x2=159, y2=90))
    assert slider.value == 50
    screen.apply(GUIAction("drag", x=10, y=185, x2=60, y2=85))  # starts on the button: no effect
    assert slider.value == 50
    click(screen, "s")  # a click sets the value under the pointer
    assert slider.value == 25
    assert [e.kind for e in screen.events] == ["change"] * 4
    assert (
        screen.accessibility_tree().splitlines()[1]
        == '[1] slider "" (20, 80, 101, 20) value="25" min=0 max=50 focused'
    )


def test_slider_keys_step_and_jump() -> None:
    screen, slider = slider_screen()
    key(screen, "Tab")
    for name in ("ArrowRight", "ArrowUp", "ArrowRight", "ArrowLeft"):
        key(screen, name)
    assert slider.value == 12
    key(screen, "ArrowDown")
    assert slider.value == 11
    key(screen, "End")
    key(screen, "ArrowRight")
    assert slider.value == 50
    key(screen, "Home")
    key(screen, "ArrowLeft")
    assert slider.value == 0


def dialog_screen() -> tuple[Screen, Dialog]:
    dialog = Dialog("dlg", Rect(20, 60, 120, 60), "Notice")
    close = CloseButton("close", Rect(90, 95, 40, 20), "OK", dialog=dialog)
    dialog.children = [Label("msg", Rect(25, 75, 60, 15), "Saved."), close]
    page = [Button("under", Rect(30, 100, 40, 20), "Next"), Button("free", Rect(10, 180, 40, 20), "Back")]
    return make_layer_screen(*page, dialog=dialog), dialog


def test_a_modal_dialog_blocks_the_page_until_closed() -> None:
    screen, _ = dialog_screen()
    click(screen, "free")  # outside the dialog: blocked
    screen.apply(GUIAction("click", x=35, y=105))  # a page button under the dialog: the dialog
    assert screen.events == [] and screen.focus is None
    key(screen, "Tab")
    key(screen, "Tab")  # focus stays inside the dialog
    assert screen.focus is screen["close"]
    key(screen, "Enter")  # closes: a close event, not a click
    assert screen.layers == [] and screen.focus is None
    assert screen.events == [Event("close", "dlg")]
    click(screen, "free")
    assert screen.events[-1] == Event("click", "free")


def test_dialog_closes_on_escape_and_by_its_button_and_is_listed_last() -> None:
    screen, _ = dialog_screen()
    lines = screen.accessibility_tree().splitlines()
    assert lines[3:] == [
        '[3] dialog "Notice" (20, 60, 120, 60)',
        '[4] text "Saved." (25, 75, 60, 15)',
        '[5] button "OK" (90, 95, 40, 20)',
    ]
    key(screen, "Escape")
    assert screen.layers == [] and len(screen.widgets) == 3
    screen, _ = dialog_screen()
    click(screen, "close")
    assert screen.layers == [] and screen.events == [Event("close", "dlg")]


def make_tabs(selected: int = 0) -> tuple[Screen, TabStrip]:
    pages: list[list[Widget]] = [
        [Button("a.ok", Rect(10, 100, 40, 20), "OK"), Button("a.save", Rect(60, 100, 40, 20), "Save")],
        [Button("b.ok", Rect(10, 130, 40, 20), "OK")],
        [],
    ]
    tabs = [(Rect(10 + 40 * i, 60, 40, 20), label) for i, label in enumerate(("One", "Two", "Three"))]
    strip = TabStrip.build("tabs", Rect(10, 60, 140, 20), tabs, pages, selected)
    window = Window("window", Rect(0, 0, 160, 210), children=[strip])
    return Screen(160, 210, "Tabs.", Rect(0, 0, 160, 50), window), strip


def test_tab_click_shows_its_page_only() -> None:
    screen, strip = make_tabs()
    assert [w.name for w in screen.widgets] == [
        "window",
        "tabs",
        "tabs.tab0",
        "tabs.tab1",
        "tabs.tab2",
        "a.ok",
        "a.save",
    ]
    tree = screen.accessibility_tree()
    assert '"One" (10, 60, 40, 20) selected' in tree and '"Two" (50, 60, 40, 20) unselected' in tree
    assert "tablist" in tree and "b.ok" not in [w.name for w in screen.widgets]
    screen.apply(GUIAction("click", x=15, y=135))  # b.ok's place: hidden, so nothing there
    assert screen.events == []
    click(screen, "tabs.tab1")
    assert strip.selected == 1 and screen.focus is screen["tabs.tab1"]
    assert Event("select", "tabs") in screen.events
    assert [w.name for w in screen.widgets][-1] == "b.ok" and "a.ok" not in [w.name for w in screen.widgets]
    screen.apply(GUIAction("click", x=15, y=105))  # a.ok's place: hidden now
    assert not any(e.kind == "click" for e in screen.events)
    click(screen, "b.ok")
    assert screen.events[-1] == Event("click", "b.ok")
    click(screen, "tabs.tab2")  # an empty page
    assert [w.role for w in screen.widgets][-1] == "tab"


def test_tab_keys_move_and_activate_and_tab_order_skips_hidden_pages() -> None:
    screen, strip = make_tabs(selected=1)
    key(screen, "Tab")
    assert screen.focus is screen["tabs.tab0"]
    key(screen, "Enter")
    assert strip.selected == 0
    key(screen, "ArrowLeft")  # wraps to the last tab and shows it
    assert strip.selected == 2 and screen.focus is screen["tabs.tab2"]
    key(screen, "ArrowRight")
    assert strip.selected == 0 and screen.focus is screen["tabs.tab0"]
    key(screen, "ArrowRight")
    key(screen, "Tab")
    key(screen, "Tab")
    assert screen.focus is screen["b.ok"]
    key(screen, "Tab")  # wraps back to the first tab: a.ok and a.save are hidden
    assert screen.focus is screen["tabs.tab0"]
    key(screen, "ArrowRight")
    key(screen, "Space")  # Space on the focused tab keeps its page shown
    assert strip.selected == 1
    tab = screen["tabs.tab1"]
    assert isinstance(tab, Tab) and tab.states() == ["selected"]


def test_focus_on_a_hidden_page_is_cleared() -> None:
    screen, strip = make_tabs()
    click(screen, "a.ok")
    assert screen.focus is screen["a.ok"]
    strip.choose(1, screen)  # a task switching pages directly
    assert screen.focus is None


def test_a_draggable_follows_the_pointer_travel_and_stays_on_the_screen() -> None:
    zone = DropZone("zone", Rect(10, 150, 80, 40), "Bin")
    item = Draggable("item", Rect(20, 70, 30, 15), "apple")
    window = Window("window", Rect(0, 0, 160, 210), children=[zone, item])
    screen = Screen(160, 210, "Drag.", Rect(0, 0, 160, 50), window)
    assert 'draggable "apple" (20, 70, 30, 15)' in screen.accessibility_tree()
    assert 'region "Bin" (10, 150, 80, 40)' in screen.accessibility_tree()
    click(screen, "item")  # no travel: stays, takes focus
    assert item.rect == Rect(20, 70, 30, 15) and screen.focus is item and screen.events == []
    screen.apply(GUIAction("drag", x=25, y=75, x2=45, y2=165))  # grabbed off-centre
    assert item.rect == Rect(40, 160, 30, 15) and screen.events == [Event("move", "item")]
    screen.apply(GUIAction("drag", x=41, y=161, x2=159, y2=209))  # clamped to the screen
    assert item.rect == Rect(130, 195, 30, 15)
    screen.apply(GUIAction("drag", x=12, y=152, x2=100, y2=100))  # a zone is inert
    assert zone.rect == Rect(10, 150, 80, 40)


def make_windows() -> Screen:
    back = AppWindow(
        "notes",
        Rect(10, 60, 100, 80),
        "Notes",
        children=[
            TextField("notes.field", Rect(14, 80, 90, 20), "Title"),
            Button("notes.ok", Rect(50, 115, 40, 20), "OK"),
        ],
    )
    front = AppWindow(
        "settings",
        Rect(40, 90, 100, 80),
        "Settings",
        children=[Checkbox("settings.box", Rect(44, 110, 90, 15), "Dark mode")],
    )
    window = Window("window", Rect(0, 0, 160, 210), children=[back, front])
    return Screen(160, 210, "Windows.", Rect(0, 0, 160, 50), window)


def test_the_front_window_occludes_the_back_one_and_a_press_raises_a_window() -> None:
    screen = make_windows()
    notes, settings = screen["notes"], screen["settings"]
    assert isinstance(notes, AppWindow) and isinstance(settings, AppWindow)
    assert settings.front and not notes.front
    assert '"Notes" (10, 60, 100, 80) back' in screen.accessibility_tree()
    # the OK button's centre (70, 125) lies under Settings: the click reaches Settings, not OK
    assert screen.hit(70, 125) is settings
    screen.apply(GUIAction("click", x=70, y=125))
    assert not screen.events
    # the Notes title bar is visible: clicking it brings Notes to the front
    screen.apply(GUIAction("click", x=20, y=62))
    assert notes.front and not settings.front
    assert screen.widgets.index(notes) > screen.widgets.index(screen["settings.box"])
    assert '"Notes" (10, 60, 100, 80) front' in screen.accessibility_tree()
    click(screen, "notes.ok")
    assert screen.events == [Event("click", "notes.ok")]
    # the checkbox is now under Notes; its visible part raises Settings and toggles it
    screen.apply(GUIAction("click", x=120, y=115))
    assert settings.front and screen["settings.box"].states() == ["checked"]


def test_clicking_a_widget_of_a_back_window_raises_it_and_acts() -> None:
    screen = make_windows()
    screen.apply(GUIAction("click", x=20, y=85))  # the Notes field, left of Settings
    assert screen.focus is screen["notes.field"] and screen["notes"].front
    type_text(screen, "abc")
    assert screen["notes.field"].states() == ['value="abc"']


def make_list_screen() -> tuple[Screen, ScrollArea, ListBox]:
    """A 60-pixel viewport over 6 rows of 20 pixels (3 shown)."""
    box = ListBox.build("list", Rect(10, 60, 100, 60), [f"row{i}" for i in range(6)], 20)
    area = ScrollArea("area", Rect(10, 60, 100, 60), children=[box])
    window = Window("window", Rect(0, 0, 160, 210), children=[area])
    return Screen(160, 210, "Pick a row.", Rect(0, 0, 160, 50), window), area, box


def scroll(screen: Screen, x: int, y: int, dy: int) -> None:
    screen.apply(GUIAction("scroll", x=x, y=y, dy=dy))


def test_scrolling_moves_items_into_view_and_clamps() -> None:
    screen, area, _box = make_list_screen()
    names = {w.name for w in screen.widgets}
    assert {"list.item0", "list.item2"} <= names and "list.item3" not in names
    scroll(screen, 50, 80, 30)  # a partly shown row is hidden
    names = {w.name for w in screen.widgets}
    assert area.offset == 30 and "list.item1" not in names and "list.item4" not in names
    assert {"list.item3"} <= names and screen["list.item3"].rect == Rect(10, 90, 100, 20)
    version = screen.version
    scroll(screen, 50, 80, 500)
    assert area.offset == 60 and screen.version == version + 1
    shown = {w.name for w in screen.widgets if w.role == "listitem"}
    assert shown == {"list.item3", "list.item4", "list.item5"}
    scroll(screen, 50, 80, 10)  # already at the bottom: nothing changes
    assert area.offset == 60 and screen.version == version + 1
    scroll(screen, 50, 80, -500)
    assert area.offset == 0 and screen["list.item0"].rect == Rect(10, 60, 100, 20)


def test_scroll_outside_a_scroll_area_changes_nothing() -> None:
    screen, area, _ = make_list_screen()
    before, version = screen.accessibility_tree(), screen.version
    scroll(screen, 150, 200, 30)
    assert area.offset == 0 and screen.version == version and screen.accessibility_tree() == before


def test_clicks_on_hidden_items_do_nothing_and_clicks_select_shown_ones() -> None:
    screen, _area, box = make_list_screen()
    item4 = box.items[4]
    x, y = item4.rect.center  # below the viewport
    screen.apply(GUIAction("click", x=x, y=y))
    assert box.selected is None and screen.events == []
    scroll(screen, 50, 80, 60)
    click(screen, "list.item4")
    assert box.selected == 4 and box.value == "row4" and screen.focus is box
    assert screen.events == [Event("select", "list")]


def test_list_keys_move_the_selection_and_scroll_it_into_view() -> None:
    screen, area, box = make_list_screen()
    click(screen, "list.item2")
    key(screen, "ArrowDown")
    assert box.selected == 3 and area.offset == 20 and screen.focus is box
    for _ in range(5):
        key(screen, "ArrowDown")
    assert box.selected == 5 and area.offset == 60
    for _ in range(7):
        key(screen, "ArrowUp")
    assert box.selected == 0 and area.offset == 0


def test_the_tree_reflects_the_scroll_offset() -> None:
    screen, _area, _box = make_list_screen()
    scroll(screen, 50, 80, 20)
    lines = screen.accessibility_tree().splitlines()
    assert lines[1] == '[1] scrollarea "" (10, 60, 100, 60) offset=20'
    assert lines[2] == '[2] list "" (10, 60, 100, 60)'
    assert lines[3:] == [
        '[3] listitem "row1" (10, 60, 100, 20)',
        '[4] listitem "row2" (10, 80, 100, 20)',
        '[5] listitem "row3" (10, 100, 100, 20)',
    ]
