"""Rule-based planning on the route: the IDM progress reference and the PDM-Closed-like planner.

PDM-Closed (Dauner et al., 2023) follows the route centreline with IDM at several target speeds
and lateral offsets, simulates every proposal forward, scores it with the PDM score and keeps the
best. omnigym's version does the same, batched over envs x proposals, with agents forecast at
constant velocity (as PDM-Closed does) and the light states held for the horizon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from omnigym.envs.driving import metrics
from omnigym.envs.driving.agents import AgentFrame, constant_velocity_forecast
from omnigym.envs.driving.assets import ROUTE_SPACING
from omnigym.envs.driving.controller import PLAN_POSES, STEPS_PER_POSE, PlanTracker, TrackerConfig
from omnigym.envs.driving.dynamics import bicycle_step, to_ego_frame
from omnigym.envs.driving.scene import DT, EGO_LENGTH, HORIZON_STEPS, LIGHT_RED, LIGHT_YELLOW
from omnigym.envs.driving.traffic import IDMParams
from omnigym.envs.driving.trajectory_scores import score_trajectories

if TYPE_CHECKING:
    from omnigym.envs.driving.simulator import DrivingSimulator

SPEED_FACTORS = (0.2, 0.4, 0.6, 0.8, 1.0)
"""PDM-Closed's target speeds, as fractions of the speed limit."""
LATERAL_OFFSETS = (-1.0, 0.0, 1.0)
"""PDM-Closed's lateral offsets from the centreline, m."""
LOOKAHEAD = 120.0
"""Route metres ahead in which leaders and stop lines are searched."""
ROUTE_LANE_HALF_WIDTH = 2.0
"""An agent within this lateral distance of the centreline (and driving along it) is a leader."""
OFFSET_TIME_CONSTANT = 1.0
"""Seconds over which a proposal moves from the ego's lateral position to its offset."""
MIN_OFFSET_DISTANCE = 5.0
"""Metres of progress a PDM-Closed proposal's offset takes at least: a slow or stopped car moves
sideways only as it moves forward (PDM-Closed offsets its paths in space)."""
LANE_WIDTH = 3.5
"""Metres between lane centres, for meta actions' lane changes (:func:`meta_action_plans`)."""


def _lead_objects(sim: DrivingSimulator, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What IDM follows on each route ahead: ``(rear station, speed)`` ``[n, NUM_LEADERS + 1]``.

    The NUM_LEADERS nearest agents driving along the route ahead (among the SEARCHED_AGENTS
    agents nearest to the ego: only those can lead within the horizon), moving at their speed
    along the route, and the nearest red or yellow stop line, standing; inf where there is none.
    """
    num_agents = sim.agent_valid.shape[2]
    k = min(NUM_LEADERS, SEARCHED_AGENTS, num_agents)
    position = np.full((len(idx), k + 1), np.inf)
    speed = np.zeros((len(idx), k + 1))
    _find_lead_objects(
        np.asarray(idx, np.int64),
        sim.time,
        sim.ego.pose,
        sim.station,
        sim.agent_pose,
        sim.agent_speed,
        sim.agent_valid,
        sim.agent_size,
        sim.route_points,
        sim.route_heading,
        sim.route_num,
        sim.light_state,
        sim.light_valid,
        sim.light_station,
        min(SEARCHED_AGENTS, num_agents),
        position,
        speed,
    )
    return position, speed


@njit(cache=True)
def _find_lead_objects(
    idx: np.ndarray,
    time: np.ndarray,
    ego_pose: np.ndarray,
    ego_station: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    size: np.ndarray,
    route_points: np.ndarray,
    route_heading: np.ndarray,
    route_num: np.ndarray,
    light_states: np.ndarray,
    light_valid: np.ndarray,
    light_station: np.ndarray,
    searched: int,
    out_position: np.ndarray,
    out_speed: np.ndarray,
) -> None:
    """:func:`_lead_objects` of slots ``idx`` at their ``time`` (agents and lights read from the logs)."""
    num_agents, k = agent_pose.shape[2], out_position.shape[1] - 1
    distance = np.empty(num_agents)
    for row in range(len(idx)):
        n = idx[row]
        pose, speed, valid = agent_pose[n, time[n]], agent_speed[n, time[n]], agent_valid[n, time[n]]
        light_state = light_states[n, time[n]]
        for a in range(num_agents):
            dx, dy = pose[a, 0] - ego_pose[n, 0], pose[a, 1] - ego_pose[n, 1]
            distance[a] = dx * dx + dy * dy if valid[a] else np.inf
        centre = int(np.rint(ego_station[n] / ROUTE_SPACING))
        last_point = route_num[n] - 1
        first = min(max(centre - 10, 0), last_point)
        last = min(max(centre + int(LOOKAHEAD) - 1, 0), last_point)
        count = 0  # agents kept so far in out_position[row, :k], nearest rear first
        for a in np.argsort(distance, kind="mergesort")[:searched]:
            if not valid[a]:
                continue
            best, best_index = np.inf, first
            for i in range(first, last + 1):  # the nearest route point in the window
                dx, dy = pose[a, 0] - route_points[n, i, 0], pose[a, 1] - route_points[n, i, 1]
                d2 = dx * dx + dy * dy
                if d2 < best:
                    best, best_index = d2, i
            along = np.cos(pose[a, 2] - route_heading[n, best_index])
            station = best_index * ROUTE_SPACING
            if not (np.sqrt(best) < ROUTE_LANE_HALF_WIDTH and along > 0.5 and station > ego_station[n]):
                continue
            rear = station - 0.5 * size[n, a, 0]  # its rear bumper
            slot = min(count, k - 1)
            if count == k and rear >= out_position[row, slot]:
                continue
            while slot > 0 and out_position[row, slot - 1] > rear:
                out_position[row, slot], out_speed[row, slot] = (
                    out_position[row, slot - 1],
                    out_speed[row, slot - 1],
                )
                slot -= 1
            out_position[row, slot], out_speed[row, slot] = rear, speed[a] * min(along, 1.0)
            count = min(count + 1, k)
        for j in range(len(light_state)):  # the nearest red or yellow stop line ahead, standing
            stopping = light_state[j] == LIGHT_RED or light_state[j] == LIGHT_YELLOW
            ahead = light_station[n, j] > ego_station[n] + 0.5 * EGO_LENGTH
            if stopping and ahead and light_valid[n, j]:
                out_position[row, k] = min(out_position[row, k], light_station[n, j])


REFERENCE_STEP = 4
"""The progress reference integrates IDM every REFERENCE_STEP x 0.1 s."""
SEARCHED_AGENTS = 16
"""Agents nearest to the ego that are checked for being on its route."""
NUM_LEADERS = 4
"""Nearest objects ahead on the route that IDM keeps track of over the horizon."""


def idm_on_route(
    sim: DrivingSimulator,
    idx: np.ndarray,
    speed_factors: np.ndarray,
    params: IDMParams | None = None,
    step_size: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Stations and speeds ``[n, F, T/step_size + 1]`` of IDM drivers on each ego's route.

    One driver per target speed factor, over the 4 s horizon, sampled every ``step_size`` x 0.1 s.

    Leaders are the nearest agents on the route ahead, moving at constant speed, and red/yellow
    stop lines; the target speed is the speed limit where the ego is, times the factor.
    """
    params = params or IDMParams()
    lead_position, lead_speed = _lead_objects(sim, idx)
    limit_index = np.minimum(
        np.round(sim.station[idx] / ROUTE_SPACING).astype(np.int64), sim.route_num[idx] - 1
    )
    desired = np.maximum(sim.route_limit[idx, limit_index][:, None] * speed_factors[None, :], 0.5)
    steps = HORIZON_STEPS // step_size
    stations = np.empty((len(idx), len(speed_factors), steps + 1))
    speeds = np.empty_like(stations)
    stations[..., 0], speeds[..., 0] = sim.station[idx, None], sim.ego.speed[idx, None]
    _integrate_idm(
        lead_position,
        lead_speed,
        desired,
        np.array([params.a_max, params.b_comfortable, params.time_headway, params.min_gap, params.delta]),
        params.b_max,
        step_size * DT,
        stations,
        speeds,
    )
    return stations, speeds


@njit(cache=True)
def _integrate_idm(
    lead_position: np.ndarray,
    lead_speed: np.ndarray,
    desired: np.ndarray,
    params: np.ndarray,
    b_max: float,
    dt: float,
    stations: np.ndarray,
    speeds: np.ndarray,
) -> None:
    """Integrate IDM (Treiber et al. 2000) drivers from ``stations[..., 0]`` and ``speeds[..., 0]``.

    Leaders move at constant speed (rear bumpers at ``lead_position``); fills the rest of both arrays.
    """
    a_max, b_comfortable, time_headway, min_gap, delta = params
    root_ab = 2.0 * np.sqrt(a_max * b_comfortable)
    half_ego = 0.5 * EGO_LENGTH
    for n in range(stations.shape[0]):
        for f in range(stations.shape[1]):
            station, speed = stations[n, f, 0], speeds[n, f, 0]
            for k in range(stations.shape[2] - 1):
                gap, v_lead = np.inf, 0.0
                for j in range(lead_position.shape[1]):
                    lead_gap = lead_position[n, j] + lead_speed[n, j] * (k * dt) - station - half_ego
                    if lead_gap > -EGO_LENGTH and lead_gap < gap:  # objects already passed do not lead
                        gap, v_lead = lead_gap, lead_speed[n, j]
                gap = max(gap, 0.1)
                desired_gap = min_gap + max(0.0, speed * time_headway + speed * (speed - v_lead) / root_ab)
                accel = a_max * (1.0 - (speed / desired[n, f]) ** delta - (desired_gap / gap) ** 2)
                new_speed = max(speed + max(accel, -b_max) * dt, 0.0)
                station += 0.5 * (speed + new_speed) * dt
                speed = new_speed
                stations[n, f, k + 1], speeds[n, f, k + 1] = station, speed


def reference_progress(sim: DrivingSimulator, idx: np.ndarray) -> np.ndarray:
    """Metres an IDM driver at the speed limit would progress on the route in the next 4 s [n]."""
    if len(idx) == 0:
        return np.zeros(0)
    # 0.4 s steps: a reference needs the distance, not the profile, and runs every window start
    stations, _ = idm_on_route(sim, idx, np.array([1.0]), step_size=REFERENCE_STEP)
    return stations[:, 0, -1] - stations[:, 0, 0]


def _route_pose(
    sim: DrivingSimulator, idx: np.ndarray, station: np.ndarray, lateral: np.ndarray
) -> np.ndarray:
    """World poses ``[n, ..., 3]`` at ``station`` along the route, offset ``lateral`` (left positive)."""
    shape = station.shape
    index = np.minimum(
        np.round(station / ROUTE_SPACING).astype(np.int64),
        sim.route_num[idx].reshape((-1,) + (1,) * (len(shape) - 1)) - 1,
    )
    rows = idx.reshape((-1,) + (1,) * (len(shape) - 1))
    heading = sim.route_heading[rows, index]
    base = sim.route_points[rows, index]
    # sub-metre position: advance along the heading by the remainder of the station
    remainder = station - index * ROUTE_SPACING
    x = base[..., 0] + remainder * np.cos(heading) - lateral * np.sin(heading)
    y = base[..., 1] + remainder * np.sin(heading) + lateral * np.cos(heading)
    return np.stack([x, y, heading], axis=-1)


def pdm_closed_plans(sim: DrivingSimulator, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best PDM-Closed proposal for slots ``idx``.

    Returns its plan ``[n, 8, 3]`` (ego frame) and its dense world positions ``[n, 41, 2]``.
    """
    factors = np.repeat(np.array(SPEED_FACTORS), len(LATERAL_OFFSETS))
    offsets = np.tile(np.array(LATERAL_OFFSETS), len(SPEED_FACTORS))
    n, p = len(idx), len(factors)
    stations, _ = idm_on_route(sim, idx, np.array(SPEED_FACTORS))
    stations = np.repeat(stations, len(LATERAL_OFFSETS), axis=1)  # [n, P, T+1]
    # offsets approached over distance: 1 s at the current speed, at least MIN_OFFSET_DISTANCE
    scale = np.maximum(sim.ego.speed[idx] * OFFSET_TIME_CONSTANT, MIN_OFFSET_DISTANCE)[:, None, None]
    lateral0, target = sim.lateral[idx, None, None], offsets[None, :, None]
    lateral = target + (lateral0 - target) * np.exp(-(stations - stations[..., :1]) / scale)
    ideal = _route_pose(sim, idx, stations, lateral)  # [n, P, T+1, 3]
    ideal[:, :, 0] = sim.ego.pose[idx, None]  # proposals start where the ego is
    tracked, tracked_speed = _track(sim, idx, ideal[..., :2])
    scores = _score_proposals(sim, idx, tracked, tracked_speed)
    best = np.argmax(scores.reshape(n, p), axis=1)
    chosen = ideal[np.arange(n), best]
    return _ego_frame_plan(sim, idx, chosen), chosen[..., :2]


def _lateral_profile(lateral0: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Offsets from the centreline over the horizon ``[..., T+1]``: from ``lateral0`` towards ``target``."""
    time = np.arange(HORIZON_STEPS + 1) * DT
    return target + (lateral0 - target) * np.exp(-time / OFFSET_TIME_CONSTANT)


def _ego_frame_plan(sim: DrivingSimulator, idx: np.ndarray, ideal: np.ndarray) -> np.ndarray:
    """The NAVSIM-style plan ``[n, 8, 3]`` (ego frame) of dense world poses ``[n, T+1, 3]``."""
    knots = ideal[:, STEPS_PER_POSE::STEPS_PER_POSE][:, :PLAN_POSES]
    local = to_ego_frame(knots[..., :2], sim.ego.pose[idx])
    heading = np.unwrap(knots[..., 2] - sim.ego.pose[idx, 2:3], axis=1)
    return np.concatenate([local, heading[..., None]], axis=-1)


def meta_action_plans(
    sim: DrivingSimulator, idx: np.ndarray, lane_change: np.ndarray, acceleration: np.ndarray
) -> np.ndarray:
    """Plans ``[n, 8, 3]`` (ego frame) that carry out meta actions, for slots ``idx``.

    The reference controller of the driving env's text actions: follow the route in the ego's
    current lane (lanes counted in ``LANE_WIDTH`` steps from the route centreline) shifted by
    ``lane_change`` ``[n]`` lanes (+1 left, -1 right), moving there like a PDM-Closed proposal,
    while the speed changes at ``acceleration`` ``[n]`` m/s², never below 0 and, when speeding
    up, never above the speed limit (or the current speed, if that is higher).
    """
    time = np.arange(HORIZON_STEPS + 1) * DT
    speed0 = sim.ego.speed[idx]
    limit_index = np.minimum(
        np.round(sim.station[idx] / ROUTE_SPACING).astype(np.int64), sim.route_num[idx] - 1
    )
    ceiling = np.where(acceleration > 0, np.maximum(sim.route_limit[idx, limit_index], speed0), np.inf)
    speed = np.clip(speed0[:, None] + acceleration[:, None] * time, 0.0, ceiling[:, None])
    travelled = np.concatenate(
        [np.zeros((len(idx), 1)), np.cumsum(0.5 * (speed[:, 1:] + speed[:, :-1]) * DT, axis=1)], axis=1
    )
    lateral0 = sim.lateral[idx]
    target = (np.round(lateral0 / LANE_WIDTH) + lane_change) * LANE_WIDTH
    lateral = _lateral_profile(lateral0[:, None], target[:, None])
    ideal = _route_pose(sim, idx, sim.station[idx, None] + travelled, lateral)  # [n, T+1, 3]
    return _ego_frame_plan(sim, idx, ideal)


def _track(sim: DrivingSimulator, idx: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Simulate the env's tracker + bicycle on every proposal: poses ``[n*P, T+1, 3]`` and speeds."""
    n, p = dense.shape[:2]
    flat = dense.reshape(n * p, HORIZON_STEPS + 1, 2)
    ego = sim.ego.take(np.repeat(idx, p))
    tracker = PlanTracker(sim.limits, TrackerConfig())
    tracker.resize(n * p)
    tracker.set_plan(np.arange(n * p), flat)
    poses, speeds = [ego.pose.copy()], [ego.speed.copy()]
    for _ in range(HORIZON_STEPS):
        accel, steer_rate = tracker.command(ego)
        bicycle_step(ego, accel, steer_rate, sim.limits)
        poses.append(ego.pose.copy())
        speeds.append(ego.speed.copy())
    return np.stack(poses, axis=1), np.stack(speeds, axis=1)


def _score_proposals(
    sim: DrivingSimulator, idx: np.ndarray, poses: np.ndarray, speeds: np.ndarray
) -> np.ndarray:
    """PDM score [n*P] of tracked proposals, ties (e.g. all zero) broken by the unmultiplied score.

    Agents: with log-replay traffic, their logged future (as NAVSIM scores against the log);
    with reactive traffic, constant velocity. Lights are held in their current state.
    """
    p = poses.shape[0] // len(idx)
    rep = np.repeat(idx, p)
    rows = rep[:, None]
    if sim.reactive is None and sim.model is None:
        t = np.minimum(sim.time[rep, None] + np.arange(HORIZON_STEPS + 1), sim.max_steps - 1)
        agent_pose, agent_speed, agent_valid = (
            sim.agent_pose[rows, t],
            sim.agent_speed[rows, t],
            sim.agent_valid[rows, t],
        )
    else:
        frame = sim.agents_now()
        mine = AgentFrame(frame.pose[rep], frame.speed[rep], frame.valid[rep])
        future = constant_velocity_forecast(mine, np.arange(HORIZON_STEPS + 1) * DT)
        agent_pose, agent_speed, agent_valid = future.pose, future.speed, future.valid
    red = sim.light_state[rep, sim.time[rep]] == LIGHT_RED
    light_red = np.broadcast_to(red[:, None], (len(rep), HORIZON_STEPS + 1, red.shape[1]))
    scores = score_trajectories(
        sim.world(rep),
        poses,
        speeds,
        agent_pose,
        agent_speed,
        agent_valid,
        light_red,
        ignore_at_start=sim.collided[rep],
    )
    progress = scores.progress.reshape(len(idx), p)
    multiplier = scores.multiplier.reshape(len(idx), p)
    scores.ep = metrics.normalise_progress(progress, multiplier).reshape(-1)
    weighted = (5 * scores.ttc + 5 * scores.ep + 2 * scores.c) / 12
    return metrics.pdms(scores) + 1e-3 * weighted


def constant_velocity_plan(speed: np.ndarray) -> np.ndarray:
    """NAVSIM's constant-velocity baseline: straight ahead at the current speed, ``[n, 8, 3]``."""
    time = np.arange(1, PLAN_POSES + 1) * STEPS_PER_POSE * DT
    plan = np.zeros((len(speed), PLAN_POSES, 3))
    plan[..., 0] = speed[:, None] * time
    return plan


def log_replay_plan(sim: DrivingSimulator, idx: np.ndarray) -> np.ndarray:
    """The logged human's next 4 s as a plan ``[n, 8, 3]`` in the ego frame."""
    t = np.minimum(sim.time[idx, None] + STEPS_PER_POSE * np.arange(1, PLAN_POSES + 1), sim.max_steps - 1)
    poses = sim.log_ego_pose[idx[:, None], t]
    local = to_ego_frame(poses[..., :2], sim.ego.pose[idx])
    heading = np.unwrap(poses[..., 2] - sim.ego.pose[idx, 2:3], axis=1)
    return np.concatenate([local, heading[..., None]], axis=-1)
