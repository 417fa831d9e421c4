"""The PDM score (NAVSIM v1 PDMS) and extended PDM score (NAVSIM v2 EPDMS): what the scoring shares.

The scoring is batched in NumPy, vectorised over ``B`` queries (envs, or envs x planner proposals)
and ``A`` agents, in layers that each live in their own module:

- per-step building blocks the env calls every 0.1 s: route projection, ego areas and red lights
  (:mod:`~omnigym.envs.driving.map_checks`), at-fault collisions and time-to-collision
  (:mod:`~omnigym.envs.driving.agent_checks`);
- :func:`~omnigym.envs.driving.trajectory_scores.score_trajectories`, which scores whole 4 s
  trajectories into :class:`SubScores`, then
- :func:`normalise_progress`, :func:`pdms` and :func:`epdms` (here) aggregate them.

This module holds what the layers share: NAVSIM's thresholds, the scoring world and state, the
sub-score containers, and the aggregation into PDMS and EPDMS.

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
from omnigym.envs.driving.comfort import two_frame_extended_comfort as two_frame_extended_comfort
from omnigym.envs.driving.geometry import polyline_stations
from omnigym.envs.driving.map_raster import RasterStack
from omnigym.envs.driving.scene import EGO_LENGTH, EGO_WIDTH

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

    ``ep`` is NaN out of :func:`~omnigym.envs.driving.trajectory_scores.score_trajectories`: set it
    from :func:`normalise_progress`.
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
