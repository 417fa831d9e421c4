"""Sub-goals in text: a task's vocabulary, the relabelling of expert steps, and their embedding.

Instruct-to-Act trains its controller on expert segments relabelled with the instruction of the
segment. For the cube tasks' PickPlace the segments are the stages of the scripted
``pickplace_expert``, whose action is a function of the ``state`` observation alone, so each step's
stage can be read back from the state by the expert's branching rule at the expert's own switching
points (:func:`relabel_episodes`, :data:`EXPERT_TOLERANCES`). The scripted planner applies the same
rule with wider points (:data:`PLANNER_TOLERANCES`): a milestone an imitating controller, less
precise than the expert, can reach. The controller sees a sub-goal
through :func:`embed_text`, a fixed hashed bag of words (no weights), so any text (a vocabulary
entry, a task instruction, a VLM's reply) has an embedding of the same width.

The two-stage push (``omnigym/PushCubeTwoStage-v0``: the blue marker, then the red target) has
two sub-goals, and its stage is not in the state: it is whether the cube has been within 4 cm of
the marker, which :func:`two_stage_subgoals` keeps per row and :func:`relabel_two_stage` reads
from each episode's past.

The cube tasks' ``state`` layout (the observation convention of ``omnigym/PushCube-v0`` and
``omnigym/PickPlace-v0``; policies read observations, not env modules): TCP position (0:3), TCP
velocity (3:6), finger-pad gap (6), goal (7:10), cube position (10:13), cube orientation (13:17),
cube velocity (17:20), cube angular velocity (20:23); metres. ``omnigym/PushCubeTwoStage-v0``
appends the marker's position (23:26).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from omnigym.core.text_actions import ActionParseError, answer_text, normalize_word

CUBE_STATE_DIM = 23
"""Width of the cube tasks' ``state`` observation."""
TCP, GAP, GOAL, CUBE = slice(0, 3), 6, slice(7, 10), slice(10, 13)
"""Indices of the cube tasks' ``state`` read here (see the module docstring)."""

PICKPLACE_SUBGOALS = (
    "move above the cube",
    "lower onto the cube",
    "grasp the cube",
    "carry the cube to the target",
)
"""PickPlace's sub-goals, in the order an episode goes through them."""
MOVE_ABOVE, LOWER, GRASP, CARRY = range(4)

TWO_STAGE_STATE_DIM = CUBE_STATE_DIM + 3
WAYPOINT = slice(CUBE_STATE_DIM, TWO_STAGE_STATE_DIM)
"""The two-stage push's marker position in its ``state``."""
TWO_STAGE_SUBGOALS = ("push the cube to the blue marker", "push the cube to the red target")
"""The two-stage push's sub-goals, in order."""
MARKER_REACHED = 0.04
"""Cube-marker distance (m) at which the two-stage push counts the marker as reached (the env's
default ``success_distance``)."""

HOLDING_GAP = 2 * 0.02 + 0.006
"""Pad gap (m) below which closed pads hold the 4 cm cube (its edge plus 6 mm)."""


@dataclass(frozen=True)
class Tolerances:
    """Where one PickPlace stage ends and the next begins (m)."""

    aligned_xy: float
    """TCP-cube distance in the table plane within which the gripper is to lower onto the cube."""
    at_cube_xy: float
    """TCP-cube distance in the plane within which the pads are around the cube..."""
    at_cube_z: float
    """...and TCP-cube height difference."""


EXPERT_TOLERANCES = Tolerances(aligned_xy=0.008, at_cube_xy=0.01, at_cube_z=0.012)
"""The expert's own switching points: its demonstrations are relabelled at these."""
PLANNER_TOLERANCES = Tolerances(aligned_xy=0.02, at_cube_xy=0.015, at_cube_z=0.02)
"""The scripted planner's: wider, so that an imitating controller, less precise than the expert,
reaches each milestone (at the expert's own the controller hovered short of them)."""

EMBEDDING_DIM = 32
"""Default width of :func:`embed_text`."""


def pickplace_subgoals(state: np.ndarray, tolerances: Tolerances = PLANNER_TOLERANCES) -> np.ndarray:
    """The PickPlace sub-goal index of each state: the stage ``pickplace_expert`` is in there.

    The expert's branches, in its order: pads around the cube and closed on it (``HOLDING_GAP``)
    -> carry; pads around it -> grasp; TCP farther than ``aligned_xy`` from the cube in the plane
    -> move above; else lower onto it.

    Args:
        state: cube-task states. Shape: [B, 23] (or [23]).
        tolerances: the switching points (the planner's by default; :func:`relabel_episodes` uses
            the expert's).

    Returns:
        Indices into :data:`PICKPLACE_SUBGOALS`. Shape: [B] (or a 0-d array).
    """
    state = np.asarray(state, dtype=np.float64)
    if state.shape[-1] != CUBE_STATE_DIM:
        raise ValueError(
            f"PickPlace sub-goals read the cube tasks' {CUBE_STATE_DIM}-value state, got {state.shape}"
        )
    offset = state[..., CUBE] - state[..., TCP]
    plane = np.linalg.norm(offset[..., :2], axis=-1)
    at_cube = (plane < tolerances.at_cube_xy) & (np.abs(offset[..., 2]) < tolerances.at_cube_z)
    holding = at_cube & (state[..., GAP] < HOLDING_GAP)
    index = np.where(plane > tolerances.aligned_xy, MOVE_ABOVE, LOWER)
    index = np.where(at_cube, GRASP, index)
    return np.where(holding, CARRY, index).astype(np.int64)


def relabel_episodes(
    state: np.ndarray,
    episode_index: np.ndarray,
    min_steps: int = 1,
    tolerances: Tolerances = EXPERT_TOLERANCES,
) -> np.ndarray:
    """Sub-goal labels of flattened expert steps, with segments shorter than ``min_steps`` merged.

    Each step gets :func:`pickplace_subgoals` at ``tolerances`` (by default the expert's own
    switching points, so each segment is what the expert did); a run of fewer than ``min_steps`` equal labels
    inside an episode (a one-step flicker at a threshold) takes the label of the run before it, so
    the controller learns from segments, not from threshold noise.

    Shapes: state [N, 23]; episode_index [N]; returns [N].
    """
    labels = pickplace_subgoals(state, tolerances)
    episode_index = np.asarray(episode_index)
    if len(labels) != len(episode_index):
        raise ValueError(f"{len(labels)} states but {len(episode_index)} episode indices")
    if min_steps <= 1:
        return labels
    out = labels.copy()
    start = 0
    for i in range(1, len(out) + 1):
        if i < len(out) and out[i] == out[start] and episode_index[i] == episode_index[start]:
            continue
        same_episode = start > 0 and episode_index[start - 1] == episode_index[start]
        if i - start < min_steps and same_episode:
            out[start:i] = out[start - 1]
        start = i
    return out


def two_stage_subgoals(state: np.ndarray, reached: np.ndarray) -> np.ndarray:
    """The two-stage push's sub-goal index of each row, updating ``reached`` in place.

    Args:
        state: two-stage states. Shape: [B, 26].
        reached: per row, whether the cube has been at the marker this episode (memory the
            caller keeps between steps and clears at episode starts). Shape: [B], bool.

    Returns:
        0 (to the marker) until the cube has been within ``MARKER_REACHED`` of it, then 1. Shape: [B].
    """
    state = np.asarray(state, dtype=np.float64)
    if state.ndim != 2 or state.shape[-1] != TWO_STAGE_STATE_DIM:
        raise ValueError(
            f"two-stage sub-goals read the two-stage push's {TWO_STAGE_STATE_DIM}-value state, "
            f"got {state.shape}"
        )
    reached |= np.linalg.norm(state[:, CUBE] - state[:, WAYPOINT], axis=1) < MARKER_REACHED
    return reached.astype(np.int64)


def relabel_two_stage(state: np.ndarray, episode_index: np.ndarray) -> np.ndarray:
    """Sub-goal labels of flattened two-stage demonstration steps: 1 from the first step at the marker.

    A step's label is the stage the expert acted in: whether the cube had been within
    ``MARKER_REACHED`` of the marker at that step or any earlier one of its episode.

    Shapes: state [N, 26]; episode_index [N]; returns [N].
    """
    state = np.asarray(state, dtype=np.float64)
    episode_index = np.asarray(episode_index)
    if len(state) != len(episode_index):
        raise ValueError(f"{len(state)} states but {len(episode_index)} episode indices")
    at_marker = np.linalg.norm(state[:, CUBE] - state[:, WAYPOINT], axis=1) < MARKER_REACHED
    labels = np.zeros(len(state), dtype=np.int64)
    reached, previous = False, None
    for i, (episode, here) in enumerate(zip(episode_index.tolist(), at_marker.tolist(), strict=True)):
        if episode != previous:
            reached, previous = False, episode
        reached = reached or here
        labels[i] = reached
    return labels


def embed_text(texts: str | Sequence[str], dim: int = EMBEDDING_DIM) -> np.ndarray:
    """A fixed embedding of texts: a signed hashed bag of their words, L2-normalised.

    Each word (lower case, punctuation stripped) adds +-1 at ``crc32(word) mod dim`` (sign from
    another bit of the hash; the hashing trick of Weinberger et al., 2009). Deterministic across
    processes and machines, and free of weights, so a saved controller's conditioning never
    drifts. A text without words embeds as zeros.

    Returns:
        float32 embeddings. Shape: [B, dim] (or [dim] for one string).
    """
    if dim < 1:
        raise ValueError(f"embedding dim must be >= 1, got {dim}")
    single = isinstance(texts, str)
    rows = [texts] if isinstance(texts, str) else list(texts)
    out = np.zeros((len(rows), dim), dtype=np.float32)
    for i, text in enumerate(rows):
        for word in normalize_word(str(text)).split():
            word = word.strip("\"'`.,;!?()[]{}:")
            if not word:
                continue
            digest = zlib.crc32(word.encode())
            out[i, digest % dim] += 1.0 if (digest >> 16) & 1 else -1.0
        norm = float(np.linalg.norm(out[i]))
        if norm > 0:
            out[i] /= norm
    return out[0] if single else out


class SubgoalVocabulary:
    """A planner's sub-goals: the texts it may emit, parsed from free replies.

    Args:
        words: the sub-goals, in order (distinct after :func:`normalize_word`).
    """

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(normalize_word(w) for w in words)
        if not self.words or len(set(self.words)) != len(self.words):
            raise ValueError(f"a sub-goal vocabulary needs distinct, non-empty entries, got {tuple(words)}")
        self._index = {word: i for i, word in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def parse(self, reply: str) -> int:
        """The index of the sub-goal a reply names (its ``<answer>`` part, case and quotes ignored).

        Raises:
            ActionParseError: the reply names no sub-goal of the vocabulary.
        """
        answer = normalize_word(answer_text(reply))
        if answer not in self._index:
            raise ActionParseError(
                f"{answer[:60]!r} is not a sub-goal; answer one of: {' | '.join(self.words)}"
            )
        return self._index[answer]

    def check_embeddings(self, dim: int) -> None:
        """Refuse a width at which two sub-goals embed alike (the controller could not tell them apart)."""
        vectors = embed_text(self.words, dim)
        for i in range(len(vectors)):
            for j in range(i):
                if np.allclose(vectors[i], vectors[j], atol=1e-6):
                    raise ValueError(
                        f"sub-goals {self.words[j]!r} and {self.words[i]!r} embed alike at embedding_dim "
                        f"{dim}: choose another width"
                    )


def describe_cube_state(state: np.ndarray) -> str:
    """A cube-task state in words (cm), for a text planner's prompt. Shape: state [23] or [26]."""
    cm = np.round(np.asarray(state, dtype=np.float64) * 100).astype(int)
    gripper, cube, goal = (tuple(int(v) for v in cm[part]) for part in (TCP, CUBE, GOAL))
    text = f"gripper at {gripper} cm, opening {int(cm[GAP])} cm; cube at {cube} cm; target at {goal} cm"
    if len(cm) == TWO_STAGE_STATE_DIM:
        text += f"; blue marker at {tuple(int(v) for v in cm[WAYPOINT])} cm"
    return text


def planner_prompt(instruction: str, vocabulary: SubgoalVocabulary, current: str, scene: str = "") -> str:
    """The text a planner reads: the task, the sub-goals to choose from, the current one, the scene.

    ``scene``: the state in words (:func:`describe_cube_state`); empty where the env has none.
    """
    lines = [
        f"instruction: {instruction}",
        f"sub-goals: {' | '.join(vocabulary.words)}",
        f"current sub-goal: {current}",
    ]
    if scene:
        lines.append(f"scene: {scene}")
    lines.append("Answer with the next sub-goal as <answer>sub-goal</answer>.")
    return "\n".join(lines)
