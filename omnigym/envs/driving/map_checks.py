"""Where the ego is on the map, per step: route projection, ego areas and red lights.

The batched building blocks of the map-based sub-metrics of :mod:`~omnigym.envs.driving.metrics`:
the station and lateral offset along the route (ego progress and lane keeping), NAVSIM's ego
areas (drivable area, driving direction and the at-fault rules of
:mod:`~omnigym.envs.driving.agent_checks`) and red-light stop boxes (traffic light compliance).
Each rule is one compiled function of one ego box (``area_at``, ``red_light_at``) that
:mod:`~omnigym.envs.driving.step_checks` shares; the functions here run them over ``[B, ...]``
poses.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from omnigym.envs.driving.geometry import box_overlap, project_to_polyline
from omnigym.envs.driving.map_raster import DRIVABLE, INTERSECTION, ON_ROUTE, lookup
from omnigym.envs.driving.metrics import ROUTE_WINDOW, AreaFlags, ScoringWorld


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
        :class:`~omnigym.envs.driving.metrics.AreaFlags` of bool ``[B, ...]``.
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
    """:func:`ego_area` of poses ``[B, M, 3]`` into ``flags [4, B, M]`` (in ``AreaFlags`` order)."""
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
    """``AreaFlags`` (multiple lanes, non-drivable, oncoming, in intersection) of one ego box."""
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
