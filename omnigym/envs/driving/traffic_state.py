"""The state of the lane-based traffic simulation, and what each agent perceives of it.

:class:`TrafficState` holds the per-agent arrays of :func:`~omnigym.envs.driving.traffic_sim.simulate`
(lane, station, speed, lane-change progress, ...) and answers the questions every decision starts
from: which lanes lie ahead on an agent's path, who occupies which lane where (:class:`Occupancy`),
and who leads an agent and how far ahead. The driving decisions build on it:
:mod:`~omnigym.envs.driving.traffic_longitudinal` (how fast) and
:mod:`~omnigym.envs.driving.traffic_lane_changes` (which lane).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from omnigym.envs.driving.lane_network import LaneNetwork
from omnigym.envs.driving.traffic import IDMParams, MOBILParams, idm_acceleration

if TYPE_CHECKING:
    from omnigym.envs.driving.traffic_sim import SimParams, TrafficAgents


def distance_along(
    path: np.ndarray, offset: np.ndarray, s: np.ndarray, lanes: np.ndarray, stations: np.ndarray
) -> np.ndarray:
    """Distances ``[N, M]`` forward along N agents' paths to M points ``(lanes, stations)``.

    Paths are ``[N, K]`` lanes whose starts lie ``offset [N, K]`` metres past the start of the
    agent's lane, where it is at station ``s [N]``. Points not ahead on the path read inf.
    """
    best = np.full((len(s), len(lanes)), np.inf)
    for k in range(path.shape[1]):
        if k and not (path[:, k] >= 0).any():
            break
        d = offset[:, k, None] + stations[None, :] - s[:, None]
        hit = (path[:, k, None] == lanes[None, :]) & (d > 0)
        np.minimum(best, np.where(hit, d, np.inf), out=best)
    return best


class Occupancy(NamedTuple):
    """Who occupies which lane where, as followers see it: one row per (agent, lane) pair."""

    lane: np.ndarray
    station: np.ndarray
    agent: np.ndarray
    projected: np.ndarray  # bool: seen only by agents on connectors (converging connectors)
    courtesy: np.ndarray  # bool: an agent that must merge, shown on its target lane to let it in

    def rows(self, keep: np.ndarray) -> Occupancy:
        """The rows where ``keep`` holds."""
        return Occupancy(*(column[keep] for column in self))


class TrafficState:
    """The simulation state (per-agent arrays), the agents' paths and what they perceive."""

    def __init__(
        self,
        net: LaneNetwork,
        agents: TrafficAgents,
        lights: np.ndarray,
        rng: np.random.Generator,
        models: tuple[IDMParams, MOBILParams, SimParams],
    ) -> None:
        self.net, self.lights, self.rng = net, lights, rng
        self.idm, self.mobil, self.params = models
        n = len(agents.lane)
        self.lane = agents.lane.astype(np.int64).copy()
        self.s = agents.station.astype(np.float64).copy()
        self.v = agents.speed.astype(np.float64).copy()
        self.d = agents.lateral.astype(np.float64).copy()
        self.length, self.width = agents.length.astype(np.float64), agents.width.astype(np.float64)
        self.factor, self.static = agents.speed_factor.astype(np.float64), agents.static.astype(bool)
        self.brake_at, self.brake_until = np.asarray(agents.brake_at), np.asarray(agents.brake_until)
        self.brake_decel = np.asarray(agents.brake_decel, np.float64)
        self.valid = self.lane >= 0
        self.reserves = list(np.flatnonzero(~self.valid))
        self.pending = 0  # agents that left the map and await a replacement
        self.a = np.zeros(n)  # applied (jerk-limited) acceleration
        self.a_idm, self.a_path, self.v0 = np.zeros(n), np.zeros(n), np.zeros(n)
        self.lead, self.lead_dist = np.full(n, -1), np.full(n, np.inf)
        self.path, self.offset = np.full((n, 3), -1), np.zeros((n, 3))
        self.lc_from, self.lc_d0 = np.full(n, -1), np.zeros(n)  # lane being left, initial offset
        self.lc_travel, self.lc_length, self.slope = np.zeros(n), np.ones(n), np.zeros(n)
        self.cooldown, self.committed = np.zeros(n), np.zeros(n, bool)
        self.blocked = self._blocked_connectors()

    # -- paths
    def _choose(self, lanes: np.ndarray, who: np.ndarray) -> np.ndarray:
        """Next lane after ``lanes`` for agents ``who``: the route for the ego, else a random successor."""
        ok = lanes >= 0
        safe = np.where(ok, lanes, 0)
        count = self.net.num_successors[safe]
        pick = np.minimum((self.rng.random(len(lanes)) * count).astype(np.int64), np.maximum(count - 1, 0))
        choice = np.where(ok & (count > 0), self.net.successors[safe, pick], -1)
        route = self.net.route_next[safe]
        return np.where((who == 0) & ok & (route >= 0), route, choice)

    def _offsets(self, path: np.ndarray) -> np.ndarray:
        lengths = np.where(path >= 0, self.net.length[np.maximum(path, 0)], np.inf)
        return np.concatenate([np.zeros((len(path), 1)), np.cumsum(lengths[:, :-1], axis=1)], axis=1)

    def _set_path(self, who: np.ndarray) -> None:
        self.path[who, 0] = self.lane[who]
        self.path[who, 1] = self._choose(self.path[who, 0], who)
        self.path[who, 2] = self._choose(self.path[who, 1], who)
        self.offset[who] = self._offsets(self.path[who])

    def _single_lane_path(self, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        path = np.stack([lanes, np.full(len(lanes), -1), np.full(len(lanes), -1)], axis=1)
        return path, self._offsets(path)

    # -- perception
    def _occupancy(self) -> Occupancy:
        """Every agent on its lane, plus the rows that let others see it where it also matters.

        Lane changers also occupy the lane they leave; agents near a fork also the sibling lanes;
        agents on connectors also their next lane, at a negative station, so converging connectors
        see who reaches the merge first; agents that must leave a lane drop soon also their target
        lane, so followers there let them in.
        """
        net, on = self.net, np.flatnonzero(self.valid)
        changing = on[self.lc_from[on] >= 0]
        fork_lane, fork_other, fork_until = net.forks
        agent, pair = np.nonzero((self.lane[on, None] == fork_lane) & (self.s[on, None] < fork_until))
        forking = on[agent]
        crossing = on[net.connector[self.lane[on]] & (self.path[on, 1] >= 0)]
        urgent = (net.leave_by[self.lane[on]] - self.s[on] < self.params.courtesy_zone) & (
            self.lc_d0[on] == 0
        )
        merging = on[urgent & ~self.static[on]]
        target = net.leave_to[self.lane[merging]]

        def scaled(who: np.ndarray, lanes: np.ndarray) -> np.ndarray:
            return self.s[who] * net.length[lanes] / net.length[self.lane[who]]

        groups = [
            (self.lane[on], self.s[on], on),
            (self.lc_from[changing], scaled(changing, self.lc_from[changing]), changing),
            (fork_other[pair], self.s[forking], forking),
            (self.path[crossing, 1], self.s[crossing] - net.length[self.lane[crossing]], crossing),
            (target, scaled(merging, target), merging),
        ]
        kind = np.repeat(np.arange(len(groups)), [len(g[2]) for g in groups])
        lane, station, who = (np.concatenate([g[i] for g in groups]) for i in range(3))
        return Occupancy(lane, station, who, projected=kind == 3, courtesy=kind == 4)

    def _blocked_connectors(self) -> np.ndarray:
        """``[L]`` bool: connectors that cross or merge with one someone is still crossing."""
        lane, other, until = self.net.conflicts
        blocked = np.zeros(len(self.net.length), bool)
        inside = np.flatnonzero(self.valid & self.net.connector[np.maximum(self.lane, 0)])
        busy = ((self.lane[inside, None] == other) & (self.s[inside, None] < until)).any(axis=0)
        blocked[lane[busy]] = True
        return blocked

    def _nearest(
        self,
        who: np.ndarray,
        path: np.ndarray,
        offset: np.ndarray,
        s: np.ndarray,
        occ: Occupancy,
        hide: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nearest occupant ahead along each path (-1: none) and its centre distance (inf).

        Rows of ``occ`` where ``hide [N, M]`` holds, and each agent's own rows, are ignored.
        """
        dist = distance_along(path, offset, s, occ.lane, occ.station)
        dist[hide | (occ.agent[None, :] == who[:, None]) | (dist > self.params.lookahead)] = np.inf
        if not len(occ.lane):
            return np.full(len(who), -1), np.full(len(who), np.inf)
        j = np.argmin(dist, axis=1)
        best = dist[np.arange(len(who)), j]
        return np.where(np.isfinite(best), occ.agent[j], -1), best

    def _leaders(
        self, who: np.ndarray, path: np.ndarray, offset: np.ndarray, s: np.ndarray, occ: Occupancy
    ) -> tuple[np.ndarray, np.ndarray]:
        """Leader and centre distance; projected rows count only for agents on a connector."""
        occ = occ.rows(~occ.courtesy)
        return self._nearest(
            who, path, offset, s, occ, occ.projected[None, :] & ~self.net.connector[path[:, :1]]
        )

    def _gap(self, who: np.ndarray, lead: np.ndarray, dist: np.ndarray) -> np.ndarray:
        """Bumper-to-bumper gap from centre distance (inf where there is no leader)."""
        return dist - (self.length[who] + np.where(lead >= 0, self.length[lead], 0.0)) / 2

    def _follow(self, who: np.ndarray, v0: np.ndarray, lead: np.ndarray, dist: np.ndarray) -> np.ndarray:
        """IDM acceleration of agents ``who`` behind ``lead`` at centre distance ``dist``."""
        lead_speed = np.where(lead >= 0, self.v[lead], 0.0)
        return idm_acceleration(self.v[who], v0, self._gap(who, lead, dist), lead_speed, self.idm)
