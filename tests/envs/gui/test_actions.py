"""The GUI action grammar: valid forms, malformed texts, and fuzzing that must never raise."""

from __future__ import annotations

import random
import time

import pytest

from omnigym.envs.gui.actions import ACTION_MAX_LENGTH, ActionParseError, GUIAction, parse_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click(120, 45)", GUIAction("click", x=120, y=45)),
        ("  CLICK ( 120 ,45 ) ; ", GUIAction("click", x=120, y=45)),
        ("click(12.6, 4.4)", GUIAction("click", x=13, y=4)),
        ("double_click(3, 4)", GUIAction("double_click", x=3, y=4)),
        ('type("alice")', GUIAction("type", text="alice")),
        ("type('it''s')", None),  # no SQL-style quote doubling
        ("type('say \"hi\"')", GUIAction("type", text='say "hi"')),
        (r'type("a\"b\\c\n")', GUIAction("type", text='a"b\\c\n')),
        ('type("")', GUIAction("type", text="")),
        ('key("Enter")', GUIAction("key", text="Enter")),
        ('key("enter")', GUIAction("key", text="Enter")),
        ('key("shift+tab")', GUIAction("key", text="Shift+Tab")),
        ("scroll(10, 20, -30)", GUIAction("scroll", x=10, y=20, dy=-30)),
        ("drag(1, 2, 3, 4)", GUIAction("drag", x=1, y=2, x2=3, y2=4)),
    ],
)
def test_parse(text: str, expected: GUIAction | None) -> None:
    if expected is None:
        with pytest.raises(ActionParseError):
            parse_action(text)
    else:
        assert parse_action(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "click",
        "click()",
        "click(1)",
        "click(1, 2, 3)",
        'click("1", 2)',
        "click(1 2)",
        "click(1,, 2)",
        "click(1, 2) click(3, 4)",
        "tap(1, 2)",
        "type(alice)",
        'type("unterminated)',
        'key("F13")',
        'key("Enter", "Tab")',
        "scroll(1, 2)",
        "drag(1, 2, 3)",
        "click(1e3, 2)",
        "click(1234567890, 2)",
        "I will click(1, 2)",
    ],
)
def test_malformed_raises_parse_error(text: str) -> None:
    with pytest.raises(ActionParseError):
        parse_action(text)


def test_non_string_and_too_long_are_parse_errors() -> None:
    for bad in (None, 3, b"click(1, 2)", ["click(1, 2)"]):
        with pytest.raises(ActionParseError, match="must be a str"):
            parse_action(bad)
    with pytest.raises(ActionParseError, match="characters"):
        parse_action("click(1, 2)" + " " * ACTION_MAX_LENGTH)


@pytest.mark.parametrize(
    "action",
    [
        GUIAction("click", x=5, y=6),
        GUIAction("double_click", x=0, y=209),
        GUIAction("type", text='quote " backslash \\ newline \n tab \t'),
        GUIAction("key", text="Backspace"),
        GUIAction("scroll", x=1, y=2, dy=-3),
        GUIAction("drag", x=1, y=2, x2=3, y2=4),
    ],
)
def test_to_text_round_trips(action: GUIAction) -> None:
    assert parse_action(action.to_text()) == action


@pytest.mark.timeout(30)
def test_fuzz_never_raises_anything_else_nor_hangs() -> None:
    rng = random.Random(0)
    alphabet = "click(type\"key\\,)0123456789 -.'\n\té€😀\x00"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))) for _ in range(3000)]
    texts += ["click(" + "1" * 10_000 + ", 2)", "(" * 100_000, '"' * 255, "type(" + '"\\' * 120 + ")"]
    texts += ["type(" + "\\" * 250 + ")", 'type("' + "ab" * 120 + '")', 'type("😀€")']
    start = time.perf_counter()
    for text in texts:
        try:
            action = parse_action(text)
        except ActionParseError:
            continue
        assert isinstance(action, GUIAction)
    assert time.perf_counter() - start < 5.0
