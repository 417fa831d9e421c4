"""Scoring whole trajectories with NAVSIM's sub-metrics (``PDMScorer.score_proposals``).

:func:`score_trajectories` scores ``B`` trajectories of ``T`` steps at once into
:class:`~omnigym.envs.driving.metrics.SubScores`: the per-step building blocks of
:mod:`~omnigym.envs.driving.map_checks` and :mod:`~omnigym.envs.driving.agent_checks` run over
every step, then each sub-metric reduces them over the trajectory (driving direction and lane
keeping over their look-back windows, comfort over the poses). The PDM-Closed planner scores its
proposals with it and the scene assets the logged human's windows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from omnigym.envs.driving.agent_checks import no_at_fault_collision, ttc_trajectory
from omnigym.envs.driving.comfort import is_comfortable
from omnigym.envs.driving.map_checks import ego_area, project_to_route, red_light_violation
from omnigym.envs.driving.metrics import (
    DDC_COMPLIANT,
    DDC_HORIZON,
    DDC_VIOLATION,
    LK_HORIZON,
    LK_MAX_LATERAL,
    ROUTE_WINDOW,
    TTC_OFFSETS,
    AreaFlags,
    ScoringWorld,
    SubScores,
)
from omnigym.envs.driving.scene import DT


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
        world: maps, routes, footprints (one query per trajectory, see
            :meth:`~omnigym.envs.driving.metrics.ScoringWorld.take`).
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
        :class:`~omnigym.envs.driving.metrics.SubScores` with ``ep`` NaN (see
        :func:`~omnigym.envs.driving.metrics.normalise_progress`) and ``ec`` 1.
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
        nc=no_at_fault_collision(near, ego_pose, ego_speed, pose, speed, valid, area, ignore),
        dac=np.where(area.non_drivable.any(axis=1), 0.0, 1.0),
        ddc=_driving_direction(ego_pose, area, dt),
        tlc=np.where(red_light_violation(world, ego_pose, light_red).any(axis=1), 0.0, 1.0),
        ep=np.full(num_queries, np.nan),
        ttc=ttc_trajectory(near, ego_pose, ego_speed, pose, valid, area, ignore, dt),
        c=is_comfortable(ego_pose, dt).astype(float),
        lk=_lane_keeping(lateral, area.in_intersection, dt),
        hc=history_comfort,
        ec=ones.copy(),
        progress=np.maximum(station[:, -1] - station[:, 0], 0.0),
    )
