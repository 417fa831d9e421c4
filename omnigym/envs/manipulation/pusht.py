"""PushT: push a T-shaped block onto a target pose with a point pusher (Diffusion Policy's task).

Seen from above, a disc-shaped pusher (radius 25 mm) and the T move on a table walled in to a
0.82 m square. The action is the pusher's target position (absolute, as in Diffusion Policy), [-1, 1]
scaled to +-``WORKSPACE`` m; position servos move the pusher there. The table's friction on the
block is viscous joint damping, so the block stops when it is no longer pushed.

Success: the block covers the target T by at least ``success_coverage`` (95 %) of its area,
computed exactly (``tblock.coverage``). Reward: the coverage (dense) or 1 on success (sparse).
``info`` has ``coverage`` and ``max_coverage``, the best coverage of the episode's steps so far
(the per-episode figure of LeRobot's and the Diffusion Policy paper's PushT protocol).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from omnigym.envs.manipulation import tblock
from omnigym.envs.manipulation.base import ManipulationEnv, TaskConfig

WORKSPACE = 0.38
"""Half-width of the square the pusher's target is clipped to (the walls' inner faces are at
+-0.41 m)."""
PUSHER_RADIUS = 0.025
STATE_DIM = 15
"""``state`` layout (metres, m/s, radians): pusher position (0:2) and velocity (2:4); block
position (4:6), yaw as cos, sin (6:8), velocity vx, vy, yaw rate (8:11); goal position (11:13)
and yaw as cos, sin (13:15)."""
# qpos/qvel order in pusht.xml: block x, y, yaw, pusher x, y.
_BLOCK, _PUSHER = slice(0, 3), slice(3, 5)


@dataclass
class PushTConfig(TaskConfig):
    """PushT options (and those of :class:`TaskConfig`)."""

    goal_pose: tuple[float, float, float] = (0.0, 0.0, math.pi / 4)
    """Target pose of the block: x, y (m), yaw (rad)."""
    block_xy_range: float = 0.2
    """Initial block position: uniform in +-this square (m)."""
    block_yaw_range: float = math.pi
    """Initial block yaw: uniform in +-this (rad)."""
    pusher_xy_range: float = 0.34
    """Initial pusher position: uniform in +-this square (m), clear of the block."""
    success_coverage: float = 0.95
    """Coverage at which the task is solved."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.goal_pose = tuple(float(v) for v in self.goal_pose)  # type: ignore[assignment]
        if len(self.goal_pose) != 3:
            raise ValueError(f"goal_pose must be (x, y, yaw), got {self.goal_pose}")
        if not 0 <= self.block_xy_range <= 0.25 or not 0 <= self.pusher_xy_range <= WORKSPACE:
            raise ValueError("block_xy_range must be in [0, 0.25] and pusher_xy_range in [0, 0.38]")
        if not 0 < self.success_coverage <= 1:
            raise ValueError(f"success_coverage must be in (0, 1], got {self.success_coverage}")


class PushTEnv(ManipulationEnv):
    """Push the T onto the green target; see the module docstring and ``docs/envs/manipulation.md``.

    Observation keys: ``state`` (``STATE_DIM`` values), ``image`` (``top`` camera), ``text``.
    Actions: pusher target x, y in [-1, 1]. 10 actions per second by default (``frame_skip=50``).
    Info: ``is_success``, ``coverage``.
    """

    config_class: ClassVar[type[TaskConfig]] = PushTConfig
    config: PushTConfig
    xml_file: ClassVar[str] = "pusht.xml"
    instruction: ClassVar[str] = "Push the T-shaped block onto the green T."
    default_frame_skip: ClassVar[int] = 50
    default_camera: ClassVar[str] = "top"
    state_dim: ClassVar[int] = STATE_DIM
    action_dim: ClassVar[int] = 2
    object_geoms: ClassVar[tuple[str, ...]] = ("block_bar", "block_stem")

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        gx, gy, gyaw = self.config.goal_pose
        self.goal: tblock.Pose = (gx, gy, gyaw)
        goal_body = self.model.body("goal")
        goal_body.pos[:2] = (gx, gy)
        goal_body.quat[:] = (math.cos(gyaw / 2), 0.0, 0.0, math.sin(gyaw / 2))
        self._goal_state = np.array([gx, gy, math.cos(gyaw), math.sin(gyaw)], np.float32)
        self._block_dofs = np.arange(3)
        self._base_drag = self.model.dof_damping[self._block_dofs].copy()
        self._max_coverage = 0.0

    def _reset_task(self, rng: np.random.Generator) -> None:
        cfg = self.config
        for _ in range(1000):  # rejection: pusher clear of the block, task not already solved
            block = rng.uniform(-1.0, 1.0, 3) * (cfg.block_xy_range, cfg.block_xy_range, cfg.block_yaw_range)
            pusher = rng.uniform(-cfg.pusher_xy_range, cfg.pusher_xy_range, 2)
            pose = (float(block[0]), float(block[1]), float(block[2]))
            clear = tblock.distance_to_point(pose, float(pusher[0]), float(pusher[1])) > PUSHER_RADIUS + 0.01
            if clear and tblock.coverage(pose, self.goal) < cfg.success_coverage:
                break
        else:
            raise ValueError("no initial pose satisfies the ranges; widen block_xy_range or pusher_xy_range")
        self.data.qpos[_BLOCK] = block
        self.data.qpos[_PUSHER] = pusher
        self.data.ctrl[:] = pusher

    def _scale_drag(self, scale: float) -> None:
        self.model.dof_damping[self._block_dofs] = self._base_drag * scale

    def _apply_action(self, action: np.ndarray) -> None:
        self.data.ctrl[:] = action * WORKSPACE

    def _state(self) -> np.ndarray:
        qpos, qvel = self.data.qpos, self.data.qvel
        yaw = qpos[2]
        return np.concatenate(
            (
                qpos[_PUSHER],
                qvel[_PUSHER],
                qpos[:2],
                (math.cos(yaw), math.sin(yaw)),
                qvel[_BLOCK],
                self._goal_state,
            ),
            dtype=np.float32,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """An episode as the base makes it; ``max_coverage`` counts its steps, not its start."""
        obs, info = super().reset(seed=seed, options=options)
        self._max_coverage = info["max_coverage"] = 0.0  # as LeRobot's per-step figure
        return obs, info

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        qpos = self.data.qpos
        covered = tblock.coverage((float(qpos[0]), float(qpos[1]), float(qpos[2])), self.goal)
        self._max_coverage = max(self._max_coverage, covered)
        info = {"coverage": covered, "max_coverage": self._max_coverage}
        return covered >= self.config.success_coverage, covered, info
