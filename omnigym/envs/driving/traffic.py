"""Reactive traffic on a lane graph: IDM car following, MOBIL lane changes and signal cycles.

The simulator works in Frenet coordinates: each agent has a lane, a station ``s`` along it and a
lateral offset ``d`` (non-zero only while it changes lanes, smoothly over ~3 s). Every step it
finds each agent's leader on its lane and the next two lanes of its path (the ego included),
adds virtual stopped leaders at red (and stoppable yellow) lights and at lane drops, and moves
everyone with the Intelligent Driver Model. Every ``mobil_interval`` steps MOBIL decides lane
changes. All of it is vectorised over agents; lanes of one road block must span the same
cross-sections (stations map between neighbours by length ratio), which the procedural maps ensure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from omnigym.envs.driving.maps import LaneGeometry
from omnigym.envs.driving.scene import DT, LIGHT_GREEN, LIGHT_RED, LIGHT_YELLOW, RoadMap


# --- models ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IDMParams:
    """Intelligent Driver Model parameters (Treiber, Hennecke and Helbing 2000)."""

    a_max: float = 1.5
    """Maximum acceleration a (m/s²)."""
    b_comfortable: float = 2.0
    """Comfortable deceleration b (m/s²)."""
    time_headway: float = 1.5
    """Desired time gap T (s)."""
    min_gap: float = 2.0
    """Jam distance s0 (m), bumper to bumper."""
    delta: float = 4.0
    """Acceleration exponent."""
    b_max: float = 8.0
    """Physical braking limit (m/s²): the output is clipped to -b_max."""


def idm_acceleration(
    speed: np.ndarray,
    desired_speed: np.ndarray,
    gap: np.ndarray,
    leader_speed: np.ndarray,
    params: IDMParams = IDMParams(),
) -> np.ndarray:
    """IDM acceleration, elementwise over broadcastable arrays (Treiber et al. 2000, eq. 2-3).

    ``a = a_max (1 - (v/v0)^δ - (s*/s)²)`` with the desired gap
    ``s* = s0 + max(0, vT + v Δv / (2 sqrt(a_max b)))`` and ``Δv = v - v_leader``.

    Args:
        speed: v (m/s), >= 0.
        desired_speed: v0 (m/s).
        gap: s, bumper-to-bumper distance to the leader (m); ``np.inf`` for a free road.
        leader_speed: the leader's speed (m/s); ignored where the gap is infinite.
        params: model parameters.

    Returns:
        Accelerations in ``[-b_max, a_max]`` (m/s²), the broadcast shape of the inputs.
    """
    p = params
    v = np.asarray(speed, dtype=np.float64)
    free = 1.0 - (v / np.maximum(desired_speed, 0.1)) ** p.delta
    approach = v * (v - leader_speed) / (2.0 * np.sqrt(p.a_max * p.b_comfortable))
    desired_gap = p.min_gap + np.maximum(0.0, v * p.time_headway + np.nan_to_num(approach))
    interaction = (desired_gap / np.maximum(gap, 0.1)) ** 2
    return np.clip(p.a_max * (free - interaction), -p.b_max, p.a_max)


@dataclass(frozen=True)
class MOBILParams:
    """MOBIL lane-change parameters (Kesting, Treiber and Helbing 2007)."""

    politeness: float = 0.2
    """p: weight of the followers' advantage."""
    threshold: float = 0.2
    """Δa_th (m/s²): the net advantage a change must bring."""
    b_safe: float = 4.0
    """Maximum deceleration (m/s²) a change may impose on the new follower (or the changer)."""
    mandatory_bonus: float = 1.0
    """m/s² added to the incentive of a mandatory change (a lane drop, or a lane off the route)."""


def mobil_incentive(
    a_self: np.ndarray,
    a_self_new: np.ndarray,
    a_new_follower: np.ndarray,
    a_new_follower_new: np.ndarray,
    a_old_follower: np.ndarray,
    a_old_follower_new: np.ndarray,
    params: MOBILParams = MOBILParams(),
) -> np.ndarray:
    """MOBIL's net incentive for a lane change, ``-inf`` where it is unsafe (Kesting et al. 2007, eq. 1-2).

    Safety: ``ã_n >= -b_safe`` (and the same for the changer). Incentive:
    ``ã_c - a_c + p ((ã_n - a_n) + (ã_o - a_o))``; change when it exceeds ``params.threshold``.
    ``_new`` values are accelerations after the change; ``n`` is the follower in the target lane,
    ``o`` the follower in the current lane (pass zeros for a missing follower).
    """
    followers = (a_new_follower_new - a_new_follower) + (a_old_follower_new - a_old_follower)
    incentive = a_self_new - a_self + params.politeness * followers
    safe = (a_new_follower_new >= -params.b_safe) & (a_self_new >= -params.b_safe)
    return np.where(safe, incentive, -np.inf)


@dataclass(frozen=True)
class LightCycle:
    """A fixed-time signal plan: approaches get green one after another (no conflicting flows)."""

    green: float = 8.0
    yellow: float = 3.0
    all_red: float = 1.0

    @property
    def phase(self) -> float:
        """Seconds from one approach's green to the next approach's green."""
        return self.green + self.yellow + self.all_red


def light_states(
    num_steps: int, light_group: np.ndarray, num_groups: int, offset: float, cycle: LightCycle = LightCycle()
) -> np.ndarray:
    """States ``[T, K]`` (int8) of lights whose approach (signal group) is ``light_group [K]``.

    Group ``g`` is green from ``g * cycle.phase`` seconds into the cycle; log step ``t`` is
    ``t * DT + offset`` seconds into it.
    """
    time = np.arange(num_steps) * DT + offset
    into = np.mod(time, max(num_groups, 1) * cycle.phase)
    active, within = into // cycle.phase, np.mod(into, cycle.phase)
    mine = active[:, None] == np.asarray(light_group)[None, :]
    state = np.full(mine.shape, LIGHT_RED, np.int8)
    state[mine & (within[:, None] < cycle.green + cycle.yellow)] = LIGHT_YELLOW
    state[mine & (within[:, None] < cycle.green)] = LIGHT_GREEN
    return state


# --- simulator ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SimParams:
    """Simulator settings beyond the driver models."""

    lane_change_time: float = 3.0
    """Seconds a lane change takes at the speed it starts with."""
    min_lane_change_length: float = 15.0
    """Metres a lane change takes at least (slow agents)."""
    lane_change_cooldown: float = 4.0
    """Seconds after a lane change before the next one."""
    mobil_interval: int = 5
    """Steps between lane-change decisions."""
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
    """Seconds of driving assumed before braking starts, when judging if a yellow light is stoppable."""
    ego_b_safe: float = 1.5
    """Maximum deceleration (m/s²) a lane change may impose on the ego as its new follower."""
    courtesy_zone: float = 60.0
    """Metres before a lane drop within which followers on the target lane let merging agents in."""
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


CLEARANCE = 3.0
"""Metres between two lanes' centrelines below which agents on them can touch."""


def _smootherstep(u: np.ndarray) -> np.ndarray:
    """Lateral progress of a lane change: zero slope and curvature at both ends (no yaw-rate jump)."""
    return u**3 * (10 - 15 * u + 6 * u**2)


def _along(path: np.ndarray, offset: np.ndarray, s: np.ndarray, lanes: np.ndarray, stations: np.ndarray) -> np.ndarray:
    """Distances ``[N, M]`` from N agents (path lanes ``[N, K]``, their start offsets ``[N, K]``,
    stations ``[N]``) forward along their paths to M points ``(lanes, stations)``; inf if not ahead."""
    best = np.full((len(s), len(lanes)), np.inf)
    for k in range(path.shape[1]):
        d = offset[:, k, None] + stations[None, :] - s[:, None]
        hit = (path[:, k, None] == lanes[None, :]) & (d > 0)
        np.minimum(best, np.where(hit, d, np.inf), out=best)
    return best


class LaneNetwork:
    """Lane-graph tables of one map for the simulator: lengths, successors, lights, lane drops
    (``leave_by`` station and ``leave_dir`` side, +1 left), entry lanes and the ego's route."""

    def __init__(self, road_map: RoadMap, ego_route: np.ndarray) -> None:
        self.geometry = LaneGeometry.of(road_map)
        self.length = self.geometry.length
        self.successors = road_map.lane_successors.astype(np.int64)
        self.num_successors = (self.successors >= 0).sum(axis=1)
        self.left, self.right = road_map.lane_left.astype(np.int64), road_map.lane_right.astype(np.int64)
        self.width = road_map.lane_width.astype(np.float64)
        self.limit = road_map.lane_speed_limit.astype(np.float64)
        self.connector = road_map.lane_is_connector
        self.light = np.full(road_map.num_lanes, -1, np.int64)
        self.light[road_map.light_lane] = np.arange(len(road_map.light_lane))
        self.leave_by, self.leave_dir = self._lane_drops(road_map)
        self.leave_to = np.where(self.leave_dir > 0, self.left, np.where(self.leave_dir < 0, self.right, -1))
        led = set(self.successors[self.successors >= 0].tolist())
        self.entry_lanes = np.array([i for i in range(road_map.num_lanes) if i not in led and not self.connector[i]])
        self.route_next, self.route_dir = self._route_tables(road_map, np.asarray(ego_route))
        self.forks, self.conflicts = self._junction_pairs(road_map)

    def _junction_pairs(self, road_map: RoadMap) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """Pairs of lanes ``(lane, other, until)`` whose centrelines come within CLEARANCE m.

        Forks: lanes with a common predecessor; an agent on ``lane`` before station ``until`` also
        occupies ``other`` (the two have not diverged yet). Conflicts: connectors from different
        lanes that cross or converge; an agent on ``other`` before ``until`` (the end of the close
        zone plus CLEARANCE) keeps others from entering ``lane``.
        """
        parents: dict[int, set[int]] = {}
        for lane, succ in enumerate(self.successors):
            for child in succ[succ >= 0]:
                parents.setdefault(int(child), set()).add(lane)
        siblings = {c for p in range(road_map.num_lanes) for c in self.successors[p] if self.num_successors[p] > 1}
        lanes = sorted(siblings | set(np.flatnonzero(self.connector).tolist()))
        forks, conflicts = [], []
        if lanes:
            points = [road_map.centreline(lane).astype(np.float64) for lane in lanes]
            owner = np.repeat(np.arange(len(lanes)), [len(p) for p in points])
            starts = np.concatenate([[0], np.cumsum([len(p) for p in points])[:-1]])
            station = np.concatenate([np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p, axis=0), axis=1))]) for p in points])
            flat = np.concatenate(points)
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
                        forks.append((lane, other, station[apart[0]] if len(apart) else self.length[lane]))
                    elif self.connector[lane] and self.connector[other]:
                        close = (owner == j) & near[:, i]
                        conflicts.append((lane, other, station[close].max() + CLEARANCE))
        pairs = (np.array(forks).reshape(-1, 3), np.array(conflicts).reshape(-1, 3))
        return tuple(
            (p[:, 0].astype(np.int64), p[:, 1].astype(np.int64), p[:, 2]) for p in pairs
        )  # type: ignore[return-value]

    def _lane_drops(self, road_map: RoadMap) -> tuple[np.ndarray, np.ndarray]:
        """Where agents must have left each lane (inf: never) and toward which side (+1 left).

        A lane drops if it ends while its neighbour goes on, or if it shares its successor with its
        left neighbour (a taper, like an on-ramp's acceleration lane); it must be left where the
        two centrelines start to converge (closer than 98 % of their parallel spacing).
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
                arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(points, axis=0), axis=1))])
                leave_by[lane] = arc[close[0]] if len(close) else self.length[lane]
                leave_dir[lane] = side
        return leave_by, leave_dir

    def _route_tables(self, road_map: RoadMap, route: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ego's next lane from each lane (-1: none on the route), and the side to change to
        from a lane of a route block whose successors leave the route (+1 left, 0 none)."""
        on_route = set(route.tolist())
        nxt = np.full(road_map.num_lanes, -1, np.int64)
        for lane in range(road_map.num_lanes):
            nxt[lane] = next((int(s) for s in self.successors[lane] if s in on_route), -1)
        nxt[route[:-1]] = route[1:]
        on_course = [i in on_route or nxt[i] >= 0 for i in range(road_map.num_lanes)]
        direction = np.zeros(road_map.num_lanes, np.int64)
        for lane in range(road_map.num_lanes):
            for side, table in ((1, self.left), (-1, self.right)):
                other, hops = int(table[lane]), 0
                while other >= 0 and not on_course[lane] and hops < 8:
                    if on_course[other] and np.isinf(self.leave_by[other]):
                        direction[lane] = side
                        break
                    other, hops = int(table[other]), hops + 1
        return nxt, direction


class _Occupancy(NamedTuple):
    """Who occupies which lane where, as seen by followers; one row per (agent, lane) pair."""

    lane: np.ndarray
    station: np.ndarray
    agent: np.ndarray
    projected: np.ndarray  # bool: seen only by agents on connectors (converging connectors)
    courtesy: np.ndarray  # bool: an agent that must merge, shown on its target lane to let it in


class _Traffic:
    """The simulation state and its step."""

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
        self.lc_from, self.lc_d0 = np.full(n, -1), np.zeros(n)
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

    # -- perception
    def _occupancy(self) -> _Occupancy:
        """Every agent on its lane; lane changers also on the lane they leave; agents near a fork
        also on the sibling lanes; agents on connectors also on their next lane, at a negative
        station (so converging connectors see who reaches the merge first); agents that must leave
        a lane drop soon also on their target lane (so followers there let them in)."""
        net, on = self.net, np.flatnonzero(self.valid)
        changing = on[self.lc_from[on] >= 0]
        fork_lane, fork_other, fork_until = net.forks
        agent, pair = np.nonzero((self.lane[on, None] == fork_lane) & (self.s[on, None] < fork_until))
        forking = on[agent]
        crossing = on[net.connector[self.lane[on]] & (self.path[on, 1] >= 0)]
        lane = self.lane[on]
        urgent = (net.leave_by[lane] - self.s[on] < self.params.courtesy_zone) & (self.lc_d0[on] == 0)
        merging = on[urgent & ~self.static[on]]
        target = net.leave_to[self.lane[merging]]
        groups = [
            (self.lane[on], self.s[on], on),
            (self.lc_from[changing], self.s[changing] * net.length[self.lc_from[changing]] / net.length[self.lane[changing]], changing),
            (fork_other[pair], self.s[forking], forking),
            (self.path[crossing, 1], self.s[crossing] - net.length[self.lane[crossing]], crossing),
            (target, self.s[merging] * net.length[target] / net.length[self.lane[merging]], merging),
        ]
        kind = np.repeat(np.arange(len(groups)), [len(g[2]) for g in groups])
        return _Occupancy(
            lane=np.concatenate([g[0] for g in groups]),
            station=np.concatenate([g[1] for g in groups]),
            agent=np.concatenate([g[2] for g in groups]),
            projected=kind == 3,
            courtesy=kind == 4,
        )

    def _blocked_connectors(self) -> np.ndarray:
        """``[L]`` bool: connectors that cross or merge with a connector someone is still crossing."""
        lane, other, until = self.net.conflicts
        blocked = np.zeros(len(self.net.length), bool)
        inside = np.flatnonzero(self.valid & self.net.connector[np.maximum(self.lane, 0)])
        busy = ((self.lane[inside, None] == other) & (self.s[inside, None] < until)).any(axis=0)
        blocked[lane[busy]] = True
        return blocked

    def _nearest(
        self, who: np.ndarray, path: np.ndarray, offset: np.ndarray, s: np.ndarray, occ: _Occupancy, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nearest occupant ahead along each path among ``occ`` rows where ``mask [N, M]`` holds:
        agent (-1: none) and centre distance (inf)."""
        dist = _along(path, offset, s, occ.lane, occ.station)
        dist[~mask | (occ.agent[None, :] == who[:, None]) | (dist > self.params.lookahead)] = np.inf
        if not len(occ.lane):
            return np.full(len(who), -1), np.full(len(who), np.inf)
        j = np.argmin(dist, axis=1)
        best = dist[np.arange(len(who)), j]
        return np.where(np.isfinite(best), occ.agent[j], -1), best

    def _leaders(
        self, who: np.ndarray, path: np.ndarray, offset: np.ndarray, s: np.ndarray, occ: _Occupancy
    ) -> tuple[np.ndarray, np.ndarray]:
        """Leader and centre distance; projected rows count only for agents on a connector."""
        seen = ~occ.courtesy[None, :] & ~(occ.projected[None, :] & ~self.net.connector[path[:, :1]])
        return self._nearest(who, path, offset, s, occ, seen)

    def _courtesy_acceleration(
        self, who: np.ndarray, path: np.ndarray, offset: np.ndarray, s: np.ndarray, occ: _Occupancy, v0: np.ndarray
    ) -> np.ndarray:
        """IDM acceleration behind the nearest agent waiting to merge in, where it is comfortable
        (a positive gap, braking at most b_comfortable); +inf elsewhere."""
        if not occ.courtesy.any():
            return np.full(len(who), np.inf)
        merger, dist = self._nearest(who, path, offset, s, occ, np.broadcast_to(occ.courtesy, (len(who), len(occ.lane))))
        gap = dist - (self.length[who] + self.length[merger]) / 2
        accel = idm_acceleration(self.v[who], v0, gap, self.v[merger], self.idm)
        return np.where((merger >= 0) & (gap > self.idm.min_gap) & (accel >= -self.idm.b_comfortable), accel, np.inf)

    def _obstacle_gap(
        self, path: np.ndarray, offset: np.ndarray, s: np.ndarray, who: np.ndarray, t: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gap to the nearest virtual stopped leader (a red or stoppable yellow light, a connector
        blocked by crossing traffic, a lane drop), and which agents cannot stop for a yellow light
        and so commit to crossing."""
        half, v = self.length[who] / 2, self.v[who]
        gap, commit = np.full(len(who), np.inf), np.zeros(len(who), bool)
        states = self.lights[t]
        for k in (1, 2):
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
        for k in range(3):
            end = offset[:, k] + np.where(path[:, k] >= 0, self.net.leave_by[np.maximum(path[:, k], 0)], np.inf) - s
            gap = np.where(end > 0, np.minimum(gap, end - half), gap)
        return gap, commit

    def _stop_acceleration(self, v: np.ndarray, v0: np.ndarray, gap: np.ndarray) -> np.ndarray:
        """IDM toward a fixed stop point, but never braking harder than the constant deceleration
        that stops ``stop_margin`` before it: IDM alone brakes needlessly hard at stop lines."""
        a_free = idm_acceleration(v, v0, np.inf, 0.0, self.idm)
        needed = v**2 / (2 * np.maximum(gap - self.params.stop_margin, 0.1))
        return np.maximum(idm_acceleration(v, v0, gap, 0.0, self.idm), np.minimum(-needed, a_free))

    def _slow_down_ahead(self, path: np.ndarray, offset: np.ndarray, s: np.ndarray, who: np.ndarray) -> np.ndarray:
        """The constant deceleration that reaches a slower lane ahead at its own desired speed
        (IDM with a lowered desired speed would brake late and hard); +inf where none is needed."""
        v, accel = self.v[who], np.full(len(who), np.inf)
        for k in (1, 2):
            limit = np.where(path[:, k] >= 0, self.net.limit[np.maximum(path[:, k], 0)], np.inf)
            target = self.factor[who] * limit
            # from 5 m out, a small excess is left to IDM's own free-road term (no last-metre spike)
            needed = (target**2 - v**2) / (2 * np.clip(offset[:, k] - s, 5.0, 1e6))
            accel = np.where(v > target, np.minimum(accel, needed), accel)
        return np.maximum(accel, -self.idm.b_max)

    def _accelerations(
        self, who: np.ndarray, path: np.ndarray, offset: np.ndarray, s: np.ndarray, t: int, occ: _Occupancy
    ) -> tuple[np.ndarray, ...]:
        """For agents ``who`` placed at (path, s): the acceleration, its part due to the path alone
        (stop lines, lane drops, slower lanes), the desired speed, the leader and its distance, and
        the yellow-light commitments."""
        lead, dist = self._leaders(who, path, offset, s, occ)
        gap = dist - (self.length[who] + self.length[lead]) / 2
        v, v0 = self.v[who], self.factor[who] * self.net.limit[path[:, 0]]
        obstacle_gap, commit = self._obstacle_gap(path, offset, s, who, t)
        a_path = np.minimum(self._stop_acceleration(v, v0, obstacle_gap), self._slow_down_ahead(path, offset, s, who))
        a_lead = idm_acceleration(v, v0, gap, np.where(lead >= 0, self.v[lead], 0.0), self.idm)
        a_courtesy = self._courtesy_acceleration(who, path, offset, s, occ, v0)
        return np.minimum(np.minimum(a_lead, a_path), a_courtesy), a_path, v0, lead, dist, commit

    def _old_lane_acceleration(self, who: np.ndarray, v0: np.ndarray, occ: _Occupancy) -> np.ndarray:
        """IDM behind the leader on the lane a lane changer is still partly on, if the changer
        would close the gap before it has left that lane (+inf otherwise): overtaking is fine,
        passing a car it is still beside is not."""
        accel, changing = np.full(len(who), np.inf), np.flatnonzero(self.lc_from[who] >= 0)
        if len(changing):
            i = who[changing]
            old = self.lc_from[i]
            path = np.stack([old, np.full(len(i), -1), np.full(len(i), -1)], axis=1)
            s = self.s[i] * self.net.length[old] / self.net.length[self.lane[i]]
            lead, dist = self._leaders(i, path, self._offsets(path), s, occ)
            gap = dist - (self.length[i] + self.length[lead]) / 2
            lead_v = np.where(lead >= 0, self.v[lead], 0.0)
            # the body leaves the old lane about 70 % of the way through the change
            left = np.maximum(0.7 * self.lc_length[i] - self.lc_travel[i], 0.0) / np.maximum(self.v[i], 0.1)
            closing = np.maximum(self.v[i] - lead_v, 0.0) * left
            idm = idm_acceleration(self.v[i], v0[changing], gap, lead_v, self.idm)
            accel[changing] = np.where(gap - closing > self.idm.min_gap, np.inf, idm)
        return accel

    def _settle(self, movers: np.ndarray) -> None:
        """Cap initial speeds at the IDM equilibrium for each agent's gap, so nobody starts too close."""
        p, path, offset, s = self.idm, self.path[movers], self.offset[movers], self.s[movers]
        lead, dist = self._leaders(movers, path, offset, s, self._occupancy())
        gap = dist - (self.length[movers] + self.length[lead]) / 2
        obstacle, _ = self._obstacle_gap(path, offset, s, movers, 0)
        room = np.maximum(np.minimum(gap, obstacle) - p.min_gap, 0.0)
        cap = np.minimum(room / p.time_headway, np.sqrt(2 * p.b_comfortable * room))
        self.v[movers] = np.minimum(self.v[movers], cap)

    # -- the step
    def step(self, t: int) -> None:
        """Advance every agent by DT."""
        movers = np.flatnonzero(self.valid & ~self.static)
        occ = self._occupancy()
        self.blocked = self._blocked_connectors()
        path, offset, s = self.path[movers], self.offset[movers], self.s[movers]
        a_idm, a_path, v0, lead, dist, commit = self._accelerations(movers, path, offset, s, t, occ)
        a_idm = np.minimum(a_idm, self._old_lane_acceleration(movers, v0, occ))
        self.committed[movers] |= commit
        self.a_idm[movers], self.a_path[movers], self.v0[movers] = a_idm, a_path, v0
        self.lead[movers], self.lead_dist[movers] = lead, dist
        prev, p = self.a[movers], self.params
        floor = np.where(a_idm < -self.idm.b_comfortable, prev - p.emergency_jerk * DT, prev - p.max_jerk * DT)
        self.a[movers] = np.clip(a_idm, floor, prev + p.max_jerk * DT)
        if t % p.mobil_interval == 0:
            self._change_lanes(movers, occ, t)
        self._move(movers)
        self._spawn(occ)

    def _move(self, movers: np.ndarray) -> None:
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
        self.slope[who] = -d0 * 30 * u**2 * (1 - u) ** 2 / self.lc_length[who]
        # the body has left the old lane: stop occupying it
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
        """The nearest agent behind each point ``(lanes, s)`` (-1: none), excluding ``who``, and its
        distance: agents whose path leads there, or that still occupy part of that lane."""
        dist = _along(self.path[movers], self.offset[movers], self.s[movers], lanes, s)
        dist[(movers[:, None] == who[None, :]) | (dist > self.params.lookahead)] = np.inf
        j = np.argmin(dist, axis=0)
        best = dist[j, np.arange(len(who))]
        follower = np.where(np.isfinite(best), movers[j], -1)
        partly = (occ.lane[:, None] == lanes[None, :]) & ~(occ.projected | occ.courtesy)[:, None]
        behind = np.where(partly & (occ.agent[:, None] != who[None, :]), s[None, :] - occ.station[:, None], np.inf)
        behind[behind <= 0] = np.inf
        if len(occ.lane):
            k = np.argmin(behind, axis=0)
            closer = behind[k, np.arange(len(who))] < best
            follower = np.where(closer, occ.agent[k], follower)
            best = np.where(closer, behind[k, np.arange(len(who))], best)
        return follower, best

    def _follower_gain(self, follower: np.ndarray, dist: np.ndarray, lead: np.ndarray, lead_v: np.ndarray) -> tuple:
        """Followers' acceleration now and with ``lead`` (distance ``dist``) ahead; zeros if none."""
        has, f = follower >= 0, np.maximum(follower, 0)
        gap = dist - (self.length[f] + np.where(lead >= 0, self.length[lead], 0.0)) / 2
        new = np.minimum(idm_acceleration(self.v[f], self.v0[f], gap, lead_v, self.idm), self.a_path[f])
        return np.where(has, self.a_idm[f], 0.0), np.where(has, new, 0.0)

    def _change_lanes(self, movers: np.ndarray, occ: _Occupancy, t: int) -> None:
        """MOBIL for every agent that may change lanes now; at most one change per target lane."""
        mandatory = self._mandatory_side(movers)
        free = (self.lc_d0[movers] == 0) & (self.cooldown[movers] <= 0)
        reach = self.params.lane_change_time * self.v[movers]
        room = self.net.length[self.lane[movers]] - np.maximum(self.params.no_change_zone, reach)
        discretionary = (movers != 0) & (mandatory == 0) & (self.s[movers] < room) & (self.v[movers] > 1.0)
        cand = movers[free & (discretionary | (mandatory != 0))]
        if not len(cand):
            return
        mandatory = self._mandatory_side(cand)
        best, target = np.full(len(cand), -np.inf), np.full(len(cand), -1)
        for side, table in ((1, self.net.left), (-1, self.net.right)):
            lane = table[self.lane[cand]]
            ok = (lane >= 0) & ((mandatory == 0) | (mandatory == side))
            ok &= ~np.isfinite(self.net.leave_by[np.maximum(lane, 0)])
            incentive = np.full(len(cand), -np.inf)
            if ok.any():
                incentive[ok] = self._incentive(movers, cand[ok], lane[ok], occ, t)
            incentive += np.where(mandatory == side, self.mobil.mandatory_bonus, 0.0)
            better = incentive > best
            best, target = np.where(better, incentive, best), np.where(better, lane, target)
        go = best > self.mobil.threshold
        _, first = np.unique(target[go], return_index=True)
        for i, lane in zip(cand[go][first], target[go][first]):
            self._start_lane_change(int(i), int(lane))

    def _incentive(self, movers: np.ndarray, who: np.ndarray, lane: np.ndarray, occ: _Occupancy, t: int) -> np.ndarray:
        """MOBIL incentive of agents ``who`` to move to ``lane`` (-inf: unsafe, or gaps too small)."""
        s = self.s[who] * self.net.length[lane] / self.net.length[self.lane[who]]
        path = np.stack([lane, self._choose(lane, who), np.full(len(who), -1)], axis=1)
        path[:, 2] = self._choose(path[:, 1], who)
        a_new, _, _, lead, dist, _ = self._accelerations(who, path, self._offsets(path), s, t, occ)
        gap_lead = dist - (self.length[who] + self.length[lead]) / 2
        new_f, new_dist = self._followers(movers, who, lane, s, occ)
        a_n, a_n_new = self._follower_gain(new_f, new_dist, who, self.v[who])
        old_f, old_dist = self._followers(movers, who, self.lane[who], self.s[who], occ)
        old_lead = self.lead[who]
        a_o, a_o_new = self._follower_gain(
            old_f, old_dist + self.lead_dist[who], old_lead, np.where(old_lead >= 0, self.v[old_lead], 0.0)
        )
        incentive = mobil_incentive(self.a_idm[who], a_new, a_n, a_n_new, a_o, a_o_new, self.mobil)
        incentive[(new_f == 0) & (a_n_new < -self.params.ego_b_safe)] = -np.inf  # the human ego is not cut off
        gap_follow = new_dist - (self.length[np.maximum(new_f, 0)] + self.length[who]) / 2
        return np.where((gap_lead < self.idm.min_gap) | (gap_follow < self.idm.min_gap), -np.inf, incentive)

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
    idm: IDMParams = IDMParams(),
    mobil: MOBILParams = MOBILParams(),
    params: SimParams = SimParams(),
) -> TrafficResult:
    """Simulate ``T = len(light_state)`` steps of traffic; step 0 is the (settled) initial state.

    Args:
        network: the lanes agents drive on, with the ego's route.
        agents: initial state; agent 0 is the ego, which follows its route at lane ends and
            changes lanes only when it must (a lane drop, a lane leaving its route).
        light_state: ``[T, K]`` light states, one column per ``road_map.light_lane``.
        rng: successor choices and reserve entries.
        idm, mobil, params: model and simulator settings.

    Returns:
        World poses, speeds and validity of every agent at every step. Agents that drive off the
        end of the map become invalid for the rest of the log.
    """
    net = network
    traffic = _Traffic(net, agents, np.asarray(light_state), rng, (idm, mobil, params))
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
    pose = net.geometry.pose(np.maximum(lane, 0), station, lateral)
    pose[..., 2] += np.arctan(slope)
    pose[~valid] = 0.0
    return TrafficResult(pose=pose, speed=speed, valid=valid, lane=lane, station=np.where(valid, station, 0.0))
