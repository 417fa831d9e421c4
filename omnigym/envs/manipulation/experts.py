"""Scripted experts for the manipulation tasks, as registered policies.

``pusht_expert``, ``reach_expert``, ``pushcube_expert`` and ``pickplace_expert`` read the privileged
``state`` observation (object and goal poses; layouts in ``pusht.py``, ``tabletop.py`` and
``cube.py``) and need no other key, so they drive the state and the pixel variants alike. They
are deterministic functions of the observation; acting with ``deterministic=False`` adds Gaussian
noise of ``noise_std`` to the [-1, 1] actions (diverse demonstrations for imitation learning,
``omnigym collect --stochastic``). Success rates are measured in ``tests/envs/manipulation``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_STATE, Obs, PolicyStep
from omnigym.envs.manipulation import cube, pusht, tabletop
from omnigym.envs.manipulation.pushing import PushPlanner


@dataclass
class ExpertConfig(PolicyConfig):
    """A scripted expert's settings."""

    noise_std: float = 0.1
    """Standard deviation of the Gaussian noise added to the [-1, 1] actions when acting
    stochastically (0.1 is 5 mm of gripper travel per step on the tabletop tasks)."""


@dataclass
class PushTExpertConfig(ExpertConfig):
    """``pusht_expert``; its actions are absolute positions, so its noise is smaller."""

    type: str = "pusht_expert"
    noise_std: float = 0.01
    """0.01 is 3.8 mm of pusher target."""


@dataclass
class ReachExpertConfig(ExpertConfig):
    """``reach_expert``."""

    type: str = "reach_expert"


@dataclass
class PushCubeExpertConfig(ExpertConfig):
    """``pushcube_expert``."""

    type: str = "pushcube_expert"


@dataclass
class PickPlaceExpertConfig(ExpertConfig):
    """``pickplace_expert``."""

    type: str = "pickplace_expert"


class ScriptedExpert(Policy):
    """Base of the experts: checks the spaces, turns states into actions, adds the noise."""

    config: ExpertConfig
    config_class: ClassVar[type[PolicyConfig]] = ExpertConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    state_dim: ClassVar[int] = 0
    action_dim: ClassVar[int] = 0

    def __init__(
        self, config: ExpertConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        state = observation_space.spaces.get(OBS_STATE)
        if state is None or state.shape != (self.state_dim,):
            raise ValueError(f"{self.name} reads the task's 'state' observation ({self.state_dim} values)")
        if not isinstance(action_space, spaces.Box) or action_space.shape != (self.action_dim,):
            raise ValueError(f"{self.name} acts in a Box of shape ({self.action_dim},), not {action_space}")
        if config.noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {config.noise_std}")

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The expert's actions for a batch of observations (noisy unless ``deterministic``)."""
        state = obs[OBS_STATE].detach().cpu().numpy().astype(np.float64)
        action = torch.from_numpy(self.actions(state)).float()
        if not deterministic and self.config.noise_std > 0:
            action = (action + self.config.noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)
        batch = action.shape[0]
        return PolicyStep(
            action=action, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
        )

    def actions(self, state: np.ndarray) -> np.ndarray:
        """Noise-free actions in [-1, 1] for states ``[B, state_dim]``. Shape: [B, action_dim]."""
        raise NotImplementedError


# --- tabletop -------------------------------------------------------------------------------------
GRIP_OPEN, GRIP_CLOSED = 1.0, -1.0
SAFE_HEIGHT = 0.075
"""TCP height at which the finger pads pass over the cube (its top is at 0.04 m)."""
PAD_REACH = 0.012
"""Half the closed finger pads' footprint (m)."""


def _move(tcp: np.ndarray, target: np.ndarray, speed: float = 1.0) -> np.ndarray:
    """Position part of an action that sends the TCP towards ``target``, at most ``speed``."""
    return np.clip((target - tcp) / tabletop.MAX_STEP, -speed, speed)


class ReachExpert(ScriptedExpert):
    """Straight to the goal."""

    name: ClassVar[str] = "reach_expert"
    config_class: ClassVar[type[PolicyConfig]] = ReachExpertConfig
    state_dim: ClassVar[int] = tabletop.GRIPPER_STATE_DIM
    action_dim: ClassVar[int] = 4

    def actions(self, state: np.ndarray) -> np.ndarray:
        """TCP towards the goal at full speed, fingers open."""
        move = _move(state[:, tabletop.TCP], state[:, tabletop.GOAL])
        return np.concatenate([move, np.full((len(state), 1), GRIP_OPEN)], axis=1)


class PushCubeExpert(ScriptedExpert):
    """Closed fingers behind the cube, then push it along the cube-goal line.

    Each step is chosen from the state alone: push when the TCP is low, behind the cube and on the
    line to the goal; otherwise lift clear of the cube, fly to a point behind it and descend.
    """

    name: ClassVar[str] = "pushcube_expert"
    config_class: ClassVar[type[PolicyConfig]] = PushCubeExpertConfig
    state_dim: ClassVar[int] = cube.STATE_DIM
    action_dim: ClassVar[int] = 4
    push_height: ClassVar[float] = cube.CUBE_HALF
    standoff: ClassVar[float] = 0.03
    """Gap between the pads and the cube before a push (m)."""
    lateral_tolerance: ClassVar[float] = 0.012
    push_step: ClassVar[float] = 0.025
    """How far ahead of the cube's back face the TCP is sent while pushing (m)."""

    def actions(self, state: np.ndarray) -> np.ndarray:
        """One action per row, fingers closed (the pads make a paddle)."""
        out = np.empty((len(state), 4))
        out[:, 3] = GRIP_CLOSED
        for i, row in enumerate(state):
            out[i, :3] = self._move(row[tabletop.TCP], row[cube.CUBE_POS], row[tabletop.GOAL])
        return out

    def _move(self, tcp: np.ndarray, box: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Position part of the action for one row."""
        to_goal = goal[:2] - box[:2]
        distance = float(np.linalg.norm(to_goal))
        u = to_goal / max(distance, 1e-9)
        n = np.array([-u[1], u[0]])
        rel = tcp[:2] - box[:2]
        along, lateral = float(rel @ u), float(rel @ n)
        contact = box[:2] - u * (cube.CUBE_HALF + PAD_REACH)
        low = tcp[2] < self.push_height + 0.012
        if low and along < -cube.CUBE_HALF and abs(lateral) < self.lateral_tolerance:
            ahead = contact + u * min(self.push_step, distance)  # push, steering back onto the line
            return _move(tcp, np.array([*ahead, self.push_height]), speed=0.6)
        near = np.all(np.abs(rel) < cube.CUBE_HALF + PAD_REACH + 0.01)
        if tcp[2] < SAFE_HEIGHT - 0.02 and near:
            return _move(tcp, np.array([*(tcp[:2] - u * 0.01), SAFE_HEIGHT]))  # lift clear
        start = contact - u * self.standoff
        if np.linalg.norm(tcp[:2] - start) > 0.008:  # fly to the start, over the cube when near it
            far_and_low = np.linalg.norm(rel) > 0.12 and tcp[2] < self.push_height + 0.02
            return _move(tcp, np.array([*start, tcp[2] if far_and_low else SAFE_HEIGHT]))
        return _move(tcp, np.array([*start, self.push_height]))  # descend behind the cube


class PickPlaceExpert(ScriptedExpert):
    """Above the cube with open fingers, down, close, then carry the cube to the goal."""

    name: ClassVar[str] = "pickplace_expert"
    config_class: ClassVar[type[PolicyConfig]] = PickPlaceExpertConfig
    state_dim: ClassVar[int] = cube.STATE_DIM
    action_dim: ClassVar[int] = 4
    grasp_gap: ClassVar[float] = 2 * cube.CUBE_HALF + 0.006
    """Pad gap below which closed fingers hold the cube (m)."""

    def actions(self, state: np.ndarray) -> np.ndarray:
        """One action per row, from where the TCP, the fingers and the cube are."""
        out = np.empty((len(state), 4))
        for i, row in enumerate(state):
            out[i] = self._action(
                row[tabletop.TCP], row[tabletop.GAP], row[cube.CUBE_POS], row[tabletop.GOAL]
            )
        return out

    def _action(self, tcp: np.ndarray, gap: float, box: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """The action for one row."""
        offset = box - tcp
        at_cube = np.linalg.norm(offset[:2]) < 0.01 and abs(offset[2]) < 0.012
        if at_cube and gap < self.grasp_gap:  # holding it: bring the cube to the goal
            return np.array([*_move(tcp, tcp + goal - box, speed=0.6), GRIP_CLOSED])
        if at_cube:
            return np.array([*_move(tcp, box), GRIP_CLOSED])  # close on it
        if np.linalg.norm(offset[:2]) > 0.008:  # fly over it with open fingers, the pads clear of it
            above = np.array([box[0], box[1], box[2] + SAFE_HEIGHT - cube.CUBE_HALF])
            return np.array([*_move(tcp, above), GRIP_OPEN])
        return np.array([*_move(tcp, box, speed=0.8), GRIP_OPEN])  # descend around it


# --- PushT ----------------------------------------------------------------------------------------
class PushTExpert(ScriptedExpert):
    """Pushes the T with a quasi-static contact planner (``pushing.PushPlanner``).

    Keeps one planner per batch row (a push in progress is finished before another is chosen);
    ``reset(done_mask)`` clears the rows whose episode ended.
    """

    name: ClassVar[str] = "pusht_expert"
    config_class: ClassVar[type[PolicyConfig]] = PushTExpertConfig
    state_dim: ClassVar[int] = pusht.STATE_DIM
    action_dim: ClassVar[int] = 2

    def __init__(
        self, config: ExpertConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self._planners: list[PushPlanner] = []

    def reset(self, done_mask: torch.Tensor | None = None) -> None:
        """Forget the pushes in progress (of the rows where ``done_mask``; all when None)."""
        if done_mask is None:
            self._planners = []
            return
        for i in torch.as_tensor(done_mask).nonzero().flatten().tolist():
            if i < len(self._planners):
                self._planners[i] = PushPlanner()

    def actions(self, state: np.ndarray) -> np.ndarray:
        """Each row's planner target, as an absolute pusher action."""
        while len(self._planners) < len(state):
            self._planners.append(PushPlanner())
        targets = np.array([planner.target(row) for planner, row in zip(self._planners, state, strict=False)])
        return np.clip(targets / pusht.WORKSPACE, -1.0, 1.0)
