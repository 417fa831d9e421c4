"""The tasks a ``hierarchical`` agent knows: sub-goals, instruction, and how their stages are read.

A :class:`SubgoalTask` bundles what the scripted planner, the relabelling of demonstrations and
the defaults of :class:`~omnigym.policies.hierarchical.policy.HierarchicalPolicyConfig` need for
one env: the sub-goal texts in order, the task instruction, the ``state`` width, the stage rule
(with per-row memory for tasks whose stage the state does not show) and the expert whose
demonstrations are relabelled. ``policy.task`` names one of :data:`SUBGOAL_TASKS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from omnigym.policies.hierarchical.subgoals import (
    CUBE_STATE_DIM,
    PICKPLACE_SUBGOALS,
    TWO_STAGE_STATE_DIM,
    TWO_STAGE_SUBGOALS,
    pickplace_subgoals,
    relabel_episodes,
    relabel_two_stage,
    two_stage_subgoals,
)

StageRule = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``(state [B, D], memory [B] bool, updated in place) -> sub-goal indices [B]``."""


@dataclass(frozen=True)
class SubgoalTask:
    """One task's sub-goals and stage rules (see the module docstring)."""

    name: str
    env_id: str
    """The env whose ``state`` the rules read."""
    expert: str
    """Registered scripted expert whose demonstrations :attr:`relabel` labels."""
    subgoals: tuple[str, ...]
    instruction: str
    """The env's ``text`` observation: what a controller without a planner is told."""
    state_dim: int
    stage: StageRule
    """The scripted planner's rule."""
    relabel: Callable[[np.ndarray, np.ndarray], np.ndarray]
    """``(state [N, D], episode_index [N]) -> labels [N]``: the stage each demonstration step was
    taken in."""


def _pickplace_stage(state: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """PickPlace's stage is a function of the state alone (``memory`` is not used)."""
    return pickplace_subgoals(state)


SUBGOAL_TASKS: dict[str, SubgoalTask] = {
    "pickplace": SubgoalTask(
        name="pickplace",
        env_id="omnigym/PickPlace-v0",
        expert="pickplace_expert",
        subgoals=PICKPLACE_SUBGOALS,
        instruction="Pick up the cube and bring it to the red target.",
        state_dim=CUBE_STATE_DIM,
        stage=_pickplace_stage,
        relabel=relabel_episodes,
    ),
    "pushcube_two_stage": SubgoalTask(
        name="pushcube_two_stage",
        env_id="omnigym/PushCubeTwoStage-v0",
        expert="pushcube_two_stage_expert",
        subgoals=TWO_STAGE_SUBGOALS,
        instruction="Push the cube to the blue marker, then to the red target.",
        state_dim=TWO_STAGE_STATE_DIM,
        stage=two_stage_subgoals,
        relabel=relabel_two_stage,
    ),
}
"""The built-in tasks, by ``policy.task`` name."""


def get_task(name: str) -> SubgoalTask:
    """The task called ``name``.

    Raises:
        ValueError: no such task (the message lists them).
    """
    if name not in SUBGOAL_TASKS:
        raise ValueError(f"policy.task {name!r} is not one of {', '.join(SUBGOAL_TASKS)}")
    return SUBGOAL_TASKS[name]
