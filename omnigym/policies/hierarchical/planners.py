"""Planners: policies whose action is a sub-goal in text.

A planner is a :class:`~omnigym.core.policy.Policy` with a ``Text`` action space. Two are built in
(:data:`BUILTIN_PLANNERS`), reading the env's observation directly:

* ``scripted``: PickPlace's sub-goal from the ``state`` by the rule the expert's stages follow, at
  wider switching points (:func:`~omnigym.policies.hierarchical.subgoals.pickplace_subgoals`);
* ``instruction``: always the task instruction, so the controller is conditioned on the
  instruction alone (the flat baseline of the same controller).

Any registered policy that acts in ``Text`` spaces (``vlm``) is a planner too; it reads the text
prompt of :func:`~omnigym.policies.hierarchical.subgoals.planner_prompt` (the one the planner env
shows it while GRPO trains it) and its reply is parsed against the vocabulary.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.text_actions import ACTION_TEXT_MAX_LENGTH
from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT, Obs, PolicyStep
from omnigym.policies.hierarchical.subgoals import CUBE_STATE_DIM, PICKPLACE_SUBGOALS, pickplace_subgoals

PICKPLACE_INSTRUCTION = "Pick up the cube and bring it to the red target."
"""``omnigym/PickPlace-v0``'s ``text`` observation: the instruction-only planner's default."""
PROMPT_SPACE = spaces.Text(max_length=1024, min_length=1, charset=string.printable)
"""The ``text`` observation space of a text planner's prompt."""
SUBGOAL_SPACE = spaces.Text(max_length=ACTION_TEXT_MAX_LENGTH, min_length=0, charset=string.printable)
"""A planner's action space: one reply (naming a sub-goal) per row."""


@dataclass
class PlannerConfig(PolicyConfig):
    """A built-in planner's settings."""

    subgoals: tuple[str, ...] = PICKPLACE_SUBGOALS
    """The sub-goals the scripted rule's indices name, in order."""
    instruction: str = PICKPLACE_INSTRUCTION
    """The instruction planner's text (also a text planner's task in its prompt)."""


def _texts_step(texts: list[str]) -> PolicyStep:
    """A planner's step: the texts, one part of log-probability 0 per row (not trained by RL)."""
    batch = len(texts)
    return PolicyStep(
        action=texts, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
    )


class ScriptedPickPlacePlanner(Policy):
    """PickPlace's sub-goal of each state, by the rule of the expert's stages (see the module doc)."""

    name: ClassVar[str] = "scripted"
    config_class: ClassVar[type[PolicyConfig]] = PlannerConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Text,)
    config: PlannerConfig

    def __init__(
        self, config: PlannerConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        state = observation_space.spaces.get(OBS_STATE)
        if state is None or tuple(state.shape or ()) != (CUBE_STATE_DIM,):
            raise ValueError(
                f"the scripted planner reads the cube tasks' {CUBE_STATE_DIM}-value 'state' observation "
                f"(omnigym/PickPlace-v0); this env observes {observation_space}"
            )
        if len(config.subgoals) != len(PICKPLACE_SUBGOALS):
            raise ValueError(
                f"the scripted planner names {len(PICKPLACE_SUBGOALS)} PickPlace stages, got "
                f"{len(config.subgoals)} sub-goals"
            )

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The sub-goal of each row's state (deterministic either way)."""
        index = pickplace_subgoals(np.asarray(torch.as_tensor(obs[OBS_STATE]).cpu(), dtype=np.float64))
        return _texts_step([self.config.subgoals[i] for i in index.reshape(-1)])


class InstructionPlanner(Policy):
    """The task instruction as every row's sub-goal: the controller is told only the task."""

    name: ClassVar[str] = "instruction"
    config_class: ClassVar[type[PolicyConfig]] = PlannerConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Text,)
    config: PlannerConfig

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """``config.instruction`` for each row."""
        return _texts_step([self.config.instruction] * batch_size(obs))


BUILTIN_PLANNERS: dict[str, type[Policy]] = {
    "scripted": ScriptedPickPlacePlanner,
    "instruction": InstructionPlanner,
}
"""Planners that read the env's observation; any other name is a registered text policy."""


def batch_size(obs: Obs) -> int:
    """Rows of a batch of observations (any key)."""
    value = next(iter(obs.values()))
    return len(value)


def prompt_space(observation_space: spaces.Dict, with_image: bool) -> spaces.Dict:
    """What a text planner observes: the prompt (and the env's image where it reads one)."""
    keys: dict[str, spaces.Space] = {OBS_TEXT: PROMPT_SPACE}
    if with_image and OBS_IMAGE in observation_space.spaces:
        keys[OBS_IMAGE] = observation_space[OBS_IMAGE]
    return spaces.Dict(keys)


def build_planner(
    kind: str, path: str, config: dict[str, Any], observation_space: spaces.Dict, defaults: dict[str, Any]
) -> tuple[Policy, bool]:
    """The planner a ``hierarchical`` config names, and whether it reads text prompts.

    Args:
        kind: a :data:`BUILTIN_PLANNERS` name or a registered text policy (``vlm``).
        path: a saved text policy to load instead (``save_pretrained`` folder); empty: none.
        config: the planner's config fields.
        observation_space: the env's observation space.
        defaults: ``subgoals`` and ``instruction`` for a built-in planner whose config omits them.

    Raises:
        ValueError: an unknown kind, or a policy that does not act in text.
    """
    from omnigym.core.config import build_dataclass
    from omnigym.core.registry import POLICIES

    if path:
        if not Path(path).exists():
            raise FileNotFoundError(f"policy.planner_path {path!r} does not exist")
        planner = Policy.from_pretrained(path)
    elif kind in BUILTIN_PLANNERS:
        cls = BUILTIN_PLANNERS[kind]
        built = build_dataclass(
            PlannerConfig, {**defaults, **config, "type": kind}, path="policy.planner_config"
        )
        return cls(built, observation_space, SUBGOAL_SPACE), False
    else:
        if kind not in POLICIES:
            raise ValueError(
                f"policy.planner {kind!r} is neither a built-in planner ({', '.join(BUILTIN_PLANNERS)}) "
                "nor a registered policy"
            )
        cls = POLICIES.get(kind)
        built = build_dataclass(cls.config_class, {**config, "type": kind}, path="policy.planner_config")
        with_image = OBS_IMAGE in tuple(getattr(built, "obs_keys", ()))
        planner = cls(built, prompt_space(observation_space, with_image), SUBGOAL_SPACE)
    if not isinstance(planner.action_space, spaces.Text):
        raise ValueError(f"a planner acts in text; {type(planner).__name__} acts in {planner.action_space}")
    return planner, True
