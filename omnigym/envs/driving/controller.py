"""Plan tracking: turn a NAVSIM-style trajectory (8 poses over 4 s) into bicycle commands.

NAVSIM tracks plans with an LQR controller; omnigym uses pure pursuit for steering and a
proportional speed controller with feed-forward for acceleration. Like NAVSIM, only the planned
positions (and their timing) are used; planned headings are not tracked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from omnigym.envs.driving.dynamics import BicycleLimits, EgoState, to_ego_frame, to_world_frame
from omnigym.envs.driving.scene import DT, HORIZON_STEPS

PLAN_POSES = 8
PLAN_INTERVAL = 0.5
"""A plan is 8 poses (x, y, heading in the ego frame) at 0.5 s, 1.0 s, ..., 4.0 s."""
STEPS_PER_POSE = round(PLAN_INTERVAL / DT)


@dataclass(frozen=True)
class TrackerConfig:
    """Gains of the plan tracker."""

    lookahead_time: float = 0.6
    """Pure-pursuit look-ahead distance per m/s of speed, s."""
    min_lookahead: float = 2.5
    """Shortest look-ahead distance, m."""
    speed_gain: float = 2.0
    """Proportional gain on the speed error, 1/s."""
    steer_time_constant: float = 0.15
    """How fast the wheel angle chases the pure-pursuit angle, s."""


def densify_plan(plan: np.ndarray, ego_pose: np.ndarray) -> np.ndarray:
    """World positions ``[N, 41, 2]`` at 0.1 s from ego-frame plans ``[N, 8, >=2]`` of egos ``[N, 3]``.

    The current position is prepended as t = 0 and the poses are joined linearly in time.
    """
    num = plan.shape[0]
    knots = np.concatenate([np.zeros((num, 1, 2)), plan[:, :, :2]], axis=1)  # [N, 9, 2]
    frac = np.arange(HORIZON_STEPS + 1) / STEPS_PER_POSE  # knot coordinate of every 0.1 s sample
    low = np.minimum(frac.astype(int), PLAN_POSES - 1)
    weight = (frac - low)[None, :, None]
    dense = knots[:, low] * (1 - weight) + knots[:, low + 1] * weight
    return to_world_frame(dense, ego_pose)


@dataclass
class PlanTracker:
    """Tracks one dense plan per env; ``set_plan`` replaces plans of some envs."""

    limits: BicycleLimits
    config: TrackerConfig

    def __post_init__(self) -> None:
        self.points = np.zeros((0, HORIZON_STEPS + 1, 2))
        self.arc = np.zeros((0, HORIZON_STEPS + 1))
        self.speed = np.zeros((0, HORIZON_STEPS + 1))
        self.step = np.zeros(0, np.int64)

    def resize(self, num: int) -> None:
        """Hold plans for ``num`` envs (all at rest)."""
        self.points = np.zeros((num, HORIZON_STEPS + 1, 2))
        self.arc = np.zeros((num, HORIZON_STEPS + 1))
        self.speed = np.zeros((num, HORIZON_STEPS + 1))
        self.step = np.zeros(num, np.int64)

    def set_plan(self, index: np.ndarray, dense_points: np.ndarray) -> None:
        """New plans (world positions ``[n, 41, 2]`` from now) for envs ``index``."""
        seg = np.linalg.norm(np.diff(dense_points, axis=1), axis=-1)  # [n, 40]
        self.points[index] = dense_points
        self.arc[index] = np.concatenate([np.zeros((len(seg), 1)), np.cumsum(seg, axis=1)], axis=1)
        speed = seg / DT
        self.speed[index] = np.concatenate([speed, speed[:, -1:]], axis=1)  # speed[k]: from sample k to k+1
        self.step[index] = 0

    def command(self, ego: EgoState) -> tuple[np.ndarray, np.ndarray]:
        """Acceleration and steering rate [N] that follow the plans, then advance plan time."""
        rows = np.arange(len(self.step))
        k = np.minimum(self.step, HORIZON_STEPS)
        # speed: P control toward the plan's speed over the next step, plus its change as feed-forward
        target = self.speed[rows, k]
        previous = self.speed[rows, np.maximum(k - 1, 0)]
        accel = self.config.speed_gain * (target - ego.speed) + (target - previous) / DT
        # steering: pure pursuit toward the plan point one look-ahead distance past the nearest one
        nearest = np.argmin(np.sum((self.points - ego.pose[:, None, :2]) ** 2, axis=-1), axis=1)
        lookahead = np.maximum(self.config.min_lookahead, ego.speed * self.config.lookahead_time)
        goal_arc = self.arc[rows, nearest] + lookahead
        goal = self._point_at(goal_arc)
        local = to_ego_frame(goal[:, None, :], ego.pose)[:, 0]
        # a goal nearer than the look-ahead (a plan that stops short of it) is steered to as if it
        # were a look-ahead away; otherwise small lateral errors near a standstill turn the wheel
        # to its stop and the car yaws as it creeps
        distance_sq = np.maximum(np.sum(local**2, axis=-1), lookahead**2)
        curvature = 2.0 * local[:, 1] / distance_sq
        moving = self.arc[:, -1] > 0.1  # a plan that stays put needs no steering
        wanted = np.where(moving, np.arctan(curvature * self.limits.wheel_base), ego.steer)
        wanted = np.clip(wanted, -self.limits.max_steer, self.limits.max_steer)
        steer_rate = (wanted - ego.steer) / max(self.config.steer_time_constant, DT)
        self.step += 1
        return accel, steer_rate

    def _point_at(self, arc: np.ndarray) -> np.ndarray:
        """Plan positions [N, 2] at arc length ``arc`` [N] (the plan's end point past its end)."""
        rows = np.arange(len(arc))
        upper = np.minimum(np.sum(self.arc <= arc[:, None], axis=1), HORIZON_STEPS)
        upper = np.maximum(upper, 1)
        lower = upper - 1
        span = np.maximum(self.arc[rows, upper] - self.arc[rows, lower], 1e-9)
        weight = np.clip((arc - self.arc[rows, lower]) / span, 0.0, 1.0)[:, None]
        return self.points[rows, lower] + weight * (self.points[rows, upper] - self.points[rows, lower])
