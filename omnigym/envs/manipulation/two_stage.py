"""PushCubeTwoStage: push the cube to a blue marker first, then to the red target.

A two-stage task whose stage the observation does not show: ``state`` holds both points (the
waypoint after PushCube's 23 values), but not whether the cube has already been at the waypoint.
The env keeps that flag (``info["waypoint_reached"]``): the cube's centre within
``success_distance`` of the waypoint at any step sets it for the rest of the episode. Success:
the flag set and the cube's centre within ``success_distance`` of the target. A policy acting on
the current observation alone must infer the stage from the scene; one with memory, or a planner
that tracks it (``hierarchical``, docs/policies.md), is told.

Dense reward: minus the cube's remaining path (to the waypoint and on to the target, or to the
target once the waypoint is reached) minus half the TCP-cube distance (m), as PickPlace's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from omnigym.envs.manipulation.base import TaskConfig
from omnigym.envs.manipulation.cube import CUBE_HALF, REACH_WEIGHT, STATE_DIM, PushCubeConfig, PushCubeEnv
from omnigym.envs.manipulation.rendering import mujoco
from omnigym.envs.manipulation.tabletop import point_text

TWO_STAGE_STATE_DIM = STATE_DIM + 3
WAYPOINT = slice(STATE_DIM, TWO_STAGE_STATE_DIM)
"""``state`` after PushCube's layout: the waypoint's position (m)."""


@dataclass
class PushCubeTwoStageConfig(PushCubeConfig):
    """PushCube's options, and where the waypoint may lie."""

    waypoint_xy_range: float = 0.1
    """Waypoint x and y: uniform in +-this square (m); inside the target's range, so a cube pushed
    past the marker stays where the gripper can get behind it again."""
    min_waypoint_distance: float = 0.08
    """Least distance (m) of the waypoint from the cube's start and from the target."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.waypoint_xy_range <= 0.2:
            raise ValueError(f"waypoint_xy_range must be in (0, 0.2], got {self.waypoint_xy_range}")
        if not self.success_distance < self.min_waypoint_distance <= 0.2:
            raise ValueError(
                f"min_waypoint_distance must be in (success_distance, 0.2], got {self.min_waypoint_distance}"
            )


REACHED_DISTANCE: float = PushCubeTwoStageConfig.success_distance
"""The default ``success_distance`` (m): the scripted expert and planner, which read observations
only, count the marker as reached at it."""


class PushCubeTwoStageEnv(PushCubeEnv):
    """Push the cube to the blue marker, then to the red target (see the module docstring).

    Info: ``is_success``, ``distance`` (cube to target, m), ``waypoint_distance`` (cube to
    waypoint, m), ``waypoint_reached``.
    """

    config_class: ClassVar[type[TaskConfig]] = PushCubeTwoStageConfig
    config: PushCubeTwoStageConfig
    xml_file: ClassVar[str] = "cube_two_stage.xml"
    state_dim: ClassVar[int] = TWO_STAGE_STATE_DIM
    instruction: ClassVar[str] = "Push the cube to the blue marker, then to the red target."

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.waypoint = np.zeros(3)
        """The episode's waypoint (m), on the table."""
        self.waypoint_reached = False
        """Whether the cube has been within ``success_distance`` of the waypoint this episode."""
        self._waypoint_site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "waypoint")
        self.model.site_size[self._waypoint_site, 0] = self.config.success_distance

    def _reset_task(self, rng: np.random.Generator) -> None:
        super()._reset_task(rng)
        cfg = self.config
        start = self.data.qpos[5:8].copy()
        for _ in range(1000):
            xy = rng.uniform(-cfg.waypoint_xy_range, cfg.waypoint_xy_range, 2)
            waypoint = np.array([xy[0], xy[1], CUBE_HALF])
            far = min(np.linalg.norm(waypoint - start), np.linalg.norm(waypoint - self.goal))
            if far >= cfg.min_waypoint_distance:
                break
        else:
            raise ValueError(
                "no waypoint in waypoint_xy_range is min_waypoint_distance from the start and the target; "
                "lower min_waypoint_distance"
            )
        self.waypoint[:] = waypoint
        self.model.site_pos[self._waypoint_site] = waypoint
        self.waypoint_reached = False

    def _state(self) -> np.ndarray:
        return np.concatenate((super()._state(), self.waypoint), dtype=np.float32)

    def _object_lines(self) -> list[str]:
        return [*super()._object_lines(), f"Blue marker: {point_text(self.waypoint)} cm."]

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        """Success, the dense reward (module docstring) and the distances; sets the waypoint flag."""
        cube = self.data.qpos[5:8]
        to_goal = float(np.linalg.norm(cube - self.goal))
        to_waypoint = float(np.linalg.norm(cube - self.waypoint))
        if to_waypoint < self.config.success_distance:
            self.waypoint_reached = True
        remaining = (
            to_goal
            if self.waypoint_reached
            else to_waypoint + float(np.linalg.norm(self.waypoint - self.goal))
        )
        dense = -remaining - REACH_WEIGHT * self._tcp_distance(cube)
        success = self.waypoint_reached and to_goal < self.config.success_distance
        info = {
            "distance": to_goal,
            "waypoint_distance": to_waypoint,
            "waypoint_reached": self.waypoint_reached,
        }
        return success, dense, info
