"""The PushT block's geometry and the exact area overlap of two poses of it.

The T is two rectangles (the bar and the stem) that touch along one edge. In the block frame the
origin is the centre of area, +y points from the stem to the bar; the numbers match
``assets/pusht.xml`` (the Diffusion Policy T at 50 mm per pymunk unit: bar 200 x 50 mm, stem
50 x 150 mm).

Coverage is computed exactly: the rectangles of the two poses intersect pairwise as convex
polygons (Sutherland-Hodgman clipping against each axis-aligned rectangle of the goal, in the
goal frame), and since each T's rectangles do not overlap, the intersection area of the two T's is
the sum of the four pairwise areas. Plain Python floats: 1-12 µs per call, cheaper than NumPy on
eight corners.
"""

from __future__ import annotations

import math

Pose = tuple[float, float, float]
"""``(x, y, yaw)`` of the block frame in the world, metres and radians."""
Rect = tuple[float, float, float, float]
"""``(centre_x, centre_y, half_width, half_height)`` in the block frame."""

BAR_HALF = (0.1, 0.025)
STEM_HALF = (0.025, 0.075)
_BAR_AREA = 4 * BAR_HALF[0] * BAR_HALF[1]
_STEM_AREA = 4 * STEM_HALF[0] * STEM_HALF[1]
AREA = _BAR_AREA + _STEM_AREA
"""Area of the T in m²."""
_CENTROID_Y = (_BAR_AREA * BAR_HALF[1] - _STEM_AREA * STEM_HALF[1]) / AREA
"""Height of the centre of area above the bar/stem junction."""
BAR: Rect = (0.0, BAR_HALF[1] - _CENTROID_Y, *BAR_HALF)
STEM: Rect = (0.0, -STEM_HALF[1] - _CENTROID_Y, *STEM_HALF)
RECTS: tuple[Rect, Rect] = (BAR, STEM)


def to_frame(pose: Pose, x: float, y: float) -> tuple[float, float]:
    """World point ``(x, y)`` in the frame of ``pose``."""
    c, s = math.cos(pose[2]), math.sin(pose[2])
    dx, dy = x - pose[0], y - pose[1]
    return c * dx + s * dy, -s * dx + c * dy


def to_world(pose: Pose, x: float, y: float) -> tuple[float, float]:
    """Point ``(x, y)`` of the frame of ``pose`` in the world."""
    c, s = math.cos(pose[2]), math.sin(pose[2])
    return pose[0] + c * x - s * y, pose[1] + s * x + c * y


def distance_to_point(pose: Pose, x: float, y: float) -> float:
    """Distance from world point ``(x, y)`` to the T at ``pose`` (0 inside)."""
    px, py = to_frame(pose, x, y)
    best = math.inf
    for cx, cy, hx, hy in RECTS:
        dx = max(abs(px - cx) - hx, 0.0)
        dy = max(abs(py - cy) - hy, 0.0)
        best = min(best, math.hypot(dx, dy))
    return best


def coverage(pose: Pose, goal: Pose) -> float:
    """Fraction of the goal T's area that the T at ``pose`` covers, in [0, 1]."""
    # The block's pose in the goal frame, where the goal's rectangles are axis-aligned.
    rx, ry = to_frame(goal, pose[0], pose[1])
    yaw = pose[2] - goal[2]
    c, s = math.cos(yaw), math.sin(yaw)
    total = 0.0
    for bx, by, bhx, bhy in RECTS:
        cx, cy = rx + c * bx - s * by, ry + s * bx + c * by
        ux, uy, vx, vy = c * bhx, s * bhx, -s * bhy, c * bhy  # half-axis vectors
        reach_x, reach_y = abs(ux) + abs(vx), abs(uy) + abs(vy)
        corners = [
            (cx - ux - vx, cy - uy - vy),
            (cx + ux - vx, cy + uy - vy),
            (cx + ux + vx, cy + uy + vy),
            (cx - ux + vx, cy - uy + vy),
        ]
        for gx, gy, ghx, ghy in RECTS:
            if abs(cx - gx) >= reach_x + ghx or abs(cy - gy) >= reach_y + ghy:
                continue  # bounding boxes apart
            total += _clipped_area(corners, gx - ghx, gx + ghx, gy - ghy, gy + ghy)
    return min(max(total / AREA, 0.0), 1.0)


def _clipped_area(polygon: list[tuple[float, float]], x0: float, x1: float, y0: float, y1: float) -> float:
    """Area of a convex counter-clockwise polygon inside the box ``[x0, x1] x [y0, y1]``."""
    polygon = _clip(polygon, 0, x0, 1.0)
    polygon = _clip(polygon, 0, x1, -1.0)
    polygon = _clip(polygon, 1, y0, 1.0)
    polygon = _clip(polygon, 1, y1, -1.0)
    if len(polygon) < 3:
        return 0.0
    area = 0.0
    px, py = polygon[-1]
    for qx, qy in polygon:
        area += px * qy - qx * py  # shoelace
        px, py = qx, qy
    return 0.5 * area


def _clip(
    polygon: list[tuple[float, float]], axis: int, bound: float, side: float
) -> list[tuple[float, float]]:
    """The part of ``polygon`` where ``side * (coordinate[axis] - bound) >= 0`` (one clip pass)."""
    out: list[tuple[float, float]] = []
    if not polygon:
        return out
    prev = polygon[-1]
    prev_in = side * (prev[axis] - bound) >= 0.0
    for point in polygon:
        point_in = side * (point[axis] - bound) >= 0.0
        if point_in != prev_in:
            t = (bound - prev[axis]) / (point[axis] - prev[axis])
            out.append((prev[0] + t * (point[0] - prev[0]), prev[1] + t * (point[1] - prev[1])))
        if point_in:
            out.append(point)
        prev, prev_in = point, point_in
    return out
