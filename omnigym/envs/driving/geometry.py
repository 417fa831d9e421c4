"""Batched planar geometry for the metrics: oriented-box overlap, bearings, projection on polylines.

NAVSIM intersects shapely polygons one pair at a time. Every footprint here is an oriented box
(or a segment, a box of zero length), so the separating-axis theorem gives an exact, closed-form
test: compiled once (numba), called pair by pair from the per-step kernels and broadcast as a
ufunc over any batch shape.
"""

from __future__ import annotations

import numpy as np
from numba import njit, vectorize


@njit(cache=True)
def box_overlap(
    x_a: float,
    y_a: float,
    heading_a: float,
    length_a: float,
    width_a: float,
    x_b: float,
    y_b: float,
    heading_b: float,
    length_b: float,
    width_b: float,
) -> bool:
    """Whether two oriented boxes intersect (touching counts): the scalar separating-axis test.

    Compiled, so the per-step kernels call it pair by pair; :func:`obb_overlap` broadcasts it.
    """
    dx, dy = x_b - x_a, y_b - y_a
    reach = (length_a + width_a + length_b + width_b) / 2  # >= the sum of the circumradii
    if dx * dx + dy * dy > reach * reach:
        return False
    cos_a, sin_a = np.cos(heading_a), np.sin(heading_a)
    cos_b, sin_b = np.cos(heading_b), np.sin(heading_b)
    # |cos|, |sin| of the relative heading: how each box's axes project onto the other's
    cos_rel = abs(cos_a * cos_b + sin_a * sin_b)
    sin_rel = abs(sin_a * cos_b - cos_a * sin_b)
    half_la, half_wa, half_lb, half_wb = length_a / 2, width_a / 2, length_b / 2, width_b / 2
    # the boxes are apart iff the centre distance projected on one of the four edge normals
    # exceeds the sum of the two projected half-extents
    if abs(dx * cos_a + dy * sin_a) > half_la + half_lb * cos_rel + half_wb * sin_rel:
        return False
    if abs(-dx * sin_a + dy * cos_a) > half_wa + half_lb * sin_rel + half_wb * cos_rel:
        return False
    if abs(dx * cos_b + dy * sin_b) > half_lb + half_la * cos_rel + half_wa * sin_rel:
        return False
    return abs(-dx * sin_b + dy * cos_b) <= half_wb + half_la * sin_rel + half_wa * cos_rel


@vectorize(["b1(f8, f8, f8, f8, f8, f8, f8, f8, f8, f8)"], cache=True)
def _box_overlap_ufunc(
    x_a: float,
    y_a: float,
    heading_a: float,
    length_a: float,
    width_a: float,
    x_b: float,
    y_b: float,
    heading_b: float,
    length_b: float,
    width_b: float,
) -> bool:
    return box_overlap(x_a, y_a, heading_a, length_a, width_a, x_b, y_b, heading_b, length_b, width_b)


def obb_overlap(pose_a: np.ndarray, size_a: np.ndarray, pose_b: np.ndarray, size_b: np.ndarray) -> np.ndarray:
    """Whether oriented boxes A and B intersect (touching counts, as shapely's ``intersects``).

    Args:
        pose_a: ``[..., 3]`` centre x, y and heading of box A.
        size_a: ``[..., 2]`` length (along the heading) and width of box A; zero length makes a
            segment across the heading.
        pose_b: ``[..., 3]`` box B, broadcastable against A.
        size_b: ``[..., 2]`` box B's length and width.

    Returns:
        ``[...]`` bool, the broadcast shape of the inputs without the last axis.
    """
    pose_a, size_a, pose_b, size_b = (np.asarray(x, np.float64) for x in (pose_a, size_a, pose_b, size_b))
    return np.asarray(
        _box_overlap_ufunc(
            pose_a[..., 0],
            pose_a[..., 1],
            pose_a[..., 2],
            size_a[..., 0],
            size_a[..., 1],
            pose_b[..., 0],
            pose_b[..., 1],
            pose_b[..., 2],
            size_b[..., 0],
            size_b[..., 1],
        )
    )


def bearing(origin: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Unsigned angle in ``[0, pi]`` between a pose's heading and the direction to a point.

    nuPlan's ``get_agent_relative_angle``: 0 straight ahead, pi straight behind (a point on the
    origin itself reads as ahead).

    Args:
        origin: ``[..., 3]`` x, y, heading.
        points: ``[..., 2]`` broadcastable against ``origin``.

    Returns:
        ``[...]`` radians.
    """
    dx = points[..., 0] - origin[..., 0]
    dy = points[..., 1] - origin[..., 1]
    cos, sin = np.cos(origin[..., 2]), np.sin(origin[..., 2])
    return np.arctan2(np.abs(cos * dy - sin * dx), cos * dx + sin * dy)


def advance(pose: np.ndarray, distance: np.ndarray | float) -> np.ndarray:
    """Poses moved ``distance`` metres along their own heading, heading unchanged.

    Args:
        pose: ``[..., 3]`` x, y, heading.
        distance: ``[...]`` metres, broadcastable against ``pose[..., 0]``.

    Returns:
        ``[..., 3]`` in the broadcast shape.
    """
    heading = pose[..., 2]
    out = np.empty((*np.broadcast_shapes(heading.shape, np.shape(distance)), 3))
    out[..., 0] = pose[..., 0] + distance * np.cos(heading)
    out[..., 1] = pose[..., 1] + distance * np.sin(heading)
    out[..., 2] = heading
    return out


# --- polylines ---------------------------------------------------------------------------------------
def polyline_stations(points: np.ndarray) -> np.ndarray:
    """Arc length ``[B, R]`` at each point of polylines ``[B, R, 2]`` (compute once per route)."""
    if points.shape[1] < 2:
        raise ValueError("a polyline needs at least 2 points (pad by repeating the last one)")
    step = np.diff(points, axis=1)
    stations = np.zeros(points.shape[:2])
    np.cumsum(np.hypot(step[..., 0], step[..., 1]), axis=1, out=stations[:, 1:])
    return stations


def project_to_polyline(
    line: np.ndarray, stations: np.ndarray, points: np.ndarray, hint: np.ndarray | None, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arc-length station and signed offset (left positive) of points on polylines.

    The closest point of the polyline, clipped to its ends. The nearest vertex is found first
    (among all, or ``window`` either side of ``hint``; coarse to fine, exact unless the line folds
    back within a few metres of itself), then the point is projected exactly on the segments
    before and after it.

    Args:
        line: ``[B, R, 2]`` polylines, ``R >= 2``.
        stations: ``[B, R]`` from :func:`polyline_stations`.
        points: ``[B, ..., 2]``.
        hint: ``[B]`` a vertex index to search near, or None to search all.
        window: vertices searched either side of ``hint``.

    Returns:
        ``(station, offset, segment)``, each ``[B, ...]``.
    """
    line = np.asarray(line, dtype=np.float64)
    flat = np.asarray(points, dtype=np.float64).reshape(len(line), -1, 2)  # [B, N, 2]
    hints = np.full(len(line), -1, np.int64) if hint is None else np.asarray(hint, np.int64).reshape(-1)
    station, offset = np.empty(flat.shape[:2]), np.empty(flat.shape[:2])
    segment = np.empty(flat.shape[:2], np.int64)
    _project(line, np.asarray(stations, np.float64), flat, hints, window, station, offset, segment)
    shape = np.shape(points)[:-1]
    return station.reshape(shape), offset.reshape(shape), segment.reshape(shape)


@njit(cache=True)
def _project(
    line: np.ndarray,
    stations: np.ndarray,
    points: np.ndarray,
    hint: np.ndarray,
    window: int,
    station: np.ndarray,
    offset: np.ndarray,
    segment: np.ndarray,
) -> None:
    for b in range(len(line)):
        for i in range(points.shape[1]):
            x, y = points[b, i, 0], points[b, i, 1]
            station[b, i], offset[b, i], segment[b, i] = project_point(
                line[b], stations[b], x, y, hint[b], window
            )


@njit(cache=True)
def project_point(
    line: np.ndarray, stations: np.ndarray, x: float, y: float, hint: int, window: int
) -> tuple[float, float, int]:
    """:func:`project_to_polyline` of one point on one polyline ``[R, 2]`` (``hint`` -1: none)."""
    last = len(line) - 1
    first, count = 0, last + 1
    if hint >= 0 and 2 * window + 2 < count:
        first, count = hint - window, 2 * window + 2
    stride = max(1, count // 24)
    nearest = _nearest_vertex(line, x, y, first, stride, -(-count // stride))
    if stride > 1:  # refine around the best coarse vertex
        nearest = _nearest_vertex(line, x, y, nearest - stride - 1, 1, 2 * stride + 3)
    best, station, offset, segment = np.inf, 0.0, 0.0, 0
    for seg in (max(nearest - 1, 0), min(nearest, last - 1)):  # the segments either side
        start_x, start_y = line[seg, 0], line[seg, 1]
        dx, dy = line[seg + 1, 0] - start_x, line[seg + 1, 1] - start_y
        rel_x, rel_y = x - start_x, y - start_y
        length = np.hypot(dx, dy)
        # foot of the perpendicular, clipped to the segment
        frac = min(max((rel_x * dx + rel_y * dy) / max(length * length, 1e-12), 0.0), 1.0)
        dist = np.hypot(rel_x - frac * dx, rel_y - frac * dy)
        if dist < best:  # the closer of the two (the first on a tie)
            best, station, segment = dist, stations[seg] + frac * length, seg
            offset = np.copysign(dist, dx * rel_y - dy * rel_x)  # left of the line: positive
    return station, offset, segment


@njit(cache=True)
def _nearest_vertex(line: np.ndarray, x: float, y: float, first: int, stride: int, count: int) -> int:
    """The vertex of ``line [R, 2]`` nearest to (x, y) among ``first + stride * k`` (clipped), k < count."""
    last = len(line) - 1
    best, best_index = np.inf, 0
    for k in range(count):
        i = min(max(first + stride * k, 0), last)
        d2 = (line[i, 0] - x) ** 2 + (line[i, 1] - y) ** 2
        if d2 < best:
            best, best_index = d2, i
    return best_index
