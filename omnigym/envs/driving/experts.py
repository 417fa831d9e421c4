"""Driving baselines as registered policies: ``constant_velocity``, ``pdm_closed``, ``log_replay``.

``constant_velocity`` needs only the ``state`` observation. The other two need the simulator's
internals (the map and route for PDM-Closed, the log's future for the human), which the env
hands over as *privileged* observation keys when made with ``privileged=[...]``; their
``env_kwargs`` ask for that, so ``omnigym eval --policy pdm_closed`` works on any driving id.
In a text-action env (``action_space="text"``) each writes its plan out (``format_plan``), which
is how ``omnigym collect`` makes text demonstrations for ``omnigym vlm sft``. A fourth,
``pdm_closed_meta`` (text envs only), writes PDM-Closed's plan as the meta action whose plan is
nearest to it: a short answer (``keep lane, decelerate``) that a small model learns from few
demonstrations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_STATE, Obs, PolicyStep
from omnigym.envs.driving.controller import PLAN_POSES, STEPS_PER_POSE
from omnigym.envs.driving.observations import STATE_DIM
from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.text_actions import format_meta_action, format_plan

CONTROL_SHAPE = (2,)
PLAN_SHAPE = (PLAN_POSES, 3)


def _driving_action_kind(action_space: spaces.Space, policy: str) -> str:
    """``control``, ``plan`` or ``text`` (written plans) from a driving env's action space.

    Raises:
        ValueError: not a driving env's action space.
    """
    if isinstance(action_space, spaces.Box) and action_space.shape == CONTROL_SHAPE:
        return "control"
    if isinstance(action_space, spaces.Box) and action_space.shape == PLAN_SHAPE:
        return "plan"
    if isinstance(action_space, spaces.Text):
        return "text"
    raise ValueError(
        f"{policy} drives omnigym driving envs (actions {CONTROL_SHAPE}, {PLAN_SHAPE} or text), "
        f"not {action_space}"
    )


def _deterministic_step(action: Tensor, kind: str = "plan") -> PolicyStep:
    """The step of deterministic actions; in a ``text`` env the plans ``[B, 8, 3]`` written out."""
    batch = action.shape[0]
    written: Any = [format_plan(plan) for plan in action.numpy()] if kind == "text" else action
    return PolicyStep(
        action=written, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
    )


@dataclass
class ConstantVelocityConfig(PolicyConfig):
    """NAVSIM's constant-velocity baseline: keep speed and heading."""

    type: str = "constant_velocity"


class ConstantVelocityPolicy(Policy):
    """Drive straight on at the current speed.

    Plan mode: a straight plan (written out in a text-action env); control mode: no throttle and
    the wheel brought back to centre.
    """

    name: ClassVar[str] = "constant_velocity"
    config_class: ClassVar[type[PolicyConfig]] = ConstantVelocityConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Text)

    def __init__(
        self, config: ConstantVelocityConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        state = observation_space.spaces.get(OBS_STATE)
        if state is None or state.shape != (STATE_DIM,):
            raise ValueError(f"constant_velocity needs the driving env's 'state' key ({STATE_DIM} values)")
        self.kind = _driving_action_kind(action_space, self.name)

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """Constant-velocity actions for a batch."""
        state = obs[OBS_STATE].float()
        speed, steer = state[:, 0], state[:, 2]
        if self.kind == "control":
            return _deterministic_step(torch.stack([torch.zeros_like(speed), -steer / DT], dim=1), self.kind)
        time = torch.arange(1, PLAN_POSES + 1, dtype=torch.float32) * STEPS_PER_POSE * DT
        action = torch.zeros(state.shape[0], PLAN_POSES, 3)
        action[..., 0] = speed[:, None] * time
        return _deterministic_step(action, self.kind)


@dataclass
class PrivilegedExpertConfig(PolicyConfig):
    """An expert whose actions the env computes (see the module docstring)."""

    type: str = ""


class _PrivilegedExpert(Policy):
    """Acts with the action in its privileged observation key."""

    key: ClassVar[str] = ""
    config_class: ClassVar[type[PolicyConfig]] = PrivilegedExpertConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Text)

    def __init__(
        self, config: PolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self.kind = _driving_action_kind(action_space, self.name)
        space = observation_space.spaces.get(self.key)
        shape = PLAN_SHAPE if self.kind == "text" else action_space.shape
        if space is None or space.shape != shape:
            raise ValueError(
                f"{self.name} reads the privileged observation {self.key!r}: make the driving env with "
                f"privileged=['{self.key}'] (omnigym eval does this itself)"
            )

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The env-computed expert actions (written out in a text-action env)."""
        action = torch.as_tensor(np.asarray(obs[self.key]), dtype=torch.float32).clone()
        return _deterministic_step(action, self.kind)


@dataclass
class PDMClosedConfig(PrivilegedExpertConfig):
    """PDM-Closed-like planner (no settings: the proposals are fixed in ``planner.py``)."""

    type: str = "pdm_closed"


@dataclass
class LogReplayConfig(PrivilegedExpertConfig):
    """The logged human."""

    type: str = "log_replay"


class PDMClosedPolicy(_PrivilegedExpert):
    """PDM-Closed-like planner (``planner.pdm_closed_plans``).

    IDM on the route at 5 speeds x 3 lateral offsets, each proposal tracked and PDM-scored, the
    best one driven.
    """

    name: ClassVar[str] = "pdm_closed"
    config_class: ClassVar[type[PolicyConfig]] = PDMClosedConfig
    key: ClassVar[str] = "pdm_closed"
    env_kwargs: ClassVar[dict[str, Any]] = {"privileged": ["pdm_closed"]}


class LogReplayPolicy(_PrivilegedExpert):
    """The logged human driver: its next 4 s as the plan (tracked in control mode)."""

    name: ClassVar[str] = "log_replay"
    config_class: ClassVar[type[PolicyConfig]] = LogReplayConfig
    key: ClassVar[str] = "log_replay"
    env_kwargs: ClassVar[dict[str, Any]] = {"privileged": ["log_replay"]}


@dataclass
class PDMClosedMetaConfig(PrivilegedExpertConfig):
    """PDM-Closed's choice written as a meta action (no settings)."""

    type: str = "pdm_closed_meta"


class PDMClosedMetaPolicy(Policy):
    """PDM-Closed's plan as its nearest meta action (``text_actions.nearest_meta_actions``), in text.

    The teacher of a language model that answers in meta actions; the env's reference controller
    turns the answer back into a plan, so this policy's score is what imitating it perfectly earns.
    """

    name: ClassVar[str] = "pdm_closed_meta"
    config_class: ClassVar[type[PolicyConfig]] = PDMClosedMetaConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Text,)
    env_kwargs: ClassVar[dict[str, Any]] = {"privileged": ["pdm_closed_meta"], "action_space": "text"}

    def __init__(
        self, config: PolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(action_space, spaces.Text):
            raise ValueError(
                "pdm_closed_meta writes meta actions: make the driving env with action_space='text' "
                "(pdm_closed drives Box plan and control envs)"
            )
        space = observation_space.spaces.get("pdm_closed_meta")
        if space is None or space.shape != (2,):
            raise ValueError(
                "pdm_closed_meta reads the privileged observation 'pdm_closed_meta': make the driving env "
                "with privileged=['pdm_closed_meta'] (omnigym eval does this itself)"
            )

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """PDM-Closed's meta actions, written out."""
        indices = np.rint(np.asarray(obs["pdm_closed_meta"])).astype(np.int64)
        batch = indices.shape[0]
        return PolicyStep(
            action=[format_meta_action(int(lat), int(lon)) for lat, lon in indices],
            logprob=torch.zeros(batch, 1),
            mask=torch.ones(batch, 1, dtype=torch.bool),
        )
