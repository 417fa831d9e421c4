"""The lane graph of one map as the traffic simulator sees it: per-lane lookup tables and the ego's route.

:class:`LaneNetwork` tabulates lane lengths, successors, neighbours, speed limits and lights,
lane drops (where a lane must be left, and toward which side), entry lanes, the ego's route, and
the fork and conflict lane pairs of junctions. Lanes of one road block must span the same
cross-sections (stations map between neighbours by length ratio), as the procedural maps ensure.
"""

from __future__ import annotations

import numpy as np

from omnigym.envs.driving.maps import LaneGeometry
from omnigym.envs.driving.scene import RoadMap

CLEARANCE = 3.0
"""Metres between two lanes' centrelines below which agents on them can touch."""


def _arc(points: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(points, axis=0), axis=1))])


class LaneNetwork:
    """Lane-graph tables of one map for the simulator, with the ego's route.

    Besides lengths, successors, neighbours and limits: ``light`` (the light index of each lane,
    -1), lane drops (``leave_by``: the station by which agents must have left a lane, inf for
    none; ``leave_dir`` / ``leave_to``: the side, +1 left, and lane to leave to), ``entry_lanes``
    (lanes nobody leads into), the ego's ``route_next`` and ``route_dir`` tables, and the
    ``forks`` and ``conflicts`` lane pairs of junctions (see :func:`_junction_pairs`).
    """

    def __init__(self, road_map: RoadMap, ego_route: np.ndarray) -> None:
        self.geometry = LaneGeometry.of(road_map)
        self.length = self.geometry.length
        self.successors = road_map.lane_successors.astype(np.int64)
        self.num_successors = (self.successors >= 0).sum(axis=1)
        self.left, self.right = road_map.lane_left.astype(np.int64), road_map.lane_right.astype(np.int64)
        self.width = road_map.lane_width.astype(np.float64)
        self.limit = road_map.lane_speed_limit.astype(np.float64)
        self.connector = road_map.lane_is_connector.astype(bool)
        self.light = np.full(road_map.num_lanes, -1, np.int64)
        self.light[road_map.light_lane] = np.arange(len(road_map.light_lane))
        self.leave_by, self.leave_dir = self._lane_drops(road_map)
        self.leave_to = np.where(self.leave_dir > 0, self.left, np.where(self.leave_dir < 0, self.right, -1))
        led = set(self.successors[self.successors >= 0].tolist())
        self.entry_lanes = np.array(
            [i for i in range(road_map.num_lanes) if i not in led and not self.connector[i]]
        )
        self.route_next, self.route_dir = self._route_tables(np.asarray(ego_route))
        self.forks, self.conflicts = _junction_pairs(road_map, self.successors, self.connector)
        self.has_junctions = bool(len(road_map.light_lane) or len(self.conflicts[0]))
        self.has_lane_drops = bool(np.isfinite(self.leave_by).any())

    def _lane_drops(self, road_map: RoadMap) -> tuple[np.ndarray, np.ndarray]:
        """Where agents must have left each lane (inf: never) and toward which side (+1 left).

        A lane drops if it ends while its neighbour goes on, or if it shares its successor with its
        left neighbour (a taper, like an on-ramp's acceleration lane). It must be left where the two
        centrelines start to converge (closer than 98 % of their parallel spacing).
        """
        leave_by, leave_dir = np.full(road_map.num_lanes, np.inf), np.zeros(road_map.num_lanes, np.int64)
        has_next = self.num_successors > 0
        for lane in range(road_map.num_lanes):
            for side, other in ((1, self.left[lane]), (-1, self.right[lane])):
                if other < 0:
                    continue
                shared = set(self.successors[lane]) & set(self.successors[other]) - {-1}
                if not ((not has_next[lane] and has_next[other]) or (side == 1 and shared)):
                    continue
                points, theirs = road_map.centreline(lane), road_map.centreline(int(other))
                gap = np.linalg.norm(points[:, None] - theirs[None], axis=2).min(axis=1)
                close = np.flatnonzero(gap < 0.49 * (self.width[lane] + self.width[other]))
                leave_by[lane] = _arc(points)[close[0]] if len(close) else self.length[lane]
                leave_dir[lane] = side
        return leave_by, leave_dir

    def _route_tables(self, route: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ego's next lane from each lane (-1: none on its route), and a side to change to.

        The side (+1 left, -1 right, 0 none) leads from a lane off the ego's course to a lane of
        its road block that is on it (and is not a lane drop).
        """
        count, on_route = len(self.length), set(route.tolist())
        nxt = np.array(
            [next((int(s) for s in self.successors[i] if s in on_route), -1) for i in range(count)]
        )
        nxt[route[:-1]] = route[1:]
        on_course = [i in on_route or nxt[i] >= 0 for i in range(count)]
        direction = np.zeros(count, np.int64)
        for lane in (i for i in range(count) if not on_course[i]):
            for side, table in ((1, self.left), (-1, self.right)):
                other = int(table[lane])
                for _ in range(count):  # bounded: a malformed map may link neighbours in a cycle
                    if other < 0 or direction[lane]:
                        break
                    if on_course[other] and np.isinf(self.leave_by[other]):
                        direction[lane] = side
                    other = int(table[other])
        return nxt, direction


def _junction_pairs(
    road_map: RoadMap, successors: np.ndarray, connector: np.ndarray
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """Lane pairs ``(lane [P], other [P], until [P])`` whose centrelines come within CLEARANCE.

    Forks: lanes with a common predecessor; an agent on ``lane`` before station ``until`` also
    occupies ``other`` (the two have not diverged yet). Conflicts: connectors from different lanes
    that cross or converge; an agent on ``other`` before ``until`` (the end of the close zone plus
    CLEARANCE) keeps others from entering ``lane``.
    """
    parents: dict[int, set[int]] = {}
    for lane, succ in enumerate(successors):
        for child in succ[succ >= 0]:
            parents.setdefault(int(child), set()).add(lane)
    siblings = {int(c) for succ in successors if (succ >= 0).sum() > 1 for c in succ[succ >= 0]}
    lanes = sorted(siblings | set(np.flatnonzero(connector).tolist()))
    forks, conflicts = [], []
    if lanes:
        points = [road_map.centreline(lane).astype(np.float64) for lane in lanes]
        owner = np.repeat(np.arange(len(lanes)), [len(p) for p in points])
        station = np.concatenate([_arc(p) for p in points])
        flat = np.concatenate(points)
        starts = np.concatenate([[0], np.cumsum([len(p) for p in points])[:-1]])
        dist = np.linalg.norm(flat[:, None] - flat[None], axis=2)
        near = np.minimum.reduceat(dist, starts, axis=1) < CLEARANCE  # [points, lanes]
        for i, lane in enumerate(lanes):
            mine = owner == i
            for j in np.flatnonzero(near[mine].any(axis=0)):
                other = lanes[j]
                if other == lane:
                    continue
                if parents.get(lane, set()) & parents.get(other, set()):
                    apart = np.flatnonzero(mine & ~near[:, j])
                    forks.append((lane, other, station[apart[0]] if len(apart) else station[mine][-1]))
                elif connector[lane] and connector[other]:
                    conflicts.append((lane, other, station[(owner == j) & near[:, i]].max() + CLEARANCE))

    def columns(pairs: list) -> tuple[np.ndarray, ...]:
        table = np.array(pairs, np.float64).reshape(-1, 3)
        return table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2]

    return columns(forks), columns(conflicts)
