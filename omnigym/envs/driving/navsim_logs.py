"""Scenes from NAVSIM / OpenScene logs, so a user with the real data can drive it in the env.

NAVSIM's logs (``navsim_logs/<split>/<log>.pkl``) are pickled lists of frame dictionaries at 2 Hz.
The fields read here are those NAVSIM's own ``Scene.from_scene_dict_list`` reads:
``ego2global_translation`` and ``ego2global_rotation`` (the rear axle's pose, a ``w, x, y, z``
quaternion), ``ego_dynamic_state`` (``vx, vy, ax, ay`` in the ego frame), ``driving_command``
(one-hot: left, straight, right, unknown), ``traffic_lights`` (``(lane connector id, is red)``
pairs), ``roadblock_ids`` (the route) and ``anns`` (``gt_boxes`` ``[N, 7]`` = x, y, z, length,
width, height, yaw in the ego frame, ``gt_names``, ``gt_velocity_3d``, ``track_tokens``), plus
``lidar2ego_translation`` when present. The maps are nuPlan GeoPackages, which need nuPlan's
devkit; here the map comes as a lane map (``read_lane_map``): the lanes and lane connectors near
the log, exported once from nuPlan's map API (docs/envs/driving.md shows how).

:func:`scene_from_navsim_frames` turns consecutive frames into one scene: poses become box
centres in a local frame (the origin at the ego's first position), 0.5 s frames are interpolated
to the env's 0.1 s, agents are matched across frames by track token, and the route is the chain of
lanes the logged ego drove, continued along the route's road blocks.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from omnigym.envs.driving.scene import (
    AGENT_STATIC,
    AGENT_VEHICLE,
    COMMAND_LEFT,
    COMMAND_RIGHT,
    COMMAND_STRAIGHT,
    DT,
    HISTORY_STEPS,
    HORIZON_STEPS,
    LIGHT_GREEN,
    LIGHT_RED,
    RoadMap,
    Route,
    Scene,
    TrafficLog,
)

FRAME_INTERVAL = 0.5
"""Seconds between NAVSIM log frames (2 Hz)."""
SAMPLES_PER_FRAME = round(FRAME_INTERVAL / DT)
HISTORY_FRAMES = HISTORY_STEPS // SAMPLES_PER_FRAME
"""Frames before the episode start: the scene's first frames cover the env's 2 s of history."""
MIN_FRAMES = HISTORY_FRAMES + HORIZON_STEPS // SAMPLES_PER_FRAME + 1
"""Fewest frames a scene can be made of: the history, one 0.5 s step and a 4 s horizon."""
REAR_AXLE_TO_CENTRE = 1.461
"""Metres from the ego's rear axle (NAVSIM's ego pose) to its box centre (nuPlan Pacifica)."""
AGENT_NAMES = ("vehicle", "pedestrian", "bicycle")
"""Annotation classes nuPlan counts as agents; every other class is a static object."""
LANE_SPACING = 2.0
"""Lane centrelines are resampled to at most this many metres between points."""
MAX_ROUTE_LANES = 12


@dataclass
class MapLane:
    """One lane or lane connector of a lane map, in the log's global coordinates."""

    id: str
    points: np.ndarray  # [n, 2] centreline in driving direction
    width: float = 3.5
    speed_limit: float = 13.9
    successors: list[str] = field(default_factory=list)
    left: str | None = None
    right: str | None = None
    is_connector: bool = False
    roadblock: str = ""


@dataclass
class LaneMap:
    """The lanes near a log and the intersections' quadrilaterals (global coordinates)."""

    lanes: list[MapLane]
    intersections: np.ndarray = field(default_factory=lambda: np.zeros((0, 4, 2)))


def read_lane_map(path: str | Path) -> LaneMap:
    """A lane map from JSON.

    The file holds ``{"lanes": [{"id", "points", "width", "speed_limit", "successors", "left",
    "right", "is_connector", "roadblock"}, ...], "intersections": [[[x, y] x 4], ...]}``. Only
    ``id`` and ``points`` are required; the others default as in :class:`MapLane`.

    Raises:
        ValueError: a lane without an id or with fewer than 2 points, or an intersection that is
            not 4 points.
    """
    data = json.loads(Path(path).read_text())
    lanes = []
    for i, entry in enumerate(data.get("lanes", [])):
        points = np.asarray(entry.get("points", []), np.float64)
        if "id" not in entry or points.ndim != 2 or points.shape[0] < 2 or points.shape[1] != 2:
            raise ValueError(f"{path}: lane {i} needs an 'id' and at least 2 [x, y] 'points'")
        known = {k: entry[k] for k in ("width", "speed_limit", "left", "right", "is_connector") if k in entry}
        lanes.append(
            MapLane(
                id=str(entry["id"]),
                points=points,
                successors=[str(s) for s in entry.get("successors", [])],
                roadblock=str(entry.get("roadblock", "")),
                **known,
            )
        )
    quads = np.asarray(data.get("intersections") or np.zeros((0, 4, 2)), np.float64)
    if quads.ndim != 3 or quads.shape[1:] != (4, 2):
        raise ValueError(f"{path}: 'intersections' must be a list of 4 [x, y] corners each")
    return LaneMap(lanes, quads)


def read_navsim_log(path: str | Path) -> list[dict[str, Any]]:
    """The frame dictionaries of a NAVSIM log pickle (trusted files only: pickle runs code)."""
    with open(path, "rb") as file:
        frames = pickle.load(file)
    if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
        raise ValueError(f"{path} is not a NAVSIM log: expected a pickled list of frame dicts")
    return frames


# --- conversion -----------------------------------------------------------------------------------
def scene_from_navsim_frames(
    frames: Sequence[dict[str, Any]],
    lane_map: LaneMap,
    *,
    scene_id: int = 0,
    kind: str = "navsim",
    crop_radius: float = 80.0,
) -> Scene:
    """One scene from consecutive 2 Hz frames: the first 2 s are history, the last 4 s the horizon.

    Args:
        frames: at least :data:`MIN_FRAMES` consecutive frames of one log.
        lane_map: the lanes around the log (global coordinates).
        scene_id: the scene's id.
        kind: the scene's label.
        crop_radius: lanes with no point within this many metres of the ego's track are left out
            (the env holds at most 64 lanes and a 400 m canvas).

    Raises:
        ValueError: too few frames, or no lane near the ego.
    """
    if len(frames) < MIN_FRAMES:
        raise ValueError(
            f"a scene needs at least {MIN_FRAMES} frames (2 s history, 4 s horizon), got {len(frames)}"
        )
    rear = np.array([_ego_pose(frame) for frame in frames])  # [F, 3] rear axle, global
    origin = rear[0, :2].copy()
    ego = rear.copy()
    ego[:, :2] += REAR_AXLE_TO_CENTRE * np.stack([np.cos(ego[:, 2]), np.sin(ego[:, 2])], axis=1) - origin
    speed = np.array([_signed_speed(frame["ego_dynamic_state"][:2], 0.0) for frame in frames])
    road_map, ids = _road_map(lane_map, ego[:, :2], origin, crop_radius)
    agents = _agents(frames, rear, origin)
    light_lanes, light_state = _lights(frames, ids)
    road_map.light_lane = light_lanes
    log = TrafficLog(
        agent_pose=_interpolate_poses(agents["pose"], agents["speed"], agents["valid"]).astype(np.float32),
        agent_speed=_interpolate(agents["speed"], agents["valid"]).astype(np.float32),
        agent_valid=_interpolate_valid(agents["valid"]),
        agent_size=agents["size"].astype(np.float32),
        agent_type=agents["type"],
        ego_pose=_interpolate_poses(ego[:, None], speed[:, None], np.ones((len(frames), 1), bool))[
            :, 0
        ].astype(np.float32),
        ego_speed=_interpolate(speed[:, None], np.ones((len(frames), 1), bool))[:, 0].astype(np.float32),
        light_state=np.repeat(light_state, SAMPLES_PER_FRAME, axis=0)[
            : (len(frames) - 1) * SAMPLES_PER_FRAME + 1
        ],
    )
    log.agent_pose[~log.agent_valid] = 0.0
    log.agent_speed[~log.agent_valid] = 0.0
    current = frames[HISTORY_FRAMES]
    roadblocks = current.get("roadblock_ids", [])
    route = Route(
        _route(road_map, ids, lane_map, log.ego_pose.astype(np.float64), roadblocks), _command(current)
    )
    scene = Scene(scene_id, kind, road_map, route, log)
    scene.validate()
    return scene


def _ego_pose(frame: dict[str, Any]) -> tuple[float, float, float]:
    """The rear axle's global ``(x, y, yaw)``; yaw from the ``w, x, y, z`` quaternion."""
    x, y = frame["ego2global_translation"][:2]
    w, qx, qy, qz = frame["ego2global_rotation"]
    return float(x), float(y), float(np.arctan2(2 * (w * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz)))


def _signed_speed(velocity: Sequence[float] | np.ndarray, heading: float) -> float:
    """Speed along ``heading`` (same frame as ``velocity``), signed: negative when reversing."""
    vx, vy = float(velocity[0]), float(velocity[1])
    along = vx * np.cos(heading) + vy * np.sin(heading)
    return float(np.hypot(vx, vy) * (1.0 if along >= 0 else -1.0))


def _agents(frames: Sequence[dict[str, Any]], rear: np.ndarray, origin: np.ndarray) -> dict[str, np.ndarray]:
    """Per-frame agent poses (box centres, local frame), speeds and validity, by track token."""
    tokens: dict[str, int] = {}
    rows: list[tuple[int, int, np.ndarray, float, str, float, float]] = []
    for f, frame in enumerate(frames):
        anns = frame.get("anns") or {}
        boxes = np.asarray(anns.get("gt_boxes", np.zeros((0, 7))), np.float64).reshape(-1, 7)
        if not len(boxes):
            continue
        velocity = np.asarray(anns.get("gt_velocity_3d", np.zeros((len(boxes), 3))), np.float64).reshape(
            -1, 3
        )
        offset = np.asarray(frame.get("lidar2ego_translation", (0.0, 0.0, 0.0)), np.float64)[:2]
        x0, y0, yaw0 = rear[f]
        c, s = np.cos(yaw0), np.sin(yaw0)
        for box, v, name, token in zip(boxes, velocity, anns["gt_names"], anns["track_tokens"], strict=True):
            bx, by = box[0] + offset[0], box[1] + offset[1]
            pose = np.array(
                [x0 + c * bx - s * by - origin[0], y0 + s * bx + c * by - origin[1], yaw0 + box[6]]
            )
            index = tokens.setdefault(str(token), len(tokens))
            rows.append((f, index, pose, _signed_speed(v[:2], box[6]), str(name), box[3], box[4]))
    num_agents = len(tokens)
    pose = np.zeros((len(frames), num_agents, 3))
    speed = np.zeros((len(frames), num_agents))
    valid = np.zeros((len(frames), num_agents), bool)
    size = np.zeros((num_agents, 2))
    kind = np.zeros(num_agents, np.int8)
    for f, a, box_pose, agent_speed, name, length, width in rows:
        pose[f, a], speed[f, a], valid[f, a] = box_pose, agent_speed, True
        size[a] = (length, width)
        kind[a] = AGENT_VEHICLE if name in AGENT_NAMES else AGENT_STATIC
    return {"pose": pose, "speed": speed, "valid": valid, "size": size, "type": kind}


def _interpolate_valid(valid: np.ndarray) -> np.ndarray:
    """0.1 s validity ``[T, A]`` from 2 Hz ``[F, A]``: valid between two valid frames, and at them."""
    out = np.zeros(((len(valid) - 1) * SAMPLES_PER_FRAME + 1, valid.shape[1]), bool)
    out[::SAMPLES_PER_FRAME] = valid
    both = valid[:-1] & valid[1:]
    for k in range(1, SAMPLES_PER_FRAME):
        out[k::SAMPLES_PER_FRAME][: len(both)] = both
    return out


def _interpolate(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Linear interpolation ``[F, A] -> [T, A]`` between frames (zeros where either end is invalid)."""
    weight = (np.arange(SAMPLES_PER_FRAME) / SAMPLES_PER_FRAME)[None, :, None]
    both = (valid[:-1] & valid[1:])[:, None]
    between = np.where(both, values[:-1, None] * (1 - weight) + values[1:, None] * weight, 0.0)
    between[:, 0] = values[:-1]  # frame samples keep their own value
    out = between.reshape(-1, *values.shape[1:])
    return np.concatenate([out, values[-1:]], axis=0)


def _interpolate_poses(pose: np.ndarray, speed: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Poses ``[F, A, 3] -> [T, A, 3]``, smooth through the frames.

    Positions follow the cubic Hermite curve whose tangents are the velocities (speed along the
    heading; linear would kink at every frame and break the comfort checks); headings turn
    linearly the shorter way round.
    """
    heading = pose[..., 2]
    step = np.angle(np.exp(1j * np.diff(heading, axis=0)))
    unwrapped = heading[:1] + np.concatenate([np.zeros_like(heading[:1]), np.cumsum(step, axis=0)], axis=0)
    u = (np.arange(SAMPLES_PER_FRAME) / SAMPLES_PER_FRAME)[None, :, None]
    h00, h10, h01, h11 = 2 * u**3 - 3 * u**2 + 1, u**3 - 2 * u**2 + u, -2 * u**3 + 3 * u**2, u**3 - u**2
    both = (valid[:-1] & valid[1:])[:, None]
    axes = []
    for trig, k in ((np.cos, 0), (np.sin, 1)):
        tangent = FRAME_INTERVAL * speed * trig(heading)
        p0, p1, m0, m1 = pose[:-1, None, :, k], pose[1:, None, :, k], tangent[:-1, None], tangent[1:, None]
        between = np.where(both, h00 * p0 + h10 * m0 + h01 * p1 + h11 * m1, 0.0)
        between[:, 0] = pose[:-1, :, k]
        axes.append(np.concatenate([between.reshape(-1, pose.shape[1]), pose[-1:, :, k]], axis=0))
    out = np.stack([*axes, _interpolate(unwrapped, valid)], axis=-1)
    out[..., 2] = np.angle(np.exp(1j * out[..., 2]))
    return out


def _resample(points: np.ndarray) -> np.ndarray:
    """A polyline with at most LANE_SPACING m between consecutive points (same shape otherwise)."""
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    keep = np.concatenate([[True], seg > 1e-6])
    points, stations = points[keep], np.concatenate([[0.0], np.cumsum(seg[seg > 1e-6])])
    count = max(int(np.ceil(stations[-1] / LANE_SPACING)) + 1, 2)
    at = np.linspace(0.0, stations[-1], count)
    return np.stack([np.interp(at, stations, points[:, 0]), np.interp(at, stations, points[:, 1])], axis=1)


def _road_map(
    lane_map: LaneMap, track: np.ndarray, origin: np.ndarray, crop_radius: float
) -> tuple[RoadMap, dict[str, int]]:
    """The lanes within ``crop_radius`` of the ego's ``track`` (local), as a RoadMap; their index by id."""
    kept: list[tuple[MapLane, np.ndarray]] = []
    for lane in lane_map.lanes:
        local = _resample(lane.points - origin)
        nearest = np.min(np.linalg.norm(local[:, None] - track[None], axis=-1))
        if nearest <= crop_radius:
            kept.append((lane, local))
    if not kept:
        raise ValueError(
            f"no lane of the lane map comes within crop_radius={crop_radius} m of the ego's track"
        )
    ids = {lane.id: i for i, (lane, _) in enumerate(kept)}
    longest = max(len(points) for _, points in kept)
    lane_points = np.stack([np.concatenate([p, np.repeat(p[-1:], longest - len(p), 0)]) for _, p in kept])
    width_successors = max([len(lane.successors) for lane, _ in kept] + [1])
    successors = np.full((len(kept), width_successors), -1, np.int32)
    for i, (lane, _) in enumerate(kept):
        known = [ids[s] for s in lane.successors if s in ids]
        successors[i, : len(known)] = known
    roads = {block: k for k, block in enumerate(dict.fromkeys(lane.roadblock or lane.id for lane, _ in kept))}
    road_map = RoadMap(
        lane_points=lane_points.astype(np.float32),
        lane_num_points=np.array([len(p) for _, p in kept], np.int32),
        lane_width=np.array([lane.width for lane, _ in kept], np.float32),
        lane_speed_limit=np.array([lane.speed_limit for lane, _ in kept], np.float32),
        lane_is_connector=np.array([lane.is_connector for lane, _ in kept], bool),
        lane_road=np.array([roads[lane.roadblock or lane.id] for lane, _ in kept], np.int32),
        lane_left=np.array([ids.get(lane.left or "", -1) for lane, _ in kept], np.int32),
        lane_right=np.array([ids.get(lane.right or "", -1) for lane, _ in kept], np.int32),
        lane_successors=successors,
        intersections=(lane_map.intersections - origin).astype(np.float32),
        light_lane=np.zeros(0, np.int32),
    )
    return road_map, ids


def _lights(frames: Sequence[dict[str, Any]], ids: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The light lanes (connectors of the map that any frame names) and their states per frame."""
    named = [str(lane) for frame in frames for lane, _ in frame.get("traffic_lights", []) if str(lane) in ids]
    lanes = list(dict.fromkeys(named))
    column = {lane: k for k, lane in enumerate(lanes)}
    state = np.full((len(frames), len(lanes)), LIGHT_GREEN, np.int8)
    for f, frame in enumerate(frames):
        for lane, red in frame.get("traffic_lights", []):
            if str(lane) in column and red:
                state[f, column[str(lane)]] = LIGHT_RED
    return np.array([ids[lane] for lane in lanes], np.int32), state


def _nearest_lane(road_map: RoadMap, pose: np.ndarray) -> int:
    """The lane whose centreline passes nearest to ``pose``, preferring lanes heading its way."""
    best, best_cost = 0, np.inf
    for lane in range(road_map.num_lanes):
        points = road_map.centreline(lane)
        d = np.linalg.norm(points - pose[:2], axis=1)
        i = int(np.argmin(d))
        j = min(i + 1, len(points) - 1)
        i = j - 1
        direction = np.arctan2(*(points[j] - points[i])[::-1])
        misaligned = abs(np.angle(np.exp(1j * (direction - pose[2])))) > np.pi / 3
        cost = float(d.min()) + (100.0 if misaligned else 0.0)
        if cost < best_cost:
            best, best_cost = lane, cost
    return best


def _route(
    road_map: RoadMap, ids: dict[str, int], lane_map: LaneMap, ego: np.ndarray, roadblocks: Sequence[str]
) -> np.ndarray:
    """The lanes the ego drove, chained by successors, then continued along the route's road blocks.

    The lanes nearest the ego's track give the road lanes it drove (a lane change moves the route
    onto the new lane); between two of them, the connector that fits the track best.
    """
    visited = [_nearest_lane(road_map, pose) for pose in ego]
    successors = [set(int(s) for s in row if s >= 0) for row in road_map.lane_successors]
    route = visited[:1]
    for lane in (lane for lane in visited[1:] if not road_map.lane_is_connector[lane]):
        if lane == route[-1]:
            continue
        if lane in successors[route[-1]]:
            route.append(lane)
            continue
        bridges = [c for c in successors[route[-1]] if lane in successors[c]]
        if bridges:
            route += [min(bridges, key=lambda c: _fit(road_map, c, ego)), lane]
        else:  # a lane change: the route continues from the new lane
            route[-1] = lane
    block_of = {ids[lane.id]: lane.roadblock for lane in lane_map.lanes if lane.id in ids}
    remaining = [str(block) for block in roadblocks]
    while len(route) < MAX_ROUTE_LANES:
        options = sorted(s for s in successors[route[-1]] if s not in route)
        if not options:
            break
        on_route = [s for s in options if block_of.get(s) in remaining]
        route.append((on_route or options)[0])
    return np.array(route, np.int32)


def _fit(road_map: RoadMap, lane: int, track: np.ndarray, cap: float = 5.0) -> float:
    """How far the ``track`` strays from ``lane`` where it runs along it (distances capped at ``cap``)."""
    points = road_map.centreline(lane)
    distance = np.min(np.linalg.norm(track[:, None, :2] - points[None], axis=-1), axis=1)
    return float(np.minimum(distance, cap).sum())


def _command(frame: dict[str, Any]) -> int:
    """NAVSIM's one-hot driving command (left, straight, right, unknown) as a route command."""
    command = np.asarray(frame.get("driving_command", (0, 1, 0, 0)))
    index = int(np.argmax(command)) if command.size else 1
    return {0: COMMAND_LEFT, 2: COMMAND_RIGHT}.get(index, COMMAND_STRAIGHT)


def scenes_from_navsim_log(
    frames: Sequence[dict[str, Any]],
    lane_map: LaneMap,
    *,
    frames_per_scene: int = 21,
    first_scene_id: int = 0,
    crop_radius: float = 80.0,
) -> list[Scene]:
    """A log cut into consecutive scenes of ``frames_per_scene`` frames; a shorter tail is dropped.

    The default, 21 frames, is 10 s: 2 s of history, a 4 s episode and a 4 s horizon. Save them
    with ``SceneSet(scenes).save(directory)`` and drive them with ``scene_dir``.
    """
    if frames_per_scene < MIN_FRAMES:
        raise ValueError(f"frames_per_scene must be >= {MIN_FRAMES}, got {frames_per_scene}")
    starts = range(0, len(frames) - frames_per_scene + 1, frames_per_scene)
    return [
        scene_from_navsim_frames(
            frames[start : start + frames_per_scene],
            lane_map,
            scene_id=first_scene_id + i,
            crop_radius=crop_radius,
        )
        for i, start in enumerate(starts)
    ]
