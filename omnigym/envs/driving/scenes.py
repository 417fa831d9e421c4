"""Procedural scenes by id: a map, an ego route and a simulated traffic log, reproducible from the id.

``generate_scene(scene_id, config)`` draws everything from ``scene_id``: the map kind and geometry,
the ego's route, the traffic and its signal plan. The ego's logged track is the "human" driver,
simulated like every other agent (IDM + MOBIL, following its route), and the others react to it.
Ids are split into train / val / test / hard ranges (:data:`SPLIT_OFFSETS`). Saved scene sets and
the env's scene source are in ``scene_sets.py``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from omnigym.envs.driving.lane_network import LaneNetwork
from omnigym.envs.driving.maps import BUILDERS, DEFAULT_KINDS, ProceduralMap, RouteOption
from omnigym.envs.driving.scene import (
    AGENT_STATIC,
    AGENT_VEHICLE,
    DT,
    EGO_LENGTH,
    EGO_WIDTH,
    FORMAT_VERSION,
    HISTORY_STEPS,
    HORIZON_STEPS,
    RoadMap,
    Route,
    Scene,
    TrafficLog,
    box_corners,
)
from omnigym.envs.driving.traffic import LightCycle, light_states
from omnigym.envs.driving.traffic_sim import TrafficAgents, simulate

GENERATOR_VERSION = 2
"""Bump when generation changes, so on-disk caches of older scenes are not reused."""
SPLIT_OFFSETS = {"train": 0, "val": 1_000_000, "test": 2_000_000, "hard": 3_000_000}
"""First scene id of each split; a split holds at most 1,000,000 ids. ``hard`` is a test split
drawn with :data:`HARD_SCENES` (NAVSIM's navhard idea: scenes a naive driver fails)."""
SPLIT_SIZE = 1_000_000
_SALT = 0x5CE7E
EGO_START = (40.0, 60.0)
"""The ego starts this many metres (uniform range) from the start of its route's first lane."""
ROUTE_MARGIN = 20.0
"""Metres of route left after driving the whole log at the speed limit."""
MIN_SPEED_LIMIT = 6.0
"""m/s; a map whose route would need slower limits to last the episode raises instead."""
MAX_EPISODE_SECONDS = 24.0
"""The longest episode every map kind can hold at MIN_SPEED_LIMIT (the shortest intersection route)."""
VEHICLE_SPACING = 14.0
"""Minimum metres between spawned vehicle centres on a lane."""
FLOW_SPACING = 22.0
"""Mean metres per vehicle on a lane when it is full: num_agents is capped by this density."""


@dataclass
class SceneConfig:
    """How procedural scenes are drawn."""

    num_agents: int = 50
    """Vehicles in the scene (both directions, all lanes); one enters for each that leaves the map."""
    episode_seconds: float = 16.0
    """Seconds the ego drives; the log adds HISTORY_STEPS before and HORIZON_STEPS after."""
    kinds: dict[str, float] = field(default_factory=lambda: {kind: 1.0 for kind in DEFAULT_KINDS})
    """Map kind -> relative frequency."""
    num_static: int = 0
    """Static objects (parked cars, partly on a lane off the ego's route)."""
    lead_brake: float = 0.0
    """Chance that a vehicle is placed 25-40 m ahead of the ego in its lane and, 0.5-2.5 s into
    the episode, brakes at 3-5 m/s² to a standstill, waits 2-5 s and drives on."""

    def __post_init__(self) -> None:
        if not isinstance(self.num_agents, int) or self.num_agents < 0:
            raise ValueError(f"num_agents must be an int >= 0, got {self.num_agents!r}")
        if not isinstance(self.num_static, int) or self.num_static < 0:
            raise ValueError(f"num_static must be an int >= 0, got {self.num_static!r}")
        if not 0.0 <= float(self.lead_brake) <= 1.0:
            raise ValueError(f"lead_brake must be a probability in [0, 1], got {self.lead_brake!r}")
        if not (DT <= float(self.episode_seconds) <= MAX_EPISODE_SECONDS):
            raise ValueError(
                f"episode_seconds must be in [{DT}, {MAX_EPISODE_SECONDS}], got {self.episode_seconds!r}"
            )
        unknown = set(self.kinds) - set(BUILDERS)
        if unknown or not self.kinds:
            raise ValueError(f"kinds must name map kinds among {sorted(BUILDERS)}, got {sorted(self.kinds)}")
        weights = list(self.kinds.values())
        if any(not np.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"kinds weights must be finite, >= 0 and not all zero, got {self.kinds}")

    @property
    def num_steps(self) -> int:
        """Log length T: history, the episode and one planning horizon."""
        return HISTORY_STEPS + round(self.episode_seconds / DT) + HORIZON_STEPS

    def key(self) -> str:
        """A short hash of this config, the scene format and the generator version (cache folders)."""
        blob = json.dumps(
            {"config": asdict(self), "format": FORMAT_VERSION, "generator": GENERATOR_VERSION}, sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


HARD_SCENES: dict[str, Any] = {
    "kinds": {"straight": 1.0, "sharp_curve": 1.0, "merge": 1.0, "intersection": 1.0},
    "lead_brake": 0.6,
    "num_agents": 60,
    "num_static": 4,
}
"""The ``hard`` split's scene settings: tight curves instead of gentle ones, a lead vehicle that
brakes hard early in most episodes, denser traffic and parked cars (``DrivingConfig.scene``
overrides them)."""


# --- splits ---------------------------------------------------------------------------------------
def split_scene_ids(split: str, count: int) -> list[int]:
    """The first ``count`` scene ids of ``split`` ("train", "val", "test" or "hard")."""
    if split not in SPLIT_OFFSETS:
        raise ValueError(f"split must be one of {sorted(SPLIT_OFFSETS)}, got {split!r}")
    if not 0 <= count <= SPLIT_SIZE:
        raise ValueError(f"count must be in [0, {SPLIT_SIZE}], got {count}")
    return list(range(SPLIT_OFFSETS[split], SPLIT_OFFSETS[split] + count))


def split_of(scene_id: int) -> str:
    """The split a scene id belongs to."""
    for split, offset in SPLIT_OFFSETS.items():
        if offset <= scene_id < offset + SPLIT_SIZE:
            return split
    raise ValueError(f"scene id {scene_id} is outside every split")


# --- generation -----------------------------------------------------------------------------------
def generate_scene(scene_id: int, config: SceneConfig | None = None) -> Scene:
    """The procedural scene ``scene_id``: identical arrays for the same id and config.

    Draws a map kind and map, an ego route, vehicles on every lane (safe spacing, speeds near the
    flow), then simulates ``config.num_steps`` steps. If the simulated ego touches another agent,
    that agent is removed and the traffic re-simulated (rare), so the human track is collision-free.
    """
    config = config or SceneConfig()
    if scene_id < 0:
        raise ValueError(f"scene_id must be >= 0, got {scene_id}")
    rng = np.random.default_rng([scene_id, _SALT])
    kinds = list(config.kinds)
    weights = np.array([config.kinds[k] for k in kinds], np.float64)
    kind = kinds[rng.choice(len(kinds), p=weights / weights.sum())]
    built = BUILDERS[kind](rng)
    option = _pick_route(built, rng)
    network = LaneNetwork(built.road_map, option.lanes)
    ego_station = float(rng.uniform(*EGO_START))
    _cap_speed_limits(built, network, option, ego_station, config)
    lights = _signal_plan(built, network, option, ego_station, config, rng)
    # events draw from their own stream, so scenes without them are those of earlier versions
    events = np.random.default_rng([scene_id, _SALT, 0xB4A4E])
    braking = config.lead_brake > 0 and events.random() < config.lead_brake
    agents = _spawn(built, network, option, ego_station, config, rng, events if braking else None)
    for attempt in range(4):
        result = simulate(network, agents, lights, np.random.default_rng([scene_id, _SALT, attempt]))
        touching = _ego_contacts(result.pose, result.valid, agents.length, agents.width)
        if not len(touching):
            break
        if attempt < 3:
            agents = _without(agents, touching)
    result.valid[:, touching] = False
    ever: np.ndarray = np.any(result.valid, axis=0)
    used = np.flatnonzero(ever[1:]) + 1  # reserves that never entered are dropped
    log = TrafficLog(
        agent_pose=result.pose[:, used].astype(np.float32),
        agent_speed=np.where(result.valid[:, used], result.speed[:, used], 0.0).astype(np.float32),
        agent_valid=result.valid[:, used],
        agent_size=np.stack([agents.length[used], agents.width[used]], axis=1).astype(np.float32),
        agent_type=np.where(agents.static[used], AGENT_STATIC, AGENT_VEHICLE).astype(np.int8),
        ego_pose=result.pose[:, 0].astype(np.float32),
        ego_speed=result.speed[:, 0].astype(np.float32),
        light_state=lights,
    )
    log.agent_pose[~log.agent_valid] = 0.0
    scene = Scene(scene_id, kind, built.road_map, Route(option.lanes.copy(), option.command), log)
    scene.validate()
    return scene


def _pick_route(built: ProceduralMap, rng: np.random.Generator) -> RouteOption:
    """Intersections: a command, then an approach; merges: the ramp half the time; else any lane."""
    routes = built.routes
    if built.kind == "intersection":
        command = rng.choice(sorted({r.command for r in routes}))
        routes = [r for r in routes if r.command == command]
    elif built.kind == "merge":
        ramp = [r for r in routes if r.name == "ramp"]
        routes = ramp if rng.random() < 0.5 else [r for r in routes if r.name != "ramp"]
    return routes[int(rng.integers(len(routes)))]


def _cap_speed_limits(
    built: ProceduralMap, network: LaneNetwork, option: RouteOption, ego_station: float, config: SceneConfig
) -> None:
    """Scale the map's speed limits so the route outlasts the whole log driven at the limit."""
    remaining = network.length[option.lanes].sum() - ego_station - ROUTE_MARGIN
    cap = remaining / (config.num_steps * DT)
    if cap < MIN_SPEED_LIMIT:
        raise ValueError(
            f"episode_seconds={config.episode_seconds} is too long for {built.kind} maps: the route would "
            f"need speed limits under {MIN_SPEED_LIMIT} m/s"
        )
    limits = built.road_map.lane_speed_limit
    scale = min(1.0, cap / float(limits[option.lanes].max()))
    built.road_map.lane_speed_limit = (limits * scale).astype(np.float32)
    network.limit = built.road_map.lane_speed_limit.astype(np.float64)


def _signal_plan(
    built: ProceduralMap,
    network: LaneNetwork,
    option: RouteOption,
    ego_station: float,
    config: SceneConfig,
    rng: np.random.Generator,
) -> np.ndarray:
    """Light states ``[T, K]``, timed so that most egos cross and some stop at yellow.

    The ego's approach turns green 6 s before to 1 s after the ego would reach the stop line at
    70 % of the speed limit.
    """
    road_map, cycle = built.road_map, LightCycle()
    if not len(road_map.light_lane):
        return np.zeros((config.num_steps, 0), np.int8)
    ego_lights = np.flatnonzero(np.isin(road_map.light_lane, option.lanes))
    group = (
        int(built.light_group[ego_lights[0]])
        if len(ego_lights)
        else int(rng.integers(built.num_light_groups))
    )
    arrival = (network.length[option.lanes[0]] - ego_station) / (0.7 * network.limit[option.lanes[0]])
    green_at = arrival + rng.uniform(-6.0, 1.0)  # the ego arrives on green or shortly before it
    offset = group * cycle.phase - green_at
    return light_states(config.num_steps, built.light_group, built.num_light_groups, offset, cycle)


def _vehicle_sizes(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and widths: cars, and one van or small truck in ten."""
    van = rng.random(count) < 0.1
    length = np.where(van, rng.uniform(5.5, 7.0, count), rng.uniform(4.2, 5.2, count))
    width = np.where(van, rng.uniform(2.0, 2.3, count), rng.uniform(1.75, 2.05, count))
    return length, width


def _parked(
    built: ProceduralMap,
    network: LaneNetwork,
    option: RouteOption,
    config: SceneConfig,
    rng: np.random.Generator,
) -> list[tuple[int, float, float]]:
    """``(lane, station, lateral)`` of static objects: on the kerb side of lanes off the route."""
    road_map = built.road_map
    lanes = [
        lane
        for lane in range(road_map.num_lanes)
        if lane not in option.lanes
        and not road_map.lane_is_connector[lane]
        and road_map.lane_right[lane] < 0
        and np.isinf(network.leave_by[lane])
        and network.length[lane] > 80.0
    ]
    placed: list[tuple[int, float, float]] = []
    for _ in range(config.num_static if lanes else 0):
        lane = lanes[int(rng.integers(len(lanes)))]
        station = float(rng.uniform(20.0, network.length[lane] - 40.0))
        if all(p[0] != lane or abs(p[1] - station) > VEHICLE_SPACING for p in placed):
            placed.append((lane, station, -0.5 * float(road_map.lane_width[lane])))
    return placed


def _spawn(
    built: ProceduralMap,
    network: LaneNetwork,
    option: RouteOption,
    ego_station: float,
    config: SceneConfig,
    rng: np.random.Generator,
    braking: np.random.Generator | None = None,
) -> TrafficAgents:
    """The ego, vehicles spread over every lane, static objects, and ``num_agents`` reserves.

    With ``braking`` (the events' generator), a lead vehicle that brakes hard is placed ahead of the
    ego first (see ``SceneConfig.lead_brake``).
    """
    road_map = built.road_map
    parked = _parked(built, network, option, config, rng)
    lead = _braking_lead(network, option, ego_station, braking) if braking is not None else None
    taken = [(int(option.lanes[0]), ego_station)] + [(lane, s) for lane, s, _ in parked]
    taken += [(int(option.lanes[0]), lead[0])] if lead is not None else []
    spots = [
        spot
        for spot in _slots(road_map, network, (int(option.lanes[0]), ego_station), rng)
        if all(spot[0] != lane or abs(spot[1] - s) >= VEHICLE_SPACING for lane, s in taken)
    ]
    spots = [spots[i] for i in np.sort(rng.permutation(len(spots))[: config.num_agents])]
    num_moving, num_parked, num_reserve = len(spots), len(parked), config.num_agents
    total = 1 + num_moving + num_parked + num_reserve
    length, width = _vehicle_sizes(rng, total)
    length[0], width[0] = EGO_LENGTH, EGO_WIDTH
    length[1 + num_moving : 1 + num_moving + num_parked] = 4.6
    width[1 + num_moving : 1 + num_moving + num_parked] = 1.9
    lane = np.array([option.lanes[0]] + [s[0] for s in spots] + [p[0] for p in parked] + [-1] * num_reserve)
    station = np.array([ego_station] + [s[1] for s in spots] + [p[1] for p in parked] + [0.0] * num_reserve)
    factor = rng.uniform(0.85, 1.1, total)
    factor[0] = rng.uniform(0.9, 1.0)
    limit = network.limit[np.maximum(lane, 0)]
    static = np.zeros(total, bool)
    static[1 + num_moving : 1 + num_moving + num_parked] = True
    lateral = np.zeros(total)
    lateral[1 + num_moving : 1 + num_moving + num_parked] = [p[2] for p in parked]
    speed = np.where(static, 0.0, factor * limit * rng.uniform(0.7, 1.0, total))
    agents = TrafficAgents(lane, station, speed, length, width, factor, static, lateral)
    if lead is not None:
        agents = _with_braking_lead(agents, int(option.lanes[0]), lead, speed[0])
    return agents


def _braking_lead(
    network: LaneNetwork, option: RouteOption, ego_station: float, events: np.random.Generator
) -> tuple[float, int, float, float] | None:
    """``(station, brake step, deceleration, wait)`` of the hard split's braking lead, or None.

    It stands 25-40 m (centre to centre) ahead of the ego on the ego's first lane, if that lane
    is long enough, and brakes 0.5-2.5 s into the episode.
    """
    station = ego_station + float(events.uniform(25.0, 40.0))
    brake_at = HISTORY_STEPS + int(events.integers(5, 26))
    decel, wait = float(events.uniform(3.0, 5.0)), float(events.uniform(2.0, 5.0))
    if station > network.length[option.lanes[0]] - 10.0:
        return None
    return station, brake_at, decel, wait


def _with_braking_lead(
    agents: TrafficAgents, lane: int, lead: tuple[float, int, float, float], ego_speed: float
) -> TrafficAgents:
    """``agents`` with the braking lead added after the ego, at the ego's speed."""
    station, brake_at, decel, wait = lead
    stop_steps = int(np.ceil(ego_speed / decel / DT)) + round(wait / DT)
    values = {
        "lane": lane,
        "station": station,
        "speed": ego_speed,
        "length": 4.6,
        "width": 1.9,
        "speed_factor": agents.speed_factor[0],
        "static": False,
        "lateral": 0.0,
        "brake_at": brake_at,
        "brake_until": brake_at + stop_steps,
        "brake_decel": decel,
    }
    return TrafficAgents(
        **{name: np.insert(getattr(agents, name), 1, values[name]) for name in values}  # type: ignore[arg-type]
    )


def _slots(
    road_map: RoadMap, network: LaneNetwork, ego: tuple[int, float], rng: np.random.Generator
) -> list[tuple[int, float]]:
    """Candidate vehicle positions ``(lane, station)``, at least VEHICLE_SPACING m apart.

    Lanes (not connectors, and not past a lane drop) are cut into equal slots of at least
    FLOW_SPACING m with one random position each. Slots are twice as long on ramps (lane drops and
    the lanes into them) and ahead of the ego on its lane, so merges do not jam and the ego is not
    stuck in a long queue.
    """
    slots = []
    drops = np.isfinite(network.leave_by)
    for lane in np.flatnonzero(~road_map.lane_is_connector):
        end = min(network.length[lane], network.leave_by[lane] - 10.0) - 5.0
        ramp = drops[lane] or any(drops[s] for s in network.successors[lane] if s >= 0)
        pieces = [(5.0, end, FLOW_SPACING * (2 if ramp else 1))]
        if lane == ego[0]:
            pieces = [(5.0, ego[1], pieces[0][2]), (ego[1], end, 2 * FLOW_SPACING)]
        for start, stop, spacing in pieces:
            if stop <= start:
                continue
            count = int((stop - start) // spacing) + 1
            size = (stop - start) / count
            jitter = rng.uniform(0.0, max(size - VEHICLE_SPACING, 0.0), count)
            slots += [(int(lane), float(start + k * size + jitter[k])) for k in range(count)]
    return slots


def _without(agents: TrafficAgents, drop: np.ndarray) -> TrafficAgents:
    keep = np.setdiff1d(np.arange(len(agents.lane)), drop)
    return TrafficAgents(**{name: value[keep] for name, value in vars(agents).items()})


def _ego_contacts(pose: np.ndarray, valid: np.ndarray, length: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Agents (indices > 0) whose box, grown by 0.1 m, ever overlaps the ego's (separating axes)."""
    size = np.stack([length, width], axis=1) + 0.2
    reach = np.linalg.norm(size, axis=1) / 2
    near = valid[:, 1:] & (np.linalg.norm(pose[:, 1:, :2] - pose[:, :1, :2], axis=2) < reach[1:] + reach[0])
    t, a = np.nonzero(near)
    if not len(t):
        return np.zeros(0, np.int64)
    ego = box_corners(pose[t, 0], size[np.zeros_like(a)])
    other = box_corners(pose[t, a + 1], size[a + 1])
    edges = np.concatenate([ego[:, 1:3] - ego[:, 0:2], other[:, 1:3] - other[:, 0:2]], axis=1)  # [n, 4, 2]
    axes = np.stack([-edges[..., 1], edges[..., 0]], axis=-1)
    proj_ego = np.einsum("nca,nka->nkc", ego, axes)
    proj_other = np.einsum("nca,nka->nkc", other, axes)
    apart = (proj_ego.max(-1) < proj_other.min(-1)) | (proj_other.max(-1) < proj_ego.min(-1))
    return np.unique(a[~apart.any(axis=1)] + 1)
