"""Reading text actions: the answer part of a reply, and word grammars."""

from __future__ import annotations

import random
import string

import pytest

from omnigym.core.text_actions import ActionParseError, WordGrammar, answer_text

DIRECTIONS = WordGrammar(["up", "down", "left", "right"], aliases={"u": "up", "north": "up"})


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("  left ", "left"),
        ("I should go around the box. <answer> Left </answer>", "Left"),
        ("<answer>up</answer> on second thought <answer>down</answer>", "down"),
        ('{"thoughts": "the target is right of me", "action": "right"}', "right"),
        ("<ANSWER>\nup\n</ANSWER>", "up"),
    ],
)
def test_answer_text_takes_the_last_tagged_answer_or_action_field(reply: str, answer: str) -> None:
    assert answer_text(reply) == answer


def test_word_grammar_ignores_case_punctuation_and_knows_aliases() -> None:
    assert DIRECTIONS.parse("Up") == [0]
    assert DIRECTIONS.parse('"RIGHT".') == [3]
    assert DIRECTIONS.parse("<answer>north</answer>") == [0]
    assert DIRECTIONS.parse("u") == [0]
    assert DIRECTIONS.describe() == "up | down | left | right"
    assert DIRECTIONS.word(2) == "left"


def test_several_actions_need_max_actions() -> None:
    with pytest.raises(ActionParseError, match="2 actions given, at most 1"):
        DIRECTIONS.parse("up, left")
    several = WordGrammar(["up", "down", "left", "right"], max_actions=3)
    assert several.parse("<answer>Up || Left || down</answer>") == [0, 2, 1]
    assert several.parse("up; right") == [0, 3]
    with pytest.raises(ActionParseError, match="4 actions given"):
        several.parse("up, up, up, up")


@pytest.mark.parametrize("reply", ["", "   ", "<answer></answer>", "jump", "up left", "upp"])
def test_unreadable_answers_raise_parse_errors_naming_the_vocabulary(reply: str) -> None:
    with pytest.raises(ActionParseError, match=r"up \| down \| left \| right|empty"):
        DIRECTIONS.parse(reply)


def test_non_text_is_a_parse_error() -> None:
    with pytest.raises(ActionParseError, match="must be a str"):
        DIRECTIONS.parse(3)  # type: ignore[arg-type]


def test_fuzzed_replies_parse_or_raise_parse_errors_only() -> None:
    rng = random.Random(0)
    parsed = 0
    for _ in range(2000):
        reply = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.3:
            reply = f"<answer>{rng.choice(['up', 'Down', 'x', ''])}{reply[:2]}</answer>"
        try:
            indices = DIRECTIONS.parse(reply)
        except ActionParseError:
            continue
        parsed += 1
        assert all(0 <= i < 4 for i in indices)
    assert parsed > 0


def test_grammar_construction_errors() -> None:
    with pytest.raises(ValueError, match="distinct"):
        WordGrammar(["up", "UP"])
    with pytest.raises(ValueError, match="not an action word"):
        WordGrammar(["up"], aliases={"x": "down"})
    with pytest.raises(ValueError, match="max_actions"):
        WordGrammar(["up"], max_actions=0)
