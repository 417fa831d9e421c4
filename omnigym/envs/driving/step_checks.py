"""NAVSIM's per-step checks of every slot, in one compiled pass.

Every 0.1 s the simulator scores each ego against the rules of :mod:`~omnigym.envs.driving.metrics`:
where the ego is on the map, at-fault collisions, time to collision, red lights, its progress
and offset along the route, driving direction, lane keeping and comfort. Each rule is one
compiled function of one ego (``area_at``, ``collisions_at``, ``ttc_ok_at``, ``red_light_at``,
``project_point``, ``uncomfortable_at_end``), shared with the batched building blocks that score
whole trajectories; this module only runs them over the slots in a single pass, so a step costs
one call instead of dozens of small array operations.

The simulator's arrays reach :func:`score_step` in a few plain tuples, one per kind of input
(the ego, the agents, the TTC future, the lights, the map rasters, the route and the running
state), which the compiled helpers below unpack; numba passes tuples of arrays at almost no cost.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from omnigym.envs.driving.agent_checks import collisions_at, ttc_ok_at
from omnigym.envs.driving.comfort import uncomfortable_at_end
from omnigym.envs.driving.geometry import project_point
from omnigym.envs.driving.map_checks import area_at, red_light_at
from omnigym.envs.driving.metrics import (
    DDC_COMPLIANT,
    DDC_VIOLATION,
    LK_HORIZON,
    LK_MAX_LATERAL,
    ROUTE_WINDOW,
)

CHECKS = ("nc", "dac", "ddc", "tlc", "ttc", "ep", "c", "lk")
"""Columns of :func:`score_step`'s output, each in [0, 1]."""


@njit(cache=True)
def score_step(
    ego: tuple,
    agents: tuple,
    future: tuple,
    lights: tuple,
    raster: tuple,
    route: tuple,
    running: tuple,
    comfort_weights: np.ndarray,
    dt: float,
    out: np.ndarray,
) -> None:
    """Score the current step of every slot into ``out [N, len(CHECKS)]`` and update its state.

    Args:
        ego: ``(pose [N, 3], speed [N], size, rear_axle, time [N], track [N, T, 3])``: box centres
            and headings, m/s, ``(length, width)``, metres from the rear axle to the box centre,
            the log index of the step, and the ego's poses by log index (comfort reads the last C).
        agents: ``(pose [N, T, A, 3], speed [N, T, A], valid [N, T, A], size [N, A, 2],
            type [N, A])``: the agents over the log, read at ``time``.
        future: ``(offsets [O], pose [N, F, A, 3], valid [N, F, A], index [N, O],
            max_travel [N], speed)``: seconds ahead that TTC projects the ego; the agents TTC
            tests, read at rows ``index`` (the row of ``pose`` at each offset); metres an agent
            moves at most from the first offset to the others. ``speed``: None (``pose`` holds the
            future, a log's), or ``[N, F, A]``: the agents at row ``index[:, 0]`` are moved on at
            constant velocity (reactive traffic; ``max_travel`` is not read).
        lights: ``(pose [N, K, 3], size [N, K, 2], red [N, T, K])``: red-light stop boxes, and
            red lights over the log, read at ``time``.
        raster: ``(origin [M, 2], resolution, area [M, H, W], lane [M, H, W], index [N])``: the
            map rasters (``RasterStack``: metres per pixel, area bits, lane ids) and each slot's
            raster.
        route: ``(points [N, R, 2], stations [N, R], index [N], station [N], lateral [N])``: route
            centrelines, their arc length, projection hints, metres along the route and metres
            off its centreline (left positive); the last three updated.
        running: ``(collided [N, A], ttc_tolerated [N, A], oncoming_progress [N, S],
            off_centre_steps [N], reference_step [N])``: objects collided with this episode,
            objects TTC tolerates in this window, metres driven against traffic in each of the
            last S steps (DDC's horizon), steps in a row off the route centreline (all four
            updated), and the progress reference per step (0: no reference).
        comfort_weights: ``[4, C]`` from :func:`~omnigym.envs.driving.comfort.last_step_weights`.
        dt: seconds per step.
        out: ``[N, len(CHECKS)]``, written.
    """
    context = np.empty((comfort_weights.shape[1], 3))
    for n in range(len(ego[0])):
        multiple_lanes, non_drivable, oncoming, in_intersection = _area(n, ego, raster)
        nc, ttc = _agent_checks(
            n, ego, agents, future, running, multiple_lanes, non_drivable, in_intersection
        )
        red = _red_light(n, ego, lights)
        progress = _advance_on_route(n, ego, route)
        ddc = _driving_direction(n, ego, running, oncoming and not in_intersection, dt)
        lk = _lane_keeping(n, route, running, in_intersection, dt)
        comfortable = _comfortable(n, ego, context, comfort_weights, dt)
        ep = _ego_progress(progress, running[4][n])
        out[n, 0] = nc
        out[n, 1] = 0.0 if non_drivable else 1.0
        out[n, 2] = ddc
        out[n, 3] = 0.0 if red else 1.0
        out[n, 4] = 1.0 if ttc else 0.0
        out[n, 5] = ep
        out[n, 6] = 1.0 if comfortable else 0.0
        out[n, 7] = lk


@njit(cache=True)
def _area(n: int, ego: tuple, raster: tuple) -> tuple[bool, bool, bool, bool]:
    """Slot ``n``'s ego areas: multiple lanes, non-drivable, oncoming, in intersection."""
    pose, size = ego[0], ego[2]
    origin, resolution, area, lane, index = raster
    x, y, heading = pose[n, 0], pose[n, 1], pose[n, 2]
    length, width = size[0], size[1]
    return area_at(origin, resolution, area, lane, index[n], x, y, heading, length, width)


@njit(cache=True)
def _agent_checks(
    n: int,
    ego: tuple,
    agents: tuple,
    future: tuple,
    running: tuple,
    multiple_lanes: bool,
    non_drivable: bool,
    in_intersection: bool,
) -> tuple[float, bool]:
    """Slot ``n``'s NC and whether its TTC holds; adds the objects it overlaps to ``collided``."""
    pose, speed, size, rear_axle, time, _ = ego
    agent_pose, agent_speed, agent_valid, agent_size, agent_type = agents
    offsets, future_pose, future_valid, future_index, max_travel, future_speed = future
    collided, ttc_tolerated = running[0], running[1]
    t = time[n]
    colliding = np.zeros(agent_pose.shape[2], np.bool_)
    nc = collisions_at(
        pose[n],
        speed[n],
        size,
        rear_axle,
        agent_pose[n, t],
        agent_speed[n, t],
        agent_valid[n, t],
        agent_size[n],
        agent_type[n],
        multiple_lanes or non_drivable,
        collided[n],
        colliding,
    )
    collided[n] |= colliding
    ttc = ttc_ok_at(
        pose[n],
        speed[n],
        size,
        rear_axle,
        offsets,
        future_pose[n],
        future_valid[n],
        future_index[n],
        agent_size[n],
        multiple_lanes or non_drivable or in_intersection,
        collided[n],
        ttc_tolerated[n],
        max_travel[n],
        _row(future_speed, n),
    )
    return nc, ttc


@njit(cache=True)
def _row(values: np.ndarray | None, n: int) -> np.ndarray | None:
    """``values[n]``, or None for None (the branch is pruned at compile time)."""
    if values is None:
        return None
    return values[n]


@njit(cache=True)
def _red_light(n: int, ego: tuple, lights: tuple) -> bool:
    """Whether slot ``n``'s ego box overlaps the stop box of a light red now."""
    pose, size, time = ego[0], ego[2], ego[4]
    light_pose, light_size, light_red = lights
    return red_light_at(pose[n], size, light_pose[n], light_size[n], light_red[n, time[n]])


@njit(cache=True)
def _advance_on_route(n: int, ego: tuple, route: tuple) -> float:
    """Project slot ``n``'s ego on its route (updating station, lateral and hint); the progress made."""
    pose = ego[0]
    points, stations, index, station, lateral = route
    new_station, lateral[n], index[n] = project_point(
        points[n], stations[n], pose[n, 0], pose[n, 1], index[n], ROUTE_WINDOW
    )
    progress, station[n] = new_station - station[n], new_station
    return progress


@njit(cache=True)
def _driving_direction(n: int, ego: tuple, running: tuple, against_traffic: bool, dt: float) -> float:
    """DDC of slot ``n``: distance driven in oncoming lanes (outside intersections) over the last second."""
    speed, oncoming_progress = ego[1], running[2]
    for s in range(oncoming_progress.shape[1] - 1, 0, -1):
        oncoming_progress[n, s] = oncoming_progress[n, s - 1]
    oncoming_progress[n, 0] = speed[n] * dt if against_traffic else 0.0
    against = oncoming_progress[n].sum()
    return 1.0 if against < DDC_COMPLIANT else (0.5 if against < DDC_VIOLATION else 0.0)


@njit(cache=True)
def _lane_keeping(n: int, route: tuple, running: tuple, in_intersection: bool, dt: float) -> float:
    """LK of slot ``n``: off the route centreline for too long (intersections pause the count)."""
    lateral, off_centre_steps = route[4], running[3]
    if abs(lateral[n]) > LK_MAX_LATERAL and not in_intersection:
        off_centre_steps[n] += 1
    elif not in_intersection:
        off_centre_steps[n] = 0
    return 1.0 if off_centre_steps[n] < round(LK_HORIZON / dt) else 0.0


@njit(cache=True)
def _comfortable(n: int, ego: tuple, context: np.ndarray, comfort_weights: np.ndarray, dt: float) -> bool:
    """C of slot ``n``: comfort at this step, from the last poses driven (copied into ``context``)."""
    time, track = ego[4], ego[5]
    t = time[n]
    for j in range(len(context)):
        context[j] = track[n, max(t - len(context) + 1 + j, 0)]
    return not uncomfortable_at_end(context, dt, comfort_weights)


@njit(cache=True)
def _ego_progress(progress: float, reference_step: float) -> float:
    """EP of one step: progress against the reference's per step (1 without a reference)."""
    ep = 1.0
    if reference_step > 0:
        ep = min(max(progress / max(reference_step, 1e-9), 0.0), 1.0)
    return ep
