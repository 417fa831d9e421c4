"""The scene format: a road map, the ego's route and a traffic log, as plain arrays.

A scene is what NAVSIM calls a log segment: everything the pseudo-simulator needs to replay the
world around the ego and to score it. Procedural scenes (``scenes.py``) and scenes converted from
real data use the same format, so users can bring their own logs: see ``docs/envs/driving.md``.

Conventions: metres, seconds, radians, a right-handed world frame (x east, y north, heading
counter-clockwise from +x). Logs are sampled every ``DT`` seconds. Log index ``HISTORY_STEPS`` is
the episode start; the steps before it are the history the ego "remembers".
"""

from __future__ import annotations

import itertools
import json
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1
DT = 0.1
"""Seconds between log samples (10 Hz, as NAVSIM's simulation)."""
HISTORY_STEPS = 20
"""Log samples before the episode start (2 s of history)."""
HORIZON_STEPS = 40
"""Samples of a NAVSIM planning horizon (4 s at 10 Hz)."""

# agent types (nuPlan: vehicles, pedestrians and bicycles are "agents"; the rest static objects)
AGENT_VEHICLE = 0
AGENT_STATIC = 1

# traffic light states
LIGHT_GREEN = 0
LIGHT_YELLOW = 1
LIGHT_RED = 2

# driving commands (NAVSIM's discrete navigation command)
COMMAND_LEFT = 0
COMMAND_STRAIGHT = 1
COMMAND_RIGHT = 2
COMMAND_NAMES = ("turn left", "go straight", "turn right")

EGO_LENGTH = 5.18
"""Ego footprint: nuPlan's Chrysler Pacifica (length, width, rear axle to centre, wheelbase)."""
EGO_WIDTH = 2.30
EGO_WHEEL_BASE = 3.09


@dataclass
class RoadMap:
    """Lanes as centreline polylines with widths, grouped into road blocks, plus intersections.

    The drivable area is the union of all lane polygons (centreline ± width/2) and intersection
    polygons. Lanes of one road block run the same direction; connectors are the lanes inside an
    intersection. Padded arrays: polylines repeat their last point up to ``P``.
    """

    lane_points: np.ndarray  # [L, P, 2] float32 centreline points
    lane_num_points: np.ndarray  # [L] int32 valid points per lane
    lane_width: np.ndarray  # [L] float32
    lane_speed_limit: np.ndarray  # [L] float32, m/s
    lane_is_connector: np.ndarray  # [L] bool, lane inside an intersection
    lane_road: np.ndarray  # [L] int32 road block id
    lane_left: np.ndarray  # [L] int32 same-direction neighbour to the left, -1 for none
    lane_right: np.ndarray  # [L] int32 same-direction neighbour to the right, -1 for none
    lane_successors: np.ndarray  # [L, S] int32 successor lanes, -1 padding
    intersections: np.ndarray  # [I, 4, 2] float32 convex quadrilaterals
    light_lane: np.ndarray  # [K] int32 the connector lane each traffic light controls

    @property
    def num_lanes(self) -> int:
        """L."""
        return len(self.lane_width)

    def centreline(self, lane: int) -> np.ndarray:
        """The valid ``[n, 2]`` points of one lane."""
        return self.lane_points[lane, : self.lane_num_points[lane]]


@dataclass
class Route:
    """The lanes the ego should follow, and its navigation command."""

    lanes: np.ndarray  # [R] int32 lane ids in driving order
    command: int  # COMMAND_LEFT / STRAIGHT / RIGHT at the scene's decision point


@dataclass
class TrafficLog:
    """Everything that moves, sampled every ``DT`` s for ``T`` steps.

    The ego's logged track is the "human" driver: the reference ``log_replay`` replays and the
    human filter scores. Other agents in the log reacted to that human ego.
    """

    agent_pose: np.ndarray  # [T, A, 3] float32 x, y, heading
    agent_speed: np.ndarray  # [T, A] float32 signed speed along the heading
    agent_valid: np.ndarray  # [T, A] bool, agent present in the scene
    agent_size: np.ndarray  # [A, 2] float32 length, width
    agent_type: np.ndarray  # [A] int8 AGENT_VEHICLE / AGENT_STATIC
    ego_pose: np.ndarray  # [T, 3] float32
    ego_speed: np.ndarray  # [T] float32
    light_state: np.ndarray  # [T, K] int8 LIGHT_GREEN / YELLOW / RED

    @property
    def num_steps(self) -> int:
        """T."""
        return self.ego_pose.shape[0]

    @property
    def num_agents(self) -> int:
        """A."""
        return self.agent_size.shape[0]


@dataclass
class Scene:
    """One map, route and traffic log; ``scene_id`` and ``kind`` identify where it came from."""

    scene_id: int
    kind: str  # e.g. "straight", "curve", "merge", "intersection", or the user's own label
    road_map: RoadMap
    route: Route
    log: TrafficLog

    @property
    def episode_steps(self) -> int:
        """Steps the ego can drive: the log must reach one horizon past the last one."""
        return self.log.num_steps - HISTORY_STEPS - HORIZON_STEPS

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first inconsistency (shapes, ids, non-finite values)."""
        m, log = self.road_map, self.log
        num_lanes, num_steps, num_agents = m.num_lanes, log.num_steps, log.num_agents
        expect = {
            "road_map.lane_points": (m.lane_points, (num_lanes, None, 2)),
            "road_map.lane_num_points": (m.lane_num_points, (num_lanes,)),
            "road_map.lane_speed_limit": (m.lane_speed_limit, (num_lanes,)),
            "road_map.lane_is_connector": (m.lane_is_connector, (num_lanes,)),
            "road_map.lane_road": (m.lane_road, (num_lanes,)),
            "road_map.lane_left": (m.lane_left, (num_lanes,)),
            "road_map.lane_right": (m.lane_right, (num_lanes,)),
            "road_map.lane_successors": (m.lane_successors, (num_lanes, None)),
            "road_map.intersections": (m.intersections, (None, 4, 2)),
            "log.agent_pose": (log.agent_pose, (num_steps, num_agents, 3)),
            "log.agent_speed": (log.agent_speed, (num_steps, num_agents)),
            "log.agent_valid": (log.agent_valid, (num_steps, num_agents)),
            "log.agent_size": (log.agent_size, (num_agents, 2)),
            "log.agent_type": (log.agent_type, (num_agents,)),
            "log.ego_pose": (log.ego_pose, (num_steps, 3)),
            "log.ego_speed": (log.ego_speed, (num_steps,)),
            "log.light_state": (log.light_state, (num_steps, len(m.light_lane))),
        }
        for name, (array, shape) in expect.items():
            if array.ndim != len(shape) or any(
                s is not None and s != a for s, a in zip(shape, array.shape, strict=True)
            ):
                raise ValueError(f"scene {self.scene_id}: {name} has shape {array.shape}, expected {shape}")
            if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
                raise ValueError(f"scene {self.scene_id}: {name} has non-finite values")
        if num_lanes == 0 or len(self.route.lanes) == 0:
            raise ValueError(f"scene {self.scene_id}: needs at least one lane and a non-empty route")
        if np.any(m.lane_num_points < 2) or np.any(m.lane_num_points > m.lane_points.shape[1]):
            raise ValueError(f"scene {self.scene_id}: every lane needs 2..P valid points")
        lane_refs = {
            "route.lanes": self.route.lanes,
            "road_map.lane_left": m.lane_left,
            "road_map.lane_right": m.lane_right,
            "road_map.lane_successors": m.lane_successors,
            "road_map.light_lane": m.light_lane,
        }
        for name, ids in lane_refs.items():
            allow_none = name not in ("route.lanes", "road_map.light_lane")
            low = -1 if allow_none else 0
            if ids.size and (ids.min() < low or ids.max() >= num_lanes):
                raise ValueError(f"scene {self.scene_id}: {name} refers to a lane outside 0..{num_lanes - 1}")
        if self.route.command not in (COMMAND_LEFT, COMMAND_STRAIGHT, COMMAND_RIGHT):
            raise ValueError(f"scene {self.scene_id}: route.command must be 0, 1 or 2")
        if num_steps < HISTORY_STEPS + HORIZON_STEPS + 1:
            raise ValueError(
                f"scene {self.scene_id}: log has {num_steps} steps, needs at least "
                f"{HISTORY_STEPS + HORIZON_STEPS + 1} (history + one step + horizon)"
            )


# --- saving and loading ---------------------------------------------------------------------------
def _parts(scene: Scene) -> dict[str, np.ndarray]:
    arrays = {f"map/{f.name}": getattr(scene.road_map, f.name) for f in fields(RoadMap)}
    arrays.update({f"log/{f.name}": getattr(scene.log, f.name) for f in fields(TrafficLog)})
    arrays["route/lanes"] = scene.route.lanes
    return arrays


def save_scene(scene: Scene, path: str | Path) -> Path:
    """Write one scene as a compressed ``.npz``.

    Arrays ``map/*``, ``log/*``, ``route/lanes`` and a JSON ``meta`` string (format version, id,
    kind, command, dt, history steps).
    """
    scene.validate()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": FORMAT_VERSION,
        "scene_id": int(scene.scene_id),
        "kind": scene.kind,
        "command": int(scene.route.command),
        "dt": DT,
        "history_steps": HISTORY_STEPS,
    }
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **_parts(scene))  # type: ignore[arg-type]
    tmp.replace(path)
    return path


def load_scene(path: str | Path) -> Scene:
    """Read a scene written by :func:`save_scene` (or converted from other data), validated."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no scene file at {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ValueError(f"{path} is not a readable scene file: {exc}") from exc
    if "meta" not in arrays:
        raise ValueError(f"{path} has no 'meta' entry: not an omnigym scene file")
    meta: dict[str, Any] = json.loads(str(arrays["meta"]))
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: scene format {meta.get('format_version')}, this omnigym reads {FORMAT_VERSION}"
        )
    if (
        abs(float(meta.get("dt", DT)) - DT) > 1e-9
        or int(meta.get("history_steps", HISTORY_STEPS)) != HISTORY_STEPS
    ):
        raise ValueError(f"{path}: logs must be sampled at {DT} s with {HISTORY_STEPS} history steps")

    def section(cls: type, prefix: str) -> Any:
        missing = [f.name for f in fields(cls) if f"{prefix}/{f.name}" not in arrays]
        if missing:
            raise ValueError(f"{path}: missing arrays {[f'{prefix}/{m}' for m in missing]}")
        return cls(**{f.name: arrays[f"{prefix}/{f.name}"] for f in fields(cls)})

    if "route/lanes" not in arrays:
        raise ValueError(f"{path}: missing array 'route/lanes'")
    scene = Scene(
        scene_id=int(meta["scene_id"]),
        kind=str(meta.get("kind", "custom")),
        road_map=section(RoadMap, "map"),
        route=Route(lanes=arrays["route/lanes"].astype(np.int32), command=int(meta["command"])),
        log=section(TrafficLog, "log"),
    )
    scene.validate()
    return scene


# --- geometry shared by the simulator, the metrics and the renderer -------------------------------
def lane_polygon(road_map: RoadMap, lane: int) -> np.ndarray:
    """The ``[2n, 2]`` polygon of a lane: its centreline offset by ± half its width."""
    points = road_map.centreline(lane).astype(np.float64)
    tangent = np.gradient(points, axis=0)
    tangent /= np.maximum(np.linalg.norm(tangent, axis=1, keepdims=True), 1e-9)
    normal = np.stack([-tangent[:, 1], tangent[:, 0]], axis=1) * (road_map.lane_width[lane] / 2)
    return np.concatenate([points + normal, (points - normal)[::-1]])


def resample_polyline(points: np.ndarray, spacing: float) -> np.ndarray:
    """Points every ``spacing`` metres of arc length along a polyline (the end point included)."""
    points = np.asarray(points, dtype=np.float64)
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    keep = np.concatenate([[True], seg > 1e-9])
    points = points[keep]
    arc = np.concatenate([[0.0], np.cumsum(seg[seg > 1e-9])])
    if arc[-1] <= 0:
        return points[:1].copy()
    stations = np.append(np.arange(0.0, arc[-1], spacing), arc[-1])
    return np.stack([np.interp(stations, arc, points[:, 0]), np.interp(stations, arc, points[:, 1])], axis=1)


def route_polyline(scene: Scene, spacing: float = 1.0) -> np.ndarray:
    """The route's centreline (its lanes joined end to end), resampled every ``spacing`` m."""
    pieces = [scene.road_map.centreline(int(lane)) for lane in scene.route.lanes]
    joined = np.concatenate(
        [
            pieces[0],
            *(p[1:] if np.allclose(p[0], q[-1]) else p for q, p in itertools.pairwise(pieces)),
        ]
    )
    return resample_polyline(joined, spacing)


def box_corners(pose: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Corners ``[..., 4, 2]`` of boxes: front-left, front-right, rear-right, rear-left.

    Boxes are centred at ``pose[..., :2]`` with heading ``pose[..., 2]`` and ``size[..., (length, width)]``.
    """
    cos, sin = np.cos(pose[..., 2]), np.sin(pose[..., 2])
    half_l, half_w = size[..., 0] / 2, size[..., 1] / 2
    signs_l = np.array([1.0, 1.0, -1.0, -1.0])
    signs_w = np.array([1.0, -1.0, -1.0, 1.0])
    dl = half_l[..., None] * signs_l
    dw = half_w[..., None] * signs_w
    x = pose[..., 0, None] + dl * cos[..., None] - dw * sin[..., None]
    y = pose[..., 1, None] + dl * sin[..., None] + dw * cos[..., None]
    return np.stack([x, y], axis=-1)


def light_stop_box(road_map: RoadMap, depth: float = 4.0) -> tuple[np.ndarray, np.ndarray]:
    """Pose ``[K, 3]`` and size ``[K, 2]`` of each traffic light's red-light object.

    The object is the first ``depth`` metres of the connector lane the light controls (NAVSIM uses
    the whole connector polygon; see ``docs/envs/driving.md``).
    """
    poses, sizes = [], []
    for lane in road_map.light_lane:
        points = road_map.centreline(int(lane)).astype(np.float64)
        heading = np.arctan2(points[1, 1] - points[0, 1], points[1, 0] - points[0, 0])
        centre = points[0] + depth / 2 * np.array([np.cos(heading), np.sin(heading)])
        poses.append([centre[0], centre[1], heading])
        sizes.append([depth, road_map.lane_width[int(lane)]])
    return np.asarray(poses, np.float64).reshape(-1, 3), np.asarray(sizes, np.float64).reshape(-1, 2)
