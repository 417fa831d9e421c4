"""Which lane the simulated traffic drives in: MOBIL lane changes and their smooth lateral motion.

Every ``mobil_interval`` steps each agent that may change lanes weighs the neighbouring lanes
with MOBIL (:func:`~omnigym.envs.driving.traffic.mobil_incentive`): its own gain against the
followers' losses, with a bonus toward the side it must take (a lane drop, a lane leaving the
ego's route). A change then moves the agent along a smooth 4 s curve across to the new lane,
while it still occupies the old one.
"""

from __future__ import annotations

import numpy as np

from omnigym.envs.driving.traffic import idm_acceleration, mobil_incentive
from omnigym.envs.driving.traffic_longitudinal import LongitudinalControl
from omnigym.envs.driving.traffic_state import Occupancy, distance_along


def _smootherstep(u: np.ndarray) -> np.ndarray:
    """Lateral progress of a lane change: zero slope and curvature at both ends (no yaw-rate jump)."""
    return u**3 * (10 - 15 * u + 6 * u**2)


class LaneChanges(LongitudinalControl):
    """MOBIL lane-change decisions and the lateral progress of the changes under way."""

    def _mandatory_side(self, who: np.ndarray) -> np.ndarray:
        lane = self.lane[who]
        side = self.net.leave_dir[lane]
        return np.where((who == 0) & (side == 0), self.net.route_dir[lane], side)

    def _followers(
        self, movers: np.ndarray, who: np.ndarray, lanes: np.ndarray, s: np.ndarray, occ: Occupancy
    ) -> tuple[np.ndarray, np.ndarray]:
        """The nearest agent behind each point ``(lanes, s)`` other than ``who`` (-1: none), and its distance.

        Followers are agents whose path leads to the point, or that still occupy part of its lane.
        """
        dist = distance_along(self.path[movers], self.offset[movers], self.s[movers], lanes, s)
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

    def _change_lanes(self, movers: np.ndarray, occ: Occupancy, t: int) -> None:
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
        self, movers: np.ndarray, who: np.ndarray, lane: np.ndarray, occ: Occupancy, t: int
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
