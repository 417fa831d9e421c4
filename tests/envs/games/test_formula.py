"""Formula tokens, exact evaluation and the 24-game search (omnigym.envs.games.formula)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from omnigym.core.text_actions import ActionParseError
from omnigym.envs.games import formula as fm


def tokens(text: str) -> list[str]:
    return fm.tokenize(text)


# --- evaluation -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2+3*4", 14),  # * before +
        ("(2+3)*4", 20),
        ("10-4-3", 3),  # left to right
        ("10-(4-3)", 9),
        ("8/4/2", 1),
        ("8/(4/2)", 4),
        ("8/(3-8/3)", 24),  # needs exact fractions: 3 - 8/3 = 1/3
        ("1/3", Fraction(1, 3)),
        ("((7))", 7),
        ("3*(2+(4-1))*2", 30),
    ],
)
def test_evaluate_hand_written_formulas(text: str, value: Fraction) -> None:
    assert fm.evaluate(tokens(text)) == value


@pytest.mark.parametrize("text", ["5/(3-3)", "1/(2-2)*4", "7/0"])
def test_division_by_zero_is_rejected(text: str) -> None:
    with pytest.raises(fm.FormulaError, match="division by zero"):
        fm.evaluate(tokens(text))
    assert fm.formula_value(tokens(text)) is None


@pytest.mark.parametrize("text", ["", "2+", "(2+3", "2+3)", "2 3", "*2", "()", "(2+3)(4)", "2+=3"])
def test_incomplete_or_malformed_formulas_have_no_value(text: str) -> None:
    with pytest.raises(fm.FormulaError):
        fm.evaluate(tokens(text))
    assert fm.formula_value(tokens(text)) is None


# --- tokens and the grammar -----------------------------------------------------------------------
def test_tokenizer_reads_numbers_whole_and_card_letters() -> None:
    assert tokens("13+12*10") == ["13", "+", "12", "*", "10"]
    assert tokens(" ( 8 - 4 ) x 6 = ") == ["(", "8", "-", "4", ")", "*", "6", "="]
    assert tokens("K*A+J") == ["10", "*", "1", "+", "10"]
    assert fm.tokenize("K*A+J", {"A": 1, "J": 11, "Q": 12, "K": 13, "X": -1}) == ["13", "*", "1", "+", "11"]


@pytest.mark.parametrize("text", ["answer", "2 % 3", "2+3;", "two", "2^3", "jack"])
def test_tokenizer_rejects_other_characters_and_words(text: str) -> None:
    with pytest.raises(ActionParseError):
        tokens(text)


def test_grammar_indices_and_answer_extraction() -> None:
    grammar = fm.FormulaGrammar(10, "+-*/()")
    assert grammar.num_actions == 17
    assert [grammar.word(i) for i in (0, 9, 10, 15, 16)] == ["1", "10", "+", ")", "="]
    words = [grammar.word(i) for i in grammar.parse("<answer>(8-4)*(7-1)=</answer>")]
    assert words == ["(", "8", "-", "4", ")", "*", "(", "7", "-", "1", ")", "="]
    assert [grammar.word(i) for i in grammar.parse('{"action": "6 * 2 ="}')] == ["6", "*", "2", "="]
    assert [grammar.word(i) for i in grammar.parse("Q")] == ["10"]


def test_grammar_rejects_tokens_outside_its_vocabulary() -> None:
    ez = fm.FormulaGrammar(10, "+*")
    for text in ("2-1", "12", "(2)", "", "   ", "<answer></answer>", "99999999999999999999"):
        with pytest.raises(ActionParseError):
            ez.parse(text)
    full = fm.FormulaGrammar(13, "+*")
    assert [full.word(i) for i in full.parse("12*1")] == ["12", "*", "1"]
    assert [full.word(i) for i in full.parse("K")] == ["13"]


# --- typing rules ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("typed", "token", "unused", "allowed"),
    [
        ("", "8", [8, 4], True),
        ("", "5", [8, 4], False),  # no card with that value
        ("", "+", [8, 4], False),  # operator first
        ("8", "4", [4], False),  # number after number
        ("8+", "*", [4], False),  # two operators in a row
        ("8+", "(", [4], True),
        ("8", "(", [4], False),  # '(' after a number
        ("8", ")", [4], False),  # nothing to close
        ("(8", ")", [4], True),
        ("(8)", ")", [4], False),
        ("(", ")", [4], False),  # empty parentheses
        ("8*4", "+", [], False),  # no card left to follow it
        ("8*4", "(", [], False),
        ("8", "=", [4], True),  # '=' is always a legal move (it may lose)
        ("", "=", [8, 4], True),
    ],
)
def test_next_token_rules(typed: str, token: str, unused: list[int], allowed: bool) -> None:
    error = fm.next_token_error(tokens(typed), token, unused, max_tokens=20)
    assert (error == "") is allowed, error


def test_formula_length_is_capped() -> None:
    assert fm.next_token_error(["(", "(", "("], "(", [1, 2], max_tokens=3) != ""
    assert fm.next_token_error(["(", "(", "("], "=", [1, 2], max_tokens=3) == ""


# --- search ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "target", "solvable"),
    [
        ((3, 3, 8, 8), 24, True),  # only 8/(3-8/3)
        ((1, 5, 5, 5), 24, True),  # only (5-1/5)*5
        ((1, 1, 1, 1), 24, False),
        ((1, 1, 5, 9), 24, False),
        ((1, 7, 7, 7), 24, False),
        ((2, 6), 12, True),
        ((5, 5), 12, False),
    ],
)
def test_find_solution_on_known_hands(values: tuple[int, ...], target: int, solvable: bool) -> None:
    operators = "+*" if len(values) == 2 else "+-*/"
    solution = fm.find_solution(values, target, operators)
    assert (solution is not None) is solvable
    if solution is not None:
        rendered = fm.render(solution)
        assert fm.evaluate(rendered) == target  # the rendering keeps the value (parentheses right)
        assert sorted(fm.card_values(rendered)) == sorted(values)


def test_count_of_solvable_hands_matches_the_known_figure() -> None:
    # Of the 715 multisets of four values 1..10, 566 make 24 (the well-known count), so the search
    # neither misses solutions nor invents them. A sample keeps the test fast: check against an
    # exhaustive enumeration of every expression tree instead.
    hands = list(itertools.combinations_with_replacement(range(1, 11), 4))[::9]
    for hand in hands:
        brute = any(_value(expr) == 24 for expr in fm.expressions(hand, "+-*/"))
        assert (fm.find_solution(hand, 24, "+-*/") is not None) is brute, hand


def _value(expr: fm.Expr) -> Fraction | None:
    try:
        return fm.expression_value(expr)
    except fm.FormulaError:
        return None


def test_render_uses_minimal_but_sufficient_parentheses() -> None:
    assert fm.render(("*", ("-", 8, 4), 6)) == tokens("(8-4)*6")
    assert fm.render(("-", 8, ("-", 4, 6))) == tokens("8-(4-6)")
    assert fm.render(("+", 8, ("-", 4, 6))) == tokens("8+4-6")
    assert fm.render(("/", 8, ("*", 4, 6))) == tokens("8/(4*6)")
    assert fm.render(("*", 8, ("/", 4, 6))) == tokens("8*4/6")


def test_complete_extends_a_prefix_or_gives_up() -> None:
    values = (1, 4, 7, 8)
    own = fm.complete((), values, 24, "+-*/")
    assert own is not None and own[-1] == "=" and fm.evaluate(own[:-1]) == 24
    # a different opening that still has a solution: (7-1)*(8-4)
    other = fm.complete(tuple(tokens("(7")), values, 24, "+-*/")
    assert other is not None and other[:2] == ("(", "7") and fm.evaluate(other[:-1]) == 24
    assert fm.complete(tuple(tokens("1*1")), values, 24, "+-*/") is None
    assert fm.complete(tuple(tokens("8+1+")), values, 24, "+-*/") is None  # 9 + (4, 7) never 24
