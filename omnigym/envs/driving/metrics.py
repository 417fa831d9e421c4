"""The PDM score (NAVSIM v1 PDMS) and extended PDM score (NAVSIM v2 EPDMS), batched in NumPy.

Two layers, both vectorised over ``B`` queries (envs, or envs x planner proposals) and ``A`` agents:

- per-step building blocks the env calls every 0.1 s (route projection, ego areas, at-fault
  collisions, time-to-collision, red lights), and
- :func:`score_trajectories`, which scores whole 4 s trajectories into :class:`SubScores`, then
  :func:`normalise_progress`, :func:`pdms` and :func:`epdms` aggregate them.

Definitions follow ``PDMScorer`` in autonomousvision/navsim (``pdm_scorer.py``,
``pdm_scorer_utils.py``); comments name the NAVSIM function each rule comes from. Map-area tests
read the rasters of :mod:`omnigym.envs.driving.map_raster` instead of nuPlan polygons; the
differences are listed in ``docs/envs/driving.md``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from omnigym.envs.driving.comfort import comfort_violations as comfort_violations
from omnigym.envs.driving.comfort import is_comfortable
from omnigym.envs.driving.comfort import two_frame_extended_comfort as two_frame_extended_comfort
from omnigym.envs.driving.geometry import (
    advance,
    bearing,
    box_overlap,
    obb_overlap,
    polyline_stations,
    project_to_polyline,
)
from omnigym.envs.driving.map_raster import DRIVABLE, INTERSECTION, ON_ROUTE, RasterStack, lookup
from omnigym.envs.driving.scene import AGENT_STATIC, DT, EGO_LENGTH, EGO_WIDTH

EGO_REAR_AXLE_TO_CENTRE = 1.461
"""Metres from the rear axle to the box centre (nuPlan Pacifica); NAVSIM measures bearings from the axle."""

STOPPED_SPEED = 0.05  # m/s, get_collision_type: ego or track counts as stopped
TTC_STOPPED_SPEED = 5e-3  # m/s, _calculate_ttc: a slower ego cannot violate TTC
TTC_OFFSETS = (0.0, 0.3, 0.6, 0.9)  # s, _calculate_ttc: np.arange(0, 10, 3) steps of 0.1 s
AHEAD_ANGLE = np.deg2rad(30.0)  # nuPlan is_agent_ahead
BEHIND_ANGLE = np.deg2rad(150.0)  # nuPlan is_agent_behind
DDC_HORIZON = 1.0  # s, driving_direction_horizon
DDC_COMPLIANT = 2.0  # m of oncoming progress still fully compliant
DDC_VIOLATION = 6.0  # m of oncoming progress from which DDC is 0
LK_MAX_LATERAL = 0.5  # m, lane_keeping_deviation_limit
LK_HORIZON = 2.0  # s, lane_keeping_horizon_window
PROGRESS_THRESHOLD = 5.0  # m, progress_distance_threshold (v1.1 and v2)
ROUTE_WINDOW = 16  # route points searched either side of a projection hint


SUB_METRICS = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "c", "lk", "hc", "ec")
PDMS_MULTIPLIERS = ("nc", "dac")
PDMS_WEIGHTS = {"ttc": 5.0, "ep": 5.0, "c": 2.0}
EPDMS_MULTIPLIERS = ("nc", "dac", "ddc", "tlc")
EPDMS_WEIGHTS = {"ep": 5.0, "ttc": 5.0, "lk": 2.0, "hc": 2.0, "ec": 2.0}
EPISODE_METRICS = ("pdms", "epdms", *SUB_METRICS, "progress", "failed")
"""What an episode reports (``final_info``): both scores, every sub-score, route progress, failure."""


@dataclass
class ScoringWorld:
    """What stays fixed while queries are scored: maps, routes and object footprints.

    Padding: routes repeat their last point; padded agents are never ``valid`` and padded
    lights never red. ``route_station`` is derived from ``route_points`` unless given (pass it to
    skip the work when rebuilding a world every step); after editing ``route_points`` in place,
    call :meth:`refresh_route`.
    """

    raster: RasterStack
    map_index: np.ndarray  # [B] slot of each query's map in ``raster``
    route_points: np.ndarray  # [B, R, 2] route centreline every 1 m, R >= 2
    route_num_points: np.ndarray  # [B] valid route points
    agent_size: np.ndarray  # [B, A, 2] length, width
    agent_type: np.ndarray  # [B, A] AGENT_VEHICLE / AGENT_STATIC
    light_pose: np.ndarray  # [B, K, 3] red-light objects (scene.light_stop_box)
    light_size: np.ndarray  # [B, K, 2]
    ego_size: tuple[float, float] = (EGO_LENGTH, EGO_WIDTH)
    ego_rear_axle: float = EGO_REAR_AXLE_TO_CENTRE  # m behind the centre
    route_station: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    """[B, R] arc length at each route point; left empty, derived from ``route_points``."""

    def __post_init__(self) -> None:
        if self.route_station.size == 0:
            self.refresh_route()

    def refresh_route(self) -> None:
        """Recompute ``route_station``, the arc length along ``route_points``."""
        self.route_station = polyline_stations(self.route_points)

    def take(self, index: np.ndarray) -> ScoringWorld:
        """The world of queries ``index`` (e.g. ``np.repeat(np.arange(B), P)`` for P proposals each)."""
        return dataclasses.replace(
            self,
            map_index=self.map_index[index],
            route_points=self.route_points[index],
            route_num_points=self.route_num_points[index],
            agent_size=self.agent_size[index],
            agent_type=self.agent_type[index],
            light_pose=self.light_pose[index],
            light_size=self.light_size[index],
            route_station=self.route_station[index],
        )


@dataclass
class StepState:
    """The world at one time step, per query."""

    ego_pose: np.ndarray  # [B, 3] box centre x, y, heading
    ego_speed: np.ndarray  # [B] m/s
    agent_pose: np.ndarray  # [B, A, 3]
    agent_speed: np.ndarray  # [B, A]
    agent_valid: np.ndarray  # [B, A] bool
    light_red: np.ndarray  # [B, K] bool


@dataclass
class AreaFlags:
    """Where the ego is (``_calculate_ego_area``), each bool ``[B, ...]`` like the poses asked."""

    multiple_lanes: np.ndarray
    non_drivable: np.ndarray
    oncoming: np.ndarray
    in_intersection: np.ndarray

    def at(self, index: tuple | slice) -> AreaFlags:
        """The flags at ``index`` (e.g. ``np.s_[:, :10]``)."""
        return AreaFlags(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))


@dataclass
class SubScores:
    """NAVSIM sub-metrics, each ``[B]`` float in [0, 1] (or any shape, as long as all agree).

    ``ep`` is NaN out of :func:`score_trajectories`: set it from :func:`normalise_progress`.
    ``ec`` is 1 there: set it from :func:`~omnigym.envs.driving.comfort.two_frame_extended_comfort`.
    """

    nc: np.ndarray  # no at-fault collision {0, 0.5, 1}
    dac: np.ndarray  # drivable area compliance {0, 1}
    ddc: np.ndarray  # driving direction compliance {0, 0.5, 1}
    tlc: np.ndarray  # traffic light compliance {0, 1}
    ep: np.ndarray  # ego progress [0, 1]
    ttc: np.ndarray  # time to collision within bound {0, 1}
    c: np.ndarray  # comfort over the trajectory {0, 1} (PDMS)
    lk: np.ndarray  # lane keeping {0, 1}
    hc: np.ndarray  # history comfort {0, 1} (EPDMS)
    ec: np.ndarray  # two-frame extended comfort {0, 1}
    progress: np.ndarray  # raw progress along the route, metres >= 0

    @classmethod
    def from_array(cls, values: np.ndarray, progress: np.ndarray | None = None) -> SubScores:
        """Sub-scores from ``values [..., len(SUB_METRICS)]`` in :data:`SUB_METRICS` order."""
        values = np.asarray(values, dtype=np.float64)
        columns = {name: values[..., i] for i, name in enumerate(SUB_METRICS)}
        return cls(**columns, progress=np.zeros(values.shape[:-1]) if progress is None else progress)

    def to_array(self) -> np.ndarray:
        """``[..., len(SUB_METRICS)]`` in :data:`SUB_METRICS` order."""
        return np.stack([getattr(self, name) for name in SUB_METRICS], axis=-1)

    @property
    def multiplier(self) -> np.ndarray:
        """NC * DAC * DDC * TLC: the EPDMS multipliers, which also mask progress (v2)."""
        return self.nc * self.dac * self.ddc * self.tlc


# --- per-step building blocks -----------------------------------------------------------------------
def _per_query(array: np.ndarray, extra: int) -> np.ndarray:
    """``[B, X...]`` -> ``[B, 1 x extra, X...]`` to broadcast against extra batch axes."""
    return array.reshape(array.shape[:1] + (1,) * extra + array.shape[1:])


def project_to_route(
    world: ScoringWorld, points: np.ndarray, hint: np.ndarray | None = None, window: int = ROUTE_WINDOW
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arc-length station and signed lateral offset of points on each query's route.

    The closest point of the polyline (clipped to its ends, as shapely's ``project`` in NAVSIM's
    ``PDMPath``); the lateral offset is the distance to it, positive left of the route. See
    :func:`~omnigym.envs.driving.geometry.project_to_polyline`.

    Args:
        world: the routes.
        points: ``[B, ..., 2]`` world x, y.
        hint: ``[B]`` a route index from an earlier call (e.g. the previous step) to search near.
        window: route points searched either side of ``hint``.

    Returns:
        ``(station [B, ...], lateral [B, ...], index [B, ...])``: metres, metres, and the route
        segment each point projects on (pass it back as ``hint``).
    """
    return project_to_polyline(world.route_points, world.route_station, points, hint, window)


def ego_area(world: ScoringWorld, ego_pose: np.ndarray) -> AreaFlags:
    """NAVSIM's ego areas (``_calculate_ego_area``) from the map rasters.

    - non-drivable: a corner outside the drivable area;
    - multiple lanes: the corners on lanes lie on more than one lane (connectors are not in the
      lane raster, so this is False inside intersections, where NAVSIM's overlapping connectors
      often set it);
    - oncoming: the centre off the on-route lanes;
    - in intersection: the centre inside an intersection.

    Args:
        world: maps and ego size.
        ego_pose: ``[B, ..., 3]`` box centre and heading.

    Returns:
        :class:`AreaFlags` of bool ``[B, ...]``.
    """
    pose = np.asarray(ego_pose, dtype=np.float64)
    flat = pose.reshape(len(pose), -1, 3)
    flags = np.empty((4, *flat.shape[:2]), bool)
    raster = world.raster
    length, width = world.ego_size
    index = np.asarray(world.map_index, dtype=np.int64)
    _ego_area(raster.origin, raster.resolution, raster.area, raster.lane, index, flat, length, width, flags)
    return AreaFlags(*(f.reshape(pose.shape[:-1]) for f in flags))


@njit(cache=True)
def _ego_area(
    origin: np.ndarray,
    resolution: float,
    area: np.ndarray,
    lane: np.ndarray,
    map_index: np.ndarray,
    poses: np.ndarray,
    length: float,
    width: float,
    flags: np.ndarray,
) -> None:
    """:func:`ego_area` of poses ``[B, M, 3]`` into ``flags [4, B, M]`` (in :class:`AreaFlags` order)."""
    for b in range(poses.shape[0]):
        for i in range(poses.shape[1]):
            x, y, heading = poses[b, i, 0], poses[b, i, 1], poses[b, i, 2]
            flags[:, b, i] = area_at(
                origin, resolution, area, lane, map_index[b], x, y, heading, length, width
            )


@njit(cache=True)
def area_at(
    origin: np.ndarray,
    resolution: float,
    area: np.ndarray,
    lane: np.ndarray,
    slot: int,
    x: float,
    y: float,
    heading: float,
    length: float,
    width: float,
) -> tuple[bool, bool, bool, bool]:
    """:class:`AreaFlags` (multiple lanes, non-drivable, oncoming, in intersection) of one ego box."""
    cos, sin = np.cos(heading), np.sin(heading)
    off_road, lowest, highest = False, -1, -1
    for sign_l, sign_w in ((1.0, 1.0), (1.0, -1.0), (-1.0, -1.0), (-1.0, 1.0)):  # the corners
        dl, dw = sign_l * length / 2, sign_w * width / 2
        bits, lane_id = lookup(
            origin, resolution, area, lane, slot, x + dl * cos - dw * sin, y + dl * sin + dw * cos
        )
        off_road |= (bits & DRIVABLE) == 0
        if lane_id >= 0:
            lowest = lane_id if lowest < 0 else min(lowest, lane_id)
            highest = max(highest, lane_id)
    centre, _ = lookup(origin, resolution, area, lane, slot, x, y)
    return lowest != highest, off_road, (centre & ON_ROUTE) == 0, (centre & INTERSECTION) != 0


Hits = tuple[np.ndarray, ...]
"""Indices (as ``np.nonzero`` gives them) of the ego-object overlaps in a ``[B, ..., A]`` array."""


def _first_per_object(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``[n]`` bool: True at the earliest (lowest ``order``) of the hits sharing a ``key``."""
    sort = np.lexsort((order, key))
    sorted_key = key[sort]
    starts = np.ones(len(key), bool)
    starts[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.zeros(len(key), bool)
    first[sort[starts]] = True
    return first


def _contacts(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    area: AreaFlags,
) -> tuple[Hits, np.ndarray]:
    """Ego-agent overlaps in ``[B, ..., A]`` and the NC value each would cost, ``[n]``."""
    extra = ego_pose.ndim - 2
    ego_size = np.asarray(world.ego_size, dtype=np.float64)
    hit = obb_overlap(ego_pose[..., None, :], ego_size, agent_pose, _per_query(world.agent_size, extra))
    index = np.nonzero(hit & agent_valid)
    if not index[0].size:
        return index, np.ones(0)
    at_ego, agent = index[:-1], (index[0], index[-1])
    ego, pose, kind = ego_pose[at_ego], agent_pose[index], world.agent_type[agent]
    # get_collision_type, in its order: stopped ego, stopped track, track behind, front edge, lateral
    ego_stopped = np.abs(ego_speed[at_ego]) <= STOPPED_SPEED
    track_stopped = (np.abs(agent_speed[index]) <= STOPPED_SPEED) | (kind == AGENT_STATIC)  # is_track_stopped
    behind = bearing(advance(ego, -world.ego_rear_axle), pose[:, :2]) > BEHIND_ANGLE
    front_edge = np.array([0.0, ego_size[1]])
    front = obb_overlap(advance(ego, ego_size[0] / 2), front_edge, pose, world.agent_size[agent])
    lateral_fault = area.multiple_lanes[at_ego] | area.non_drivable[at_ego]
    # _calculate_no_at_fault_collision: front or stopped-track hits, laterals off a single lane
    at_fault = ~ego_stopped & (track_stopped | (~behind & (front | lateral_fault)))
    return index, np.where(at_fault, np.where(kind == AGENT_STATIC, 0.5, 0.0), 1.0)


def collisions(
    world: ScoringWorld, step: StepState, area: AreaFlags, ignore: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """NC at one step: at-fault collisions of the ego box with agent boxes.

    Args:
        world: footprints and types.
        step: the state at this step.
        area: :func:`ego_area` at this step.
        ignore: ``[B, A]`` bool, objects collided with earlier (skipped, as NAVSIM's
            ``collided_track_ids``); the caller accumulates ``ignore |= colliding``.

    Returns:
        ``(nc [B], colliding [B, A])``: 0 for an at-fault collision with an agent, 0.5 with a
        static object, else 1; and every new (not ignored) overlap, at fault or not.
    """
    nc = np.ones(len(ignore))
    colliding = np.zeros(ignore.shape, bool)
    _step_collisions(
        np.asarray(step.ego_pose, dtype=np.float64),
        np.asarray(step.ego_speed, dtype=np.float64),
        np.asarray(world.ego_size, dtype=np.float64),
        float(world.ego_rear_axle),
        np.asarray(step.agent_pose, dtype=np.float64),
        np.asarray(step.agent_speed, dtype=np.float64),
        step.agent_valid,
        np.asarray(world.agent_size, dtype=np.float64),
        world.agent_type,
        area.multiple_lanes | area.non_drivable,
        ignore,
        nc,
        colliding,
    )
    return nc, colliding


@njit(cache=True)
def _step_collisions(
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    ego_size: np.ndarray,
    rear_axle: float,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    agent_size: np.ndarray,
    agent_type: np.ndarray,
    lateral_fault: np.ndarray,
    ignore: np.ndarray,
    nc: np.ndarray,
    colliding: np.ndarray,
) -> None:
    """:func:`collisions` for one step, writing ``nc`` and ``colliding``."""
    for n in range(len(ego_pose)):
        nc[n] = collisions_at(
            ego_pose[n],
            ego_speed[n],
            ego_size,
            rear_axle,
            agent_pose[n],
            agent_speed[n],
            agent_valid[n],
            agent_size[n],
            agent_type[n],
            lateral_fault[n],
            ignore[n],
            colliding[n],
        )


@njit(cache=True)
def collisions_at(
    ego_pose: np.ndarray,
    ego_speed: float,
    ego_size: np.ndarray,
    rear_axle: float,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    agent_size: np.ndarray,
    agent_type: np.ndarray,
    lateral_fault: bool,
    ignore: np.ndarray,
    colliding: np.ndarray,
) -> float:
    """NC of one ego ``[3]`` against agents ``[A, ...]``; marks new overlaps in ``colliding [A]``."""
    x, y, heading = ego_pose[0], ego_pose[1], ego_pose[2]
    length, width = ego_size[0], ego_size[1]
    cos, sin = np.cos(heading), np.sin(heading)
    ego_stopped = abs(ego_speed) <= STOPPED_SPEED
    rear_x, rear_y = x - rear_axle * cos, y - rear_axle * sin
    front_x, front_y = x + length / 2 * cos, y + length / 2 * sin  # the front edge's centre
    nc = 1.0
    for a in range(len(agent_pose)):
        if not agent_valid[a] or ignore[a]:
            continue
        ax, ay, ah = agent_pose[a, 0], agent_pose[a, 1], agent_pose[a, 2]
        al, aw = agent_size[a, 0], agent_size[a, 1]
        if not box_overlap(x, y, heading, length, width, ax, ay, ah, al, aw):
            continue
        colliding[a] = True
        # get_collision_type, in its order: stopped ego, stopped track, track behind, front edge, lateral
        if ego_stopped:
            continue
        static = agent_type[a] == AGENT_STATIC
        at_fault = static or abs(agent_speed[a]) <= STOPPED_SPEED  # is_track_stopped
        behind = _bearing(rear_x, rear_y, cos, sin, ax, ay) > BEHIND_ANGLE
        if not at_fault and not behind:
            front = box_overlap(front_x, front_y, heading, 0.0, width, ax, ay, ah, al, aw)
            at_fault = lateral_fault or front
        if at_fault:  # _calculate_no_at_fault_collision
            nc = min(nc, 0.5 if static else 0.0)
    return nc


@njit(cache=True)
def _bearing(x: float, y: float, cos: float, sin: float, px: float, py: float) -> float:
    """:func:`~omnigym.envs.driving.geometry.bearing` of a point from one pose (heading as cos, sin)."""
    dx, dy = px - x, py - y
    return np.arctan2(abs(cos * dy - sin * dx), cos * dx + sin * dy)


def _ttc_hits(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    area: AreaFlags,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    skip: np.ndarray,
    offsets: np.ndarray,
) -> tuple[Hits, np.ndarray]:
    """Overlaps of the projected ego with agents in ``[B, ..., O, A]``, and whether each counts."""
    extra = ego_pose.ndim - 2
    # _calculate_ttc: the box slides along its heading at constant speed, heading fixed
    projected = advance(ego_pose[..., None, :], ego_speed[..., None] * offsets)  # [B, ..., O, 3]
    size = _per_query(world.agent_size, extra + 1)
    hit = obb_overlap(projected[..., None, :], np.asarray(world.ego_size), agent_pose, size) & agent_valid
    index = np.nonzero(hit)
    if not index[0].size:
        return index, np.zeros(0, bool)
    at_ego = index[:-2]
    # skipped: a (nearly) stopped ego, objects ignored
    keep = (np.abs(ego_speed[at_ego]) >= TTC_STOPPED_SPEED) & ~skip[index[0], index[-1]]
    index, at_ego = tuple(i[keep] for i in index), tuple(i[keep] for i in at_ego)
    # counts if ahead, or (in multiple lanes / off-road / intersection) and not behind
    angle = bearing(advance(ego_pose[at_ego], -world.ego_rear_axle), agent_pose[index][:, :2])
    special = area.multiple_lanes[at_ego] | area.non_drivable[at_ego] | area.in_intersection[at_ego]
    return index, (angle < AHEAD_ANGLE) | (special & (angle <= BEHIND_ANGLE))


def ttc_ok(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    area: AreaFlags,
    agent_pose_at_offsets: np.ndarray,
    agent_valid_at_offsets: np.ndarray,
    ignore: np.ndarray,
    *,
    tolerated: np.ndarray | None = None,
    time_index: np.ndarray | None = None,
) -> np.ndarray:
    """TTC at one step: no object within reach of the ego over the next second.

    The ego box, moved along its heading at constant speed by each of :data:`TTC_OFFSETS`, is
    tested against the agents at those times. An overlap is skipped when the ego is (nearly)
    stopped or the object is ignored; it counts when the object is ahead (within 30 degrees of
    the heading, seen from the rear axle), or when the ego is in multiple lanes, off-road or in
    an intersection and the object is not behind (beyond 150 degrees). NAVSIM decides each object
    at its first overlap and then tolerates one that did not count for the rest of the horizon:
    pass the same ``tolerated`` array every step to carry that (it is updated in place).

    Args:
        world: footprints.
        ego_pose: ``[B, 3]`` at this step.
        ego_speed: ``[B]``.
        area: :func:`ego_area` at this step.
        agent_pose_at_offsets: ``[B, O, A, 3]`` agents at this step + each offset; with
            ``time_index``, ``[B, T, A, 3]`` agents over time (e.g. a whole log).
        agent_valid_at_offsets: ``[B, O, A]`` (``[B, T, A]`` with ``time_index``).
        ignore: ``[B, A]`` objects already collided with.
        tolerated: optional ``[B, A]`` bool, updated in place.
        time_index: optional ``[B, O]`` rows of the agent arrays at each offset (saves gathering
            them from a log); by default row ``o`` is offset ``o``.

    Returns:
        ``[B]`` bool, True where TTC is within bound.
    """
    num, offsets = len(ignore), np.asarray(TTC_OFFSETS)
    if time_index is None:
        time_index = np.broadcast_to(np.arange(len(offsets)), (num, len(offsets)))
    ok = np.ones(num, bool)
    _step_ttc(
        np.asarray(ego_pose, dtype=np.float64),
        np.asarray(ego_speed, dtype=np.float64),
        np.asarray(world.ego_size, dtype=np.float64),
        float(world.ego_rear_axle),
        offsets,
        np.asarray(agent_pose_at_offsets, dtype=np.float64),
        agent_valid_at_offsets,
        np.asarray(time_index, dtype=np.int64),
        np.asarray(world.agent_size, dtype=np.float64),
        area.multiple_lanes | area.non_drivable | area.in_intersection,
        ignore,
        np.zeros(ignore.shape, bool) if tolerated is None else tolerated,
        ok,
    )
    return ok


@njit(cache=True)
def _step_ttc(
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    ego_size: np.ndarray,
    rear_axle: float,
    offsets: np.ndarray,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    time_index: np.ndarray,
    agent_size: np.ndarray,
    special: np.ndarray,
    ignore: np.ndarray,
    tolerated: np.ndarray,
    ok: np.ndarray,
) -> None:
    """:func:`ttc_ok` for one step, writing ``ok`` and ``tolerated``."""
    for n in range(len(ego_pose)):
        ok[n] = ttc_ok_at(
            ego_pose[n],
            ego_speed[n],
            ego_size,
            rear_axle,
            offsets,
            agent_pose[n],
            agent_valid[n],
            time_index[n],
            agent_size[n],
            special[n],
            ignore[n],
            tolerated[n],
        )


@njit(cache=True)
def ttc_ok_at(
    ego_pose: np.ndarray,
    ego_speed: float,
    ego_size: np.ndarray,
    rear_axle: float,
    offsets: np.ndarray,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    time_index: np.ndarray,
    agent_size: np.ndarray,
    special: bool,
    ignore: np.ndarray,
    tolerated: np.ndarray,
    max_travel: float = np.inf,
) -> bool:
    """TTC of one ego ``[3]`` against agents over time ``[T, A, ...]`` read at ``time_index [O]``.

    ``max_travel`` bounds how far any agent valid at the first offset moves by the others: one
    farther than that from everywhere the projected ego box reaches is skipped unread.
    """
    if abs(ego_speed) < TTC_STOPPED_SPEED:  # _calculate_ttc: a (nearly) stopped ego is never at fault
        return True
    x, y, heading = ego_pose[0], ego_pose[1], ego_pose[2]
    length, width = ego_size[0], ego_size[1]
    cos, sin = np.cos(heading), np.sin(heading)
    rear_x, rear_y = x - rear_axle * cos, y - rear_axle * sin
    sweep = ego_speed * offsets[-1]  # the ego's centre moves along [0, sweep] on its heading
    low, high = min(sweep, 0.0), max(sweep, 0.0)
    first = time_index[0]
    ok = True
    for a in range(agent_pose.shape[1]):
        if ignore[a] or tolerated[a]:
            continue
        if max_travel < np.inf and agent_valid[first, a]:
            # half-diagonals are at most half of length + width: a cheap, safe reach
            reach = (length + width + agent_size[a, 0] + agent_size[a, 1]) / 2 + max_travel + 1e-6
            dx, dy = agent_pose[first, a, 0] - x, agent_pose[first, a, 1] - y
            along = min(max(dx * cos + dy * sin, low), high)
            gap_x, gap_y = dx - along * cos, dy - along * sin
            if gap_x * gap_x + gap_y * gap_y > reach * reach:
                continue
        for o in range(len(offsets)):  # each object is decided at its first overlap
            t = time_index[o]
            if not agent_valid[t, a]:
                continue
            ax, ay, ah = agent_pose[t, a, 0], agent_pose[t, a, 1], agent_pose[t, a, 2]
            reach = ego_speed * offsets[o]
            if not box_overlap(
                x + reach * cos, y + reach * sin, heading, length, width,
                ax, ay, ah, agent_size[a, 0], agent_size[a, 1],
            ):  # fmt: skip
                continue
            angle = _bearing(rear_x, rear_y, cos, sin, ax, ay)
            if angle < AHEAD_ANGLE or (special and angle <= BEHIND_ANGLE):
                ok = False
            else:
                tolerated[a] = True
            break
    return ok


def red_light_violation(world: ScoringWorld, ego_pose: np.ndarray, light_red: np.ndarray) -> np.ndarray:
    """``_calculate_traffic_light_compliance``: the ego box overlaps a red light's stop box.

    Args:
        world: light boxes.
        ego_pose: ``[B, ..., 3]``.
        light_red: ``[B, ..., K]`` bool.

    Returns:
        ``[B, ...]`` bool.
    """
    pose = np.asarray(ego_pose, dtype=np.float64)
    flat = pose.reshape(len(pose), -1, 3)
    red = np.broadcast_to(light_red, (*pose.shape[:-1], world.light_pose.shape[1])).reshape(
        *flat.shape[:2], -1
    )
    out = np.empty(flat.shape[:2], bool)
    size = np.asarray(world.ego_size, dtype=np.float64)
    light_pose, light_size = (np.asarray(x, dtype=np.float64) for x in (world.light_pose, world.light_size))
    _red_lights(flat, size, light_pose, light_size, np.ascontiguousarray(red), out)
    return out.reshape(pose.shape[:-1])


@njit(cache=True)
def _red_lights(
    poses: np.ndarray,
    ego_size: np.ndarray,
    light_pose: np.ndarray,
    light_size: np.ndarray,
    red: np.ndarray,
    out: np.ndarray,
) -> None:
    for b in range(poses.shape[0]):
        for i in range(poses.shape[1]):
            out[b, i] = red_light_at(poses[b, i], ego_size, light_pose[b], light_size[b], red[b, i])


@njit(cache=True)
def red_light_at(
    ego_pose: np.ndarray,
    ego_size: np.ndarray,
    light_pose: np.ndarray,
    light_size: np.ndarray,
    red: np.ndarray,
) -> bool:
    """Whether one ego box ``[3]`` overlaps the stop box of a red light ``[K, ...]``."""
    for k in range(len(light_pose)):
        if red[k] and box_overlap(
            ego_pose[0], ego_pose[1], ego_pose[2], ego_size[0], ego_size[1],
            light_pose[k, 0], light_pose[k, 1], light_pose[k, 2], light_size[k, 0], light_size[k, 1],
        ):  # fmt: skip
            return True
    return False


# --- whole trajectories -----------------------------------------------------------------------------
def _no_at_fault_collision(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    area: AreaFlags,
    ignore: np.ndarray,
) -> np.ndarray:
    """NC ``[B]``: the worst first contact with each object over the horizon."""
    (rows, steps, agents), penalty = _contacts(
        world, ego_pose, ego_speed, agent_pose, agent_speed, agent_valid, area
    )
    # an object is typed at its first contact and ignored afterwards (collided_track_ids)
    new = ~ignore[rows, agents]
    rows, steps, agents, penalty = rows[new], steps[new], agents[new], penalty[new]
    first = _first_per_object(rows * ignore.shape[1] + agents, steps)
    nc = np.ones(len(ignore))
    np.minimum.at(nc, rows[first], penalty[first])
    return nc


def _driving_direction(ego_pose: np.ndarray, area: AreaFlags, dt: float) -> np.ndarray:
    """DDC ``[B]`` from the distance driven against traffic in any ~1 s window."""
    step = np.zeros(ego_pose.shape[:2])
    step[:, 1:] = np.linalg.norm(np.diff(ego_pose[..., :2], axis=1), axis=-1)
    step *= area.oncoming & ~area.in_intersection
    # _calculate_driving_direction_compliance: sums over steps t - horizon .. t
    span = round(DDC_HORIZON / dt) + 1
    total = np.cumsum(step, axis=1)
    window = total.copy()
    window[:, span:] -= total[:, :-span]
    worst = window.max(axis=1)
    return np.where(worst < DDC_COMPLIANT, 1.0, np.where(worst < DDC_VIOLATION, 0.5, 0.0))


def _ttc_trajectory(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    area: AreaFlags,
    ignore: np.ndarray,
    dt: float,
) -> np.ndarray:
    """TTC ``[B]``: start steps whose every offset stays inside the trajectory (NAVSIM v2)."""
    offset_steps = np.round(np.asarray(TTC_OFFSETS) / dt).astype(int)
    num_starts = ego_pose.shape[1] - int(offset_steps.max())
    if num_starts <= 0:
        return np.ones(ego_pose.shape[0])
    future = np.arange(num_starts)[:, None] + offset_steps  # [S, O]
    index, counts = _ttc_hits(
        world,
        ego_pose[:, :num_starts],
        ego_speed[:, :num_starts],
        area.at(np.s_[:, :num_starts]),
        agent_pose[:, future],
        agent_valid[:, future],
        ignore,
        offset_steps * dt,
    )
    # each object is decided at its first overlap in NAVSIM's visiting order (step, then offset)
    rows, start, offset, agents = index
    first = _first_per_object(rows * ignore.shape[1] + agents, start * len(offset_steps) + offset)
    ttc = np.ones(len(ignore))
    ttc[rows[first & counts]] = 0.0
    return ttc


def _route_frame(world: ScoringWorld, ego_pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Station and lateral offset ``[B, T]`` of the ego centre along the route."""
    xy = np.asarray(ego_pose[..., :2], dtype=np.float64)
    start = project_to_route(world, xy[:, 0])[2]
    travelled = np.linalg.norm(np.diff(xy, axis=1), axis=-1).sum(axis=1).max(initial=0.0)
    station, lateral, _ = project_to_route(
        world, xy, hint=start, window=int(np.ceil(travelled)) + ROUTE_WINDOW
    )
    return station, lateral


def _lane_keeping(lateral: np.ndarray, in_intersection: np.ndarray, dt: float) -> np.ndarray:
    """LK ``[B]``: 0 after too many consecutive steps off the centreline (intersections skipped)."""
    counted = ~in_intersection
    exceed = counted & (np.abs(lateral) > LK_MAX_LATERAL)
    reset = counted & ~exceed
    # run length of exceedances: steps counted since the last reset; skipped steps change nothing
    total = np.cumsum(exceed, axis=1)
    run = total - np.maximum.accumulate(np.where(reset, total, 0), axis=1)
    return np.where(run.max(axis=1) >= int(np.ceil(LK_HORIZON / dt - 1e-9)), 0.0, 1.0)


def _nearby_agents(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    ignore: np.ndarray,
    dt: float,
) -> tuple[ScoringWorld, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Only the agents that come within collision or TTC reach of the ego, ``A' <= A`` of them.

    A TTC overlap at step s + offset o needs the agent (valid then) within the two footprints'
    half-diagonals of the projected ego, which is at most ``|v(s)| o`` ahead of the ego at s,
    itself at most ``o`` steps of ego motion from the ego at s + o: so an agent never closer to
    the time-aligned ego than that sum can neither collide nor violate TTC.

    Returns the world and agent arrays (``[B, T, A', ...]``, ignore ``[B, A']``) cut down to
    them; a query with fewer than ``A'`` such agents is padded with invalid ones.
    """
    dx = agent_pose[..., 0] - ego_pose[..., None, 0]
    dy = agent_pose[..., 1] - ego_pose[..., None, 1]
    closest = np.sqrt(np.where(agent_valid, dx * dx + dy * dy, np.inf).min(axis=1))  # [B, A]
    moves = np.diff(ego_pose[..., :2], axis=1)
    ego_step = np.hypot(moves[..., 0], moves[..., 1]).max(axis=1, initial=0.0)  # [B]
    reach = TTC_OFFSETS[-1] * np.abs(ego_speed).max(axis=1) + round(TTC_OFFSETS[-1] / dt) * ego_step
    radii = (np.hypot(*world.ego_size) + np.hypot(world.agent_size[..., 0], world.agent_size[..., 1])) / 2
    near = closest <= radii + reach[:, None]
    keep = np.argsort(~near, axis=1, kind="stable")[:, : near.sum(axis=1).max(initial=0)]  # [B, A']
    rows = np.arange(len(keep))[:, None]
    at = (rows[..., None], np.arange(ego_pose.shape[1])[None, :, None], keep[:, None])
    cut = dataclasses.replace(
        world, agent_size=world.agent_size[rows, keep], agent_type=world.agent_type[rows, keep]
    )
    valid = agent_valid[at] & near[rows, keep][:, None]
    return cut, agent_pose[at], agent_speed[at], valid, ignore[rows, keep]


def score_trajectories(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    light_red: np.ndarray,
    *,
    ego_history: np.ndarray | None = None,
    ignore_at_start: np.ndarray | None = None,
    dt: float = DT,
) -> SubScores:
    """Score trajectories with NAVSIM's sub-metrics (``PDMScorer.score_proposals``).

    Args:
        world: maps, routes, footprints (one query per trajectory, see :meth:`ScoringWorld.take`).
        ego_pose: ``[B, T, 3]`` ego box centre and heading, t = 0 first (T = 41 for 4 s).
        ego_speed: ``[B, T]`` m/s.
        agent_pose: ``[B, T, A, 3]`` agents at the same times.
        agent_speed: ``[B, T, A]``.
        agent_valid: ``[B, T, A]`` bool.
        light_red: ``[B, T, K]`` bool.
        ego_history: ``[B, H, 3]`` past poses before ``ego_pose[:, 0]``, oldest first, for HC
            (HC = 1 without it).
        ignore_at_start: ``[B, A]`` objects in collision at t = 0, skipped by NC and TTC.
        dt: seconds between samples.

    Returns:
        :class:`SubScores` with ``ep`` NaN (see :func:`normalise_progress`) and ``ec`` 1.
    """
    num_queries, num_agents = agent_valid.shape[0], agent_valid.shape[-1]
    ignore = np.zeros((num_queries, num_agents), bool) if ignore_at_start is None else ignore_at_start
    area = ego_area(world, ego_pose)
    station, lateral = _route_frame(world, ego_pose)
    ones = np.ones(num_queries)
    history_comfort = ones
    if ego_history is not None:
        history_comfort = is_comfortable(np.concatenate([ego_history, ego_pose], axis=1), dt).astype(float)
    near, pose, speed, valid, ignore = _nearby_agents(
        world, ego_pose, ego_speed, agent_pose, agent_speed, agent_valid, ignore, dt
    )
    return SubScores(
        nc=_no_at_fault_collision(near, ego_pose, ego_speed, pose, speed, valid, area, ignore),
        dac=np.where(area.non_drivable.any(axis=1), 0.0, 1.0),
        ddc=_driving_direction(ego_pose, area, dt),
        tlc=np.where(red_light_violation(world, ego_pose, light_red).any(axis=1), 0.0, 1.0),
        ep=np.full(num_queries, np.nan),
        ttc=_ttc_trajectory(near, ego_pose, ego_speed, pose, valid, area, ignore, dt),
        c=is_comfortable(ego_pose, dt).astype(float),
        lk=_lane_keeping(lateral, area.in_intersection, dt),
        hc=history_comfort,
        ec=ones.copy(),
        progress=np.maximum(station[:, -1] - station[:, 0], 0.0),
    )


# --- aggregation -------------------------------------------------------------------------------------
def normalise_progress(
    progress: np.ndarray, multiplier: np.ndarray, threshold: float = PROGRESS_THRESHOLD
) -> np.ndarray:
    """EP: progress relative to the best admissible proposal (NAVSIM v2 ``_aggregate_scores``).

    Masked progress is progress times the multiplier product. If the best masked progress over
    the proposals exceeds ``threshold`` metres, EP = progress / best clipped to [0, 1]; otherwise
    every proposal gets EP = 1 (all made too little progress to tell apart).

    Args:
        progress: ``[B, P]`` raw metres of P proposals per query (proposal 0 usually the reference
            planner, as NAVSIM's PDM-Closed).
        multiplier: ``[B, P]`` their :attr:`SubScores.multiplier`.
        threshold: metres.

    Returns:
        ``[B, P]`` EP in [0, 1].
    """
    best = (progress * multiplier).max(axis=-1, keepdims=True)
    ratio = np.clip(progress / np.maximum(best, 1e-12), 0.0, 1.0)
    return np.where(best > threshold, ratio, 1.0)


def _columns(
    multipliers: tuple[str, ...], weights: dict[str, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A score's multiplier columns, weighted columns and weights in :data:`SUB_METRICS` order."""
    return (
        np.array([SUB_METRICS.index(name) for name in multipliers], np.int64),
        np.array([SUB_METRICS.index(name) for name in weights], np.int64),
        np.array(list(weights.values()), np.float64),
    )


PDMS_COLUMNS = _columns(PDMS_MULTIPLIERS, PDMS_WEIGHTS)
EPDMS_COLUMNS = _columns(EPDMS_MULTIPLIERS, EPDMS_WEIGHTS)


def _aggregate(scores: SubScores, columns: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    values = scores.to_array()
    flat = np.ascontiguousarray(values.reshape(-1, len(SUB_METRICS)))
    out = np.empty(len(flat))
    multipliers, weighted, weights = columns
    _aggregate_rows(flat, multipliers, weighted, weights, out)
    return out.reshape(values.shape[:-1])


@njit(cache=True)
def _aggregate_rows(
    values: np.ndarray, multipliers: np.ndarray, weighted: np.ndarray, weights: np.ndarray, out: np.ndarray
) -> None:
    for b in range(len(values)):
        out[b] = aggregate_row(values[b], multipliers, weighted, weights)


@njit(cache=True)
def aggregate_row(
    row: np.ndarray, multipliers: np.ndarray, weighted: np.ndarray, weights: np.ndarray
) -> float:
    """A score of one sub-score row (SUB_METRICS order): the multipliers' product times the weighted mean."""
    product = 1.0
    for column in multipliers:
        product *= row[column]
    total = 0.0
    for i in range(len(weighted)):
        total += weights[i] * row[weighted[i]]
    return product * total / weights.sum()


def pdms(scores: SubScores) -> np.ndarray:
    """NAVSIM v1.1 PDMS ``[B]`` = NC * DAC * (5 TTC + 5 EP + 2 C) / 12."""
    return _aggregate(scores, PDMS_COLUMNS)


def filtered(agent: SubScores, human: SubScores) -> SubScores:
    """NAVSIM v2's false-positive filter: a sub-metric the human scores 0 on counts as 1 for the agent.

    Applied to every sub-metric column (as ``navsim/evaluate/pdm_score.py`` does), so the
    multiplier product is recomputed from the filtered columns; raw progress is kept.
    """
    replaced = {name: np.where(getattr(human, name) == 0, 1.0, getattr(agent, name)) for name in SUB_METRICS}
    return dataclasses.replace(agent, **replaced)


def epdms(scores: SubScores, human: SubScores | None = None) -> np.ndarray:
    """NAVSIM v2 EPDMS ``[B]`` = NC * DAC * DDC * TLC * (5 EP + 5 TTC + 2 LK + 2 HC + 2 EC) / 16.

    Args:
        scores: the agent's sub-scores (``ep`` and ``ec`` set).
        human: the logged human's sub-scores for the same queries; given, :func:`filtered` applies.

    Returns:
        ``[B]`` in [0, 1].
    """
    if human is not None:
        scores = filtered(scores, human)
    return _aggregate(scores, EPDMS_COLUMNS)
