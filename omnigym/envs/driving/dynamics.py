"""The ego's motion: a kinematic bicycle model at 10 Hz, batched over envs.

NAVSIM tracks plans with a kinematic bicycle too; omnigym's reference point is the vehicle
centre (not the rear axle), which keeps boxes, metrics and observations on one point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from omnigym.envs.driving.scene import DT, EGO_WHEEL_BASE


@dataclass(frozen=True)
class BicycleLimits:
    """Physical limits of the ego (a passenger car)."""

    max_accel: float = 3.0
    """Strongest throttle, m/s²."""
    max_decel: float = 6.0
    """Strongest braking, m/s² (positive)."""
    max_steer: float = 0.6
    """Largest front-wheel angle, rad."""
    max_steer_rate: float = 1.0
    """Fastest steering change, rad/s."""
    max_speed: float = 25.0
    """m/s; the ego does not reverse."""
    wheel_base: float = EGO_WHEEL_BASE


@dataclass
class EgoState:
    """Batched ego state; arrays of shape [N] (pose [N, 3]) updated in place."""

    pose: np.ndarray  # [N, 3] x, y, heading
    speed: np.ndarray  # [N]
    steer: np.ndarray  # [N] front-wheel angle
    accel: np.ndarray  # [N] longitudinal acceleration applied last step
    yaw_rate: np.ndarray  # [N]

    @classmethod
    def zeros(cls, num: int) -> EgoState:
        """``num`` egos at the origin, at rest."""
        return cls(np.zeros((num, 3)), np.zeros(num), np.zeros(num), np.zeros(num), np.zeros(num))

    def copy(self) -> EgoState:
        """A deep copy."""
        return EgoState(
            self.pose.copy(), self.speed.copy(), self.steer.copy(), self.accel.copy(), self.yaw_rate.copy()
        )

    def take(self, index: np.ndarray) -> EgoState:
        """The sub-batch ``index`` (a copy)."""
        return EgoState(
            self.pose[index], self.speed[index], self.steer[index], self.accel[index], self.yaw_rate[index]
        )


def bicycle_step(
    state: EgoState, accel: np.ndarray, steer_rate: np.ndarray, limits: BicycleLimits, dt: float = DT
) -> None:
    """Advance ``state`` in place by ``dt`` under commanded acceleration and steering rate [N].

    Commands are clipped to the limits; speed stays in [0, max_speed] (braking at rest holds).
    """
    _bicycle_step(
        state.pose,
        state.speed,
        state.steer,
        state.accel,
        state.yaw_rate,
        np.asarray(accel, dtype=np.float64),
        np.asarray(steer_rate, dtype=np.float64),
        np.array([limits.max_accel, limits.max_decel, limits.max_steer, limits.max_steer_rate]),
        limits.max_speed,
        limits.wheel_base,
        dt,
    )


@njit(cache=True)
def _bicycle_step(
    pose: np.ndarray,
    speed: np.ndarray,
    steer: np.ndarray,
    applied: np.ndarray,
    yaw_rate: np.ndarray,
    accel: np.ndarray,
    steer_rate: np.ndarray,
    limits: np.ndarray,
    max_speed: float,
    wheel_base: float,
    dt: float,
) -> None:
    max_accel, max_decel, max_steer, max_steer_rate = limits
    for n in range(len(speed)):
        command = min(max(accel[n], -max_decel), max_accel)
        rate = min(max(steer_rate[n], -max_steer_rate), max_steer_rate)
        steer[n] = min(max(steer[n] + rate * dt, -max_steer), max_steer)
        new_speed = min(max(speed[n] + command * dt, 0.0), max_speed)
        applied[n] = (new_speed - speed[n]) / dt  # what was actually applied
        mean_speed = 0.5 * (speed[n] + new_speed)
        yaw_rate[n] = mean_speed * np.tan(steer[n]) / wheel_base
        heading = pose[n, 2]
        mid_heading = heading + 0.5 * yaw_rate[n] * dt  # midpoint rule: exact for arcs to O(dt^3)
        pose[n, 0] += mean_speed * np.cos(mid_heading) * dt
        pose[n, 1] += mean_speed * np.sin(mid_heading) * dt
        pose[n, 2] = (heading + yaw_rate[n] * dt + np.pi) % (2 * np.pi) - np.pi  # wrap_angle
        speed[n] = new_speed


def wrap_angle(angle: np.ndarray) -> np.ndarray:
    """Angles wrapped to [-pi, pi)."""
    return (angle + np.pi) % (2 * np.pi) - np.pi


def to_ego_frame(points: np.ndarray, ego_pose: np.ndarray) -> np.ndarray:
    """World points ``[N, ..., 2]`` in the frames of egos ``[N, 3]`` (x forward, y left)."""
    extra = points.ndim - 2
    shape = (ego_pose.shape[0],) + (1,) * extra
    cos, sin = np.cos(ego_pose[:, 2]).reshape(shape), np.sin(ego_pose[:, 2]).reshape(shape)
    dx = points[..., 0] - ego_pose[:, 0].reshape(shape)
    dy = points[..., 1] - ego_pose[:, 1].reshape(shape)
    return np.stack([dx * cos + dy * sin, -dx * sin + dy * cos], axis=-1)


def to_world_frame(points: np.ndarray, ego_pose: np.ndarray) -> np.ndarray:
    """Ego-frame points ``[N, ..., 2]`` back in the world frame."""
    extra = points.ndim - 2
    shape = (ego_pose.shape[0],) + (1,) * extra
    cos, sin = np.cos(ego_pose[:, 2]).reshape(shape), np.sin(ego_pose[:, 2]).reshape(shape)
    x = ego_pose[:, 0].reshape(shape) + points[..., 0] * cos - points[..., 1] * sin
    y = ego_pose[:, 1].reshape(shape) + points[..., 0] * sin + points[..., 1] * cos
    return np.stack([x, y], axis=-1)
