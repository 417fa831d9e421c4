"""Card and number games in the style of RL4VLM's Gym-Cards: an image of cards or numbers plus text.

- **NumberLine**: a target and a current number, distinct, in ``[0, max_position]``. Actions
  ``-`` and ``+`` move the current number by one (clipped to the range: a legal no-op at the
  ends). Reaching the target: reward +1, the game ends, success; every other step gives 0.
- **EZPoints**: two cards; type a formula with ``+`` and ``*`` that uses both card values once and
  equals the target (12). Aces count 1, J/Q/K 10 (or 11/12/13 with ``face_cards_as_10=False``).
- **Points24**: four cards; the same with ``+ - * /`` and parentheses, target 24, exact
  arithmetic (``8/(3-8/3)`` is 24).

Blackjack, the fourth Gym-Cards game, lives in ``blackjack.py``.

Formula games (EZPoints, Points24): each step appends one token (a card value, an operator, a
parenthesis) to the formula shown under the cards; a text answer may hold several tokens or a
whole formula (``"2*6="``). A token the formula cannot take (a value no unused card has, two
operators in a row, an operator first, a number after a number, a ``)`` with no open ``(``) is an
invalid move: nothing changes and the step costs ``invalid_action_penalty``. ``=`` submits: a
formula that uses every card and equals the target gives +10 and success, anything else (wrong
value, unused cards, unbalanced parentheses, an unfinished formula) -1; either way the game ends.
Only hands with a solution are dealt. Every game ends on its own; a step after the end is an
invalid move.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from omnigym.core.text_actions import WordGrammar
from omnigym.envs.games import card_render as cr
from omnigym.envs.games import formula as fm
from omnigym.envs.games.base import ActionGrammar, GameConfig, GameEnv, Outcome

MARGIN = 8
GAME_OVER = "the game is over; reset to play again"


def state_field(state: str, key: str) -> str:
    """The value of the ``key: value`` line of a state text; raises ``ValueError`` if missing."""
    match = re.search(rf"^{re.escape(key)}: (.*)$", state, re.MULTILINE)
    if match is None:
        raise ValueError(f"state text has no {key!r} line")
    return match.group(1).strip()


def check_card_width(width: int) -> None:
    """Reject cards too narrow to draw a rank and a suit on."""
    if width < 24:
        raise ValueError(f"card_width must be >= 24 pixels, got {width}")


# --- NumberLine -----------------------------------------------------------------------------------
@dataclass
class NumberLineConfig(GameConfig):
    """NumberLine options."""

    max_position: int = 5
    """Numbers lie in ``[0, max_position]``."""
    glyph_height: int = 32
    """Height in pixels of the text lines in the image."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_position < 1:
            raise ValueError(f"max_position must be >= 1, got {self.max_position}")
        if self.glyph_height < 8:
            raise ValueError(f"glyph_height must be >= 8, got {self.glyph_height}")


class NumberLineEnv(GameEnv):
    """Move the current number to the target, one step at a time.

    Observation: ``image`` ("Target: 3" over "Current: 1"), ``text``, ``state`` =
    ``[target, current] / max_position`` (float32). Actions: ``-`` (0), ``+`` (1).
    """

    game = "NumberLine"
    rules = (
        "Move the current number to the target number. '-' subtracts 1, '+' adds 1 (the number stays "
        "within the range). Reaching the target ends the game with reward 1; other steps give 0."
    )
    config_class = NumberLineConfig
    has_state = True
    config: NumberLineConfig

    def make_grammar(self) -> ActionGrammar:
        """``-`` and ``+`` with spelled-out aliases."""
        aliases = {"minus": "-", "decrease": "-", "left": "-", "plus": "+", "increase": "+", "right": "+"}
        return WordGrammar(["-", "+"], aliases)

    def _chars(self) -> int:
        return len("Current: ") + len(str(self.config.max_position))

    def image_shape(self) -> tuple[int, int, int]:
        """Two text lines, wide enough for the largest number."""
        sheet = cr.glyphs(self.config.glyph_height)
        return (2 * sheet.height + 3 * MARGIN, sheet.text_width(self._chars()) + 2 * MARGIN, 3)

    def state_size(self) -> int:
        """Target and current."""
        return 2

    def new_game(self, rng: np.random.Generator) -> None:
        """Two distinct numbers in ``[0, max_position]``."""
        self.target, self.current = (
            int(v) for v in rng.choice(self.config.max_position + 1, 2, replace=False)
        )
        self._over = False

    def apply(self, action: int) -> Outcome:
        """Move by one (clipped); +1 and the end on reaching the target."""
        if self._over:
            return Outcome(error=GAME_OVER)
        self.current = int(np.clip(self.current + (1 if action == 1 else -1), 0, self.config.max_position))
        self._over = self.current == self.target
        return Outcome(reward=float(self._over), terminated=self._over, success=self._over)

    def draw(self) -> np.ndarray:
        """The two numbers, written large."""
        sheet = cr.glyphs(self.config.glyph_height)
        frame = cr.table(*self.image_shape()[:2])
        width = self._chars()
        cr.paste(frame, sheet.line(f"Target: {self.target}".ljust(width)), MARGIN, MARGIN)
        cr.paste(frame, sheet.line(f"Current: {self.current}"), 2 * MARGIN + sheet.height, MARGIN)
        return frame

    def state_text(self) -> str:
        """Range, target and current number."""
        return f"range: 0..{self.config.max_position}\ntarget: {self.target}\ncurrent: {self.current}"

    def state_vector(self) -> np.ndarray:
        """``[target, current] / max_position``. Shape: [2]."""
        return np.array([self.target, self.current], np.float32) / self.config.max_position

    @classmethod
    def solve(cls, state: str) -> int:
        """Step toward the target."""
        target, current = int(state_field(state, "target")), int(state_field(state, "current"))
        if target == current:
            return 0  # the game is over; any action will do
        return 1 if target > current else 0


# --- formula games --------------------------------------------------------------------------------
@dataclass
class FormulaConfig(GameConfig):
    """Options of the formula games (EZPoints, Points24)."""

    target: int = 24
    """The value the formula must reach."""
    face_cards_as_10: bool = True
    """J, Q, K count 10 (else 11, 12, 13); the number tokens are 1..10 (else 1..13)."""
    card_width: int = 44
    """Card width in pixels (height 1.4x); the image size follows from it."""
    max_formula_tokens: int = 20
    """Longest formula (tokens before ``=``); more is an invalid move."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_card_width(self.card_width)
        if self.max_formula_tokens < 1:
            raise ValueError(f"max_formula_tokens must be >= 1, got {self.max_formula_tokens}")


@dataclass
class EZPointsConfig(FormulaConfig):
    """EZPoints options: target 12, formulas up to 3 tokens."""

    target: int = 12
    max_formula_tokens: int = 3


@dataclass
class Points24Config(FormulaConfig):
    """Points24 options: target 24."""


@dataclass(frozen=True)
class _FormulaLayout:
    """Where things go in a formula game's image (pixels)."""

    header: int  # glyph height of the "target" line
    cards_y: int
    card_xs: tuple[int, ...]
    formula_y: int
    formula: int  # glyph height of the formula lines
    chars_per_line: int
    height: int
    width: int


class _FormulaGame(GameEnv):
    """Deal solvable cards, type a formula token by token, submit with ``=``."""

    num_cards: ClassVar[int] = 4
    symbols: ClassVar[str] = "+-*/()"
    has_state = True
    config: FormulaConfig

    def make_grammar(self) -> ActionGrammar:
        """Card values, the game's symbols and ``=``."""
        return fm.FormulaGrammar(10 if self.config.face_cards_as_10 else 13, self.symbols)

    @property
    def layout(self) -> _FormulaLayout:
        """The image layout under this config."""
        return _formula_layout(self.num_cards, self.config.card_width, self.config.max_formula_tokens)

    def image_shape(self) -> tuple[int, int, int]:
        """Target line, one row of cards, the formula lines."""
        return (self.layout.height, self.layout.width, 3)

    def state_size(self) -> int:
        """Values and used flags per card, formula length, whether an operand comes next."""
        return 2 * self.num_cards + 2

    def _value(self, card: int) -> int:
        rank = cr.card_rank(card)
        return min(rank, 10) if self.config.face_cards_as_10 else rank

    def new_game(self, rng: np.random.Generator) -> None:
        """Deal cards from a 52-card deck until the hand has a solution (rejection sampling)."""
        operators = self.symbols.replace("(", "").replace(")", "")
        for _ in range(10_000):
            cards = [int(c) for c in rng.choice(cr.NUM_CARDS, self.num_cards, replace=False)]
            values = [self._value(c) for c in cards]
            if fm.find_solution(tuple(sorted(values)), self.config.target, operators) is not None:
                break
        else:
            raise ValueError(f"{self.game}: no solvable hand found for target {self.config.target}")
        self.cards, self.values = cards, values
        self.used = [False] * self.num_cards
        self.tokens: list[str] = []
        self.result = ""
        self._base = self._draw_base()

    def apply(self, action: int) -> Outcome:
        """Append a token (checked by :func:`formula.next_token_error`) or submit on ``=``."""
        if self.result:
            return Outcome(error=GAME_OVER)
        token = self.grammar.word(action)
        if token == fm.SUBMIT:
            return self._submit()
        unused = [v for v, used in zip(self.values, self.used, strict=True) if not used]
        error = fm.next_token_error(self.tokens, token, unused, self.config.max_formula_tokens)
        if error:
            return Outcome(error=error)
        if fm.is_number(token):
            self.used[next(i for i, v in enumerate(self.values) if v == int(token) and not self.used[i])] = (
                True
            )
        self.tokens.append(token)
        return Outcome()

    def _submit(self) -> Outcome:
        value = fm.formula_value(self.tokens)
        won = all(self.used) and value == self.config.target
        if won:
            self.result = f"correct, the formula equals {self.config.target}"
        elif not all(self.used):
            self.result = "wrong, not every card is used"
        elif value is None:
            self.result = "wrong, the formula is incomplete"
        else:
            self.result = f"wrong, the formula equals {value}, not {self.config.target}"
        return Outcome(reward=10.0 if won else -1.0, terminated=True, success=won)

    def _draw_base(self) -> np.ndarray:
        layout = self.layout
        frame = cr.table(layout.height, layout.width)
        cr.paste(frame, cr.glyphs(layout.header).line(f"target: {self.config.target}"), MARGIN, MARGIN)
        sprites = cr.card_sprites(self.config.card_width)
        for card, x in zip(self.cards, layout.card_xs, strict=True):
            cr.paste(frame, sprites[card], layout.cards_y, x)
        return frame

    def draw(self) -> np.ndarray:
        """Cards (used ones dimmed) and the formula typed so far, on a cached background."""
        layout = self.layout
        frame = self._base.copy()
        sprites = cr.card_sprites(self.config.card_width)
        for card, used, x in zip(self.cards, self.used, layout.card_xs, strict=True):
            if used:
                cr.paste(frame, sprites[cr.CARD_BACK + 1 + card], layout.cards_y, x)
        text = "".join(self.tokens) + ("=" if self.result else "")
        sheet = cr.glyphs(layout.formula)
        for row in range(0, len(text), layout.chars_per_line):
            y = layout.formula_y + (row // layout.chars_per_line) * layout.formula
            cr.paste(frame, sheet.line(text[row : row + layout.chars_per_line]), y, MARGIN)
        if self.result:
            verdict = "  WIN" if self.result.startswith("correct") else "  LOSS"
            x = MARGIN + cr.glyphs(layout.header).text_width(len(f"target: {self.config.target}"))
            cr.paste(frame, cr.glyphs(layout.header).line(verdict), MARGIN, x)
        return frame

    def state_text(self) -> str:
        """Cards, values, the number tokens, target, the formula (quoted) and, at the end, the result."""
        unused = [str(v) for v, used in zip(self.values, self.used, strict=True) if not used]
        lines = [
            "cards: " + " ".join(cr.card_name(c) for c in self.cards),
            "values: " + " ".join(str(v) for v in self.values),
            f"number tokens: 1..{self.grammar.num_actions - len(self.symbols) - 1}",
            f"target: {self.config.target}",
            f'formula: "{"".join(self.tokens)}"',
            "unused values: " + (" ".join(unused) or "none"),
        ]
        if self.result:
            lines.append(f"result: {self.result}")
        return "\n".join(lines)

    def state_vector(self) -> np.ndarray:
        """Card values / 13, used flags, formula length / max length, operand expected next.

        Shape: [2 * num_cards + 2].
        """
        wants_operand = not self.tokens or self.tokens[-1] == "(" or self.tokens[-1] in fm.OPERATORS
        return np.array(
            [
                *(v / 13 for v in self.values),
                *(float(u) for u in self.used),
                len(self.tokens) / self.config.max_formula_tokens,
                float(wants_operand),
            ],
            np.float32,
        )

    @classmethod
    def solve(cls, state: str) -> int:
        """The next token of a solving formula that extends the one typed so far.

        From the empty formula this always wins on a solvable hand; when the typed formula cannot be
        completed to a solution (or is already complete), it submits with ``=``.
        """
        return _solve_formula(state, cls.symbols)


@lru_cache(maxsize=8192)
def _solve_formula(state: str, symbols: str) -> int:
    if "\nresult: " in state:
        return 0  # the formula was submitted: the game is over, any action will do
    values = tuple(sorted(int(v) for v in state_field(state, "values").split()))
    target = int(state_field(state, "target"))
    grammar = fm.FormulaGrammar(int(state_field(state, "number tokens").split("..")[1]), symbols)
    prefix = tuple(fm.tokenize(state_field(state, "formula").strip('"')))
    operators = symbols.replace("(", "").replace(")", "")
    if fm.find_solution(values, target, operators) is None:
        raise ValueError(f"the cards {values} cannot make {target}")
    tokens = fm.complete(prefix, values, target, operators)
    return grammar.index(fm.SUBMIT if tokens is None else tokens[len(prefix)])


@lru_cache(maxsize=32)
def _formula_layout(num_cards: int, card_width: int, max_tokens: int) -> _FormulaLayout:
    header, formula = max(12, round(card_width * 0.36)), max(12, round(card_width * 0.45))
    gap = card_width // 4
    cards_width = num_cards * card_width + (num_cards - 1) * gap
    # At most num_cards two-digit numbers, the other tokens one character, then "=".
    max_chars = max_tokens + num_cards + 1
    width = max(cards_width, cr.glyphs(header).text_width(len("target: 999  LOSS")))
    if max_chars * cr.glyphs(formula).width <= 1.5 * width:  # one line if it stays reasonably narrow
        width = max(width, cr.glyphs(formula).text_width(max_chars))
    width = -(-(width + 2 * MARGIN) // 8) * 8
    chars_per_line = (width - 2 * MARGIN) // cr.glyphs(formula).width
    lines = -(-max_chars // chars_per_line)
    cards_y = MARGIN + header + MARGIN // 2
    formula_y = cards_y + cr.card_height(card_width) + MARGIN
    left = (width - cards_width) // 2
    card_xs = tuple(left + i * (card_width + gap) for i in range(num_cards))
    height = formula_y + lines * formula + MARGIN
    return _FormulaLayout(header, cards_y, card_xs, formula_y, formula, chars_per_line, height, width)


class EZPointsEnv(_FormulaGame):
    """Two cards; type a formula with ``+`` and ``*`` that makes 12.

    Actions: numbers 1..10 (indices 0..9), ``+`` (10), ``*`` (11), ``=`` (12); with
    ``face_cards_as_10=False`` numbers 1..13 and the rest shifted by 3. ``state``: see
    :meth:`_FormulaGame.state_vector`.
    """

    game = "EZPoints"
    rules = (
        "Type a formula that uses both card values exactly once with + and * and equals the target. "
        "A is 1; J, Q, K count as shown in the number tokens. Each step adds one or more tokens; a token "
        "that cannot follow the formula or a value no unused card has is refused (penalty). '=' submits: "
        "+10 if the formula equals the target, otherwise -1; the game ends either way."
    )
    config_class = EZPointsConfig
    num_cards = 2
    symbols = "+*"


class Points24Env(_FormulaGame):
    """Four cards; type a formula with ``+ - * /`` and parentheses that makes 24.

    Actions: numbers 1..10 (indices 0..9), ``+ - * / ( )`` (10..15), ``=`` (16); with
    ``face_cards_as_10=False`` numbers 1..13 and the rest shifted by 3.
    """

    game = "Points24"
    rules = (
        "Type a formula that uses all four card values exactly once with + - * / and parentheses and "
        "equals the target (exact fractions). A is 1; J, Q, K count as shown in the number tokens. Each "
        "step adds one or more tokens; a token that cannot follow the formula, a ')' without '(' or a "
        "value no unused card has is refused (penalty). '=' submits: +10 if the formula uses every card "
        "and equals the target, otherwise -1; the game ends either way."
    )
    config_class = Points24Config
    num_cards = 4
    symbols = "+-*/()"
