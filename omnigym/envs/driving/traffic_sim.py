"""Lane-based traffic simulation: the agents' tracks for a procedural scene's traffic log.

:func:`simulate` drives agents on a :class:`~omnigym.envs.driving.lane_network.LaneNetwork` in
Frenet coordinates: a lane, a station ``s`` along it and a lateral offset ``d`` (only while
changing lanes, along a smooth 4 s curve). Each step it finds every agent's leader on the next
three lanes of its path (the ego included), adds virtual stopped leaders (red and stoppable
yellow lights, connectors blocked by crossing traffic, lane drops), and moves everyone with IDM;
every second MOBIL decides lane changes (the models are in :mod:`omnigym.envs.driving.traffic`).
Agents that must merge synchronise with the target lane, whose followers let them in. All of it
is vectorised over agents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from omnigym.envs.driving.lane_network import LaneNetwork
from omnigym.envs.driving.scene import DT, LIGHT_GREEN, LIGHT_RED, LIGHT_YELLOW
from omnigym.envs.driving.traffic import IDMParams, MOBILParams, idm_acceleration, mobil_incentive


# --- inputs and outputs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SimParams:
    """Simulator settings beyond the driver models."""

    lane_change_time: float = 4.0
    """Seconds a lane change takes at the speed it starts with."""
    min_lane_change_length: float = 20.0
    """Metres a lane change takes at least: shorter ones would turn too sharply."""
    lane_change_cooldown: float = 4.0
    """Seconds after a lane change before the next one."""
    mobil_interval: int = 10
    """Steps between lane-change decisions (1 s: a driver's look around; half the cost of 0.5 s)."""
    no_change_zone: float = 30.0
    """Metres before a lane's end where discretionary changes are not started."""
    lookahead: float = 150.0
    """Metres ahead within which leaders are seen."""
    max_jerk: float = 4.0
    """m/s³ limit on changes of acceleration, for comfort."""
    emergency_jerk: float = 25.0
    """m/s³ allowed when the IDM asks for more than comfortable braking."""
    stop_margin: float = 1.0
    """Metres before a stop line (or lane drop) where agents aim to stop."""
    reaction_time: float = 0.5
    """Seconds driven before braking starts, when judging whether a yellow light is stoppable."""
    ego_b_safe: float = 1.5
    """Maximum deceleration (m/s²) a lane change may impose on the ego as its new follower."""
    courtesy_zone: float = 100.0
    """Metres before a lane drop within which merging agents synchronise and are let in."""
    spawn_clearance: float = 30.0
    """Free metres needed at the start of an entry lane to let a reserve agent in."""


@dataclass
class TrafficAgents:
    """Initial state of the simulated agents. Agent 0 is the ego.

    Agents with ``lane == -1`` are reserves: they enter at the start of a random free entry lane
    (a lane nobody leads into), one each time an agent leaves the map, so traffic stays dense.
    """

    lane: np.ndarray  # [A] int, -1 for a reserve
    station: np.ndarray  # [A] metres along the lane (the box centre)
    speed: np.ndarray  # [A] m/s, capped by the simulator so nobody starts inside its safe gap
    length: np.ndarray  # [A] m
    width: np.ndarray  # [A] m
    speed_factor: np.ndarray  # [A] desired speed / speed limit
    static: np.ndarray  # [A] bool, never moves (parked cars)
    lateral: np.ndarray  # [A] m left of the lane centre (static agents)


@dataclass
class TrafficResult:
    """Simulated tracks, ``T`` steps ``DT`` apart; invalid entries are zero."""

    pose: np.ndarray  # [T, A, 3] x, y, heading
    speed: np.ndarray  # [T, A]
    valid: np.ndarray  # [T, A] bool
    lane: np.ndarray  # [T, A] int, -1 when invalid
    station: np.ndarray  # [T, A]


# --- helpers --------------------------------------------------------------------------------------
def _along(
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


def _smootherstep(u: np.ndarray) -> np.ndarray:
    """Lateral progress of a lane change: zero slope and curvature at both ends (no yaw-rate jump)."""
    return u**3 * (10 - 15 * u + 6 * u**2)


class _Occupancy(NamedTuple):
    """Who occupies which lane where, as followers see it: one row per (agent, lane) pair."""

    lane: np.ndarray
    station: np.ndarray
    agent: np.ndarray
    projected: np.ndarray  # bool: seen only by agents on connectors (converging connectors)
    courtesy: np.ndarray  # bool: an agent that must merge, shown on its target lane to let it in

    def rows(self, keep: np.ndarray) -> _Occupancy:
        """The rows where ``keep`` holds."""
        return _Occupancy(*(column[keep] for column in self))


# --- the simulation -------------------------------------------------------------------------------
class _Traffic:
    """The simulation state (per-agent arrays) and its step."""

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
        movers = np.flatnonzero(self.valid & ~self.static)
        self._set_path(movers)
        self._settle(movers)

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
    def _occupancy(self) -> _Occupancy:
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
        return _Occupancy(lane, station, who, projected=kind == 3, courtesy=kind == 4)

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
        occ: _Occupancy,
        hide: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nearest occupant ahead along each path (-1: none) and its centre distance (inf).

        Rows of ``occ`` where ``hide [N, M]`` holds, and each agent's own rows, are ignored.
        """
        dist = _along(path, offset, s, occ.lane, occ.station)
        dist[hide | (occ.agent[None, :] == who[:, None]) | (dist > self.params.lookahead)] = np.inf
        if not len(occ.lane):
            return np.full(len(who), -1), np.full(len(who), np.inf)
        j = np.argmin(dist, axis=1)
        best = dist[np.arange(len(who)), j]
        return np.where(np.isfinite(best), occ.agent[j], -1), best

    def _leaders(
        self, who: np.ndarray, path: np.ndarray, offset: np.ndarray, s: np.ndarray, occ: _Occupancy
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

    # -- accelerations
    def _obstacle_gap(
        self, path: np.ndarray, offset: np.ndarray, s: np.ndarray, who: np.ndarray, t: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gap to the nearest virtual stopped leader, and who commits to crossing on yellow.

        Virtual leaders stand at red lights, at yellow ones that can be stopped for comfortably,
        at connectors blocked by crossing traffic, and where lane drops must be left.
        """
        half, v = self.length[who] / 2, self.v[who]
        gap, commit = np.full(len(who), np.inf), np.zeros(len(who), bool)
        states = self.lights[t]
        for k in (1, 2) if self.net.has_junctions else ():
            ahead = np.maximum(path[:, k], 0)
            light = np.where(path[:, k] >= 0, self.net.light[ahead], -1)
            state = states[np.maximum(light, 0)] if len(states) else np.zeros(len(who), np.int8)
            state = np.where(light >= 0, state, LIGHT_GREEN)
            dist = offset[:, k] - s - half
            room = np.maximum(dist - self.params.stop_margin - v * self.params.reaction_time, 0.0)
            stoppable = v**2 <= 2 * self.idm.b_comfortable * room
            stop = ~self.committed[who] & ((state == LIGHT_RED) | ((state == LIGHT_YELLOW) & stoppable))
            commit |= (state == LIGHT_YELLOW) & ~stoppable
            # yield to agents still crossing a conflicting connector, unless it is too late to stop
            stop |= (path[:, k] >= 0) & self.blocked[ahead] & (v**2 <= 2 * self.mobil.b_safe * room)
            gap = np.where(stop, np.minimum(gap, dist), gap)
        for k in range(3) if self.net.has_lane_drops else ():
            end = (
                offset[:, k]
                + np.where(path[:, k] >= 0, self.net.leave_by[np.maximum(path[:, k], 0)], np.inf)
                - s
            )
            gap = np.where(end > 0, np.minimum(gap, end - half), gap)
        return gap, commit

    def _stop_acceleration(self, v: np.ndarray, v0: np.ndarray, gap: np.ndarray) -> np.ndarray:
        """IDM toward a fixed stop point, never braking harder than needed to stop before it.

        IDM alone brakes needlessly hard at stop lines; the constant deceleration that stops
        ``stop_margin`` before the point is its floor.
        """
        a_free = idm_acceleration(v, v0, np.inf, 0.0, self.idm)
        needed = v**2 / (2 * np.maximum(gap - self.params.stop_margin, 0.1))
        return np.maximum(idm_acceleration(v, v0, gap, 0.0, self.idm), np.minimum(-needed, a_free))

    def _slow_down_ahead(
        self, path: np.ndarray, offset: np.ndarray, s: np.ndarray, who: np.ndarray
    ) -> np.ndarray:
        """The constant deceleration that reaches a slower lane ahead at its desired speed (+inf: none).

        IDM with a lowered desired speed would brake late and hard instead.
        """
        v, accel = self.v[who], np.full(len(who), np.inf)
        for k in (1, 2):
            limit = np.where(path[:, k] >= 0, self.net.limit[np.maximum(path[:, k], 0)], np.inf)
            target = self.factor[who] * limit
            # from 5 m out, a small excess is left to IDM's own free-road term (no last-metre spike)
            needed = (target**2 - v**2) / (2 * np.clip(offset[:, k] - s, 5.0, 1e6))
            accel = np.where(v > target, np.minimum(accel, needed), accel)
        return np.maximum(accel, -self.idm.b_max)

    def _courtesy_acceleration(
        self,
        who: np.ndarray,
        path: np.ndarray,
        offset: np.ndarray,
        s: np.ndarray,
        occ: _Occupancy,
        v0: np.ndarray,
    ) -> np.ndarray:
        """IDM behind the nearest agent waiting to merge in, where that is comfortable (+inf: none).

        Comfortable: a positive gap, and braking of at most b_comfortable.
        """
        if not occ.courtesy.any():
            return np.full(len(who), np.inf)
        merger, dist = self._nearest(who, path, offset, s, occ.rows(occ.courtesy), np.zeros((1, 1), bool))
        accel = self._follow(who, v0, merger, dist)
        comfortable = (self._gap(who, merger, dist) > self.idm.min_gap) & (accel >= -self.idm.b_comfortable)
        return np.where((merger >= 0) & comfortable, accel, np.inf)

    def _accelerations(
        self,
        who: np.ndarray,
        path: np.ndarray,
        offset: np.ndarray,
        s: np.ndarray,
        t: int,
        occ: _Occupancy,
        leaders: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, ...]:
        """Acceleration of agents ``who`` placed at (path, s), and what it is made of.

        Returns the acceleration, its part due to the path alone (stop lines, lane drops, slower
        lanes), the desired speed, the leader and its centre distance, and yellow-light commitments.
        ``leaders`` passes leaders already found.
        """
        lead, dist = leaders or self._leaders(who, path, offset, s, occ)
        v0 = self.factor[who] * self.net.limit[path[:, 0]]
        obstacle_gap, commit = self._obstacle_gap(path, offset, s, who, t)
        a_path = np.minimum(
            self._stop_acceleration(self.v[who], v0, obstacle_gap),
            self._slow_down_ahead(path, offset, s, who),
        )
        a_lead = self._follow(who, v0, lead, dist)
        a_courtesy = self._courtesy_acceleration(who, path, offset, s, occ, v0)
        return np.minimum(np.minimum(a_lead, a_path), a_courtesy), a_path, v0, lead, dist, commit

    def _side_lanes(self, movers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Agents that must also watch a neighbouring lane, and which lane.

        Lane changers watch the lane they are still partly on; agents that must merge soon watch
        their target lane. Returns positions in ``movers`` ``[Q]``, the lanes ``[Q]``, and whether
        each is a changer.
        """
        changing = np.flatnonzero(self.lc_from[movers] >= 0)
        merging = np.zeros(0, np.int64)
        if self.net.has_lane_drops:
            urgent = self.net.leave_by[self.lane[movers]] - self.s[movers] < self.params.courtesy_zone
            merging = np.flatnonzero(urgent & (self.lc_d0[movers] == 0))
        lanes = np.concatenate(
            [self.lc_from[movers[changing]], self.net.leave_to[self.lane[movers[merging]]]]
        )
        is_changer = np.arange(len(lanes)) < len(changing)
        return np.concatenate([changing, merging]), lanes, is_changer

    def _side_accelerations(
        self, who: np.ndarray, v0: np.ndarray, changer: np.ndarray, lead: np.ndarray, dist: np.ndarray
    ) -> np.ndarray:
        """IDM behind the leader on each agent's side lane, where it must (+inf elsewhere).

        A lane changer follows the leader on the lane it is still partly on only if it would close
        the gap before leaving that lane: overtaking is fine, passing a car it is beside is not.
        An agent that must merge follows its target lane's leader, braking at most b_comfortable,
        to drop in behind it rather than stay alongside: the synchronisation step of merging,
        which MOBIL alone lacks. A slower merger beside its leader needs no braking.
        """
        follow, gap = self._follow(who, v0, lead, dist), self._gap(who, lead, dist)
        lead_v = np.where(lead >= 0, self.v[lead], 0.0)
        # the body leaves the old lane about 70 % of the way through the change
        left = np.maximum(0.7 * self.lc_length[who] - self.lc_travel[who], 0.0) / np.maximum(self.v[who], 0.1)
        closing = np.maximum(self.v[who] - lead_v, 0.0) * left
        changer_accel = np.where(gap - closing > self.idm.min_gap, np.inf, follow)
        merger_accel = np.where(
            (gap > 0) | (self.v[who] > lead_v), np.maximum(follow, -self.idm.b_comfortable), np.inf
        )
        return np.where(changer, changer_accel, merger_accel)

    def _settle(self, movers: np.ndarray) -> None:
        """Cap initial speeds at the IDM equilibrium for each agent's gap, so nobody starts too close."""
        p, path, offset, s = self.idm, self.path[movers], self.offset[movers], self.s[movers]
        lead, dist = self._leaders(movers, path, offset, s, self._occupancy())
        obstacle, _ = self._obstacle_gap(path, offset, s, movers, 0)
        room = np.maximum(np.minimum(self._gap(movers, lead, dist), obstacle) - p.min_gap, 0.0)
        cap = np.minimum(room / p.time_headway, np.sqrt(2 * p.b_comfortable * room))
        self.v[movers] = np.minimum(self.v[movers], cap)

    # -- the step
    def step(self, t: int) -> None:
        """Advance every agent by DT."""
        movers = np.flatnonzero(self.valid & ~self.static)
        occ = self._occupancy()
        self.blocked = self._blocked_connectors()
        path, offset, s = self.path[movers], self.offset[movers], self.s[movers]
        # one leader search for every agent's path and, for some, a neighbouring lane too
        side, side_lane, changer = self._side_lanes(movers)
        side_path, side_offset = self._single_lane_path(side_lane)
        side_s = self.s[movers[side]] * self.net.length[side_lane] / self.net.length[self.lane[movers[side]]]
        who = np.concatenate([movers, movers[side]])
        all_path, all_offset = np.concatenate([path, side_path]), np.concatenate([offset, side_offset])
        leaders, distances = self._leaders(who, all_path, all_offset, np.concatenate([s, side_s]), occ)
        n = len(movers)
        a_idm, a_path, v0, lead, dist, commit = self._accelerations(
            movers, path, offset, s, t, occ, (leaders[:n], distances[:n])
        )
        side_accel = self._side_accelerations(movers[side], v0[side], changer, leaders[n:], distances[n:])
        np.minimum.at(a_idm, side, side_accel)
        self.committed[movers] |= commit
        self.a_idm[movers], self.a_path[movers], self.v0[movers] = a_idm, a_path, v0
        self.lead[movers], self.lead_dist[movers] = lead, dist
        prev, p = self.a[movers], self.params
        floor = np.where(
            a_idm < -self.idm.b_comfortable, prev - p.emergency_jerk * DT, prev - p.max_jerk * DT
        )
        self.a[movers] = np.clip(a_idm, floor, prev + p.max_jerk * DT)
        if t % p.mobil_interval == 0:
            self._change_lanes(movers, occ, t)
        self._move(movers)
        self._spawn(occ)

    def _move(self, movers: np.ndarray) -> None:
        """Integrate speeds and stations, follow lane ends onto the path, drop who leaves the map."""
        v, a = self.v[movers], self.a[movers]
        stops = v + a * DT < 0  # comes to rest within the step
        ds = np.where(stops, v**2 / (2 * np.maximum(-a, 1e-9)), v * DT + 0.5 * a * DT**2)
        self.v[movers] = np.maximum(v + a * DT, 0.0)
        self.s[movers] += ds
        self.cooldown[movers] -= DT
        self._progress_lane_changes(movers, ds)
        over = movers[self.s[movers] >= self.net.length[self.lane[movers]]]
        onward, leaving = over[self.path[over, 1] >= 0], over[self.path[over, 1] < 0]
        self.s[onward] -= self.net.length[self.lane[onward]]
        self.lane[onward] = self.path[onward, 1]
        self.path[onward, :2] = self.path[onward, 1:]
        self.path[onward, 2] = self._choose(self.path[onward, 1], onward)
        self.offset[onward] = self._offsets(self.path[onward])
        self.committed[onward], self.lc_from[onward] = False, -1
        self.valid[leaving] = False
        self.pending += len(leaving)

    def _progress_lane_changes(self, movers: np.ndarray, ds: np.ndarray) -> None:
        changing = self.lc_d0[movers] != 0
        who, ds = movers[changing], ds[changing]
        self.lc_travel[who] += ds
        u = np.minimum(self.lc_travel[who] / self.lc_length[who], 1.0)
        d0 = self.lc_d0[who]
        self.d[who] = d0 * (1 - _smootherstep(u))
        self.slope[who] = -d0 * 30 * u**2 * (1 - u) ** 2 / self.lc_length[who]  # dd/ds
        # once the body has left the old lane, stop occupying it
        self.lc_from[who[np.abs(self.d[who]) < np.abs(d0) / 2 - self.width[who] / 2]] = -1
        done = who[u >= 1]
        self.lc_d0[done], self.d[done], self.slope[done], self.lc_from[done] = 0.0, 0.0, 0.0, -1

    def _spawn(self, occ: _Occupancy) -> None:
        """Let one reserve agent in at the start of a free entry lane, if someone has left the map."""
        if not self.pending or not self.reserves or not len(self.net.entry_lanes):
            return
        first = np.full(len(self.net.length), np.inf)
        np.minimum.at(first, occ.lane, occ.station - self.length[occ.agent] / 2)
        free = self.net.entry_lanes[first[self.net.entry_lanes] > self.params.spawn_clearance]
        if not len(free):
            return
        who = np.array([self.reserves.pop(0)])
        lane = int(free[self.rng.integers(len(free))])
        self.lane[who], self.s[who], self.valid[who] = lane, self.length[who] / 2, True
        room = max(first[lane] - self.length[who][0] - self.idm.min_gap, 0.0)
        self.v[who] = min(self.factor[who][0] * self.net.limit[lane], room / self.idm.time_headway)
        self._set_path(who)
        self.pending -= 1

    # -- lane changes
    def _mandatory_side(self, who: np.ndarray) -> np.ndarray:
        lane = self.lane[who]
        side = self.net.leave_dir[lane]
        return np.where((who == 0) & (side == 0), self.net.route_dir[lane], side)

    def _followers(
        self, movers: np.ndarray, who: np.ndarray, lanes: np.ndarray, s: np.ndarray, occ: _Occupancy
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nearest agent behind each point ``(lanes, s)`` other than ``who`` (-1: none), and its distance.

        Followers are agents whose path leads to the point, or that still occupy part of its lane.
        """
        dist = _along(self.path[movers], self.offset[movers], self.s[movers], lanes, s)
        dist[(movers[:, None] == who[None, :]) | (dist > self.params.lookahead)] = np.inf
        j = np.argmin(dist, axis=0)
        best = dist[j, np.arange(len(who))]
        follower = np.where(np.isfinite(best), movers[j], -1)
        partly = (occ.lane[:, None] == lanes[None, :]) & ~(occ.projected | occ.courtesy)[:, None]
        behind = np.where(
            partly & (occ.agent[:, None] != who[None, :]), s[None, :] - occ.station[:, None], np.inf
        )
        behind[behind <= 0] = np.inf
        if len(occ.lane):
            k = np.argmin(behind, axis=0)
            closer = behind[k, np.arange(len(who))] < best
            follower = np.where(closer, occ.agent[k], follower)
            best = np.where(closer, behind[k, np.arange(len(who))], best)
        return follower, best

    def _follower_gain(self, follower: np.ndarray, dist: np.ndarray, lead: np.ndarray) -> tuple:
        """Followers' acceleration now and with ``lead`` at centre distance ``dist`` ahead (zeros: none)."""
        has, f = follower >= 0, np.maximum(follower, 0)
        new = np.minimum(self._follow(f, self.v0[f], lead, dist), self.a_path[f])
        return np.where(has, self.a_idm[f], 0.0), np.where(has, new, 0.0)

    def _change_lanes(self, movers: np.ndarray, occ: _Occupancy, t: int) -> None:
        """MOBIL for every agent that may change lanes now; at most one change per target lane."""
        mandatory = self._mandatory_side(movers)
        free = (self.lc_d0[movers] == 0) & (self.cooldown[movers] <= 0)
        reach = self.params.lane_change_time * self.v[movers]
        room = self.net.length[self.lane[movers]] - np.maximum(self.params.no_change_zone, reach)
        # MOBIL's own gain is at most the acceleration an agent is missing: skip those not held back
        held_back = (
            idm_acceleration(self.v[movers], self.v0[movers], np.inf, 0.0, self.idm) - self.a_idm[movers]
        )
        discretionary = (movers != 0) & (mandatory == 0) & (self.s[movers] < room) & (self.v[movers] > 1.0)
        discretionary &= held_back > self.mobil.threshold
        cand = movers[free & (discretionary | (mandatory != 0))]
        if not len(cand):
            return
        mandatory = self._mandatory_side(cand)
        best, target = np.full(len(cand), -np.inf), np.full(len(cand), -1)
        for side, table in ((1, self.net.left), (-1, self.net.right)):
            lane = table[self.lane[cand]]
            ok = (lane >= 0) & ((mandatory == 0) | (mandatory == side))
            ok &= ~np.isfinite(self.net.leave_by[np.maximum(lane, 0)])  # never into a lane drop
            incentive = np.full(len(cand), -np.inf)
            if ok.any():
                incentive[ok] = self._incentive(movers, cand[ok], lane[ok], occ, t)
            incentive += np.where(mandatory == side, self.mobil.mandatory_bonus, 0.0)
            better = incentive > best
            best, target = np.where(better, incentive, best), np.where(better, lane, target)
        go = best > self.mobil.threshold
        _, first = np.unique(target[go], return_index=True)
        for i, lane in zip(cand[go][first], target[go][first], strict=True):
            self._start_lane_change(int(i), int(lane))

    def _incentive(
        self, movers: np.ndarray, who: np.ndarray, lane: np.ndarray, occ: _Occupancy, t: int
    ) -> np.ndarray:
        """MOBIL incentive of agents ``who`` to move to ``lane`` (-inf: unsafe, or gaps too small)."""
        s = self.s[who] * self.net.length[lane] / self.net.length[self.lane[who]]
        path = np.stack([lane, self._choose(lane, who), np.full(len(who), -1)], axis=1)
        path[:, 2] = self._choose(path[:, 1], who)
        a_new, _, _, lead, dist, _ = self._accelerations(who, path, self._offsets(path), s, t, occ)
        new_f, new_dist = self._followers(movers, who, lane, s, occ)
        a_n, a_n_new = self._follower_gain(new_f, new_dist, who)
        old_f, old_dist = self._followers(movers, who, self.lane[who], self.s[who], occ)
        a_o, a_o_new = self._follower_gain(old_f, old_dist + self.lead_dist[who], self.lead[who])
        incentive = mobil_incentive(self.a_idm[who], a_new, a_n, a_n_new, a_o, a_o_new, self.mobil)
        incentive[
            (new_f == 0) & (a_n_new < -self.params.ego_b_safe)
        ] = -np.inf  # the human ego is not cut off
        tight = (self._gap(who, lead, dist) < self.idm.min_gap) | (
            self._gap(who, new_f, new_dist) < self.idm.min_gap
        )
        return np.where(tight, -np.inf, incentive)

    def _start_lane_change(self, i: int, lane: int) -> None:
        old = self.lane[i]
        side = 1.0 if self.net.left[old] == lane else -1.0
        self.s[i] *= self.net.length[lane] / self.net.length[old]
        self.lc_from[i], self.lane[i] = old, lane
        self.lc_d0[i] = -side * (self.net.width[old] + self.net.width[lane]) / 2
        self.d[i], self.lc_travel[i] = self.lc_d0[i], 0.0
        self.lc_length[i] = max(self.v[i] * self.params.lane_change_time, self.params.min_lane_change_length)
        self.cooldown[i], self.committed[i] = self.params.lane_change_cooldown, False
        self._set_path(np.array([i]))


def simulate(
    network: LaneNetwork,
    agents: TrafficAgents,
    light_state: np.ndarray,
    rng: np.random.Generator,
    *,
    idm: IDMParams = IDMParams(),  # noqa: B008 (frozen dataclass: safe to share)
    mobil: MOBILParams = MOBILParams(),  # noqa: B008
    params: SimParams = SimParams(),
) -> TrafficResult:
    """Simulate ``T = len(light_state)`` steps of traffic; step 0 is the (settled) initial state.

    Args:
        network: the lanes agents drive on, with the ego's route.
        agents: initial state; agent 0 is the ego, which follows its route at lane ends and
            changes lanes only when it must (a lane drop, a lane leaving its route).
        light_state: ``[T, K]`` light states, one column per ``road_map.light_lane``.
        rng: successor choices and reserve entries.
        idm: car-following parameters.
        mobil: lane-change parameters.
        params: simulator settings.

    Returns:
        World poses, speeds and validity of every agent at every step. Agents that drive off the
        end of the map become invalid for the rest of the log.
    """
    traffic = _Traffic(network, agents, np.asarray(light_state), rng, (idm, mobil, params))
    num_steps, num_agents = len(light_state), len(agents.lane)
    lane, station = np.full((num_steps, num_agents), -1), np.zeros((num_steps, num_agents))
    lateral, slope = np.zeros((num_steps, num_agents)), np.zeros((num_steps, num_agents))
    speed, valid = np.zeros((num_steps, num_agents)), np.zeros((num_steps, num_agents), bool)
    for t in range(num_steps):
        valid[t], speed[t] = traffic.valid, np.where(traffic.valid, traffic.v, 0.0)
        lane[t] = np.where(traffic.valid, traffic.lane, -1)
        station[t], lateral[t], slope[t] = traffic.s, traffic.d, traffic.slope
        if t + 1 < num_steps:
            traffic.step(t)
    pose = network.geometry.pose(np.maximum(lane, 0), station, lateral)
    pose[..., 2] += np.arctan(slope)  # heading: lane tangent plus lateral motion
    pose[~valid] = 0.0
    return TrafficResult(
        pose=pose, speed=speed, valid=valid, lane=lane, station=np.where(valid, station, 0.0)
    )
