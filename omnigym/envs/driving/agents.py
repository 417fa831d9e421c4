"""Background traffic during an episode: log replay, reactive IDM agents, or a learned model.

Reactive agents follow the paths they drove in the log, as NAVSIM's IDM traffic agents do, but
their speed along that path comes from IDM with the ego and the other agents as possible leaders,
so they brake for an ego that cuts in. A learned prediction model (PerlAD) plugs in through
:class:`TrafficModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.traffic import IDMParams, idm_acceleration

LEADER_LATERAL_MARGIN = 0.3
"""Extra lateral clearance (m) within which an object ahead counts as a leader."""

_CHUNK = 1 << 18
"""Floats in the pairwise leader tests of one chunk of slots: about 1 MB, to stay in cache."""
_AWAY = 1e20
"""Scale of the leader tests' margins: a candidate failing one by 1e-10 m or more scores at least
_NO_LEADER, so no real gap beats it."""
_NO_LEADER = 1e10
"""Pairwise results (m) from this on mean the candidate does not lead."""


def _row_map() -> np.ndarray:
    """The linear map from an agent's terms to its coefficients in the pairwise leader tests.

    Terms ``(cos, sin, along, across, half length, half width + margin, 1)`` of the agent's heading
    and of its position along and across that heading, through the map ``[4 * 5, 7]``, give the
    rows ``[4, 5]`` that, dotted with a candidate's ``(x, y, 1, half width, half length)``, evaluate
    -ahead, side - both half widths and -side - both half widths (the candidate leads where all
    three are negative; scaled by ``_AWAY``) and the bumper gap ahead - both half lengths.
    """
    cos, sin, along, across, length, width, one = np.eye(7)
    zero = 0.0 * one
    table = np.array(
        [
            [-cos, -sin, along, zero, zero],
            [-sin, cos, -across - width, -one, zero],
            [sin, -cos, across - width, -one, zero],
            [cos, sin, -along - length, zero, -one],
        ]
    )  # [test, candidate feature, agent term]
    table[:3] *= _AWAY
    return table.reshape(20, 7).astype(np.float32)


_ROW_MAP = _row_map()


@dataclass
class AgentFrame:
    """Background agents at one instant, batched: ``pose [N, A, 3]``, ``speed [N, A]``, ``valid [N, A]``."""

    pose: np.ndarray
    speed: np.ndarray
    valid: np.ndarray


def constant_velocity_forecast(frame: AgentFrame, times: np.ndarray) -> AgentFrame:
    """Agents ``[N, A]`` moved on at constant speed and heading for ``times`` [O] seconds: ``[N, O, A]``."""
    heading = frame.pose[..., 2]
    velocity = frame.speed[..., None] * np.stack([np.cos(heading), np.sin(heading)], axis=-1)
    xy = frame.pose[:, None, :, :2] + times[None, :, None, None] * velocity[:, None]
    pose = np.concatenate([xy, np.broadcast_to(heading[:, None, :, None], (*xy.shape[:-1], 1))], axis=-1)
    shape = pose.shape[:-1]
    return AgentFrame(
        pose, np.broadcast_to(frame.speed[:, None], shape), np.broadcast_to(frame.valid[:, None], shape)
    )


class TrafficModel(Protocol):
    """A learned traffic model moving agents conditioned on the ego (the world-model issue's hook).

    The env calls ``reset`` when slots load scenes and ``step`` once per 0.1 s with the ego's
    current pose and, in plan mode, its dense plan (world positions ``[N, 41, 2]``, else None).
    """

    def reset(self, slots: np.ndarray, frames: AgentFrame, size: np.ndarray) -> None:
        """Start slots ``slots`` from the logged agents ``frames`` (sub-batch) with sizes ``[n, A, 2]``."""

    def step(self, ego_pose: np.ndarray, ego_speed: np.ndarray, plan: np.ndarray | None) -> AgentFrame:
        """Advance all slots by 0.1 s and return the agents' new state."""


@dataclass
class TrafficLog:
    """One scene's logged traffic, given to a :class:`LogTrafficModel` when a slot loads the scene.

    Shapes: ``pose [T, A, 3]``, ``speed/valid [T, A]``, ``size [A, 2]``; the traffic-light stop
    boxes ``light_pose [K, 3]``, ``light_size [K, 2]`` and their states ``light_state [T, K]``
    (0 green, 1 yellow, 2 red); ``start`` is the log index of the episode start.
    """

    pose: np.ndarray
    speed: np.ndarray
    valid: np.ndarray
    size: np.ndarray
    light_pose: np.ndarray
    light_size: np.ndarray
    light_state: np.ndarray
    start: int


@runtime_checkable
class LogTrafficModel(TrafficModel, Protocol):
    """A traffic model that also needs the logged paths and the lights, as the IDM agents do.

    The simulator calls ``allocate`` once with its capacities and ``load_log`` before ``reset``
    whenever a slot loads a scene (models that keep agents on their logged paths need the paths).
    """

    def allocate(self, num_slots: int, num_steps: int, num_agents: int) -> None:
        """Size the per-slot state: N slots of logs up to ``num_steps`` steps and ``num_agents`` agents."""

    def load_log(self, slot: int, log: TrafficLog) -> None:
        """Give ``slot`` the logged traffic of the scene it loads."""


class ReactiveAgents:
    """IDM agents on their logged paths, batched over N slots of A agents.

    A step looks for leaders among what exists only: the agents that can move (moving in their
    log, short of their path's end) are packed into ``[N, R]`` rows and the valid agents, the ego
    and the active stop boxes into ``[N, C]`` candidate columns (R, C the most any slot has, ~85
    and ~70 where A is padded to 128), and the pairwise tests come out of float32 products over
    chunks of slots in reused buffers rather than ``[N, A, A + O]`` float64 temporaries. Path
    look-ups gather through flat indices.

    Args:
        num_slots: N.
        num_steps: the longest log a slot holds.
        num_agents: the most agents a slot holds.
        params: IDM parameters shared by all agents.
    """

    def __init__(
        self, num_slots: int, num_steps: int, num_agents: int, params: IDMParams | None = None
    ) -> None:
        self.params = params or IDMParams()
        self.num_slots = num_slots
        self._allocate(num_steps, num_agents)

    def _allocate(self, num_steps: int, num_agents: int) -> None:
        n = self.num_slots
        self.path = np.zeros((n, num_agents, num_steps, 2))  # logged positions
        self.path_heading = np.zeros((n, num_agents, num_steps))
        self.arc = np.zeros((n, num_agents, num_steps))  # cumulative arc length along the path
        self.path_valid = np.zeros((n, num_agents, num_steps), bool)
        self.arc_end = np.zeros((n, num_agents))  # the path's length: agents stop there
        self.first_valid = np.zeros((n, num_agents), np.int64)  # log index where each agent appears
        self.first_station = np.zeros((n, num_agents))
        self.first_speed = np.zeros((n, num_agents))
        self.clock = np.zeros(n, np.int64)  # log index of the agents' current state
        self.station = np.zeros((n, num_agents))
        self.speed = np.zeros((n, num_agents))
        self.desired_speed = np.zeros((n, num_agents))
        self.moving = np.zeros((n, num_agents), bool)  # agents that move at all in their log
        self.cursor = np.zeros((n, num_agents), np.int64)  # path index at or before the station
        self.size = np.zeros((n, num_agents, 2))
        # flat index of (slot, agent, step 0) in the [N, A, T] path arrays
        self._first = np.arange(n * num_agents, dtype=np.int64).reshape(n, num_agents) * num_steps
        self._buffers: dict[str, np.ndarray] = {}

    def load(
        self, slot: int, pose: np.ndarray, speed: np.ndarray, valid: np.ndarray, size: np.ndarray, start: int
    ) -> None:
        """Give ``slot`` the log of one scene, starting at log index ``start``.

        Shapes: ``pose [T, A, 3]``, ``speed/valid [T, A]``, ``size [A, 2]``.
        """
        num_steps, num_agents = valid.shape
        if num_steps > self.path.shape[2] or num_agents > self.path.shape[1]:
            raise ValueError(
                f"scene log has {num_steps} steps and {num_agents} agents; slots hold {self.capacity}"
            )
        a = num_agents
        self.path[slot] = 0.0
        self.path_valid[slot] = False
        self.path[slot, :a, :num_steps] = pose[:, :, :2].transpose(1, 0, 2)
        self.path_heading[slot, :a, :num_steps] = pose[:, :, 2].T
        self.path_valid[slot, :a, :num_steps] = valid.T
        seg = np.linalg.norm(np.diff(self.path[slot, :a, :num_steps], axis=1), axis=-1)
        seg *= self.path_valid[slot, :a, 1:num_steps] & self.path_valid[slot, :a, : num_steps - 1]
        self.arc[slot] = 0.0
        self.arc[slot, :a, 1:num_steps] = np.cumsum(seg, axis=1)
        self.arc[slot, :a, num_steps:] = self.arc[slot, :a, num_steps - 1 : num_steps]
        self.arc_end[slot] = self.arc[slot, :, -1]
        # agents that enter the log later wait at their first logged pose until their log starts
        first = np.where(valid.any(axis=0), np.argmax(valid, axis=0), num_steps - 1)
        begin = np.maximum(first, start)
        agents = np.arange(a)
        self.first_valid[slot] = 0
        self.first_valid[slot, :a] = first
        self.first_station[slot] = 0.0
        self.first_station[slot, :a] = self.arc[slot, agents, begin]
        self.first_speed[slot] = 0.0
        self.first_speed[slot, :a] = np.where(valid.any(axis=0), np.maximum(speed[begin, agents], 0.0), 0.0)
        self.clock[slot] = start
        self.station[slot] = self.first_station[slot]
        self.cursor[slot] = 0
        self.cursor[slot, :a] = begin
        self.speed[slot] = self.first_speed[slot]
        self.desired_speed[slot] = 0.0
        top_speed = speed.max(axis=0, where=valid, initial=0.0)
        self.desired_speed[slot, :a] = np.maximum(top_speed, 1.0)
        self.moving[slot] = False
        self.moving[slot, :a] = top_speed > 0.1
        self.size[slot] = 0.0
        self.size[slot, :a] = size

    @property
    def capacity(self) -> tuple[int, int]:
        """(log steps, agents) the slots can hold."""
        return self.path.shape[2], self.path.shape[1]

    def frame(self, time_index: np.ndarray) -> AgentFrame:
        """Agents' current poses, speeds and validity (valid while their log is)."""
        last = self.path.shape[2] - 1
        lower = self._first + self.cursor  # [N, A] flat indices into the [N, A, T] path arrays
        upper = self._first + np.minimum(self.cursor + 1, last)
        arc_lower = np.take(self.arc, lower)
        span = np.take(self.arc, upper) - arc_lower
        weight = np.where(span > 1e-9, (self.station - arc_lower) / np.maximum(span, 1e-9), 0.0)
        weight = np.clip(weight, 0.0, 1.0)
        # x and y gathered one at a time: [N, A] float arrays stay small enough for the heap
        path = self.path.reshape(-1)
        pose = np.empty((*self.station.shape, 3))
        for i in range(2):
            pose[..., i] = np.take(path, 2 * lower + i) * (1 - weight) + np.take(path, 2 * upper + i) * weight
        pose[..., 2] = np.take(self.path_heading, np.where(weight > 0.5, upper, lower))
        now = self._first + np.minimum(time_index, last)[:, None]
        valid = np.take(self.path_valid, now) & np.take(self.path_valid, lower)
        return AgentFrame(pose=pose, speed=self.speed.copy(), valid=valid)

    def step(
        self,
        frame: AgentFrame,
        ego_pose: np.ndarray,
        ego_speed: np.ndarray,
        ego_size: np.ndarray,
        stops: AgentFrame | None = None,
        stop_size: np.ndarray | None = None,
    ) -> None:
        """Advance every agent by one IDM step.

        Possible leaders: the ego, the other agents and ``stops`` (e.g. red-light stop boxes,
        ``pose [N, K, 3]``, ``valid`` where active, with sizes ``stop_size [N, K, 2]``).
        """
        n, a = self.station.shape
        k = stops.valid.shape[1] if stops is not None and stop_size is not None else 0
        # candidate leaders [N, A + 1 + K + 1]: the agents, the ego, the stop boxes and one never
        # valid; each as (x, y, heading, speed, length, width)
        candidates = self._buffer("candidates", (n, a + k + 2, 6), np.float64)
        valid = self._buffer("valid", (n, a + k + 2), np.bool_)
        candidates[:, :a, :3], candidates[:, :a, 3], candidates[:, :a, 4:] = (
            frame.pose,
            frame.speed,
            self.size,
        )
        candidates[:, a, :3], candidates[:, a, 3], candidates[:, a, 4:] = ego_pose, ego_speed, ego_size
        valid[:, :a], valid[:, a], valid[:, -1] = frame.valid, True, False
        candidates[:, -1] = 0.0
        if stops is not None and stop_size is not None:
            candidates[:, a + 1 : -1, :3], candidates[:, a + 1 : -1, 3] = stops.pose, 0.0
            candidates[:, a + 1 : -1, 4:], valid[:, a + 1 : -1] = stop_size, stops.valid
        # parked agents, agents at the end of their logged path and agents not yet in the log stay
        # put; the others need leaders
        self.clock += 1
        waiting = self.clock[:, None] <= self.first_valid  # not in the log yet: held at their entry
        free = self.moving & (self.station < self.arc_end - 1e-6) & ~waiting
        gap, leader_speed = self._leaders(ego_pose[:, :2], free, candidates, valid)
        accel = self.acceleration(gap, leader_speed, free)
        new_speed = np.where(free, np.maximum(self.speed + accel * DT, 0.0), 0.0)
        self.station += 0.5 * (self.speed + new_speed) * DT
        self.station = np.where(waiting, self.first_station, self.station)
        self.speed = np.where(waiting, self.first_speed, new_speed)
        # keep the cursor at the last path index at or before the station (agents move < 3 samples a step)
        last = self.path.shape[2] - 1
        for _ in range(3):
            nxt = np.minimum(self.cursor + 1, last)
            self.cursor = np.where(np.take(self.arc, self._first + nxt) <= self.station, nxt, self.cursor)

    def acceleration(self, gap: np.ndarray, leader_speed: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Acceleration ``[N, A]`` of every agent from its leader's bumper gap and speed (IDM).

        Only the ``free`` agents' values are used. Learned traffic models that keep agents on their
        logged paths override this (``omnigym.world_models.driving``).
        """
        return idm_acceleration(self.speed, self.desired_speed, gap, leader_speed, self.params)

    def _leaders(
        self, origin: np.ndarray, rows: np.ndarray, candidates: np.ndarray, valid: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gap to and speed of the nearest object ahead of each agent in ``rows``, in its lane band.

        A candidate leads an agent when its centre is ahead along the agent's heading and sideways
        within both half widths plus :data:`LEADER_LATERAL_MARGIN`; the gap is bumper to bumper
        along the heading. Only the ``[N, R]`` rows and ``[N, C]`` valid candidates are compared
        (each packed to the front per slot, R and C the most any slot has), all four tests of
        every pair coming out of float32 products of per-row coefficients and per-candidate
        features, on coordinates relative to ``origin`` (errors ~1e-5 m).

        Args:
            origin: ``[N, 2]`` a point near each slot's objects.
            rows: ``[N, A]`` agents to find leaders for; the others get a free road.
            candidates: ``[N, M, 6]`` possible leaders as (x, y, heading, speed, length, width):
                the A agents first (column a is agent a), then other objects, the last one never
                valid.
            valid: ``[N, M]`` the candidates that exist.

        Returns:
            Bumper gap (``inf`` without a leader, else at least 0.1 m) and leader speed (0 without
            one), each ``[N, A]``.
        """
        num_slots, num_agents = rows.shape
        slots = np.arange(num_slots)[:, None]
        row_order, row_count = _pack(rows)
        col_order, col_count = _pack(valid)
        num_rows, num_cols = int(row_count.max()), int(col_count.max()) + 1  # >= 1 padding column
        gap_out = np.full((num_slots, num_agents), np.inf)
        speed_out = np.zeros((num_slots, num_agents))
        if num_rows == 0:
            return gap_out, speed_out
        # rows [N, R] (past a slot's count come the first other agents: distinct, and dropped)
        agent = row_order[:, :num_rows]
        here = candidates[slots, agent]  # [N, R, 6]
        cos, sin = np.cos(here[..., 2]), np.sin(here[..., 2])
        x, y = here[..., 0] - origin[:, None, 0], here[..., 1] - origin[:, None, 1]
        terms = [cos, sin, cos * x + sin * y, cos * y - sin * x, 0.5 * here[..., 4]]
        terms += [0.5 * here[..., 5] + LEADER_LATERAL_MARGIN, np.ones_like(x)]
        coefficients = _ROW_MAP @ np.stack(terms, axis=1, dtype=np.float32)  # [N, 4 * 5, R]
        # columns [N, C]: (x, y, 1, half width, half length); padding is pushed out of every lane
        column = col_order[:, :num_cols]
        there = candidates[slots, column]  # [N, C, 6]
        width = np.where(np.arange(num_cols) < col_count[:, None], 0.5 * there[..., 5], -1e6)
        features = [there[..., 0] - origin[:, None, 0], there[..., 1] - origin[:, None, 1]]
        features += [np.ones_like(width), width, 0.5 * there[..., 4]]
        feature = np.stack(features, axis=-1, dtype=np.float32)[:, None]  # [N, 1, C, 5]
        # an agent never leads itself: the column of each row's own agent (a padding one if none)
        position = np.empty_like(col_order)
        position[slots, col_order] = np.arange(col_order.shape[1])
        own_column = position[slots, agent]
        own_column[own_column >= col_count[:, None]] = num_cols - 1
        nearest = np.empty((num_slots, num_rows), np.int64)
        best = np.empty((num_slots, num_rows), np.float32)
        chunk = max(1, _CHUNK // (4 * num_rows * num_cols))
        for first in range(0, num_slots, chunk):  # chunks of slots keep the products in cache
            part = slice(first, min(first + chunk, num_slots))
            n = part.stop - first
            product = self._buffer("product", (n, 4, num_cols, num_rows), np.float32)
            np.matmul(feature[part], coefficients[part].reshape(n, 4, 5, num_rows), out=product)
            outside, gap = product[:, 0], product[:, 3]  # [n, C, R]
            np.maximum(outside, product[:, 1], out=outside)
            np.maximum(outside, product[:, 2], out=outside)  # < 0 where the column leads the row
            outside[np.arange(n)[:, None], own_column[part], np.arange(num_rows)] = np.inf
            np.maximum(gap, outside, out=gap)
            nearest[part] = gap.argmin(axis=1)  # with overlapping objects, the most overlapped
            best[part] = np.take_along_axis(gap, nearest[part, None], axis=1)[:, 0]
        led = (best < _NO_LEADER) & (np.arange(num_rows) < row_count[:, None])
        gap_out[slots, agent] = np.where(led, np.maximum(best, 0.1), np.inf)
        speed_out[slots, agent] = np.where(led, there[slots, nearest, 3], 0.0)
        return gap_out, speed_out

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
        """A reused scratch array of ``shape``, contents undefined.

        Per-step temporaries of a few MB would otherwise be mapped and page-faulted in every step.
        """
        size = int(np.prod(shape))
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size or buffer.dtype != dtype:
            buffer = self._buffers[name] = np.empty(size, dtype)
        return buffer[:size].reshape(shape)


def _pack(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pack the true entries of ``mask [N, M]`` to the front of each row.

    Returns:
        The column order ``[N, M]`` listing each row's true entries first (in order) and then the
        others, and the true counts ``[N]``.
    """
    return np.argsort(~mask, axis=1, kind="stable"), mask.sum(axis=1)
