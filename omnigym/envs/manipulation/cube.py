"""PushCube and PickPlace: bring a 4 cm cube to a goal point with the tabletop gripper.

PushCube's goal lies on the table (the cube's centre height), PickPlace's in the air, so the cube
must be grasped and lifted (as in Gymnasium-Robotics' FetchPickAndPlace and Meta-World's
pick-place). Success: the cube's centre within ``success_distance`` (4 cm) of the goal. Dense
reward: minus the cube-goal distance minus half the TCP-cube distance (m), which also pays for
approaching the cube; sparse: 1 on success.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from omnigym.envs.manipulation.base import TaskConfig
from omnigym.envs.manipulation.tabletop import GRIPPER_STATE_DIM, TabletopConfig, TabletopEnv

CUBE_HALF = 0.02
"""Half the cube's edge (m)."""
STATE_DIM = GRIPPER_STATE_DIM + 13
CUBE_POS, CUBE_QUAT, CUBE_VEL, CUBE_ANGVEL = (
    slice(GRIPPER_STATE_DIM + i, GRIPPER_STATE_DIM + j) for i, j in ((0, 3), (3, 7), (7, 10), (10, 13))
)
"""``state`` after the tabletop layout: cube position, orientation (quaternion w, x, y, z),
linear velocity (world frame) and angular velocity (cube frame)."""
REACH_WEIGHT = 0.5
"""Weight of the TCP-cube distance in the dense reward."""
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

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        cube = self.data.qpos[5:8]
        distance = float(np.linalg.norm(cube - self.goal))
        dense = -distance - REACH_WEIGHT * self._tcp_distance(cube)
        return distance < self.config.success_distance, dense, {"distance": distance}


class PushCubeEnv(CubeEnv):
    """Push the cube over the table to the red target."""

    config_class: ClassVar[type[TaskConfig]] = PushCubeConfig
    instruction: ClassVar[str] = "Push the cube to the red target."


class PickPlaceEnv(CubeEnv):
    """Pick the cube up and hold it at the red target in the air."""

    config_class: ClassVar[type[TaskConfig]] = PickPlaceConfig
    instruction: ClassVar[str] = "Pick up the cube and bring it to the red target."
