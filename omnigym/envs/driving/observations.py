"""What the ego sees: Dict observations in its own frame (x forward, y left), batched.

Keys (configs pick which):
- ``state`` [12]: speed, acceleration, wheel angle, yaw rate, lateral offset and heading error to
  the route centreline, speed limit, the command one-hot (left, straight, right), the distance to
  the next red light on the route (100 m when none) and the elapsed share of the episode.
- ``agents`` [K, 9]: the K nearest agents: x, y, cos and sin of relative heading, vx, vy, length,
  width, valid (0 rows pad).
- ``route`` [P, 3]: route centreline points every ``route_spacing`` m ahead: x, y, valid.
- ``lanes`` [M, P, 3]: the M lane centrelines nearest to the ego, from their nearest point onward
  every ``lane_spacing`` m: x, y, valid.
- ``lights`` [J, 6]: the J nearest traffic-light stop lines ahead: x, y, green, yellow, red, valid.
- ``image``: the BEV raster (``render.py``); ``text``: a description for VLMs (``text.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from omnigym.envs.driving.dynamics import to_ego_frame, wrap_angle
from omnigym.envs.driving.scene import (
    COMMAND_LEFT,
    COMMAND_RIGHT,
    COMMAND_STRAIGHT,
    LIGHT_GREEN,
    LIGHT_RED,
    LIGHT_YELLOW,
)

VECTOR_KEYS = ("state", "agents", "route", "lanes", "lights")
ALL_KEYS = (*VECTOR_KEYS, "image", "text")
STATE_DIM = 12
NO_LIGHT_DISTANCE = 100.0
AGENT_RADIUS = 80.0
"""Agents farther than this (m) are not observed."""
LANE_SAMPLE_SPACING = 2.0
LANE_REFRESH_STEPS = 10
"""Which lanes are nearest is re-decided every this many steps; their points move every step."""
COARSE = 4
"""Lane samples skipped by the search for the nearest lanes (refined locally afterwards)."""


@dataclass(frozen=True)
class ObservationConfig:
    """Sizes of the observation keys."""

    keys: tuple[str, ...] = VECTOR_KEYS
    num_agents: int = 16
    num_route_points: int = 20
    route_spacing: float = 4.0
    num_lanes: int = 6
    num_lane_points: int = 10
    lane_spacing: float = 4.0
    num_lights: int = 4

    def __post_init__(self) -> None:
        unknown = [key for key in self.keys if key not in ALL_KEYS]
        if unknown or not self.keys:
            raise ValueError(f"obs_keys {list(self.keys)}: choose from {list(ALL_KEYS)} (unknown: {unknown})")
        for name in ("num_agents", "num_route_points", "num_lanes", "num_lane_points", "num_lights"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lane_spacing < LANE_SAMPLE_SPACING or self.route_spacing < 1.0:
            raise ValueError(f"lane_spacing must be >= {LANE_SAMPLE_SPACING} m and route_spacing >= 1 m")


def vector_spaces(config: ObservationConfig) -> dict[str, spaces.Box]:
    """The Box space of every vector key."""
    shapes = {
        "state": (STATE_DIM,),
        "agents": (config.num_agents, 9),
        "route": (config.num_route_points, 3),
        "lanes": (config.num_lanes, config.num_lane_points, 3),
        "lights": (config.num_lights, 6),
    }
    return {key: spaces.Box(-np.inf, np.inf, shape, np.float32) for key, shape in shapes.items()}


def state_features(
    speed: np.ndarray,
    accel: np.ndarray,
    steer: np.ndarray,
    yaw_rate: np.ndarray,
    lateral: np.ndarray,
    heading_error: np.ndarray,
    speed_limit: np.ndarray,
    command: np.ndarray,
    red_light_distance: np.ndarray,
    elapsed: np.ndarray,
) -> np.ndarray:
    """``state`` [N, 12] from per-env quantities [N]."""
    one_hot = np.stack(
        [command == COMMAND_LEFT, command == COMMAND_STRAIGHT, command == COMMAND_RIGHT], axis=1
    )
    columns = [speed, accel, steer, yaw_rate, lateral, wrap_angle(heading_error), speed_limit]
    out = np.concatenate(
        [np.stack(columns, axis=1), one_hot, np.stack([red_light_distance, elapsed], axis=1)], axis=1
    )
    return out.astype(np.float32)


def agent_features(
    ego_pose: np.ndarray, pose: np.ndarray, speed: np.ndarray, size: np.ndarray, valid: np.ndarray, k: int
) -> np.ndarray:
    """``agents`` [N, K, 9]: the ``k`` nearest valid agents (within AGENT_RADIUS) in the ego frame."""
    num, num_agents = valid.shape
    local = to_ego_frame(pose[..., :2], ego_pose)  # [N, A, 2]
    distance = np.where(valid, np.hypot(local[..., 0], local[..., 1]), np.inf)
    if num_agents > k:
        nearest = np.argpartition(distance, k - 1, axis=1)[:, :k]
    else:
        nearest = np.broadcast_to(np.arange(num_agents), (num, num_agents))
    order = np.argsort(np.take_along_axis(distance, nearest, axis=1), axis=1)
    nearest = np.take_along_axis(nearest, order, axis=1)
    rows = np.arange(num)[:, None]
    rel_heading = pose[rows, nearest, 2] - ego_pose[:, 2:3]
    ego_heading = ego_pose[:, 2:3]
    world_v = speed[rows, nearest][..., None] * np.stack(
        [np.cos(pose[rows, nearest, 2]), np.sin(pose[rows, nearest, 2])], -1
    )
    v_local = np.stack(
        [
            world_v[..., 0] * np.cos(ego_heading) + world_v[..., 1] * np.sin(ego_heading),
            -world_v[..., 0] * np.sin(ego_heading) + world_v[..., 1] * np.cos(ego_heading),
        ],
        axis=-1,
    )
    seen = (distance[rows, nearest] < AGENT_RADIUS)[..., None]
    features = np.concatenate(
        [
            local[rows, nearest],
            np.cos(rel_heading)[..., None],
            np.sin(rel_heading)[..., None],
            v_local,
            size[rows, nearest],
            np.ones_like(seen, dtype=np.float64),
        ],
        axis=-1,
    )
    out = np.zeros((num, k, 9), np.float32)
    out[:, : nearest.shape[1]] = np.where(seen, features, 0.0)
    return out


def route_features(
    ego_pose: np.ndarray,
    route_points: np.ndarray,
    route_num_points: np.ndarray,
    station: np.ndarray,
    config: ObservationConfig,
) -> np.ndarray:
    """``route`` [N, P, 3]: route points every ``route_spacing`` m past the ego's station."""
    offsets = np.arange(1, config.num_route_points + 1) * config.route_spacing
    index = np.round(station[:, None] + offsets).astype(np.int64)
    valid = index < route_num_points[:, None]
    index = np.minimum(index, route_num_points[:, None] - 1)
    points = np.take_along_axis(route_points, index[..., None], axis=1)
    local = to_ego_frame(points, ego_pose)
    return np.concatenate([np.where(valid[..., None], local, 0.0), valid[..., None]], axis=-1).astype(
        np.float32
    )


class LaneTracker:
    """The nearest lanes of each env and where along them the ego is, for the ``lanes`` key.

    Lane samples are stored per slot every LANE_SAMPLE_SPACING m; which lanes are nearest is
    re-decided every LANE_REFRESH_STEPS steps (a full search), the nearest sample every step
    (a local search), so the key costs little per step.
    """

    def __init__(self, num_slots: int, max_lanes: int, max_samples: int, config: ObservationConfig) -> None:
        self.config = config
        self.samples = np.zeros((num_slots, max_lanes, max_samples, 2))
        self.num_samples = np.zeros((num_slots, max_lanes), np.int64)
        self.selected = np.zeros((num_slots, config.num_lanes), np.int64)
        self.nearest = np.zeros((num_slots, config.num_lanes), np.int64)
        self.age = np.full(num_slots, LANE_REFRESH_STEPS, np.int64)
        # the most lanes / samples any loaded scene has: searches stop there (empty lanes pad to M)
        self.used_lanes = min(config.num_lanes, max_lanes)
        self.used_samples = 1

    def load(self, slot: int, lanes: list[np.ndarray]) -> None:
        """Lane centrelines of a new scene (each resampled every LANE_SAMPLE_SPACING m)."""
        longest = max(len(p) for p in lanes)
        if len(lanes) > self.samples.shape[1] or longest > self.samples.shape[2]:
            raise ValueError(
                f"scene has {len(lanes)} lanes of up to {longest} samples; the env holds "
                f"{self.samples.shape[1:3]}: raise max_lanes / max_lane_samples"
            )
        self.samples[slot] = 1e6  # far away: never nearest
        self.num_samples[slot] = 0
        for i, points in enumerate(lanes):
            self.samples[slot, i, : len(points)] = points
            self.num_samples[slot, i] = len(points)
        self.used_lanes = max(self.used_lanes, len(lanes))
        self.used_samples = max(self.used_samples, max(len(p) for p in lanes))
        self.age[slot] = LANE_REFRESH_STEPS

    def features(self, ego_pose: np.ndarray) -> np.ndarray:
        """``lanes`` [N, M, P, 3] for the egos [N, 3]."""
        refresh = self.age >= LANE_REFRESH_STEPS
        if refresh.any():
            refresh |= (
                self.age >= LANE_REFRESH_STEPS // 2
            )  # refresh in step with others: fewer, bigger searches
            self._select(np.flatnonzero(refresh), ego_pose[refresh])
        self.age += 1
        self._track(ego_pose)
        stride = round(self.config.lane_spacing / LANE_SAMPLE_SPACING)
        rows = np.arange(len(ego_pose))[:, None, None]
        lanes = self.selected[:, :, None]
        index = self.nearest[:, :, None] + stride * np.arange(self.config.num_lane_points)
        count = self.num_samples[rows[:, :, 0], self.selected][:, :, None]
        valid = index < count
        points = self.samples[rows, lanes, np.minimum(index, self.samples.shape[2] - 1)]
        local = to_ego_frame(points, ego_pose)
        return np.concatenate([np.where(valid[..., None], local, 0.0), valid[..., None]], axis=-1).astype(
            np.float32
        )

    def _select(self, slots: np.ndarray, ego_pose: np.ndarray) -> None:
        # a coarse search (every COARSE-th sample); _track refines the nearest sample locally
        coarse = self.samples[slots, : self.used_lanes, : self.used_samples : COARSE]
        d2 = np.sum((coarse - ego_pose[:, None, None, :2]) ** 2, axis=-1)  # [n, L, S / COARSE]
        nearest_sample = np.argmin(d2, axis=2) * COARSE
        lane_distance = np.min(d2, axis=2)
        m = self.config.num_lanes
        if lane_distance.shape[1] > m:
            chosen = np.argpartition(lane_distance, m - 1, axis=1)[:, :m]
        else:
            chosen = np.resize(np.arange(lane_distance.shape[1]), (len(slots), m))
        order = np.argsort(np.take_along_axis(lane_distance, chosen, axis=1), axis=1)
        chosen = np.take_along_axis(chosen, order, axis=1)
        self.selected[slots] = chosen
        self.nearest[slots] = np.take_along_axis(nearest_sample, chosen, axis=1)
        self.age[slots] = 0

    def _track(self, ego_pose: np.ndarray) -> None:
        window = np.arange(-COARSE, 9)  # the ego moves < 16 m between steps
        rows = np.arange(len(ego_pose))[:, None, None]
        index = np.clip(self.nearest[:, :, None] + window, 0, self.samples.shape[2] - 1)
        points = self.samples[rows, self.selected[:, :, None], index]
        d2 = np.sum((points - ego_pose[:, None, None, :2]) ** 2, axis=-1)
        self.nearest = np.take_along_axis(index, np.argmin(d2, axis=2)[..., None], axis=2)[..., 0]


def light_features(
    ego_pose: np.ndarray, light_pose: np.ndarray, light_state: np.ndarray, light_valid: np.ndarray, k: int
) -> np.ndarray:
    """``lights`` [N, J, 6]: the ``k`` nearest stop lines ahead of the ego (x > -2 m), within 80 m."""
    num = len(ego_pose)
    out = np.zeros((num, k, 6), np.float32)
    if light_pose.shape[1] == 0:
        return out
    local = to_ego_frame(light_pose[..., :2], ego_pose)
    facing = np.cos(light_pose[..., 2] - ego_pose[:, 2:3]) > 0.5  # lights for the ego's direction of travel
    distance = np.where(
        light_valid & facing & (local[..., 0] > -2.0), np.hypot(local[..., 0], local[..., 1]), np.inf
    )
    count = min(k, light_pose.shape[1])
    nearest = np.argsort(distance, axis=1)[:, :count]
    rows = np.arange(num)[:, None]
    state = light_state[rows, nearest]
    seen = distance[rows, nearest] < 80.0
    features = np.concatenate(
        [
            local[rows, nearest],
            np.stack([state == LIGHT_GREEN, state == LIGHT_YELLOW, state == LIGHT_RED, seen], axis=-1),
        ],
        axis=-1,
    )
    out[:, :count] = np.where(seen[..., None], features, 0.0)
    return out
