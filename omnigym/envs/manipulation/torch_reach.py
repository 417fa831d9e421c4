"""``omnigym/TorchReach-v0``: a 2-link planar arm reaching a random goal, simulated in torch.

All ``N`` arms live in ``[N, ...]`` tensors and advance in one tensor operation per step, on any
device. The batched env follows Isaac Lab's ``DirectRLEnv`` conventions (observation group
``policy``, finished copies reset inside ``step``, time-outs reported as truncated, episode
statistics in ``extras["log"]``), so :func:`make_torch_reach_vec_env` runs Isaac Lab's adapter
(``isaaclab.py``) and omnigym's torch collection path without Isaac Lab. :class:`TorchReachEnv` is
one arm as a plain Gymnasium env (NumPy, CPU), for the conformance tests, evaluation and videos.

* Dynamics: joint velocity control, ``q <- wrap(q + max_joint_speed * dt * clip(a, -1, 1))``.
* End effector: ``p(q) = l1 [cos q1, sin q1] + l2 [cos(q1 + q2), sin(q1 + q2)]``.
* Start: joint angles uniform in ``[-pi, pi)``; the goal uniform (by area) over the annulus the
  arm can reach.
* Observation (8): ``cos q1, sin q1, cos q2, sin q2``, the goal, end effector minus goal.
* Reward: ``-|p(q) - goal|`` per step.
* Episode end: terminated on reaching the goal (``|p(q) - goal| < success_radius``, reported as
  ``is_success``), truncated after ``episode_length`` steps.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from torch import Tensor

from omnigym.core.types import OBS_STATE
from omnigym.envs.manipulation.isaaclab import IsaacLabVectorEnv

OBS_DIM = 8


@dataclass
class TorchReachCfg:
    """The reach task (an Isaac Lab-style env config)."""

    num_envs: int = 64
    """Arms simulated in one batch."""
    device: str = "cpu"
    """Where the tensors live."""
    episode_length: int = 50
    """Steps before an episode is truncated."""
    dt: float = 0.1
    """Seconds per step."""
    max_joint_speed: float = 2.0
    """Joint speed at action +-1, rad/s."""
    link_lengths: tuple[float, float] = (0.5, 0.5)
    """Upper and lower link lengths, m."""
    success_radius: float = 0.1
    """Distance to the goal that counts as reached, m."""
    is_finite_horizon: bool = False
    """Isaac Lab's flag: time-outs are part of the task (no bootstrapping) when True."""
    seed: int = 0
    """Seed of the batch's random generator until ``reset(seed=...)``."""


class ReachArms:
    """The state and dynamics of ``N`` arms. Shapes: joint angles and goals ``[N, 2]``."""

    def __init__(self, cfg: TorchReachCfg) -> None:
        if cfg.num_envs < 1 or cfg.episode_length < 1:
            raise ValueError("num_envs and episode_length must be >= 1")
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(cfg.seed)
        n = cfg.num_envs
        self.joint_pos = torch.zeros(n, 2, device=self.device)
        self.goal = torch.zeros(n, 2, device=self.device)
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=self.device)
        l1, l2 = cfg.link_lengths
        self.goal_radius = (abs(l1 - l2) + 0.1, l1 + l2 - 0.05)

    def seed(self, seed: int) -> None:
        """Restart the batch's random generator."""
        self.generator.manual_seed(seed)

    def _uniform(self, low: float, high: float) -> Tensor:
        u = torch.rand(self.cfg.num_envs, 2, generator=self.generator, device=self.device)
        return low + (high - low) * u

    def reset_where(self, mask: Tensor) -> None:
        """New joint angles and goals for the arms where ``mask`` (bool ``[N]``); no host sync."""
        joint_pos = self._uniform(-math.pi, math.pi)
        r_min, r_max = self.goal_radius
        polar = self._uniform(0.0, 1.0)
        radius = torch.sqrt(r_min**2 + (r_max**2 - r_min**2) * polar[:, 0])  # uniform by area
        angle = (2 * polar[:, 1] - 1) * math.pi
        goal = radius.unsqueeze(-1) * torch.stack([torch.cos(angle), torch.sin(angle)], dim=-1)
        column = mask.unsqueeze(-1)
        self.joint_pos = torch.where(column, joint_pos, self.joint_pos)
        self.goal = torch.where(column, goal, self.goal)
        self.episode_length_buf = torch.where(mask, 0, self.episode_length_buf)

    def end_effector(self) -> Tensor:
        """Forward kinematics. Shape: [N, 2]."""
        l1, l2 = self.cfg.link_lengths
        q1, q12 = self.joint_pos[:, 0], self.joint_pos.sum(-1)
        x = l1 * torch.cos(q1) + l2 * torch.cos(q12)
        y = l1 * torch.sin(q1) + l2 * torch.sin(q12)
        return torch.stack([x, y], dim=-1)

    def observations(self) -> Tensor:
        """Shape: [N, 8]."""
        q = self.joint_pos
        trig = torch.stack([q[:, 0].cos(), q[:, 0].sin(), q[:, 1].cos(), q[:, 1].sin()], dim=-1)
        return torch.cat([trig, self.goal, self.end_effector() - self.goal], dim=-1)

    def advance(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Apply joint velocity commands ``[N, 2]`` for one step (no reset).

        Returns:
            reward (float32 ``[N]``), terminated, truncated and success (bool ``[N]``).
        """
        cfg = self.cfg
        step = cfg.max_joint_speed * cfg.dt * actions.to(self.device, torch.float32).clamp(-1.0, 1.0)
        self.joint_pos = torch.remainder(self.joint_pos + step + math.pi, 2 * math.pi) - math.pi
        self.episode_length_buf = self.episode_length_buf + 1
        distance = torch.linalg.vector_norm(self.end_effector() - self.goal, dim=-1)
        success = distance < cfg.success_radius
        truncated = (self.episode_length_buf >= cfg.episode_length) & ~success
        return -distance, success, truncated, success


class TorchReachLabEnv:
    """``N`` arms behind Isaac Lab's batched env interface (``DirectRLEnv`` conventions).

    ``reset(seed)`` -> ``({"policy": obs [N, 8]}, extras)``; ``step(actions [N, 2])`` ->
    ``({"policy": obs}, reward [N], terminated [N], truncated [N], extras)`` with finished arms
    already reset and ``extras["log"]["is_success"]`` (float ``[N]``, read on finished rows).
    """

    is_vector_env: ClassVar[bool] = True
    metadata: ClassVar[dict[str, Any]] = {"render_modes": [None]}

    def __init__(self, cfg: TorchReachCfg) -> None:
        self.cfg = cfg
        self.arms = ReachArms(cfg)
        self.num_envs = cfg.num_envs
        self.device = self.arms.device
        self.max_episode_length = cfg.episode_length
        self.single_observation_space = spaces.Dict(
            {"policy": spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)}
        )
        self.single_action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.extras: dict[str, Any] = {}

    @property
    def unwrapped(self) -> TorchReachLabEnv:
        """The env itself (Isaac Lab envs sit under Gymnasium wrappers)."""
        return self

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Reset every arm, reseeding first when ``seed`` is given."""
        if seed is not None:
            self.arms.seed(seed)
        self.arms.reset_where(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self.extras = {"log": {}}
        return {"policy": self.arms.observations()}, self.extras

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Advance every arm and reset the finished ones."""
        reward, terminated, truncated, success = self.arms.advance(actions)
        self.extras = {"log": {"is_success": success.float()}}
        self.arms.reset_where(terminated | truncated)
        return {"policy": self.arms.observations()}, reward, terminated, truncated, self.extras

    def close(self) -> None:
        """Nothing to release."""


def make_torch_reach_vec_env(
    num_envs: int,
    *,
    autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    **cfg: Any,
) -> IsaacLabVectorEnv:
    """``omnigym/TorchReach-v0``'s vector entry point: the batched env behind the Isaac Lab adapter.

    Args:
        num_envs: arms in the batch.
        autoreset_mode: must be same-step (finished arms reset inside ``step``).
        max_episode_steps: overrides ``episode_length``.
        render_mode: must be None (render :class:`TorchReachEnv` instead).
        **cfg: :class:`TorchReachCfg` fields (``device``, ``success_radius``, ...).
    """
    if AutoresetMode(autoreset_mode) != AutoresetMode.SAME_STEP:
        raise ValueError(
            "omnigym/TorchReach-v0 resets finished arms inside step: use autoreset_mode same_step"
        )
    if render_mode is not None:
        raise ValueError("the batched omnigym/TorchReach-v0 does not render; make the single env for frames")
    config = TorchReachCfg(num_envs=num_envs, **cfg)
    if max_episode_steps is not None:
        config = replace(config, episode_length=max_episode_steps)
    return IsaacLabVectorEnv(TorchReachLabEnv(config))


class TorchReachEnv(gym.Env):
    """One arm of the reach task as a plain Gymnasium env (NumPy observations, CPU tensors inside).

    Observation ``{"state": float32 [8]}``, action ``Box(-1, 1, (2,))``, ``info["is_success"]``;
    dynamics, reward and episode ends as in the module docstring.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012  (gymnasium's instance attribute)

    def __init__(self, render_mode: str | None = None, **cfg: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.arms = ReachArms(TorchReachCfg(**{**cfg, "num_envs": 1, "device": "cpu"}))
        self.observation_space = spaces.Dict({OBS_STATE: spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)})
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.metadata = {**self.metadata, "render_fps": round(1 / self.arms.cfg.dt)}
        self._seeded = False

    def _obs(self) -> dict[str, np.ndarray]:
        return {OBS_STATE: self.arms.observations()[0].numpy()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """A new arm pose and goal; the torch generator is seeded from ``seed`` on seeded resets."""
        super().reset(seed=seed)
        if seed is not None or not self._seeded:
            self.arms.seed(int(self.np_random.integers(2**62)))
            self._seeded = True
        self.arms.reset_where(torch.ones(1, dtype=torch.bool))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Move the arm one step."""
        action = np.asarray(action, dtype=np.float32).reshape(1, 2)
        if not np.all(np.isfinite(action)):
            raise ValueError(f"non-finite action {action}")
        reward, terminated, truncated, success = self.arms.advance(torch.from_numpy(action))
        info = {"is_success": bool(success[0])}
        return self._obs(), float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> np.ndarray | None:
        """A 128 x 128 top view: the goal (red) and the arm (blue), the base at the centre."""
        if self.render_mode != "rgb_array":
            return None
        import cv2

        size = 128
        scale = 0.45 * size / sum(self.arms.cfg.link_lengths)

        def pixel(point: Tensor) -> tuple[int, int]:
            return int(size / 2 + scale * float(point[0])), int(size / 2 - scale * float(point[1]))

        frame = np.full((size, size, 3), 255, np.uint8)
        l1 = self.arms.cfg.link_lengths[0]
        q1 = self.arms.joint_pos[0, 0]
        elbow = l1 * torch.stack([q1.cos(), q1.sin()])
        goal_radius = max(4, int(scale * self.arms.cfg.success_radius))
        cv2.circle(frame, pixel(self.arms.goal[0]), goal_radius, (220, 40, 40), -1)
        points = [pixel(torch.zeros(2)), pixel(elbow), pixel(self.arms.end_effector()[0])]
        for a, b in itertools.pairwise(points):
            cv2.line(frame, a, b, (40, 80, 200), 3)
        for point in points:
            cv2.circle(frame, point, 3, (20, 20, 20), -1)
        return frame
