"""Text actions: pulling the answer out of a model's reply and parsing it with a word grammar.

Language-model policies answer in free text (a thought, then the action). Every env with text
actions reads the *answer* part the same way (:func:`answer_text`), and games whose actions are a
small vocabulary (``up|down|left|right``, ``hit|stand``, an Atari action set) parse it with a
:class:`WordGrammar`. A reply that does not parse raises :class:`ActionParseError`, which the env
turns into a defined outcome (``info["action_valid"] = False`` and a penalty), never a crash.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

ACTION_TEXT_MAX_LENGTH = 512
"""Longest text action any game's ``Text`` action space holds (a thought and an answer)."""
ACTION_TEXT_CHARSET = string.printable
"""Characters a text action may use."""

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ACTION_FIELD = re.compile(r"[\"']action[\"']\s*:\s*[\"']([^\"']*)[\"']", re.IGNORECASE)
_SEPARATORS = re.compile(r"\s*(?:\|\||,|;|\n)\s*")


class ActionParseError(ValueError):
    """A text action that the env's grammar cannot read; the message says why."""


def answer_text(text: str, max_length: int | None = None) -> str:
    """The answer part of a model's reply.

    The content of the last ``<answer>...</answer>`` tag (RAGEN's format), else the value of the
    last ``"action": "..."`` field (RL4VLM's JSON format), else the whole text; stripped. A reply
    longer than ``max_length`` characters (the action space's) is refused, not cut.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"a text action must be a str, got {type(text).__name__}")
    if max_length is not None and len(text) > max_length:
        raise ActionParseError(f"reply of {len(text)} characters, at most {max_length} allowed")
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return str(tags[-1]).strip()
    fields = _ACTION_FIELD.findall(text)
    if fields:
        return str(fields[-1]).strip()
    return text.strip()


def normalize_word(word: str) -> str:
    """Lower case, inner whitespace collapsed, surrounding quotes/brackets/punctuation dropped."""
    return " ".join(word.strip().strip("\"'`.!()[]{}:").lower().split())


class WordGrammar:
    """A vocabulary of action words, each naming one discrete action index.

    Matching ignores case, surrounding quotes and punctuation. ``aliases`` add other spellings
    (``"u"`` for ``"up"``). With ``max_actions > 1`` an answer may list several actions separated
    by ``,``, ``;``, ``||`` or new lines (RAGEN's multi-action turns); they are applied in order.

    Args:
        words: the canonical word of each action, by index.
        aliases: extra spelling -> canonical word.
        max_actions: most actions one answer may hold.
    """

    def __init__(
        self, words: Sequence[str], aliases: Mapping[str, str] | None = None, max_actions: int = 1
    ) -> None:
        if max_actions < 1:
            raise ValueError(f"max_actions must be >= 1, got {max_actions}")
        self.words = tuple(normalize_word(word) for word in words)
        if len(set(self.words)) != len(self.words):
            raise ValueError(f"action words must be distinct, got {self.words}")
        self._index = {word: i for i, word in enumerate(self.words)}
        for alias, word in (aliases or {}).items():
            key = normalize_word(word)
            if key not in self._index:
                raise ValueError(f"alias {alias!r} names {word!r}, which is not an action word")
            self._index.setdefault(normalize_word(alias), self._index[key])
        self.max_actions = max_actions

    @property
    def num_actions(self) -> int:
        """How many distinct actions the vocabulary names."""
        return len(self.words)

    def word(self, index: int) -> str:
        """The canonical text of action ``index``."""
        return self.words[index]

    def describe(self) -> str:
        """The vocabulary as a prompt line: ``up | down | left | right``."""
        return " | ".join(self.words)

    def parse(self, text: str) -> list[int]:
        """The action indices ``text`` names, in order.

        Raises:
            ActionParseError: empty answer, an unknown word, or more than ``max_actions``.
        """
        answer = answer_text(text)
        if not answer:
            raise ActionParseError("empty action; expected one of " + self.describe())
        parts = [part for part in _SEPARATORS.split(answer) if part.strip()]
        if len(parts) > self.max_actions:
            raise ActionParseError(f"{len(parts)} actions given, at most {self.max_actions} allowed")
        indices = []
        for part in parts:
            index = self._index.get(normalize_word(part))
            if index is None:
                shown = part if len(part) <= 40 else part[:37] + "..."
                raise ActionParseError(f"unknown action {shown!r}; expected one of {self.describe()}")
            indices.append(index)
        return indices
