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
from numba import njit

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


def _output(
    shape: tuple[int, ...], rows: np.ndarray | None, out: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Where a key is written and which envs are computed.

    Every env into a new zeroed array, or the envs ``rows`` into ``out`` (their rows zeroed first).
    """
    if out is None:
        return np.zeros(shape, np.float32), np.arange(shape[0])
    if rows is None:
        raise ValueError("out needs rows: the envs to compute")
    out[rows] = 0.0
    return out, rows


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
    heading: np.ndarray,
    lateral: np.ndarray,
    station: np.ndarray,
    route_heading: np.ndarray,
    route_limit: np.ndarray,
    route_num: np.ndarray,
    command: np.ndarray,
    light_state: np.ndarray,
    light_valid: np.ndarray,
    light_station: np.ndarray,
    elapsed: np.ndarray,
    rows: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``state`` [N, 12] from the egos' dynamics [N], their routes and the lights on them.

    The heading error and speed limit are read at the route point nearest the ego's station;
    the next red or yellow stop line ahead on the route gives the light distance.

    Args:
        speed: ``[N]`` m/s.
        accel: ``[N]`` m/s^2.
        steer: ``[N]`` wheel angle, rad.
        yaw_rate: ``[N]`` rad/s.
        heading: ``[N]`` world heading, rad.
        lateral: ``[N]`` offset from the route centreline, m (left positive).
        station: ``[N]`` metres along the route.
        route_heading: ``[N, R]`` route heading every metre.
        route_limit: ``[N, R]`` speed limit every metre.
        route_num: ``[N]`` valid route points.
        command: ``[N]`` navigation command.
        light_state: ``[N, K]`` light states now.
        light_valid: ``[N, K]``.
        light_station: ``[N, K]`` station of each stop line on the route (inf off the route).
        elapsed: ``[N]`` share of the episode driven.
        rows: with ``out``, compute only these envs into it.
        out: ``[N, 12]`` to update in place.
    """
    out, rows = _output((len(speed), STATE_DIM), rows, out)
    _state_features(
        speed, accel, steer, yaw_rate, heading, lateral, station, route_heading, route_limit, route_num,
        command, light_state, light_valid, light_station, elapsed, rows, out,
    )  # fmt: skip
    return out


@njit(cache=True)
def _state_features(
    speed: np.ndarray,
    accel: np.ndarray,
    steer: np.ndarray,
    yaw_rate: np.ndarray,
    heading: np.ndarray,
    lateral: np.ndarray,
    station: np.ndarray,
    route_heading: np.ndarray,
    route_limit: np.ndarray,
    route_num: np.ndarray,
    command: np.ndarray,
    light_state: np.ndarray,
    light_valid: np.ndarray,
    light_station: np.ndarray,
    elapsed: np.ndarray,
    rows: np.ndarray,
    out: np.ndarray,
) -> None:
    for n in rows:
        index = min(int(np.rint(station[n])), route_num[n] - 1)  # route points are 1 m apart
        red_light = NO_LIGHT_DISTANCE
        for k in range(light_state.shape[1]):
            stopping = light_state[n, k] == LIGHT_RED or light_state[n, k] == LIGHT_YELLOW
            if stopping and light_valid[n, k] and light_station[n, k] > station[n]:
                red_light = min(red_light, light_station[n, k] - station[n])
        out[n, 0], out[n, 1], out[n, 2], out[n, 3] = speed[n], accel[n], steer[n], yaw_rate[n]
        out[n, 4] = lateral[n]
        out[n, 5] = (heading[n] - route_heading[n, index] + np.pi) % (2 * np.pi) - np.pi
        out[n, 6] = route_limit[n, index]
        out[n, 7] = command[n] == COMMAND_LEFT
        out[n, 8] = command[n] == COMMAND_STRAIGHT
        out[n, 9] = command[n] == COMMAND_RIGHT
        out[n, 10], out[n, 11] = red_light, elapsed[n]


def agent_features(
    ego_pose: np.ndarray,
    pose: np.ndarray,
    speed: np.ndarray,
    size: np.ndarray,
    valid: np.ndarray,
    k: int,
    rows: np.ndarray | None = None,
    out: np.ndarray | None = None,
    time: np.ndarray | None = None,
) -> np.ndarray:
    """``agents`` [N, K, 9]: the ``k`` nearest valid agents (within AGENT_RADIUS) in the ego frame.

    ``pose`` ``[N, A, 3]``, ``speed`` and ``valid`` ``[N, A]`` are the agents now; with ``time``
    ``[N]``, they are logs ``[N, T, A, ...]`` read at each env's time. With ``out`` and ``rows``,
    only the envs ``rows`` are computed, into ``out``.
    """
    if time is None:  # one time step: a log of length 1
        pose, speed, valid, time = (
            pose[:, None],
            speed[:, None],
            valid[:, None],
            np.zeros(len(pose), np.int64),
        )
    out, rows = _output((len(ego_pose), k, 9), rows, out)
    _agent_features(ego_pose, pose, speed, size, valid, time, rows, out)
    return out


@njit(cache=True)
def _agent_features(
    ego_pose: np.ndarray,
    poses: np.ndarray,
    speeds: np.ndarray,
    size: np.ndarray,
    valids: np.ndarray,
    time: np.ndarray,
    rows: np.ndarray,
    out: np.ndarray,
) -> None:
    num_agents, k = poses.shape[2], out.shape[1]
    local = np.empty((num_agents, 2))
    nearest = np.empty(k, np.int64)  # the agents seen so far, nearest first
    nearest_distance = np.empty(k)
    for n in rows:
        pose, speed, valid = poses[n, time[n]], speeds[n, time[n]], valids[n, time[n]]
        cos, sin = np.cos(ego_pose[n, 2]), np.sin(ego_pose[n, 2])
        count = 0
        for a in range(num_agents):
            if not valid[a]:
                continue
            dx, dy = pose[a, 0] - ego_pose[n, 0], pose[a, 1] - ego_pose[n, 1]
            distance = np.hypot(dx, dy)
            if distance >= AGENT_RADIUS or (count == k and distance >= nearest_distance[k - 1]):
                continue
            local[a, 0], local[a, 1] = dx * cos + dy * sin, -dx * sin + dy * cos
            row = min(count, k - 1)  # insertion into the sorted list (ties keep the lower index first)
            while row > 0 and nearest_distance[row - 1] > distance:
                nearest[row], nearest_distance[row] = nearest[row - 1], nearest_distance[row - 1]
                row -= 1
            nearest[row], nearest_distance[row] = a, distance
            count = min(count + 1, k)
        for row in range(count):
            a = nearest[row]
            heading_cos, heading_sin = np.cos(pose[a, 2]), np.sin(pose[a, 2])
            out[n, row, 0], out[n, row, 1] = local[a, 0], local[a, 1]
            # the agent's heading and velocity in the ego frame
            out[n, row, 2] = heading_cos * cos + heading_sin * sin
            out[n, row, 3] = heading_sin * cos - heading_cos * sin
            out[n, row, 4], out[n, row, 5] = speed[a] * out[n, row, 2], speed[a] * out[n, row, 3]
            out[n, row, 6], out[n, row, 7] = size[n, a, 0], size[n, a, 1]
            out[n, row, 8] = 1.0


def route_features(
    ego_pose: np.ndarray,
    route_points: np.ndarray,
    route_num_points: np.ndarray,
    station: np.ndarray,
    config: ObservationConfig,
    rows: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``route`` [N, P, 3]: route points every ``route_spacing`` m past the ego's station.

    With ``out`` and ``rows``, only the envs ``rows`` are computed, into ``out``.
    """
    out, rows = _output((len(ego_pose), config.num_route_points, 3), rows, out)
    _route_features(ego_pose, route_points, route_num_points, station, config.route_spacing, rows, out)
    return out


@njit(cache=True)
def _route_features(
    ego_pose: np.ndarray,
    route_points: np.ndarray,
    route_num_points: np.ndarray,
    station: np.ndarray,
    spacing: float,
    rows: np.ndarray,
    out: np.ndarray,
) -> None:
    for n in rows:
        cos, sin = np.cos(ego_pose[n, 2]), np.sin(ego_pose[n, 2])
        for p in range(out.shape[1]):
            index = int(np.rint(station[n] + (p + 1) * spacing))  # route points are 1 m apart
            if index >= route_num_points[n]:
                break
            dx, dy = route_points[n, index, 0] - ego_pose[n, 0], route_points[n, index, 1] - ego_pose[n, 1]
            out[n, p, 0], out[n, p, 1], out[n, p, 2] = dx * cos + dy * sin, -dx * sin + dy * cos, 1.0


FAR = 1e6
"""Coordinate of padding lane samples: far away, never nearest."""


@dataclass(frozen=True)
class LaneSamples:
    """A scene's lane centrelines, sampled every LANE_SAMPLE_SPACING m, as padded arrays."""

    points: np.ndarray  # [L, S, 2], padded with FAR
    counts: np.ndarray  # [L] samples of each lane
    bounds: np.ndarray  # [L, 4] min x, min y, max x, max y

    @classmethod
    def of(cls, lanes: list[np.ndarray]) -> LaneSamples:
        """From per-lane sample arrays ``[S_i, 2]``."""
        points = np.full((len(lanes), max(len(p) for p in lanes), 2), FAR)
        for i, lane in enumerate(lanes):
            points[i, : len(lane)] = lane
        bounds = np.array([(*lane.min(axis=0), *lane.max(axis=0)) for lane in lanes]).reshape(-1, 4)
        return cls(points, np.array([len(p) for p in lanes], np.int64), bounds)


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
        self.bounds = np.full((num_slots, max_lanes, 4), FAR)  # min x, min y, max x, max y per lane
        self.selected = np.zeros((num_slots, config.num_lanes), np.int64)
        self.nearest = np.zeros((num_slots, config.num_lanes), np.int64)
        self.age = np.full(num_slots, LANE_REFRESH_STEPS, np.int64)
        # the most lanes / samples any loaded scene has: searches stop there (empty lanes pad to M)
        self.used_lanes = min(config.num_lanes, max_lanes)
        self.used_samples = 1

    def load(self, slot: int, lanes: LaneSamples) -> None:
        """Lane centrelines of a new scene."""
        num_lanes, longest = lanes.points.shape[:2]
        if num_lanes > self.samples.shape[1] or longest > self.samples.shape[2]:
            raise ValueError(
                f"scene has {num_lanes} lanes of up to {longest} samples; the env holds "
                f"{self.samples.shape[1:3]}: raise max_lanes / max_lane_samples"
            )
        self.samples[slot] = FAR
        self.samples[slot, :num_lanes, :longest] = lanes.points
        self.num_samples[slot] = 0
        self.num_samples[slot, :num_lanes] = lanes.counts
        self.bounds[slot] = FAR
        self.bounds[slot, :num_lanes] = lanes.bounds
        self.used_lanes = max(self.used_lanes, num_lanes)
        self.used_samples = max(self.used_samples, longest)
        self.age[slot] = LANE_REFRESH_STEPS

    def features(
        self, ego_pose: np.ndarray, rows: np.ndarray | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``lanes`` [N, M, P, 3] for the egos [N, 3] (with ``out``: only the envs ``rows``, into it)."""
        shape = (len(ego_pose), self.config.num_lanes, self.config.num_lane_points, 3)
        out, rows = _output(shape, rows, out)
        stride = round(self.config.lane_spacing / LANE_SAMPLE_SPACING)
        _lane_features(
            ego_pose,
            self.samples,
            self.num_samples,
            self.bounds,
            self.selected,
            self.nearest,
            self.age,
            self.used_lanes,
            self.used_samples,
            stride,
            rows,
            out,
        )
        return out


@njit(cache=True)
def _lane_features(
    ego_pose: np.ndarray,
    samples: np.ndarray,
    num_samples: np.ndarray,
    bounds: np.ndarray,
    selected: np.ndarray,
    nearest: np.ndarray,
    age: np.ndarray,
    used_lanes: int,
    used_samples: int,
    stride: int,
    rows: np.ndarray,
    out: np.ndarray,
) -> None:
    """Update the lane choice (``selected``, ``nearest``, ``age``) and write ``lanes`` into ``out``.

    Which lanes are nearest is re-decided by a coarse search (every COARSE-th sample) when a slot's
    choice is LANE_REFRESH_STEPS old; lanes are searched nearest bounding box first, and the search
    stops at boxes farther than the M-th nearest lane found. The nearest sample on each chosen lane
    is refined every step by a local search.
    """
    m = selected.shape[1]
    last = samples.shape[2] - 1
    box_distance = np.empty(used_lanes)
    found_lane = np.empty(m, np.int64)  # the nearest lanes so far, by (distance, lane index)
    found_distance = np.empty(m)
    found_nearest = np.empty(m, np.int64)
    for n in rows:
        x, y = ego_pose[n, 0], ego_pose[n, 1]
        if age[n] >= LANE_REFRESH_STEPS:
            for lane in range(used_lanes):
                gap_x = max(bounds[n, lane, 0] - x, 0.0, x - bounds[n, lane, 2])
                gap_y = max(bounds[n, lane, 1] - y, 0.0, y - bounds[n, lane, 3])
                box_distance[lane] = gap_x * gap_x + gap_y * gap_y
            count = 0
            for lane in np.argsort(box_distance, kind="mergesort"):
                if count == m and box_distance[lane] > found_distance[m - 1]:
                    break  # no sample of this lane (or of farther boxes) can be nearer
                best, best_index = np.inf, 0
                for i in range(0, used_samples, COARSE):
                    d2 = (samples[n, lane, i, 0] - x) ** 2 + (samples[n, lane, i, 1] - y) ** 2
                    if d2 < best:
                        best, best_index = d2, i
                row = min(count, m - 1)
                if count == m and not _before(best, lane, found_distance[row], found_lane[row]):
                    continue
                while row > 0 and _before(best, lane, found_distance[row - 1], found_lane[row - 1]):
                    found_lane[row], found_distance[row] = found_lane[row - 1], found_distance[row - 1]
                    found_nearest[row] = found_nearest[row - 1]
                    row -= 1
                found_lane[row], found_distance[row], found_nearest[row] = lane, best, best_index
                count = min(count + 1, m)
            for j in range(m):  # fewer lanes than m: repeat them (their rows are equal), nearest first
                row = j * count // m
                selected[n, j], nearest[n, j] = found_lane[row], found_nearest[row]
            age[n] = 0
        age[n] += 1
        cos, sin = np.cos(ego_pose[n, 2]), np.sin(ego_pose[n, 2])
        for j in range(m):
            lane = selected[n, j]
            best, best_index = np.inf, 0
            for offset in range(-COARSE, 9):  # the ego moves < 16 m between steps
                i = min(max(nearest[n, j] + offset, 0), last)
                d2 = (samples[n, lane, i, 0] - x) ** 2 + (samples[n, lane, i, 1] - y) ** 2
                if d2 < best:
                    best, best_index = d2, i
            nearest[n, j] = best_index
            for p in range(out.shape[2]):
                i = best_index + stride * p
                if i >= num_samples[n, lane]:
                    break
                dx, dy = samples[n, lane, i, 0] - x, samples[n, lane, i, 1] - y
                out[n, j, p, 0], out[n, j, p, 1], out[n, j, p, 2] = (
                    dx * cos + dy * sin,
                    -dx * sin + dy * cos,
                    1.0,
                )


@njit(cache=True)
def _before(distance: float, lane: int, other_distance: float, other_lane: int) -> bool:
    """Whether a lane sorts before another: nearer, or as near with a lower index."""
    return distance < other_distance or (distance == other_distance and lane < other_lane)


def light_features(
    ego_pose: np.ndarray,
    light_pose: np.ndarray,
    light_state: np.ndarray,
    light_valid: np.ndarray,
    k: int,
    rows: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """``lights`` [N, J, 6]: the ``k`` nearest stop lines ahead of the ego (x > -2 m), within 80 m.

    With ``out`` and ``rows``, only the envs ``rows`` are computed, into ``out``.
    """
    out, rows = _output((len(ego_pose), k, 6), rows, out)
    _light_features(ego_pose, light_pose, light_state, light_valid, rows, out)
    return out


@njit(cache=True)
def _light_features(
    ego_pose: np.ndarray,
    light_pose: np.ndarray,
    light_state: np.ndarray,
    light_valid: np.ndarray,
    rows: np.ndarray,
    out: np.ndarray,
) -> None:
    num_lights = light_pose.shape[1]
    distance = np.empty(num_lights)
    local = np.empty((num_lights, 2))
    for n in rows:
        cos, sin = np.cos(ego_pose[n, 2]), np.sin(ego_pose[n, 2])
        for j in range(num_lights):
            if not light_valid[n, j]:
                distance[j] = np.inf
                continue
            dx, dy = light_pose[n, j, 0] - ego_pose[n, 0], light_pose[n, j, 1] - ego_pose[n, 1]
            local[j, 0], local[j, 1] = dx * cos + dy * sin, -dx * sin + dy * cos
            facing = np.cos(light_pose[n, j, 2] - ego_pose[n, 2]) > 0.5  # lights for the ego's direction
            ahead = facing and local[j, 0] > -2.0
            distance[j] = np.hypot(local[j, 0], local[j, 1]) if ahead else np.inf
        order = np.argsort(distance, kind="mergesort")
        for row in range(min(out.shape[1], num_lights)):
            j = order[row]
            if not distance[j] < 80.0:
                break
            state = light_state[n, j]
            out[n, row, 0], out[n, row, 1] = local[j, 0], local[j, 1]
            out[n, row, 2] = state == LIGHT_GREEN
            out[n, row, 3] = state == LIGHT_YELLOW
            out[n, row, 4] = state == LIGHT_RED
            out[n, row, 5] = 1.0
