"""The text action grammar of the GUI envs, parsed into a structured :class:`GUIAction`.

A VLM policy writes one call per step::

    click(120, 45)          double_click(x, y)       type("alice")
    key("Enter")            scroll(x, y, dy)          drag(x1, y1, x2, y2)

Coordinates are screenshot pixels (numbers with a fraction are rounded); strings take single
or double quotes with backslash escapes. Anything else raises :class:`ActionParseError`, which
the env turns into ``info["action_valid"] = False`` and a penalty, so a malformed generation is an
outcome to learn from, never a crash. The grammar knows nothing of screens: a browser adapter
reuses :func:`parse_action` and maps :class:`GUIAction` onto its own driver.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from omnigym.core.text_actions import ActionParseError, answer_text

ActionKind = Literal["click", "double_click", "type", "key", "scroll", "drag"]
ACTION_KINDS: tuple[ActionKind, ...] = ("click", "double_click", "type", "key", "scroll", "drag")
"""The action kinds in the order of the structured space's ``kind`` index."""

ACTION_CHARSET = string.printable
"""Characters of the env's ``Text`` action space: printable ASCII and whitespace."""
ACTION_MAX_LENGTH = 256
"""Longest action text accepted; longer texts are invalid without being scanned."""
KEYS: tuple[str, ...] = (
    "Enter", "Tab", "Shift+Tab", "Backspace", "Delete", "Escape", "Space",
    "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End",
)  # fmt: skip
"""Key names in the order of the structured space's ``key`` index."""
KEY_NAMES = frozenset(KEYS)
"""Key names ``key(...)`` accepts (DOM ``KeyboardEvent.key`` spelling, case-insensitive)."""
_KEYS_BY_LOWER = {name.lower(): name for name in KEY_NAMES}

# Argument kinds per action: "n" a number, "s" a string.
_SIGNATURES: dict[str, str] = {
    "click": "nn",
    "double_click": "nn",
    "type": "s",
    "key": "s",
    "scroll": "nnn",
    "drag": "nnnn",
}
_CALL = re.compile(r"\s*([A-Za-z_]+)\s*\((.*)\)\s*;?\s*", re.DOTALL)
_ARG = re.compile(
    r"""\s*(?:(?P<num>[-+]?\d{1,9}(?:\.\d*)?)|"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>(?:[^'\\]|\\.)*)')\s*""",
    re.DOTALL,
)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t"}


@dataclass(frozen=True)
class GUIAction:
    """One structured GUI action.

    Attributes:
        kind: which action.
        x, y: pointer position (click, double_click, scroll) or drag start, pixels.
        x2, y2: drag end, pixels.
        dy: scroll amount in pixels, positive scrolls the content up (shows what is below).
        text: the string typed, or the key name (canonical spelling).
    """

    kind: ActionKind
    x: int = 0
    y: int = 0
    x2: int = 0
    y2: int = 0
    dy: int = 0
    text: str = ""

    def points(self) -> tuple[tuple[int, int], ...]:
        """The screen points the action touches (none for ``type`` and ``key``)."""
        if self.kind in ("click", "double_click", "scroll"):
            return ((self.x, self.y),)
        if self.kind == "drag":
            return ((self.x, self.y), (self.x2, self.y2))
        return ()

    def to_text(self) -> str:
        """The action in the grammar (``parse_action(a.to_text()) == a``)."""
        if self.kind in ("type", "key"):
            escaped = self.text.replace("\\", "\\\\").replace('"', '\\"')
            escaped = escaped.replace("\n", "\\n").replace("\t", "\\t")
            return f'{self.kind}("{escaped}")'
        numbers = {
            "click": (self.x, self.y),
            "double_click": (self.x, self.y),
            "scroll": (self.x, self.y, self.dy),
            "drag": (self.x, self.y, self.x2, self.y2),
        }[self.kind]
        return f"{self.kind}({', '.join(str(n) for n in numbers)})"

    def to_structured(self) -> dict[str, Any]:
        """The action as a sample of the structured action space (unused fields 0 or "")."""
        return {
            "kind": ACTION_KINDS.index(self.kind),
            "x": np.int64(self.x),
            "y": np.int64(self.y),
            "x2": np.int64(self.x2),
            "y2": np.int64(self.y2),
            "dy": np.int64(self.dy),
            "text": self.text if self.kind == "type" else "",
            "key": KEYS.index(self.text) if self.kind == "key" else 0,
        }

    @classmethod
    def from_structured(cls, action: object, max_length: int = ACTION_MAX_LENGTH) -> GUIAction:
        """The action a sample of the structured action space stands for.

        ``action`` is a mapping with ``kind`` (index into :data:`ACTION_KINDS`) and the fields
        that kind uses: ``x``, ``y`` (click, double_click, scroll, drag), ``x2``, ``y2`` (drag),
        ``dy`` (scroll), ``text`` (type), ``key`` (index into :data:`KEYS`). Numbers may be
        Python or NumPy scalars or one-element arrays; fractions are rounded. Fields the kind
        does not use are ignored. Screen bounds are the env's to check.

        Raises:
            ActionParseError: on a missing field, an index out of range or a value of the
                wrong type, as :func:`parse_action` does for malformed text.
        """
        if not isinstance(action, Mapping):
            raise ActionParseError(f"structured action must be a mapping, got {type(action).__name__}")
        kind = ACTION_KINDS[_index(action, "kind", len(ACTION_KINDS))]
        if kind == "type":
            text = action.get("text")
            if not isinstance(text, str):
                raise ActionParseError(f"type needs a str 'text', got {type(text).__name__}")
            if len(text) > max_length:
                raise ActionParseError(f"text is {len(text)} characters, more than {max_length}")
            return cls(kind="type", text=text)
        if kind == "key":
            return cls(kind="key", text=KEYS[_index(action, "key", len(KEYS))])
        x, y = _number(action, "x"), _number(action, "y")
        if kind == "scroll":
            return cls(kind="scroll", x=x, y=y, dy=_number(action, "dy"))
        if kind == "drag":
            return cls(kind="drag", x=x, y=y, x2=_number(action, "x2"), y2=_number(action, "y2"))
        return cls(kind=kind, x=x, y=y)


_MAX_NUMBER = 10**9


def _scalar(action: Mapping[Any, Any], name: str) -> float:
    if name not in action:
        raise ActionParseError(f"structured action lacks {name!r}")
    value = action[name]
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ActionParseError(f"{name!r} must be a number, got {type(value).__name__}")
    if not abs(value) < _MAX_NUMBER:  # also rejects nan
        raise ActionParseError(f"{name!r} is out of range: {value}")
    return value


def _number(action: Mapping[Any, Any], name: str) -> int:
    return round(_scalar(action, name))


def _index(action: Mapping[Any, Any], name: str, n: int) -> int:
    value = _scalar(action, name)
    if value != int(value) or not 0 <= value < n:
        raise ActionParseError(f"{name!r} must be an index in 0..{n - 1}, got {value}")
    return int(value)


def _unescape(body: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _split_args(body: str) -> list[int | str]:
    """The comma-separated numbers and strings of a call's argument list."""
    args: list[int | str] = []
    pos = 0
    if not body.strip():
        return args
    while True:
        match = _ARG.match(body, pos)
        if match is None:
            raise ActionParseError(f"bad argument at {body[pos : pos + 20]!r}")
        if match.group("num") is not None:
            args.append(round(float(match.group("num"))))
        else:
            quoted = match.group("dq") if match.group("dq") is not None else match.group("sq")
            args.append(_unescape(quoted))
        pos = match.end()
        if pos == len(body):
            return args
        if body[pos] != ",":
            raise ActionParseError(f"expected ',' at {body[pos : pos + 20]!r}")
        pos += 1


def parse_action(text: object, max_length: int = ACTION_MAX_LENGTH) -> GUIAction:
    """Parse one action text.

    Args:
        text: the policy's output (``str``; anything else is an error).
        max_length: longest text accepted.

    Returns:
        The structured action.

    Raises:
        ActionParseError: when ``text`` is not one call of the grammar with the right arguments.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"action must be a str, got {type(text).__name__}")
    if len(text) > max_length:
        raise ActionParseError(f"action is {len(text)} characters, more than {max_length}")
    call = _CALL.fullmatch(text)
    if call is None:
        raise ActionParseError("expected one call such as click(x, y)")
    name = call.group(1).lower()
    signature = _SIGNATURES.get(name)
    if signature is None:
        raise ActionParseError(f"unknown action {call.group(1)!r}; known: {', '.join(_SIGNATURES)}")
    args = _split_args(call.group(2))
    kinds = "".join("s" if isinstance(arg, str) else "n" for arg in args)
    if kinds != signature:
        wanted = ", ".join("number" if k == "n" else "string" for k in signature)
        raise ActionParseError(f"{name} takes ({wanted})")
    if name in ("type", "key"):
        (value,) = args
        assert isinstance(value, str)
        if name == "key":
            canonical = _KEYS_BY_LOWER.get(value.strip().lower())
            if canonical is None:
                raise ActionParseError(f"unknown key {value!r}; known: {', '.join(sorted(KEY_NAMES))}")
            value = canonical
        return GUIAction(kind=name, text=value)  # type: ignore[arg-type]
    numbers = [int(arg) for arg in args]
    if name == "scroll":
        return GUIAction(kind="scroll", x=numbers[0], y=numbers[1], dy=numbers[2])
    if name == "drag":
        return GUIAction(kind="drag", x=numbers[0], y=numbers[1], x2=numbers[2], y2=numbers[3])
    return GUIAction(kind=name, x=numbers[0], y=numbers[1])  # type: ignore[arg-type]


def parse_on_screen(text: object, width: int, height: int) -> tuple[GUIAction | None, str]:
    """``text`` (a reply: its ``<answer>`` part when tagged) parsed, with every point on the screen.

    The shared first step of the envs that take the GUI grammar in a browser (MiniWoB++,
    BrowserGym): a malformed action or one pointing off the ``width x height`` screen is a defined
    no-op (None and why), not an error.
    """
    try:
        parsed = parse_action(answer_text(text) if isinstance(text, str) else text)
    except ActionParseError as exc:
        return None, str(exc)
    if not all(0 <= x < width and 0 <= y < height for x, y in parsed.points()):
        return None, f"point off the {width}x{height} screen"
    return parsed, ""


def copy_observation(obs: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an observation whose arrays the caller may keep or change (Gymnasium's rule)."""
    return {key: value.copy() if isinstance(value, np.ndarray) else value for key, value in obs.items()}
