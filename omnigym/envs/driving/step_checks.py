"""NAVSIM's per-step checks of every slot, in one compiled pass.

Every 0.1 s the simulator scores each ego against the rules of :mod:`~omnigym.envs.driving.metrics`:
where the ego is on the map, at-fault collisions, time to collision, red lights, its progress
and offset along the route, driving direction, lane keeping and comfort. Each rule is one
compiled function of one ego (``area_at``, ``collisions_at``, ``ttc_ok_at``, ``red_light_at``,
``project_point``, ``uncomfortable_at_end``), shared with the batched building blocks that score
whole trajectories; this module only runs them over the slots in a single pass, so a step costs
one call instead of dozens of small array operations.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from omnigym.envs.driving.comfort import uncomfortable_at_end
from omnigym.envs.driving.geometry import project_point
from omnigym.envs.driving.metrics import (
    DDC_COMPLIANT,
    DDC_VIOLATION,
    LK_HORIZON,
    LK_MAX_LATERAL,
    ROUTE_WINDOW,
    area_at,
    collisions_at,
    red_light_at,
    ttc_ok_at,
)

CHECKS = ("nc", "dac", "ddc", "tlc", "ttc", "ep", "c", "lk")
"""Columns of :func:`score_step`'s output, each in [0, 1]."""


@njit(cache=True)
def score_step(
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    ego_size: np.ndarray,
    rear_axle: float,
    time: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    agent_size: np.ndarray,
    agent_type: np.ndarray,
    ttc_offsets: np.ndarray,
    future_pose: np.ndarray,
    future_valid: np.ndarray,
    future_index: np.ndarray,
    max_travel: np.ndarray,
    light_pose: np.ndarray,
    light_size: np.ndarray,
    light_red: np.ndarray,
    raster_origin: np.ndarray,
    raster_resolution: float,
    raster_area: np.ndarray,
    raster_lane: np.ndarray,
    raster_index: np.ndarray,
    route_points: np.ndarray,
    route_station: np.ndarray,
    route_index: np.ndarray,
    station: np.ndarray,
    lateral: np.ndarray,
    collided: np.ndarray,
    ttc_tolerated: np.ndarray,
    oncoming_progress: np.ndarray,
    off_centre_steps: np.ndarray,
    reference_step: np.ndarray,
    ego_track: np.ndarray,
    comfort_weights: np.ndarray,
    dt: float,
    out: np.ndarray,
) -> None:
    """Score the current step of every slot into ``out [N, len(CHECKS)]`` and update its state.

    Args:
        ego_pose: ``[N, 3]`` box centres and headings.
        ego_speed: ``[N]`` m/s.
        ego_size: ``(length, width)``.
        rear_axle: metres from the rear axle to the box centre.
        time: ``[N]`` log index of the step.
        agent_pose: ``[N, T, A, 3]`` the agents over the log, read at ``time``.
        agent_speed: ``[N, T, A]``.
        agent_valid: ``[N, T, A]``.
        agent_size: ``[N, A, 2]``.
        agent_type: ``[N, A]``.
        ttc_offsets: ``[O]`` seconds ahead that TTC projects the ego.
        future_pose: ``[N, F, A, 3]`` the agents TTC tests, read at rows ``future_index``.
        future_valid: ``[N, F, A]``.
        future_index: ``[N, O]`` the row of ``future_pose`` at each offset.
        max_travel: ``[N]`` metres an agent moves at most from the first offset to the others.
        light_pose: ``[N, K, 3]`` red-light stop boxes.
        light_size: ``[N, K, 2]``.
        light_red: ``[N, T, K]`` red lights over the log, read at ``time``.
        raster_origin: ``[M, 2]`` of the map rasters (``RasterStack``).
        raster_resolution: metres per pixel.
        raster_area: ``[M, H, W]`` area bits.
        raster_lane: ``[M, H, W]`` lane ids.
        raster_index: ``[N]`` each slot's raster.
        route_points: ``[N, R, 2]`` route centrelines.
        route_station: ``[N, R]`` their arc length.
        route_index: ``[N]`` projection hints; updated.
        station: ``[N]`` metres along the route; updated.
        lateral: ``[N]`` metres off the route centreline (left positive); updated.
        collided: ``[N, A]`` objects collided with this episode; updated.
        ttc_tolerated: ``[N, A]`` objects TTC tolerates in this window; updated.
        oncoming_progress: ``[N, S]`` metres driven against traffic in each of the last S steps
            (DDC's horizon); updated.
        off_centre_steps: ``[N]`` steps in a row off the route centreline; updated.
        reference_step: ``[N]`` the progress reference per step (0: no reference).
        ego_track: ``[N, T, 3]`` the ego's poses by log index (comfort reads the last C).
        comfort_weights: ``[4, C]`` from :func:`~omnigym.envs.driving.comfort.last_step_weights`.
        dt: seconds per step.
        out: ``[N, len(CHECKS)]``, written.
    """
    context = np.empty((comfort_weights.shape[1], 3))
    ddc_steps = oncoming_progress.shape[1]
    for n in range(len(ego_pose)):
        t = time[n]
        x, y, heading = ego_pose[n, 0], ego_pose[n, 1], ego_pose[n, 2]
        length, width = ego_size[0], ego_size[1]
        multiple_lanes, non_drivable, oncoming, in_intersection = area_at(
            raster_origin,
            raster_resolution,
            raster_area,
            raster_lane,
            raster_index[n],
            x,
            y,
            heading,
            length,
            width,
        )
        colliding = np.zeros(agent_pose.shape[2], np.bool_)
        nc = collisions_at(
            ego_pose[n],
            ego_speed[n],
            ego_size,
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
            ego_pose[n],
            ego_speed[n],
            ego_size,
            rear_axle,
            ttc_offsets,
            future_pose[n],
            future_valid[n],
            future_index[n],
            agent_size[n],
            multiple_lanes or non_drivable or in_intersection,
            collided[n],
            ttc_tolerated[n],
            max_travel[n],
        )
        red = red_light_at(ego_pose[n], ego_size, light_pose[n], light_size[n], light_red[n, t])
        new_station, lateral[n], route_index[n] = project_point(
            route_points[n], route_station[n], x, y, route_index[n], ROUTE_WINDOW
        )
        progress, station[n] = new_station - station[n], new_station
        # DDC: distance driven in oncoming lanes (outside intersections) over the last second
        for s in range(ddc_steps - 1, 0, -1):
            oncoming_progress[n, s] = oncoming_progress[n, s - 1]
        oncoming_progress[n, 0] = ego_speed[n] * dt if oncoming and not in_intersection else 0.0
        against = oncoming_progress[n].sum()
        ddc = 1.0 if against < DDC_COMPLIANT else (0.5 if against < DDC_VIOLATION else 0.0)
        # LK: off the route centreline for too long (intersections pause the count)
        if abs(lateral[n]) > LK_MAX_LATERAL and not in_intersection:
            off_centre_steps[n] += 1
        elif not in_intersection:
            off_centre_steps[n] = 0
        lk = 1.0 if off_centre_steps[n] < round(LK_HORIZON / dt) else 0.0
        # C: comfort at this step, from the last poses driven
        for j in range(len(context)):
            context[j] = ego_track[n, max(t - len(context) + 1 + j, 0)]
        comfortable = not uncomfortable_at_end(context, dt, comfort_weights)
        ep = 1.0
        if reference_step[n] > 0:
            ep = min(max(progress / max(reference_step[n], 1e-9), 0.0), 1.0)
        out[n, 0] = nc
        out[n, 1] = 0.0 if non_drivable else 1.0
        out[n, 2] = ddc
        out[n, 3] = 0.0 if red else 1.0
        out[n, 4] = 1.0 if ttc else 0.0
        out[n, 5] = ep
        out[n, 6] = 1.0 if comfortable else 0.0
        out[n, 7] = lk
