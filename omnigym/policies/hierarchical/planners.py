"""Planners: policies whose action is a sub-goal in text.

A planner is a :class:`~omnigym.core.policy.Policy` with a ``Text`` action space. Two are built in
(:data:`BUILTIN_PLANNERS`), reading the env's observation directly:

* ``scripted``: the task's sub-goal from the ``state`` by the rule the expert's stages follow
  (:data:`~omnigym.policies.hierarchical.tasks.SUBGOAL_TASKS`: PickPlace's stage at wider
  switching points, :func:`~omnigym.policies.hierarchical.subgoals.pickplace_subgoals`; the
  two-stage push's from whether the cube has been at the marker, remembered per row);
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
from omnigym.policies.hierarchical.tasks import SUBGOAL_TASKS, get_task

PICKPLACE_INSTRUCTION = SUBGOAL_TASKS["pickplace"].instruction
"""``omnigym/PickPlace-v0``'s ``text`` observation: the instruction-only planner's default."""
PROMPT_SPACE = spaces.Text(max_length=1024, min_length=1, charset=string.printable)
"""The ``text`` observation space of a text planner's prompt."""
SUBGOAL_SPACE = spaces.Text(max_length=ACTION_TEXT_MAX_LENGTH, min_length=0, charset=string.printable)
"""A planner's action space: one reply (naming a sub-goal) per row."""


@dataclass
class PlannerConfig(PolicyConfig):
    """A built-in planner's settings."""

    task: str = "pickplace"
    """The task whose stage rule the scripted planner applies (a ``SUBGOAL_TASKS`` name)."""
    subgoals: tuple[str, ...] = ()
    """The sub-goals the scripted rule's indices name, in order (empty: the task's)."""
    instruction: str = ""
    """The instruction planner's text (empty: the task's)."""

    def __post_init__(self) -> None:
        """Fill the task's sub-goals and instruction where none are given."""
        task = get_task(self.task)
        self.subgoals = tuple(self.subgoals) or task.subgoals
        self.instruction = self.instruction or task.instruction


def _texts_step(texts: list[str]) -> PolicyStep:
    """A planner's step: the texts, one part of log-probability 0 per row (not trained by RL)."""
    batch = len(texts)
    return PolicyStep(
        action=texts, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
    )


class ScriptedPlanner(Policy):
    """The task's sub-goal of each row, by the rule of the expert's stages (see the module doc).

    Called with the whole batch at every step (``hierarchical`` does), so a task whose stage
    needs memory (the two-stage push) sees every observation of each row.
    """

    name: ClassVar[str] = "scripted"
    config_class: ClassVar[type[PolicyConfig]] = PlannerConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Text,)
    config: PlannerConfig

    def __init__(
        self, config: PlannerConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self.task = get_task(config.task)
        state = observation_space.spaces.get(OBS_STATE)
        if state is None or tuple(state.shape or ()) != (self.task.state_dim,):
            raise ValueError(
                f"the scripted planner of task {self.task.name!r} reads {self.task.env_id}'s "
                f"{self.task.state_dim}-value 'state' observation; this env observes {observation_space} "
                "(set policy.task to the env's task)"
            )
        if len(config.subgoals) != len(self.task.subgoals):
            raise ValueError(
                f"the scripted planner names {len(self.task.subgoals)} stages of {self.task.name}, got "
                f"{len(config.subgoals)} sub-goals"
            )
        self._memory = np.zeros(0, dtype=bool)

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The sub-goal of each row's state (deterministic either way)."""
        state = np.asarray(torch.as_tensor(obs[OBS_STATE]).cpu(), dtype=np.float64).reshape(
            -1, self.task.state_dim
        )
        if len(self._memory) != len(state):
            self._memory = np.zeros(len(state), dtype=bool)
        index = self.task.stage(state, self._memory)
        return _texts_step([self.config.subgoals[i] for i in index.reshape(-1)])

    def reset(self, done_mask: torch.Tensor | None = None) -> None:
        """Forget the rows' stage memory where ``done_mask`` (all: None)."""
        if done_mask is None:
            self._memory = np.zeros(0, dtype=bool)
            return
        done = np.asarray(torch.as_tensor(done_mask).cpu(), dtype=bool).reshape(-1)
        if done.shape == self._memory.shape:
            self._memory[done] = False
        else:
            self._memory = np.zeros(0, dtype=bool)


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
    "scripted": ScriptedPlanner,
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
        defaults: ``task``, ``subgoals`` and ``instruction`` for a built-in planner whose config
            omits them.

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
