"""What the VLM policy puts in its prompts: system prompts, the episode's past turns, obs texts and images.

The chat itself is assembled by :meth:`omnigym.policies.vlm.policy.VLMPolicy.messages` (its shape
depends on the loaded model); this module holds the parts that do not: the default system prompt
of each env family, each env slot's history of (text, reply) turns between ``act`` calls, and the
reading of a batch's ``text`` (strings or stored UTF-8 rows) and ``image`` keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from omnigym.core.text_obs import decode_texts, is_encoded_text
from omnigym.core.types import OBS_IMAGE, OBS_TEXT, Obs

Turn = tuple[str, str]
"""One past step of an episode: (observation text, the model's reply)."""

GAME_PROMPT = (
    "You are playing a game. Read the rules, the action words and the state. Think briefly inside "
    "<think></think>, then write exactly one action word inside <answer></answer>."
)
GUI_PROMPT = (
    "You operate a graphical user interface from its screenshot and accessibility tree. Write one "
    'call per step: click(x, y), double_click(x, y), type("text"), key("Enter"), scroll(x, y, dy) '
    "or drag(x1, y1, x2, y2), with screenshot pixel coordinates. Think briefly inside "
    "<think></think>, then write the call inside <answer></answer>."
)
DRIVING_PROMPT = (
    "You drive a car from a bird's-eye view and a description of the traffic. Every half second, "
    "answer with a meta action: keep lane, change left, change right or stop, optionally followed "
    "by accelerate, keep speed or decelerate (e.g. keep lane, accelerate); or with a plan of 8 poses "
    "(x, y, heading) in the car's frame at 0.5 s steps, metres forward and left and radians. Think "
    "briefly inside <think></think>, then write the action inside <answer></answer>."
)
MANIPULATION_PROMPT = (
    "You control a robot gripper over a table from a camera image and the positions in the text. "
    "Answer with one skill per step: move_to(x, y, z), push(dx, dy), grasp or release, in "
    "centimetres in the table frame the text uses. Think briefly inside <think></think>, then write "
    "the skill inside <answer></answer>."
)
GENERIC_PROMPT = "Think briefly inside <think></think>, then write your action inside <answer></answer>."


def default_system_prompt(text: str) -> str:
    """The system prompt for an observation text.

    Games' texts start with ``game:``, GUIs' with ``instruction:``, driving's with ``Command:``,
    the manipulation tasks' with ``Task:`` when they take skills (text actions).
    """
    head = text.lstrip().lower()
    if head.startswith("game:"):
        return GAME_PROMPT
    if head.startswith("instruction:"):
        return GUI_PROMPT
    if head.startswith("command:"):  # the driving env's situation text
        return DRIVING_PROMPT
    if head.startswith("task:"):  # the tabletop tasks' text with skill actions
        return MANIPULATION_PROMPT
    return GENERIC_PROMPT


@dataclass
class PromptHistory:
    """Each env slot's past turns in its current episode (one row of the acting batch each).

    ``act`` records its step as *pending* and commits it at the next ``act``, so every prompt built
    between two ``act`` calls (``features``) sees the history that ``act`` used.
    """

    max_turns: int
    turns: list[list[Turn]] = field(default_factory=list)
    """Committed turns per row, oldest first (at most ``max_turns``)."""
    pending: list[Turn | None] = field(default_factory=list)
    """Per row, the last ``act``'s (text, reply), not yet in ``turns``."""

    def rows(self, batch_size: int) -> list[list[Turn]]:
        """The committed turns of ``batch_size`` rows (none for a batch of another size)."""
        if len(self.turns) != batch_size:
            return [[] for _ in range(batch_size)]
        return [list(turns) for turns in self.turns]

    def commit(self, batch_size: int) -> None:
        """Move the pending turns into the history; a new batch size starts every row afresh."""
        if len(self.turns) != batch_size:
            self.turns, self.pending = [[] for _ in range(batch_size)], [None] * batch_size
        for turns, turn in zip(self.turns, self.pending, strict=True):
            if turn is not None:
                turns.append(turn)
                del turns[: max(0, len(turns) - self.max_turns)]
        self.pending = [None] * batch_size

    def record(self, texts: Sequence[str], replies: Sequence[str]) -> None:
        """Hold this step's (text, reply) per row until the next :meth:`commit`."""
        self.pending = list(zip(texts, replies, strict=True))

    def reset(self, done_mask: Tensor | None = None) -> None:
        """Forget the rows where ``done_mask`` ``[B]`` is True (every row when None)."""
        done = None if done_mask is None else torch.as_tensor(done_mask).bool().flatten().tolist()
        if done is None or len(done) != len(self.turns):
            self.turns, self.pending = [], []
            return
        for row in (i for i, is_done in enumerate(done) if is_done):
            self.turns[row], self.pending[row] = [], None


def observation_texts(obs: Obs, obs_keys: Sequence[str]) -> list[str]:
    """The ``B`` observation texts ("" when the prompt has no text key).

    Strings from an env, or the UTF-8 byte rows a rollout stores (:mod:`omnigym.core.text_obs`).
    """
    if OBS_TEXT in obs:
        value: Any = obs[OBS_TEXT]
        if is_encoded_text(value):
            return decode_texts(value)
        return [str(t) for t in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if OBS_TEXT in obs_keys:
        raise KeyError("obs has no 'text' key")
    return [""] * int(obs[OBS_IMAGE].shape[0])


def observation_images(obs: Obs) -> Any:
    """``obs["image"]`` as a CPU uint8 array ``[B, H, W, 3]``."""
    if OBS_IMAGE not in obs:
        raise KeyError("obs has no 'image' key; the policy's obs_keys include 'image'")
    image: Any = obs[OBS_IMAGE]
    return image.detach().cpu().numpy() if isinstance(image, Tensor) else np.asarray(image)
