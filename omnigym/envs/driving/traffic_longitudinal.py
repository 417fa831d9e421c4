"""How fast the simulated traffic drives: each agent's acceleration along its path.

IDM behind the leader, with virtual stopped leaders where an agent must stop (red and stoppable
yellow lights, connectors blocked by crossing traffic, lane drops), scripted hard stops (the hard
split's braking lead vehicles), the constant deceleration
that reaches a slower lane ahead at its speed, courtesy to agents waiting to merge in, and the
leaders of the side lane that lane changers and merging agents must also respect. Built on the
perception of :class:`~omnigym.envs.driving.traffic_state.TrafficState`; the driver model itself
is :func:`~omnigym.envs.driving.traffic.idm_acceleration`.
"""

from __future__ import annotations

import numpy as np

from omnigym.envs.driving.scene import LIGHT_GREEN, LIGHT_RED, LIGHT_YELLOW
from omnigym.envs.driving.traffic import idm_acceleration
from omnigym.envs.driving.traffic_state import Occupancy, TrafficState


class LongitudinalControl(TrafficState):
    """The accelerations of agents placed on paths: IDM, stop points, slower lanes, courtesy."""

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
        occ: Occupancy,
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
        occ: Occupancy,
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
        # scripted hard stops (a lead vehicle braking for something the others cannot see)
        braking = (self.brake_at[who] >= 0) & (t >= self.brake_at[who]) & (t < self.brake_until[who])
        a_path = np.where(braking, np.minimum(a_path, -self.brake_decel[who]), a_path)
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
