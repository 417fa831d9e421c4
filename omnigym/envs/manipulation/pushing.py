"""The PushT expert's planner: which point of the T to push, how far, and how to get there.

Quasi-static pushing under viscous drag (the block's joint damping in ``assets/pusht.xml``): a
pusher pressing along the inward normal ``f`` at a contact ``r`` (from the block's centre) moves
the block by ``dx = k f`` and turns it by ``dyaw = k (r x f) / RHO2`` per pusher travel ``d``, with
``k = d / (1 + (r x f)^2 / RHO2)`` (the contact point must move with the pusher), where RHO2 is
the ratio of the turning to the sliding drag. Each push is the contact, out of points sampled on
the T's outline, whose motion best reduces the pose error (translation plus ``ANGLE_SCALE`` times
the yaw error, least squares), and the travel that minimises it along that motion. The pusher
reaches a contact around the block (a circle clear of it) when the straight way is blocked, and
follows the contact while the block moves. A push in progress is kept while it still helps.
"""

from __future__ import annotations

import math

import numpy as np

from omnigym.envs.manipulation import tblock
from omnigym.envs.manipulation.pusht import PUSHER_RADIUS, WORKSPACE

RHO2 = 0.018 / 5.0
"""Turning over sliding drag of the block (m²): its hinge over its slide damping in pusht.xml."""
ANGLE_SCALE = 0.1
"""Metres of position error worth one radian of yaw error."""
TRAVEL_STEP = 0.05
"""Most pusher travel per action while moving to a contact (m)."""
PUSH_STEP = 0.03
"""Most pusher travel into the block per action (m)."""
MIN_TRAVEL = 0.0005
"""Pushes shorter than this are not worth making (m)."""
STANDOFF = 0.02
"""Gap between pusher and block where a push starts (m)."""
CLEARANCE = PUSHER_RADIUS + 0.006
"""Distance from the pusher's centre to the T kept while moving to a contact (m)."""
ORBIT_RADIUS = 0.134 + CLEARANCE + 0.012
"""Circle around the block's centre on which the pusher passes it (the T reaches 0.134 m)."""
SWITCH_COST = 0.15
"""Metres of travel to a contact that halve its score (prefers contacts close by)."""


def _outline() -> tuple[np.ndarray, np.ndarray]:
    """Contact points on the T's outline and their outward normals, block frame. Shape: [N, 2].

    Points keep off convex corners (pushes there slip off) and far enough from the two concave
    corners that the pusher fits.
    """
    (_, by, bhx, bhy), (_, sy, shx, shy) = tblock.BAR, tblock.STEM
    bar_low, bar_high, stem_low = by - bhy, by + bhy, sy - shy
    corner_gap, pocket_gap = 0.006, PUSHER_RADIUS + STANDOFF
    # (start, end, outward normal) per edge; spacing about 1 cm
    edges = [
        ((-shx + corner_gap, stem_low), (shx - corner_gap, stem_low), (0.0, -1.0)),
        ((shx, stem_low + corner_gap), (shx, bar_low - pocket_gap), (1.0, 0.0)),
        ((shx + pocket_gap, bar_low), (bhx - corner_gap, bar_low), (0.0, -1.0)),
        ((bhx, bar_low + corner_gap), (bhx, bar_high - corner_gap), (1.0, 0.0)),
        ((bhx - corner_gap, bar_high), (-bhx + corner_gap, bar_high), (0.0, 1.0)),
        ((-bhx, bar_high - corner_gap), (-bhx, bar_low + corner_gap), (-1.0, 0.0)),
        ((-bhx + corner_gap, bar_low), (-shx - pocket_gap, bar_low), (0.0, -1.0)),
        ((-shx, bar_low - pocket_gap), (-shx, stem_low + corner_gap), (-1.0, 0.0)),
    ]
    points, normals = [], []
    for start, end, normal in edges:
        count = max(2, round(math.dist(start, end) / 0.01) + 1)
        for t in np.linspace(0.0, 1.0, count):
            points.append((start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1])))
            normals.append(normal)
    return np.array(points), np.array(normals)


OUTLINE_POINTS, OUTLINE_NORMALS = _outline()


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


class PushPlanner:
    """Pusher targets for one episode of PushT; remembers the push in progress."""

    def __init__(self, rho2: float = RHO2) -> None:
        self.rho2 = rho2
        """Turning over sliding resistance of the block (m²): ``RHO2`` for omnigym's MuJoCo PushT; for
        a block that moves only by contact impulses, its moment of inertia over its mass."""
        self.contact: int | None = None
        """Index into ``OUTLINE_POINTS`` of the push in progress."""
        self.orbit: tuple[int | None, float] | None = None
        """The contact the pusher is rounding the block for, and the way round (+1 or -1): kept
        until the contact changes, so the pusher does not swing between the two ways."""

    def target(self, state: np.ndarray) -> np.ndarray:
        """The pusher's next target position (world, m) for a PushT ``state`` vector."""
        pusher = state[0:2]
        pose = (float(state[4]), float(state[5]), math.atan2(state[7], state[6]))
        goal = (float(state[11]), float(state[12]), math.atan2(state[14], state[13]))
        error = np.array([goal[0] - pose[0], goal[1] - pose[1], ANGLE_SCALE * _wrap(goal[2] - pose[2])])

        c, s = math.cos(pose[2]), math.sin(pose[2])
        rotation = np.array([[c, -s], [s, c]])
        arms = OUTLINE_POINTS @ rotation.T  # contact points from the block's centre, world axes
        normals = OUTLINE_NORMALS @ rotation.T
        points = arms + pose[:2]
        push = -normals
        torque = arms[:, 0] * push[:, 1] - arms[:, 1] * push[:, 0]
        gain = 1.0 / (1.0 + torque**2 / self.rho2)  # block motion per unit of pusher travel
        motion = np.column_stack([push, ANGLE_SCALE * torque / self.rho2]) * gain[:, None]
        starts = points + normals * (PUSHER_RADIUS + STANDOFF)
        reachable = np.abs(starts).max(axis=1) <= WORKSPACE
        travel, reduction = _least_squares_pushes(motion, error, reachable)

        # Go on with the push in progress while it reduces the error well and the pusher is on it.
        i = self.contact
        if (
            i is not None
            and reduction[i] > 0.5 * reduction.max()
            and self._on_contact(pusher, points[i], normals[i])
        ):
            return self._press(points[i], normals[i], travel[i])
        if i is None or reduction[i] <= 0.5 * reduction.max():
            distance = np.linalg.norm(starts - pusher, axis=1)
            i = self.contact = int(np.argmax(reduction / (1.0 + distance / SWITCH_COST)))
        start = starts[i]
        if np.linalg.norm(start - pusher) < 0.006 or self._on_contact(pusher, points[i], normals[i]):
            return self._press(points[i], normals[i], travel[i])
        return _clip(self._waypoint(pusher, start, pose))

    @staticmethod
    def _on_contact(pusher: np.ndarray, point: np.ndarray, normal: np.ndarray) -> bool:
        """Whether the pusher is on the push line of a contact, between the start and touching."""
        rel = pusher - point
        out = float(rel @ normal)
        side = abs(float(rel[0] * normal[1] - rel[1] * normal[0]))
        return side < 0.008 and PUSHER_RADIUS - 0.012 < out < PUSHER_RADIUS + STANDOFF + 0.006

    @staticmethod
    def _press(point: np.ndarray, normal: np.ndarray, travel: float) -> np.ndarray:
        """Target that pushes the contact ``travel`` (at most ``PUSH_STEP``) into the block."""
        return _clip(point + normal * (PUSHER_RADIUS - min(travel, PUSH_STEP)))

    def _waypoint(self, pusher: np.ndarray, destination: np.ndarray, pose: tblock.Pose) -> np.ndarray:
        """Next point towards ``destination``: straight when clear of the T, else around it."""
        offset = destination - pusher
        length = float(np.linalg.norm(offset))
        samples = max(2, math.ceil(length / 0.01) + 1)
        if all(
            tblock.distance_to_point(pose, float(x), float(y)) >= CLEARANCE
            for x, y in pusher + np.linspace(0.0, 1.0, samples)[:, None] * offset
        ):
            return pusher + offset * min(1.0, TRAVEL_STEP / max(length, 1e-9))
        centre = np.array(pose[:2])
        rel = pusher - centre
        radius = float(np.linalg.norm(rel))
        out = centre + rel * min(ORBIT_RADIUS, radius + TRAVEL_STEP) / max(radius, 1e-9)
        if radius < ORBIT_RADIUS - 0.01 and np.abs(out).max() <= WORKSPACE:  # out first, away from the centre
            return out
        # round the block on the orbit (or, squeezed by a wall, at the pusher's distance), the
        # short way unless the workspace's edge cuts it
        radius = min(ORBIT_RADIUS, max(radius, CLEARANCE))
        here = math.atan2(rel[1], rel[0])
        there = math.atan2(destination[1] - centre[1], destination[0] - centre[0])
        turn = _wrap(there - here)
        if self.orbit is None or self.orbit[0] != self.contact:
            way = math.copysign(1.0, turn) * (1.0 if _arc_inside(centre, radius, here, turn) else -1.0)
            self.orbit = (self.contact, way)
        if turn * self.orbit[1] < 0:
            turn += 2 * math.pi * self.orbit[1]
        step = math.copysign(min(abs(turn), TRAVEL_STEP / radius), turn)
        return centre + radius * np.array([math.cos(here + step), math.sin(here + step)])


def _least_squares_pushes(
    motion: np.ndarray, error: np.ndarray, allowed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per contact: the pusher travel that best reduces ``error`` (least squares), and its gain.

    The gain is the drop in squared error (0 where not ``allowed`` or the travel is too short).
    """
    along = motion @ error
    norm2 = np.einsum("ij,ij->i", motion, motion)
    travel = np.where(along > 0, along / norm2, 0.0)
    reduction = np.where((travel > MIN_TRAVEL) & allowed, along * travel, 0.0)
    return travel, reduction


def _arc_inside(centre: np.ndarray, radius: float, start: float, turn: float) -> bool:
    """Whether an arc about ``centre`` from angle ``start`` through ``turn`` stays in the workspace.

    Sampled every 0.1 rad.
    """
    angles = start + np.linspace(0.0, turn, max(2, math.ceil(abs(turn) / 0.1) + 1))
    arc = centre + radius * np.column_stack([np.cos(angles), np.sin(angles)])
    return bool(np.abs(arc).max() <= WORKSPACE)


def _clip(point: np.ndarray) -> np.ndarray:
    return np.clip(point, -WORKSPACE, WORKSPACE)
