"""Lane-based traffic simulation: the agents' tracks for a procedural scene's traffic log.

:func:`simulate` drives agents on a :class:`~omnigym.envs.driving.lane_network.LaneNetwork` in
Frenet coordinates: a lane, a station ``s`` along it and a lateral offset ``d`` (only while
changing lanes, along a smooth 4 s curve). Each step it finds every agent's leader on the next
three lanes of its path (the ego included), adds virtual stopped leaders (red and stoppable
yellow lights, connectors blocked by crossing traffic, lane drops), and moves everyone with IDM;
every second MOBIL decides lane changes (the models are in :mod:`omnigym.envs.driving.traffic`).
Agents that must merge synchronise with the target lane, whose followers let them in. All of it
is vectorised over agents.

The simulation is one class in layers, each in its own module: the state and what agents
perceive (:mod:`~omnigym.envs.driving.traffic_state`), accelerations
(:mod:`~omnigym.envs.driving.traffic_longitudinal`), lane changes
(:mod:`~omnigym.envs.driving.traffic_lane_changes`), and here the step that puts them together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from omnigym.envs.driving.lane_network import LaneNetwork
from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.traffic import IDMParams, MOBILParams
from omnigym.envs.driving.traffic_lane_changes import LaneChanges
from omnigym.envs.driving.traffic_state import Occupancy


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
    brake_at: np.ndarray | None = None  # [A] int step a scripted hard stop starts, -1: none
    brake_until: np.ndarray | None = None  # [A] int step it ends (the agent then drives on)
    brake_decel: np.ndarray | None = None  # [A] m/s² it brakes with, down to a standstill

    def __post_init__(self) -> None:
        n = len(self.lane)
        if self.brake_at is None:
            self.brake_at = np.full(n, -1, np.int64)
        if self.brake_until is None:
            self.brake_until = np.full(n, -1, np.int64)
        if self.brake_decel is None:
            self.brake_decel = np.zeros(n)


@dataclass
class TrafficResult:
    """Simulated tracks, ``T`` steps ``DT`` apart; invalid entries are zero."""

    pose: np.ndarray  # [T, A, 3] x, y, heading
    speed: np.ndarray  # [T, A]
    valid: np.ndarray  # [T, A] bool
    lane: np.ndarray  # [T, A] int, -1 when invalid
    station: np.ndarray  # [T, A]


# --- the simulation -------------------------------------------------------------------------------
class _Traffic(LaneChanges):
    """The simulation state (per-agent arrays) and its step, with the decisions it inherits."""

    def __init__(
        self,
        net: LaneNetwork,
        agents: TrafficAgents,
        lights: np.ndarray,
        rng: np.random.Generator,
        models: tuple[IDMParams, MOBILParams, SimParams],
    ) -> None:
        super().__init__(net, agents, lights, rng, models)
        movers = np.flatnonzero(self.valid & ~self.static)
        self._set_path(movers)
        self._settle(movers)

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

    def _spawn(self, occ: Occupancy) -> None:
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
