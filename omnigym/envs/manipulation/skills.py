"""Text actions of the tabletop tasks (``action_space="text"``): one parameterised skill per reply.

A language-model policy answers in text; the env reads the answer part (``<answer>...</answer>``,
:func:`omnigym.core.text_actions.answer_text`) as exactly one skill of this grammar:

- ``move_to(x, y, z)``: bring the gripper's tool centre point (between the finger pads) to the
  point ``(x, y, z)``, fingers as they are;
- ``push(dx, dy)``: slide the gripper over the table by ``(dx, dy)`` at its current height,
  slowly (1.5 cm per 0.04 s control step), fingers as they are: close them first (``grasp``) to
  push with the pads as a paddle;
- ``grasp``: close the fingers where the gripper is (on the cube if it is between the pads);
- ``release``: open the fingers.

Numbers are centimetres in the table frame, the frame the env's ``text`` observation writes its
positions in: origin at the table's centre, x to the right and y away from the camera (up in the
``front`` image), z up from the table top. A number may carry a ``cm`` suffix; ``grasp()`` and
``release()`` may have empty brackets; names ignore case.

Bad input is rejected, never clipped: a reply that holds no skill or more than one, an unknown
skill, the wrong number of numbers, a word where a number goes, NaN or infinity, a ``move_to``
point outside the gripper's workspace (x and y within +-25 cm, z within 1.2-30 cm; the bounds
are in the reason), a ``push`` longer than the workspace is wide (50 cm per axis), or a reply
longer than the action space (:data:`ACTION_TEXT_MAX_LENGTH` characters). The env then runs the
no-op skill (the gripper holds still for one control step), adds ``invalid_action_penalty`` and
reports ``info["action_valid"] = False`` with the reason in ``info["action_error"]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from omnigym.core.text_actions import (
    ACTION_TEXT_CHARSET,
    ACTION_TEXT_MAX_LENGTH,
    ActionParseError,
    answer_text,
)

CM = 0.01
"""Metres per centimetre: skills are written in centimetres, the physics runs in metres."""
SKILL_ARGS: dict[str, tuple[str, ...]] = {
    "move_to": ("x", "y", "z"),
    "push": ("dx", "dy"),
    "grasp": (),
    "release": (),
}
"""Each skill's parameters, in the order they are written."""
PUSH_LIMIT_CM = 50.0
"""Longest push along each axis (cm): the workspace's width; longer is absurd and rejected."""
_SKILL = re.compile(r"([a-z][a-z0-9_ \-]*?)\s*(?:\((.*)\))?", re.IGNORECASE | re.DOTALL)
_NUMBER = re.compile(r"([+-]?[^\s]+?)\s*(?:cm)?", re.IGNORECASE)


@dataclass(frozen=True)
class Skill:
    """One parsed skill: its name (a key of :data:`SKILL_ARGS`) and its numbers in centimetres."""

    name: str
    args: tuple[float, ...] = ()


NO_OP = Skill("hold")
"""What an invalid reply runs: the gripper holds still for one control step (not writable)."""


def action_space() -> spaces.Text:
    """The single-env action space of ``action_space="text"`` (the games' Text space)."""
    return spaces.Text(max_length=ACTION_TEXT_MAX_LENGTH, min_length=0, charset=ACTION_TEXT_CHARSET)


def describe_skills(low: np.ndarray, high: np.ndarray) -> str:
    """How to answer, for the ``text`` observation; ``low``/``high`` ``[3]`` bound the TCP (m)."""
    (xl, yl, zl), (xh, yh, zh) = np.asarray(low) / CM, np.asarray(high) / CM
    return (
        "Skills, one per answer: move_to(x, y, z) | push(dx, dy) | grasp | release. Centimetres in "
        "the table frame: x right, y away from the camera, z up from the table; move_to places the "
        f"point between the finger pads, x in [{xl:g}, {xh:g}], y in [{yl:g}, {yh:g}], z in "
        f"[{zl:g}, {zh:g}]; push slides the gripper at its height."
    )


def format_skill(skill: Skill) -> str:
    """The canonical text of ``skill`` (what :func:`parse_skill` reads back): 1 mm resolution."""
    if not skill.args:
        return skill.name
    return f"{skill.name}(" + ", ".join(_number_text(value) for value in skill.args) + ")"


def _number_text(value: float) -> str:
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def parse_skill(text: str, low: np.ndarray, high: np.ndarray) -> Skill:
    """Read one reply as a skill; ``low``/``high`` ``[3]`` are the TCP workspace (m).

    Raises:
        ActionParseError: with the reason (see the module docstring).
    """
    answer = answer_text(text, max_length=ACTION_TEXT_MAX_LENGTH)
    if not answer:
        raise ActionParseError("empty action; expected one skill: " + _forms())
    match = _SKILL.fullmatch(answer.rstrip(" .;"))
    if match is None:
        raise ActionParseError(f"{_shown(answer)} is not one skill; expected one of {_forms()}")
    name = re.sub(r"[\s\-]+", "_", match.group(1).strip().lower())
    if name not in SKILL_ARGS:
        raise ActionParseError(f"unknown skill {_shown(name)}; expected one of {_forms()}")
    inner = (match.group(2) or "").strip()
    if "(" in inner or ")" in inner:
        raise ActionParseError(f"one skill per answer, got {_shown(answer)}")
    values = _numbers(name, [part.strip() for part in inner.split(",")] if inner else [])
    _check_range(name, values, low, high)
    return Skill(name, values)


def _forms() -> str:
    return " | ".join(f"{name}({', '.join(args)})" if args else name for name, args in SKILL_ARGS.items())


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _numbers(name: str, parts: list[str]) -> tuple[float, ...]:
    params = SKILL_ARGS[name]
    if len(parts) != len(params):
        form = f"{name}({', '.join(params)})" if params else name
        raise ActionParseError(f"{name} takes {len(params)} numbers, got {len(parts)}; write {form}")
    values = []
    for param, part in zip(params, parts, strict=True):
        match = _NUMBER.fullmatch(part)
        try:
            value = float(match.group(1)) if match else float("")
        except ValueError:
            raise ActionParseError(f"{name}: {param} = {_shown(part)} is not a number") from None
        if not math.isfinite(value):
            raise ActionParseError(f"{name}: {param} = {part} is not finite; write centimetres")
        values.append(value)
    return tuple(values)


def _check_range(name: str, values: tuple[float, ...], low: np.ndarray, high: np.ndarray) -> None:
    if name == "move_to":
        bounds = list(zip(np.asarray(low) / CM, np.asarray(high) / CM, strict=True))
    elif name == "push":
        bounds = [(-PUSH_LIMIT_CM, PUSH_LIMIT_CM)] * 2
    else:
        return
    for param, value, (lo, hi) in zip(SKILL_ARGS[name], values, bounds, strict=True):
        if not lo - 1e-9 <= value <= hi + 1e-9:
            raise ActionParseError(f"{name}: {param} = {value:g} cm is outside [{lo:g}, {hi:g}]")
