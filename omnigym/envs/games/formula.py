"""Formulas over card values: the token grammar, exact evaluation and the 24-game search.

EZPoints and Points24 agents type a formula one token at a time (a card value, an operator, a
parenthesis, ``=`` to submit). This module holds everything about those formulas that is not a
game: the discrete token vocabulary and its text parser (:class:`FormulaGrammar`), the rule that
says which token may come next (:func:`next_token_error`), an exact evaluator over ``Fraction``
(:func:`evaluate`, a recursive-descent parser; user text never reaches Python's ``eval``), and the
classic 24-game search (:func:`find_solution`) with a renderer that turns its expression tree into
the tokens an agent would type (:func:`render`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import TypeAlias

from omnigym.core.text_actions import ActionParseError, answer_text

SUBMIT = "="
OPERATORS = "+-*/"
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
FACE_RANKS = {"J": 11, "Q": 12, "K": 13}

Expr: TypeAlias = "int | tuple[str, Expr, Expr]"
"""An expression tree: a card value, or ``(operator, left, right)``."""

# Numbers (validated against the vocabulary after matching), card letters standing alone (so the
# "a" in "answer" is not an ace), "x" as times, operators and parentheses; anything else is an error.
_TOKEN = re.compile(r"\s*(?:([0-9]+)|(?<![A-Za-z])([JQKAjqkaXx])(?![A-Za-z])|([-+*/()=]))")


class FormulaError(ValueError):
    """A token list that is not a complete formula, or one that divides by zero."""


def is_number(token: str) -> bool:
    """Whether ``token`` is a card value (not an operator, parenthesis or ``=``)."""
    return token.isdigit()


# --- the vocabulary ---------------------------------------------------------------------------
class FormulaGrammar:
    """Discrete formula tokens and the text parser that maps an answer onto them.

    Action indices: the numbers ``1..max_number`` first (index ``n - 1`` types ``n``), then the
    ``symbols`` in order (operators and parentheses), then ``=``. A text answer may hold one token
    or a whole formula (``"2*6="``, ``"(8-4) * (7-1) ="``); it is tokenised (whitespace ignored,
    ``x`` read as ``*``, ``A`` as 1 and ``J``/``Q``/``K`` as their card values) and the tokens are
    applied in order.

    Args:
        max_number: largest card value (10 when face cards count 10, else 13).
        symbols: the operator and parenthesis tokens, e.g. ``"+*"`` or ``"+-*/()"``.
    """

    def __init__(self, max_number: int, symbols: str) -> None:
        if max_number < 1:
            raise ValueError(f"max_number must be >= 1, got {max_number}")
        if set(symbols) - set(OPERATORS + "()"):
            raise ValueError(f"symbols must be operators or parentheses, got {symbols!r}")
        self.max_number = max_number
        self.tokens = (*(str(n) for n in range(1, max_number + 1)), *symbols, SUBMIT)
        self._index = {token: i for i, token in enumerate(self.tokens)}
        self._letters = {"A": 1, **{k: min(v, max_number) for k, v in FACE_RANKS.items()}, "X": -1}

    @property
    def num_actions(self) -> int:
        """Numbers, symbols and ``=``."""
        return len(self.tokens)

    def word(self, index: int) -> str:
        """The token action ``index`` types."""
        return self.tokens[index]

    def index(self, token: str) -> int:
        """The action index of ``token``; raises ``KeyError`` for a token outside the vocabulary."""
        return self._index[token]

    def describe(self) -> str:
        """One prompt line: the tokens in index order (``1 | 2 | ... | =``), then how to answer."""
        faces = "J Q K = 10" if self.max_number == 10 else "J=11 Q=12 K=13"
        return (
            f"{' | '.join(self.tokens)}; type the formula, one or more tokens per answer "
            f"(A=1, {faces}); = submits it (e.g. 2*6=)"
        )

    def parse(self, text: str) -> list[int]:
        """The token indices of an answer, in order.

        Raises:
            ActionParseError: empty answer, an unknown character or word, or a number outside
                ``1..max_number``.
        """
        answer = answer_text(text)
        tokens = tokenize(answer, self._letters)
        if not tokens:
            raise ActionParseError("empty action; expected formula tokens: " + " ".join(self.tokens))
        out = []
        for token in tokens:
            if token not in self._index:
                raise ActionParseError(
                    f"{token!r} is not a token here; expected one of {' '.join(self.tokens)}"
                )
            out.append(self._index[token])
        return out


def tokenize(text: str, letters: dict[str, int] | None = None) -> list[str]:
    """Split formula text into tokens (numbers as decimal strings, ``x`` as ``*``).

    Args:
        text: the formula, e.g. ``"(8 - 4) x 6 ="``.
        letters: card letters (upper case) -> value; ``-1`` means ``*``. Default: A=1, J/Q/K=10.

    Raises:
        ActionParseError: a character or word that is no token.
    """
    letters = letters if letters is not None else {"A": 1, "J": 10, "Q": 10, "K": 10, "X": -1}
    tokens, position, end = [], 0, len(text.rstrip())
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None:
            shown = text[position : position + 12].strip()
            raise ActionParseError(f"cannot read {shown!r} as formula tokens")
        number, letter, symbol = match.groups()
        if number is not None:
            tokens.append(str(int(number)) if len(number) <= 3 else number)
        elif letter is not None:
            value = letters.get(letter.upper(), -1)
            tokens.append("*" if value < 0 else str(value))
        else:
            tokens.append(symbol)
        position = match.end()
    return tokens


# --- typing rules -----------------------------------------------------------------------------
def next_token_error(tokens: Sequence[str], token: str, unused: Sequence[int], max_tokens: int) -> str:
    """Why ``token`` may not extend the formula ``tokens`` ("" when it may; ``=`` always may).

    A formula alternates operands (a number or a parenthesised formula) and operators. Numbers
    must be values of unused cards; operators and ``(`` need an unused card left to follow them;
    ``)`` must close an open ``(``; the formula holds at most ``max_tokens`` tokens.
    """
    if token == SUBMIT:
        return ""
    if len(tokens) >= max_tokens:
        return f"the formula is full ({max_tokens} tokens); submit it with ="
    previous = tokens[-1] if tokens else ""
    wants_operand = previous == "" or previous == "(" or previous in OPERATORS
    if is_number(token):
        if not wants_operand:
            return f"a number cannot follow {previous!r}; type an operator"
        if int(token) not in unused:
            return f"no unused card has the value {token}"
    elif token in OPERATORS or token == ")":
        if wants_operand:
            where = f"after {previous!r}" if previous else "first"
            return f"{token!r} cannot come {where}; type a number"
        if token == ")" and tokens.count("(") <= tokens.count(")"):
            return "')' has no open '(' to close"
        if token in OPERATORS and not unused:
            return "every card is used; close parentheses or submit with ="
    elif token == "(":
        if not wants_operand:
            return f"'(' cannot follow {previous!r}; type an operator"
        if not unused:
            return "every card is used; submit with ="
    else:
        return f"unknown token {token!r}"
    return ""


# --- exact evaluation -------------------------------------------------------------------------
def evaluate(tokens: Sequence[str]) -> Fraction:
    """The exact value of a complete formula (recursive descent, usual precedence).

    Grammar: ``expr := term (("+"|"-") term)*``, ``term := factor (("*"|"/") factor)*``,
    ``factor := NUMBER | "(" expr ")"``.

    Raises:
        FormulaError: the tokens are not one complete formula, or it divides by zero.
    """
    parser = _Parser(list(tokens))
    value = parser.expr()
    if parser.position != len(parser.tokens):
        raise FormulaError(f"unexpected {parser.tokens[parser.position]!r} at token {parser.position}")
    return value


class _Parser:
    """Recursive-descent evaluation over a token list (see :func:`evaluate`)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0

    def peek(self) -> str:
        return self.tokens[self.position] if self.position < len(self.tokens) else ""

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.tokens[self.position]
            self.position += 1
            value = apply_operator(op, value, self.term())
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.tokens[self.position]
            self.position += 1
            value = apply_operator(op, value, self.factor())
        return value

    def factor(self) -> Fraction:
        token = self.peek()
        self.position += 1
        if token == "(":
            value = self.expr()
            if self.peek() != ")":
                raise FormulaError("unbalanced parentheses")
            self.position += 1
            return value
        if is_number(token):
            return Fraction(int(token))
        raise FormulaError(
            f"expected a number or '(' at token {self.position - 1}, got {token or 'the end'!r}"
        )


def apply_operator(op: str, a: Fraction, b: Fraction) -> Fraction:
    """``a op b`` exactly; raises :class:`FormulaError` on division by zero."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise FormulaError("division by zero")
    return a / b


def formula_value(tokens: Sequence[str]) -> Fraction | None:
    """The value of a complete formula, or ``None`` when it is incomplete or divides by zero."""
    try:
        return evaluate(tokens)
    except FormulaError:
        return None


def card_values(tokens: Sequence[str]) -> list[int]:
    """The numbers a formula uses, in order."""
    return [int(token) for token in tokens if is_number(token)]


# --- search -----------------------------------------------------------------------------------
@lru_cache(maxsize=8192)
def find_solution(values: tuple[int, ...], target: int, operators: str) -> Expr | None:
    """A formula that uses each value once and equals ``target``, or ``None``.

    The classic 24-game search: pick two of the remaining numbers, replace them by their sum,
    difference, product or quotient (both orders, no division by zero), recurse until one number
    is left. Exact arithmetic with ``Fraction``. Deterministic: same input, same tree.
    """
    items: list[tuple[Fraction, Expr]] = [(Fraction(value), value) for value in values]
    return _search(items, Fraction(target), operators)


def _search(items: list[tuple[Fraction, Expr]], target: Fraction, operators: str) -> Expr | None:
    if len(items) == 1:
        return items[0][1] if items[0][0] == target else None
    for i, j in itertools.combinations(range(len(items)), 2):
        rest = [item for k, item in enumerate(items) if k not in (i, j)]
        for swapped, ((a, ea), (b, eb)) in enumerate(((items[i], items[j]), (items[j], items[i]))):
            for op in operators:
                if swapped and op in "+*":
                    continue  # commutative: one order is enough
                if op == "/" and b == 0:
                    continue
                found = _search([*rest, (apply_operator(op, a, b), (op, ea, eb))], target, operators)
                if found is not None:
                    return found
    return None


def expressions(values: tuple[int, ...], operators: str) -> Iterator[Expr]:
    """Every expression tree over ``values`` (each used once, any order and bracketing)."""
    if len(values) == 1:
        yield values[0]
        return
    n = len(values)
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for mask in range(1, (1 << n) - 1):
        left = tuple(sorted(values[k] for k in range(n) if mask >> k & 1))
        right = tuple(sorted(values[k] for k in range(n) if not mask >> k & 1))
        if (left, right) in seen:
            continue
        seen.add((left, right))
        for a in expressions(left, operators):
            for b in expressions(right, operators):
                for op in operators:
                    yield (op, a, b)


def expression_value(expr: Expr) -> Fraction:
    """The exact value of a tree; raises :class:`FormulaError` on division by zero."""
    if isinstance(expr, int):
        return Fraction(expr)
    op, left, right = expr
    return apply_operator(op, expression_value(left), expression_value(right))


def render(expr: Expr) -> list[str]:
    """The tokens of a tree with only the parentheses precedence needs (``(8-4)*6``)."""
    if isinstance(expr, int):
        return [str(expr)]
    op, left, right = expr
    tokens = _wrap(left, PRECEDENCE[op] > _precedence(left))
    tokens.append(op)
    # a - (b + c) and a / (b * c) need them; a + (b - c) and a * (b / c) do not.
    return tokens + _wrap(
        right, PRECEDENCE[op] > _precedence(right) or (op in "-/" and _precedence(right) == PRECEDENCE[op])
    )


def _precedence(expr: Expr) -> int:
    return 3 if isinstance(expr, int) else PRECEDENCE[expr[0]]


def _wrap(expr: Expr, parenthesise: bool) -> list[str]:
    tokens = render(expr)
    return ["(", *tokens, ")"] if parenthesise else tokens


@lru_cache(maxsize=4096)
def complete(
    prefix: tuple[str, ...], values: tuple[int, ...], target: int, operators: str
) -> tuple[str, ...] | None:
    """A full solving token sequence (ending in ``=``) that starts with ``prefix``, or ``None``.

    First the search's own solution (what a solver that started from the empty formula typed);
    otherwise every expression tree, rendered, whose tokens extend the prefix.
    """
    solution = find_solution(tuple(sorted(values)), target, operators)
    if solution is None:
        return None
    tokens = (*render(solution), SUBMIT)
    if tokens[: len(prefix)] == prefix:
        return tokens
    if prefix and prefix[-1] == SUBMIT:
        return None
    for expr in expressions(tuple(sorted(values)), operators):
        tokens = (*render(expr), SUBMIT)
        if tokens[: len(prefix)] == prefix:
            try:
                if expression_value(expr) == target:
                    return tokens
            except FormulaError:
                continue
    return None
