"""The tabletop tasks' shared part: a Cartesian parallel gripper over a table, and a goal point.

The gripper (``assets/tabletop.xml``) moves on world x, y, z slide joints under position servos.
An action ``(dx, dy, dz, grip)`` in [-1, 1] sets the servo target to the current tool centre
point (TCP, the point between the finger pads) plus ``MAX_STEP`` m times ``(dx, dy, dz)``, clipped
to the workspace (as Gymnasium-Robotics' Fetch moves its mocap), and the fingers' target opening
to ``(grip + 1) / 2`` of fully open (-1 closes, +1 opens).

``state`` starts with the same ``GRIPPER_STATE_DIM`` values in every tabletop task: TCP position
(0:3), TCP velocity (3:6), gap between the finger pads (6), goal position (7:10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from omnigym.envs.manipulation.base import ManipulationEnv, TaskConfig
from omnigym.envs.manipulation.rendering import mujoco

MAX_STEP = 0.05
"""TCP target offset per action at full scale (m)."""
FINGER_OPEN = 0.04
"""Each finger pad's distance from the centre line when fully open (m); closed is 0."""
TCP_LOW = np.array([-0.25, -0.25, 0.012])
TCP_HIGH = np.array([0.25, 0.25, 0.3])
"""The workspace the TCP target is clipped to (m); at the lowest, the pads clear the table."""
HOME = np.array([0.0, 0.0, 0.15])
"""TCP position at the start of an episode (m)."""
GRIPPER_STATE_DIM = 10
TCP, TCP_VEL, GAP, GOAL = slice(0, 3), slice(3, 6), 6, slice(7, 10)
"""Indices of the ``state`` vector shared by the tabletop tasks."""
# qpos/qvel of tabletop.xml: gripper x, y, z, finger left, finger right (then any objects).
_GRIPPER, _FINGERS = slice(0, 3), slice(3, 5)


@dataclass
class TabletopConfig(TaskConfig):
    """Options of the tabletop tasks (and those of :class:`TaskConfig`)."""

    goal_xy_range: float = 0.15
    """Goal x and y: uniform in +-this square around the table centre (m)."""
    goal_z_range: tuple[float, float] = (0.03, 0.25)
    """Goal height above the table: uniform in this range (m)."""
    success_distance: float = 0.03
    """Distance to the goal (m) within which the task is solved."""
    min_goal_distance: float = 0.06
    """Goals are drawn again until this far from where the task starts (the TCP for Reach, the
    cube for the cube tasks), so no episode starts solved (m)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        low, high = self.goal_z_range
        self.goal_z_range = (float(low), float(high))
        if not 0 <= self.goal_xy_range <= 0.25 or not 0 < low <= high <= TCP_HIGH[2]:
            raise ValueError("goal_xy_range must be in [0, 0.25] and goal_z_range within (0, 0.3]")
        if not 0 < self.success_distance < self.min_goal_distance:
            raise ValueError(
                f"need 0 < success_distance < min_goal_distance, got {self.success_distance} "
                f"and {self.min_goal_distance}"
            )


class TabletopEnv(ManipulationEnv):
    """Base of Reach, PushCube and PickPlace: gripper actions, the gripper's state, the goal.

    Actions: ``(dx, dy, dz, grip)`` in [-1, 1] (see the module docstring). 25 actions per second
    by default (``frame_skip=20``).
    """

    config: TabletopConfig
    default_frame_skip: ClassVar[int] = 20
    default_camera: ClassVar[str] = "front"
    action_dim: ClassVar[int] = 4

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.goal = np.zeros(3)
        """The goal point of the episode (m)."""
        self._goal_site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "goal")
        self.model.site_size[self._goal_site, 0] = self.config.success_distance

    def _reset_gripper(self) -> None:
        qpos, ctrl = self.data.qpos, self.data.ctrl
        qpos[_GRIPPER] = ctrl[_GRIPPER] = HOME
        qpos[_FINGERS] = ctrl[_FINGERS] = FINGER_OPEN

    def _reset_goal(self, rng: np.random.Generator, start: np.ndarray) -> None:
        """Draw the goal from the configured ranges, ``min_goal_distance`` from ``start``."""
        cfg = self.config
        for _ in range(1000):
            xy = rng.uniform(-cfg.goal_xy_range, cfg.goal_xy_range, 2)
            goal = np.array([xy[0], xy[1], rng.uniform(*cfg.goal_z_range)])
            if np.linalg.norm(goal - start) >= cfg.min_goal_distance:
                break
        else:
            raise ValueError("no goal in the goal ranges is min_goal_distance from the start; widen them")
        self.goal[:] = goal
        self.model.site_pos[self._goal_site] = goal

    def _apply_action(self, action: np.ndarray) -> None:
        ctrl = self.data.ctrl
        target = self.data.qpos[_GRIPPER] + action[:3] * MAX_STEP
        ctrl[_GRIPPER] = np.minimum(np.maximum(target, TCP_LOW), TCP_HIGH)  # np.clip costs 3x more
        ctrl[_FINGERS] = (action[3] + 1.0) * (0.5 * FINGER_OPEN)

    def _gripper_state(self) -> tuple[Any, ...]:
        """The shared leading part of ``state``, as parts for one ``np.concatenate``."""
        qpos = self.data.qpos
        return qpos[_GRIPPER], self.data.qvel[_GRIPPER], (qpos[3] + qpos[4],), self.goal

    def _tcp_distance(self, point: np.ndarray) -> float:
        """Distance from the TCP to ``point`` (m)."""
        qpos = self.data.qpos
        return math.dist((qpos[0], qpos[1], qpos[2]), (point[0], point[1], point[2]))
