"""The GUI action grammar: valid forms, malformed texts, and fuzzing that must never raise."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from omnigym.envs.gui.actions import ACTION_MAX_LENGTH, KEYS, ActionParseError, GUIAction, parse_action
from omnigym.envs.gui.env import GUIEnv, structured_action_space
from omnigym.envs.gui.oracle import solve


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


@pytest.mark.parametrize(
    "action",
    [
        GUIAction("click", x=5, y=6),
        GUIAction("double_click", x=0, y=209),
        GUIAction("type", text='quote " backslash \\ newline \n tab \t'),
        GUIAction("scroll", x=1, y=2, dy=-3),
        GUIAction("drag", x=1, y=2, x2=3, y2=4),
        *(GUIAction("key", text=key) for key in KEYS),
    ],
)
def test_structured_round_trips(action: GUIAction) -> None:
    assert GUIAction.from_structured(action.to_structured()) == action
    assert parse_action(GUIAction.from_structured(action.to_structured()).to_text()) == action


def test_structured_samples_round_trip_through_text() -> None:
    space = structured_action_space(160, 210)
    space.seed(0)
    for _ in range(500):
        action = GUIAction.from_structured(space.sample())
        # Escapes may lengthen a long typed text beyond the env's text limit.
        assert parse_action(action.to_text(), max_length=4 * ACTION_MAX_LENGTH) == action
        assert GUIAction.from_structured(action.to_structured()) == action


def test_structured_accepts_numpy_and_floats() -> None:
    sample = {"kind": np.int64(4), "x": np.array([3.6]), "y": 2.4, "dy": np.float32(-7)}
    assert GUIAction.from_structured(sample) == GUIAction("scroll", x=4, y=2, dy=-7)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "click(1, 2)",
        {},
        {"kind": 6, "x": 1, "y": 1},
        {"kind": -1, "x": 1, "y": 1},
        {"kind": 0.5, "x": 1, "y": 1},
        {"kind": 0, "x": 1},
        {"kind": 0, "x": "1", "y": 1},
        {"kind": 0, "x": float("nan"), "y": 1},
        {"kind": 0, "x": 1e12, "y": 1},
        {"kind": True, "x": 1, "y": 1},
        {"kind": 2, "text": 5},
        {"kind": 2, "text": "a" * (ACTION_MAX_LENGTH + 1)},
        {"kind": 3, "key": len(KEYS)},
        {"kind": 3},
        {"kind": 5, "x": 1, "y": 1, "x2": 2},
        {"kind": np.zeros(2), "x": 1, "y": 1},
    ],
)
def test_structured_malformed_raises_parse_error(bad: object) -> None:
    with pytest.raises(ActionParseError):
        GUIAction.from_structured(bad)


def test_structured_env_passes_check_env_and_solves_click_button() -> None:
    env = GUIEnv(task="ClickButton", action_space="structured")
    assert isinstance(env.action_space, spaces.Dict)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=4)
    text_action = parse_action(solve(obs["text"]))
    _, reward, terminated, _, info = env.step(text_action.to_structured())
    assert (reward, terminated, info["is_success"], info["action_valid"]) == (1.0, True, True, True)


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": 0, "x": 160, "y": 5},
        {"kind": 0, "x": -1, "y": 5},
        {"kind": 5, "x": 1, "y": 1, "x2": 1, "y2": 999},
        {"kind": 3, "key": 99},
        {"kind": 9},
        "click(1, 2)",
        None,
    ],
)
def test_structured_env_invalid_is_penalised_never_raised(bad: object) -> None:
    env = GUIEnv(task="ClickButton", action_space="structured", invalid_action_penalty=-0.25)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(bad)
    assert (reward, terminated, info["action_valid"]) == (-0.25, False, False)
    assert info["action_error"]


def test_unknown_action_space_raises() -> None:
    with pytest.raises(ValueError, match="action_space"):
        GUIEnv(action_space="discrete")


def test_parse_on_screen_reads_the_answer_and_refuses_off_screen_points() -> None:
    from omnigym.envs.gui.actions import parse_on_screen

    assert parse_on_screen("<think>the OK button</think><answer>click(9, 4)</answer>", 10, 5) == (
        GUIAction("click", 9, 4),
        "",
    )
    assert parse_on_screen("drag(1, 1, 10, 1)", 10, 5) == (None, "point off the 10x5 screen")
    parsed, error = parse_on_screen("jump()", 10, 5)
    assert parsed is None and error


def test_copy_observation_shares_no_array() -> None:
    import numpy as np

    from omnigym.envs.gui.actions import copy_observation

    obs = {"image": np.zeros((2, 2, 3), np.uint8), "text": "hi"}
    copy = copy_observation(obs)
    copy["image"][0, 0, 0] = 9
    assert obs["image"][0, 0, 0] == 0 and copy["text"] == "hi"
