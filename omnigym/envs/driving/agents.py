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

from omnigym.envs.driving.reactive_kernels import (
    ARC_END,
    DESIRED_SPEED,
    FIRST_SPEED,
    FIRST_STATION,
    SPEED,
    STATE_FIELDS,
    STATION,
    TRACK_FIELDS,
    advance_on_paths,
    find_leaders,
    forecast_constant_velocity,
    load_slot,
    valid_on_paths,
    write_frame_rows,
)
from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.traffic import IDMParams, idm_acceleration, idm_params_tuple

LEADER_LATERAL_MARGIN = 0.3
"""Extra lateral clearance (m) within which an object ahead counts as a leader."""


_NOT_READ = np.empty((0, 0))
"""The acceleration argument of :func:`advance_on_paths` when it runs IDM itself."""


@dataclass
class AgentFrame:
    """Background agents at one instant, batched: ``pose [N, A, 3]``, ``speed [N, A]``, ``valid [N, A]``."""

    pose: np.ndarray
    speed: np.ndarray
    valid: np.ndarray


def constant_velocity_forecast(
    frame: AgentFrame, times: np.ndarray, out: np.ndarray | None = None
) -> AgentFrame:
    """Agents ``[N, A]`` moved on at constant speed and heading for ``times`` [O] seconds: ``[N, O, A]``.

    ``out`` (``[N, O, A, 3]`` float64) receives the poses when given, so a caller stepping every
    0.1 s reuses one array.
    """
    num_slots, num_agents = frame.speed.shape
    pose = np.empty((num_slots, len(times), num_agents, 3)) if out is None else out
    forecast_constant_velocity(frame.pose, frame.speed, np.asarray(times, np.float64), pose)
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

    A step looks for leaders among what exists only (the valid agents, the ego and the active stop
    boxes) for the agents that can move (moving in their log, short of their path's end), then
    advances them along their paths; the loops are compiled
    (:mod:`~omnigym.envs.driving.reactive_kernels`).

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
        # logged (x, y, heading, arc length along the path), one record per sample: an agent's look-ups
        # around its cursor share cache lines; float32 like the agents' history, so half the bytes
        # (the path advance waits on these loads: 0.16 -> 0.125 ms for 64 scenes)
        self.track = np.zeros((n, num_agents, num_steps, TRACK_FIELDS), np.float32)
        self.path_valid = np.zeros((n, num_steps, num_agents), bool)  # by step: a frame's row is contiguous
        self.pose = np.zeros((n, num_agents, 3))  # where each agent is now
        self.count = np.zeros(n, np.int64)  # agents in each slot's log (the rest is padding)
        self.first_valid = np.zeros((n, num_agents), np.int64)  # log index where each agent appears
        self.clock = np.zeros(n, np.int64)  # log index of the agents' current state
        self.moving = np.zeros((n, num_agents), bool)  # agents that move at all in their log
        self.cursor = np.zeros((n, num_agents), np.int64)  # path index at or before the station
        # per-agent floats, one [N, A] view each of a slot's rows
        # field-major, so each [N, A] view is contiguous (what the stepping kernels read)
        self.state = np.zeros((STATE_FIELDS, n, num_agents))
        self.arc_end = self.state[ARC_END]  # the path's length: agents stop there
        self.first_station, self.first_speed = self.state[FIRST_STATION], self.state[FIRST_SPEED]
        self.station, self.speed = self.state[STATION], self.state[SPEED]
        self.desired_speed = self.state[DESIRED_SPEED]
        self.size = np.zeros((n, num_agents, 2))

    def load(
        self, slot: int, pose: np.ndarray, speed: np.ndarray, valid: np.ndarray, size: np.ndarray, start: int
    ) -> None:
        """Give ``slot`` the log of one scene, starting at log index ``start``.

        Shapes: ``pose [T, A, 3]``, ``speed/valid [T, A]``, ``size [A, 2]``.
        """
        num_steps, num_agents = valid.shape
        if num_steps > self.track.shape[2] or num_agents > self.track.shape[1]:
            raise ValueError(
                f"scene log has {num_steps} steps and {num_agents} agents; slots hold {self.capacity}"
            )
        # strided logs are read in place (the kernel reads each element once)
        load_slot(
            np.asarray(pose), np.asarray(speed), np.asarray(valid, np.bool_), np.asarray(size), start,
            int(self.count[slot]), self.track[slot], self.path_valid[slot], self.state[:, slot],
            self.first_valid[slot], self.cursor[slot], self.moving[slot], self.size[slot], self.pose[slot],
        )  # fmt: skip
        self.count[slot] = num_agents
        self.clock[slot] = start

    @property
    def capacity(self) -> tuple[int, int]:
        """(log steps, agents) the slots can hold."""
        return self.track.shape[2], self.track.shape[1]

    def frame(self, time_index: np.ndarray) -> AgentFrame:
        """Agents' current poses, speeds and validity (valid while their log is)."""
        valid = np.empty(self.station.shape, np.bool_)
        valid_on_paths(np.asarray(time_index, np.int64), self.count, self.cursor, self.path_valid, valid)
        return AgentFrame(pose=self.pose.copy(), speed=self.speed.copy(), valid=valid)

    def write_frame(
        self, time_index: np.ndarray, pose: np.ndarray, speed: np.ndarray, valid: np.ndarray
    ) -> None:
        """Write :meth:`frame` into row ``time_index[n]`` of each slot's log arrays.

        Shapes: ``pose [N, T, A, 3]``, ``speed/valid [N, T, A]``. What the simulator records every
        step, without building the frame first.
        """
        write_frame_rows(
            np.asarray(time_index, np.int64), self.count, self.cursor, self.path_valid,
            self.pose, self.speed, pose, speed, valid,
        )  # fmt: skip

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
        n = self.num_slots
        if stops is None or stop_size is None:  # no stop boxes
            stops = AgentFrame(np.zeros((n, 0, 3)), np.zeros((n, 0)), np.zeros((n, 0), bool))
            stop_size = np.zeros((n, 0, 2))
        # parked agents, agents at the end of their logged path and agents not yet in the log stay
        # put; the others need leaders
        self.clock += 1
        waiting = self.clock[:, None] <= self.first_valid  # not in the log yet: held at their entry
        free = self.moving & (self.station < self.arc_end - 1e-6) & ~waiting
        gap, leader_speed = np.empty_like(self.station), np.empty_like(self.station)
        find_leaders(
            free, frame.pose, frame.speed, frame.valid, self.size,
            np.ascontiguousarray(ego_pose, np.float64), np.ascontiguousarray(ego_speed, np.float64),
            np.asarray(ego_size, np.float64), stops.pose, stops.valid, np.asarray(stop_size, np.float64),
            LEADER_LATERAL_MARGIN, gap, leader_speed,
        )  # fmt: skip
        # IDM runs inside the kernel unless a subclass (a learned model) overrides the acceleration
        if type(self).acceleration is ReactiveAgents.acceleration:
            accel, idm = _NOT_READ, idm_params_tuple(self.params)
        else:
            accel, idm = np.asarray(self.acceleration(gap, leader_speed, free), np.float64), None
        advance_on_paths(
            accel, idm, gap, leader_speed, self.desired_speed, free, waiting, self.station, self.speed,
            self.cursor, self.count, self.track, self.first_station, self.first_speed, DT, self.pose,
        )  # fmt: skip

    def acceleration(self, gap: np.ndarray, leader_speed: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Acceleration ``[N, A]`` of every agent from its leader's bumper gap and speed (IDM).

        Only the ``free`` agents' values are used. Learned traffic models that keep agents on their
        logged paths override this (``omnigym.world_models.driving``).
        """
        return idm_acceleration(self.speed, self.desired_speed, gap, leader_speed, self.params)
