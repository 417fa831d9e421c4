"""Text actions of the driving env (``action_space="text"``): a written plan or a meta action.

A language-model policy answers in text; the env reads the answer part (``<answer>...</answer>``,
:func:`omnigym.core.text_actions.answer_text`) as one of

- a **plan**: the NAVSIM trajectory written out, 8 poses ``(x, y, heading)`` in the ego frame at
  0.5 s, 1.0 s, ..., 4.0 s (metres forward and left, radians), e.g.
  ``(4.1, 0.0, 0.00), (8.3, 0.1, 0.01), ..., (33.0, 1.2, 0.05)``; brackets work as well;
- a **meta action**: a lateral part (``keep lane | change left | change right | stop``) and an
  optional speed part (``accelerate | keep speed | decelerate``), e.g. ``change left, accelerate``.
  The env's reference controller (:func:`omnigym.envs.driving.planner.meta_action_plans`) turns it
  into a plan from where the car is.

A reply that does not parse (malformed, not 8 poses, a number that is NaN, infinite or outside
the plan box, an unknown word, longer than the action space) keeps the slot's last valid action
(a plan is repeated in the ego frame, a meta action is carried out again from where the car is;
``keep lane, keep speed`` before any), costs ``invalid_action_penalty`` and reports
``info["action_valid"] = False`` with the reason in ``info["action_error"]``: never an exception.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from gymnasium import spaces

from omnigym.core.text_actions import ActionParseError, answer_text, normalize_word
from omnigym.envs.driving.controller import PLAN_POSES
from omnigym.envs.driving.planner import meta_action_plans

if TYPE_CHECKING:
    from omnigym.envs.driving.simulator import DrivingSimulator

ACTION_TEXT_MAX_LENGTH = 1024
"""Longest text action: a short thought and a plan of 8 poses fit with room to spare."""
LATERAL = ("keep lane", "change left", "change right", "stop")
"""Lateral meta actions; ``stop`` brakes to a standstill in the current lane."""
LONGITUDINAL = ("accelerate", "keep speed", "decelerate")
"""Speed meta actions (ignored after ``stop``)."""
LANE_CHANGES = (0, 1, -1, 0)
"""Lanes moved by each lateral meta action (+1: one lane to the left)."""
ACCELERATIONS = (1.5, 0.0, -2.0)
"""m/s² of each speed meta action: gentle, inside the comfort bounds the score checks."""
STOP_DECELERATION = -3.0
"""m/s² of ``stop``: firm but comfortable."""
_ALIASES = {
    "keep": "keep lane",
    "stay in lane": "keep lane",
    "lane keep": "keep lane",
    "left": "change left",
    "change lane left": "change left",
    "lane change left": "change left",
    "change to the left lane": "change left",
    "right": "change right",
    "change lane right": "change right",
    "lane change right": "change right",
    "change to the right lane": "change right",
    "brake to a stop": "stop",
    "speed up": "accelerate",
    "maintain speed": "keep speed",
    "keep the speed": "keep speed",
    "slow down": "decelerate",
    "brake": "decelerate",
}
_PARTS = re.compile(r"\s*(?:,|;|\||\band\b|\n)\s*")
_GROUP = re.compile(r"[(\[]([^()\[\]]*)[)\]]")


@dataclass(frozen=True)
class DrivingTextAction:
    """One parsed reply: a written plan ``[8, 3]``, or a meta action (indices into the vocabularies)."""

    plan: np.ndarray | None = None
    lateral: int = 0
    longitudinal: int = 1


KEEP_LANE = DrivingTextAction()
"""``keep lane, keep speed``: the action before a slot's first valid one."""


def action_space() -> spaces.Text:
    """The single-env action space of ``action_space="text"``."""
    return spaces.Text(max_length=ACTION_TEXT_MAX_LENGTH, min_length=0, charset=string.printable)


def describe_actions() -> str:
    """How to answer, for prompts: both forms and their vocabularies."""
    return (
        "Answer with a meta action, a lateral part (" + " | ".join(LATERAL) + ") and optionally a "
        "speed part (" + " | ".join(LONGITUDINAL) + "), e.g. 'keep lane, accelerate'; or with a plan "
        "of 8 poses (x, y, heading) in the ego frame at 0.5 s steps, metres forward and left and "
        "radians, e.g. '(4.0, 0.0, 0.00), (8.0, 0.0, 0.00), ...'."
    )


def parse_driving_action(text: str, low: np.ndarray, high: np.ndarray) -> DrivingTextAction:
    """Read one reply; ``low``/``high`` ``[8, 3]`` bound a written plan.

    Raises:
        ActionParseError: with the reason (see the module docstring).
    """
    answer = answer_text(text, max_length=ACTION_TEXT_MAX_LENGTH)
    if not answer:
        raise ActionParseError("empty action; " + describe_actions())
    groups = _GROUP.findall(answer)
    if groups:
        return DrivingTextAction(plan=_parse_plan(groups, low, high))
    return _parse_meta_action(answer)


def _parse_plan(groups: Sequence[str], low: np.ndarray, high: np.ndarray) -> np.ndarray:
    if len(groups) != PLAN_POSES:
        raise ActionParseError(f"a plan has {PLAN_POSES} poses (x, y, heading), got {len(groups)}")
    plan = np.empty((PLAN_POSES, 3))
    for i, group in enumerate(groups):
        values = [value.strip() for value in group.split(",")]
        if len(values) != 3:
            raise ActionParseError(f"pose {i + 1} has {len(values)} numbers, expected 3 (x, y, heading)")
        for j, value in enumerate(values):
            try:
                plan[i, j] = float(value)
            except ValueError:
                shown = value if len(value) <= 20 else value[:17] + "..."
                raise ActionParseError(f"pose {i + 1}: {shown!r} is not a number") from None
    if not np.all(np.isfinite(plan)):
        raise ActionParseError("the plan holds NaN or infinite numbers")
    outside = (plan < low) | (plan > high)
    if outside.any():
        i, j = np.argwhere(outside)[0]
        name = ("x", "y", "heading")[j]
        raise ActionParseError(
            f"pose {i + 1}: {name} = {plan[i, j]:g} is outside [{low[i, j]:g}, {high[i, j]:g}]"
        )
    return plan


def _parse_meta_action(answer: str) -> DrivingTextAction:
    parts = [normalize_word(part) for part in _PARTS.split(answer) if part.strip()]
    lateral: int | None = None
    longitudinal: int | None = None
    for part in parts:
        word = _ALIASES.get(part, part)
        if word in LATERAL and lateral is None:
            lateral = LATERAL.index(word)
        elif word in LONGITUDINAL and longitudinal is None:
            longitudinal = LONGITUDINAL.index(word)
        else:
            shown = part if len(part) <= 40 else part[:37] + "..."
            repeated = word in LATERAL or word in LONGITUDINAL
            reason = "a second" if repeated else "unknown"
            raise ActionParseError(f"{reason} meta action {shown!r}; " + describe_actions())
    return DrivingTextAction(
        lateral=0 if lateral is None else lateral, longitudinal=1 if longitudinal is None else longitudinal
    )


def format_meta_action(lateral: int, longitudinal: int) -> str:
    """The canonical text of a meta action (what :func:`parse_driving_action` reads back)."""
    if LATERAL[lateral] == "stop":
        return "stop"
    return f"{LATERAL[lateral]}, {LONGITUDINAL[longitudinal]}"


META_ACTIONS = (
    *((lateral, speed) for lateral in range(len(LATERAL) - 1) for speed in range(len(LONGITUDINAL))),
    (LATERAL.index("stop"), 1),
)
"""The distinct meta actions as ``(lateral, longitudinal)`` indices: 3 x 3, then ``stop``."""


def meta_plans(
    sim: DrivingSimulator, idx: np.ndarray, lateral: np.ndarray, longitudinal: np.ndarray
) -> np.ndarray:
    """Plans ``[n, 8, 3]`` (ego frame) of meta actions ``(lateral[k], longitudinal[k])`` in slots ``idx``."""
    stop = lateral == LATERAL.index("stop")
    lane_change = np.asarray(LANE_CHANGES)[lateral]
    acceleration = np.where(stop, STOP_DECELERATION, np.asarray(ACCELERATIONS)[longitudinal])
    return meta_action_plans(sim, idx, lane_change, acceleration)


def nearest_meta_actions(sim: DrivingSimulator, idx: np.ndarray, plans: np.ndarray) -> np.ndarray:
    """For each slot of ``idx``, the meta action (``[n, 2]`` indices) whose plan is closest to ``plans[k]``.

    Closest: the smallest summed distance between the 8 positions, so a plan that slows down
    for a lead car maps to ``decelerate`` and one that moves a lane over maps to a lane change,
    whatever the road's curvature. This is how a planner's plan is written as a meta action.
    """
    n, m = len(idx), len(META_ACTIONS)
    table = np.asarray(META_ACTIONS)
    candidates = meta_plans(sim, np.repeat(idx, m), np.tile(table[:, 0], n), np.tile(table[:, 1], n))
    gaps = np.linalg.norm(candidates.reshape(n, m, PLAN_POSES, 3)[..., :2] - plans[:, None, :, :2], axis=-1)
    return table[np.argmin(gaps.sum(axis=-1), axis=1)]


def format_plan(plan: np.ndarray) -> str:
    """A plan ``[8, 3]`` as text: ``(x, y, heading)`` with 2 decimals (headings 3).

    Digits are cut, not rounded, so a value inside the plan box is written inside it (a heading
    of pi rounds to 3.142, outside the box the env reads plans with).
    """
    plan = np.asarray(plan, np.float64)
    cut = np.trunc(plan * np.array([100.0, 100.0, 1000.0])) / np.array([100.0, 100.0, 1000.0]) + 0.0
    return ", ".join(f"({x:.2f}, {y:.2f}, {h:.3f})" for x, y, h in cut)


class TextActionReader:
    """Turns each env slot's reply into the plan it drives, remembering its last valid action."""

    def __init__(self, num_envs: int, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high = low, high
        self.last: list[DrivingTextAction] = [KEEP_LANE] * num_envs

    def forget(self, slots: np.ndarray) -> None:
        """New episodes in ``slots`` (indices): back to ``keep lane, keep speed`` until a valid reply."""
        for slot in slots:
            self.last[int(slot)] = KEEP_LANE

    def plans(self, sim: DrivingSimulator, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Plans ``[N, 8, 3]``, whether each reply was valid ``[N]``, and why not ("" when valid)."""
        n = len(self.last)
        if len(texts) != n:
            raise ValueError(f"expected {n} text actions (one per env), got {len(texts)}")
        valid = np.ones(n, bool)
        errors = [""] * n
        for i, text in enumerate(texts):
            try:
                self.last[i] = parse_driving_action(text, self.low, self.high)
            except ActionParseError as error:
                valid[i], errors[i] = False, str(error)
        plans = np.empty((n, PLAN_POSES, 3))
        meta = [i for i, action in enumerate(self.last) if action.plan is None]
        for i, action in enumerate(self.last):
            if action.plan is not None:
                plans[i] = action.plan
        if meta:
            idx = np.asarray(meta, np.int64)
            lateral = np.array([self.last[i].lateral for i in meta])
            speed = np.array([self.last[i].longitudinal for i in meta])
            plans[idx] = meta_plans(sim, idx, lateral, speed)
        return np.clip(plans, self.low, self.high), valid, errors
