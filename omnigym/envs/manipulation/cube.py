"""PushCube and PickPlace: bring a 4 cm cube to a goal point with the tabletop gripper.

PushCube's goal lies on the table (the cube's centre height), PickPlace's in the air, so the cube
must be grasped and lifted (as in Gymnasium-Robotics' FetchPickAndPlace and Meta-World's
pick-place). Success: the cube's centre within ``success_distance`` (4 cm) of the goal; sparse
reward: 1 on success.

PickPlace's dense reward: minus the cube-goal distance minus half the TCP-cube distance (m), which
also pays for approaching the cube. PushCube's is staged, after ManiSkill's PushCube-v1 (see
:meth:`PushCubeEnv._score`): reach the push pose behind the cube, then bring the cube to the goal;
it lies in [-1, 0] and is 0 exactly on success.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from omnigym.envs.manipulation.base import TaskConfig
from omnigym.envs.manipulation.tabletop import GRIPPER_STATE_DIM, TabletopConfig, TabletopEnv, point_text

CUBE_HALF = 0.02
"""Half the cube's edge (m)."""
STATE_DIM = GRIPPER_STATE_DIM + 13
CUBE_POS, CUBE_QUAT, CUBE_VEL, CUBE_ANGVEL = (
    slice(GRIPPER_STATE_DIM + i, GRIPPER_STATE_DIM + j) for i, j in ((0, 3), (3, 7), (7, 10), (10, 13))
)
"""``state`` after the tabletop layout: cube position, orientation (quaternion w, x, y, z),
linear velocity (world frame) and angular velocity (cube frame)."""
REACH_WEIGHT = 0.5
"""Weight of the TCP-cube distance in PickPlace's dense reward."""
PUSH_OFFSET = CUBE_HALF + 0.015
"""Distance of PushCube's push pose behind the cube's centre (m): the closed finger pads (half
footprint 12 mm) just touch the cube's back face, with 3 mm to spare."""
PUSH_REACHED = 0.05
"""TCP-push pose distance (m) within which PushCube's dense reward counts the pose as reached.
Wider than ManiSkill's 1 cm: a push slides the cube ahead of the pads (the scripted expert's pushes
leave the TCP up to 2.4 cm behind the pose), and PPO learnt faster with 5 cm than with 2.5 cm."""
SHAPING_SCALE = 5.0
"""``k`` of PushCube's ``1 - tanh(k d)`` terms (1/m): a term is 0.5 at 11 cm."""
# qpos of cube.xml: gripper (0:5), then the cube's free joint: position (5:8), quaternion (8:12).
# qvel: gripper (0:5), cube linear (5:8) and angular (8:11) velocity.
_CUBE_QPOS, _CUBE_QVEL = slice(5, 12), slice(5, 11)


@dataclass
class CubeTaskConfig(TabletopConfig):
    """Options of the cube tasks (and those of :class:`TabletopConfig`)."""

    cube_xy_range: float = 0.12
    """Initial cube x and y: uniform in +-this square (m)."""
    cube_yaw_range: float = 0.0
    """Initial cube yaw: uniform in +-this (rad); 0 keeps its faces along the gripper's axes."""
    min_goal_distance: float = 0.08
    success_distance: float = 0.04

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.cube_xy_range <= 0.2:
            raise ValueError(f"cube_xy_range must be in [0, 0.2], got {self.cube_xy_range}")


@dataclass
class PushCubeConfig(CubeTaskConfig):
    """PushCube: the goal is on the table."""

    goal_z_range: tuple[float, float] = (CUBE_HALF, CUBE_HALF)


@dataclass
class PickPlaceConfig(CubeTaskConfig):
    """PickPlace: the goal is in the air."""

    goal_z_range: tuple[float, float] = (0.06, 0.2)


class CubeEnv(TabletopEnv):
    """A cube task; see the module docstring, ``tabletop.py`` for actions and the docs page.

    Observation keys: ``state`` (``STATE_DIM`` values), ``image`` (``front`` camera), ``text``.
    Info: ``is_success``, ``distance`` (cube to goal, m).
    """

    config: CubeTaskConfig
    xml_file: ClassVar[str] = "cube.xml"
    state_dim: ClassVar[int] = STATE_DIM
    object_geoms: ClassVar[tuple[str, ...]] = ("cube",)

    def _reset_task(self, rng: np.random.Generator) -> None:
        cfg = self.config
        self._reset_gripper()
        cube = rng.uniform(-cfg.cube_xy_range, cfg.cube_xy_range, 2)
        yaw = rng.uniform(-cfg.cube_yaw_range, cfg.cube_yaw_range)
        start = np.array([cube[0], cube[1], CUBE_HALF])
        self.data.qpos[_CUBE_QPOS] = (*start, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        self._reset_goal(rng, start)

    def _state(self) -> np.ndarray:
        return np.concatenate(
            (*self._gripper_state(), self.data.qpos[_CUBE_QPOS], self.data.qvel[_CUBE_QVEL]), dtype=np.float32
        )

    def _object_lines(self) -> list[str]:
        return [f"Cube: {point_text(self.data.qpos[5:8])} cm (its centre; it is 4 cm wide)."]

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        """Success, PickPlace's dense reward (see the module docstring) and the cube-goal distance."""
        cube = self.data.qpos[5:8]
        distance = float(np.linalg.norm(cube - self.goal))
        dense = -distance - REACH_WEIGHT * self._tcp_distance(cube)
        return distance < self.config.success_distance, dense, {"distance": distance}


class PushCubeEnv(CubeEnv):
    """Push the cube over the table to the red target."""

    config_class: ClassVar[type[TaskConfig]] = PushCubeConfig
    instruction: ClassVar[str] = "Push the cube to the red target."

    def push_pose(self) -> np.ndarray:
        """Where the TCP should be to push the cube to the goal (m).

        ``PUSH_OFFSET`` behind the cube's centre on the table-plane line from the goal through the
        cube, at the cube's centre height. When the cube's centre is above the goal, the direction
        is undefined and the pose is taken behind the cube along -x.
        """
        cube = self.data.qpos[5:8]
        to_goal = self.goal[:2] - cube[:2]
        length = math.hypot(to_goal[0], to_goal[1])
        ux, uy = (to_goal[0] / length, to_goal[1] / length) if length > 1e-9 else (1.0, 0.0)
        return np.array([cube[0] - PUSH_OFFSET * ux, cube[1] - PUSH_OFFSET * uy, cube[2]])

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        """Success, the staged dense reward and the cube-goal distance.

        The dense reward follows ManiSkill's PushCube-v1: ``reach = 1 - tanh(k d_push)`` with
        ``d_push`` the TCP-push pose distance, ``place = 1 - tanh(k d_goal)`` with ``d_goal`` the
        cube-goal distance, counted only once the push pose is within ``PUSH_REACHED``; the sum
        (at most 2) is replaced by 3 on success and divided by 3. Unlike ManiSkill, 1 is then
        subtracted, so the reward lies in [-1, 0] and is 0 on success: the episode ends on success
        (``terminate_on_success``), and with positive per-step rewards hovering just outside the
        goal would be worth more than reaching it.
        """
        cube = self.data.qpos[5:8]
        distance = float(np.linalg.norm(cube - self.goal))
        success = distance < self.config.success_distance
        if success:
            return True, 0.0, {"distance": distance}
        to_push = self._tcp_distance(self.push_pose())
        shaped = 1.0 - math.tanh(SHAPING_SCALE * to_push)
        if to_push < PUSH_REACHED:
            shaped += 1.0 - math.tanh(SHAPING_SCALE * distance)
        return False, shaped / 3.0 - 1.0, {"distance": distance}


class PickPlaceEnv(CubeEnv):
    """Pick the cube up and hold it at the red target in the air."""

    config_class: ClassVar[type[TaskConfig]] = PickPlaceConfig
    instruction: ClassVar[str] = "Pick up the cube and bring it to the red target."
