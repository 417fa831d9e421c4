"""Blackjack with cards you can see (Gym-Cards' fourth game), and its exact optimal decision.

Gymnasium's Blackjack-v1 rules: infinite deck, the dealer draws below 17 and stands on soft 17,
face cards count 10, an ace counts 11 while that does not bust (a "usable ace"), no natural
bonus. Actions ``stand`` or ``hit``; +1 win, -1 loss, 0 draw when the hand ends. The solver plays
the exact optimal stand/hit decision for the infinite deck, computed by dynamic programming over
the dealer's final totals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import numpy as np

from omnigym.core.text_actions import WordGrammar
from omnigym.envs.games import card_render as cr
from omnigym.envs.games.base import ActionGrammar, GameConfig, GameEnv, Outcome
from omnigym.envs.games.cards import GAME_OVER, MARGIN, check_card_width, state_field


@dataclass
class BlackjackConfig(GameConfig):
    """Blackjack options."""

    card_width: int = 40
    """Card width in pixels (height 1.4x); the image size follows from it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_card_width(self.card_width)


DEALER_STANDS = 17
CARD_PROBABILITIES = {**{value: 1 / 13 for value in range(1, 10)}, 10: 4 / 13}
"""Infinite deck: each rank 1/13, so 10 (ten, J, Q, K) has 4/13."""


def hand_total(values: list[int]) -> int:
    """Best total of a hand: an ace counts 11 when that does not bust ("usable ace")."""
    total = sum(values)
    return total + 10 if 1 in values and total + 10 <= 21 else total


def usable_ace(values: list[int]) -> bool:
    """Whether the hand counts an ace as 11."""
    return 1 in values and sum(values) + 10 <= 21


@cache
def dealer_final(hard: int, ace: bool) -> tuple[float, ...]:
    """Distribution of the dealer's final total from a hand of hard total ``hard``.

    Returns probabilities of ``(17, 18, 19, 20, 21, bust)``; the dealer draws below 17 and stands
    on every 17 (soft ones too), like Gymnasium's Blackjack.
    """
    total = hard + 10 if ace and hard + 10 <= 21 else hard
    if total > 21:
        return (0.0,) * 5 + (1.0,)
    if total >= DEALER_STANDS:
        return (*(float(total == t) for t in range(17, 22)), 0.0)
    out = np.zeros(6)
    for value, p in CARD_PROBABILITIES.items():
        out += p * np.array(dealer_final(hard + value, ace or value == 1))
    return tuple(float(x) for x in out)


def blackjack_values(total: int, usable: bool, dealer_card: int) -> tuple[float, float]:
    """Exact expected returns ``(stand, hit)`` for the player, then optimal play (infinite deck).

    Args:
        total: the player's total (``hand_total``), at most 21.
        usable: whether it counts an ace as 11.
        dealer_card: the dealer's up card value, 1 (ace) to 10.
    """
    hard = total - 10 if usable else total
    return _stand_value(total, dealer_card), _hit_value(hard, usable, dealer_card)


@cache
def _stand_value(total: int, dealer_card: int) -> float:
    final = dealer_final(dealer_card, dealer_card == 1)
    win = final[5] + sum(p for t, p in zip(range(17, 22), final, strict=False) if t < total)
    loss = sum(p for t, p in zip(range(17, 22), final, strict=False) if t > total)
    return win - loss


@cache
def _hit_value(hard: int, ace: bool, dealer_card: int) -> float:
    value = 0.0
    for card, p in CARD_PROBABILITIES.items():
        new_hard, new_ace = hard + card, ace or card == 1
        total = new_hard + 10 if new_ace and new_hard + 10 <= 21 else new_hard
        if total > 21:
            value -= p
        else:
            value += p * max(_stand_value(total, dealer_card), _hit_value(new_hard, new_ace, dealer_card))
    return value


class BlackjackEnv(GameEnv):
    """Gymnasium Blackjack-v1 with cards you can see.

    Observation: ``image`` (the dealer's up card and a face-down card, the player's cards, totals),
    ``text``, ``state`` = ``[player total / 21, dealer card / 10, usable ace]`` (float32).
    Actions: ``stand`` (0, alias ``stick``), ``hit`` (1).
    """

    game = "Blackjack"
    rules = (
        "Get a total closer to 21 than the dealer without going over. Cards 2-10 count their value, "
        "J Q K count 10, an ace 11 unless that busts, then 1. 'hit' draws a card (over 21: you lose); "
        "'stand' ends your turn, the dealer draws until 17 or more. Win +1, lose -1, draw 0. "
        "The deck is infinite."
    )
    config_class = BlackjackConfig
    has_state = True
    config: BlackjackConfig

    def make_grammar(self) -> ActionGrammar:
        """``stand`` and ``hit``."""
        return WordGrammar(["stand", "hit"], {"stick": "stand", "stay": "stand", "s": "stand", "h": "hit"})

    def _glyph_height(self) -> int:
        return max(12, round(self.config.card_width * 0.4))

    def image_shape(self) -> tuple[int, int, int]:
        """Two rows of a label and cards; five cards fit side by side, more overlap."""
        card_w, label = self.config.card_width, self._glyph_height()
        row = label + MARGIN // 2 + cr.card_height(card_w)
        width = max(5 * card_w + 4 * (card_w // 4), cr.glyphs(label).text_width(len("Player: 21 DRAW")))
        return (2 * row + 3 * MARGIN, -(-(width + 2 * MARGIN) // 8) * 8, 3)

    def state_size(self) -> int:
        """Player total, dealer card, usable ace."""
        return 3

    def _card(self) -> int:
        return int(self._rng.integers(cr.NUM_CARDS))

    def new_game(self, rng: np.random.Generator) -> None:
        """Two cards to the dealer, then two to the player (Gymnasium's order)."""
        self._rng = rng
        self.dealer = [self._card(), self._card()]
        self.player = [self._card(), self._card()]
        self.result = ""

    @staticmethod
    def values(cards: list[int]) -> list[int]:
        """Blackjack values of cards (ace 1, faces 10)."""
        return [min(cr.card_rank(c), 10) for c in cards]

    def apply(self, action: int) -> Outcome:
        """Hit (bust loses) or stand (the dealer plays, then the totals are compared)."""
        if self.result:
            return Outcome(error=GAME_OVER)
        if action == 1:
            self.player.append(self._card())
            if hand_total(self.values(self.player)) > 21:
                self.result = "loss"
                return Outcome(reward=-1.0, terminated=True)
            return Outcome()
        while hand_total(self.values(self.dealer)) < DEALER_STANDS:
            self.dealer.append(self._card())
        player, dealer = hand_total(self.values(self.player)), hand_total(self.values(self.dealer))
        dealer = 0 if dealer > 21 else dealer
        reward = float(np.sign(player - dealer))
        self.result = {1.0: "win", -1.0: "loss", 0.0: "draw"}[reward]
        return Outcome(reward=reward, terminated=True, success=reward > 0)

    def _labels(self) -> tuple[str, str]:
        dealer = self.values(self.dealer)
        if not self.result:
            return f"Dealer: {dealer[0]}", f"Player: {hand_total(self.values(self.player))}"
        total = hand_total(dealer)
        return f"Dealer: {total}" + (" bust" if total > 21 else ""), (
            f"Player: {hand_total(self.values(self.player))} {self.result.upper()}"
        )

    def draw(self) -> np.ndarray:
        """Dealer row (up card and a face-down card until the end), player row, totals."""
        height, width, _ = self.image_shape()
        frame = cr.table(height, width)
        sprites, sheet = cr.card_sprites(self.config.card_width), cr.glyphs(self._glyph_height())
        row = sheet.height + MARGIN // 2 + sprites.shape[1]
        dealer = self.dealer if self.result else [self.dealer[0], cr.CARD_BACK]
        for label, cards, y in zip(
            self._labels(), (dealer, self.player), (MARGIN, 2 * MARGIN + row), strict=True
        ):
            cr.paste(frame, sheet.line(label), y, MARGIN)
            xs = cr.card_offsets(
                len(cards), width - 2 * MARGIN, self.config.card_width, self.config.card_width // 4
            )
            for card, x in zip(cards, xs, strict=True):
                cr.paste(frame, sprites[card], y + sheet.height + MARGIN // 2, MARGIN + x)
        return frame

    def state_text(self) -> str:
        """Dealer's cards (one hidden until the end), player's cards, total and usable ace, result."""
        player = self.values(self.player)
        ace = "yes" if usable_ace(player) else "no"
        names = " ".join(cr.card_name(c) for c in self.player)
        lines = [f"player: {names} (total {hand_total(player)}, usable ace: {ace})"]
        if self.result:
            dealer = " ".join(cr.card_name(c) for c in self.dealer)
            lines.insert(0, f"dealer: {dealer} (total {hand_total(self.values(self.dealer))})")
            lines.append(f"result: {self.result}")
        else:
            up = cr.card_name(self.dealer[0])
            lines.insert(0, f"dealer: {up} + hidden (showing {self.values(self.dealer)[0]})")
        return "\n".join(lines)

    def state_vector(self) -> np.ndarray:
        """``[player total / 21, dealer up card / 10, usable ace]``. Shape: [3]."""
        player = self.values(self.player)
        return np.array(
            [hand_total(player) / 21, self.values(self.dealer)[0] / 10, float(usable_ace(player))], np.float32
        )

    @classmethod
    def solve(cls, state: str) -> int:
        """Optimal stand (0) / hit (1) from the exact dynamic programme (ties stand)."""
        if "\nresult: " in state:
            return 0  # the hand is over; any action will do
        player = re.search(r"\(total (\d+), usable ace: (yes|no)\)", state_field(state, "player"))
        dealer = re.search(r"\(showing (\d+)\)", state_field(state, "dealer"))
        if player is None or dealer is None:
            raise ValueError("not a Blackjack state text")
        stand, hit = blackjack_values(int(player.group(1)), player.group(2) == "yes", int(dealer.group(1)))
        return int(hit > stand)
