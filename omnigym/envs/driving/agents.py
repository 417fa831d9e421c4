"""Background traffic during an episode: log replay, reactive IDM agents, or a learned model.

Reactive agents follow the paths they drove in the log, as NAVSIM's IDM traffic agents do, but
their speed along that path comes from IDM with the ego and the other agents as possible leaders,
so they brake for an ego that cuts in. A learned prediction model (PerlAD) plugs in through
:class:`TrafficModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.traffic import IDMParams, idm_acceleration

LEADER_LATERAL_MARGIN = 0.3
"""Extra lateral clearance (m) within which an object ahead counts as a leader."""


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


class ReactiveAgents:
    """IDM agents on their logged paths, batched over N slots of A agents.

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
        self.station = np.zeros((n, num_agents))
        self.speed = np.zeros((n, num_agents))
        self.desired_speed = np.zeros((n, num_agents))
        self.moving = np.zeros((n, num_agents), bool)  # agents that move at all in their log
        self.cursor = np.zeros((n, num_agents), np.int64)  # path index at or before the station
        self.size = np.zeros((n, num_agents, 2))

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
        self.station[slot] = 0.0
        self.station[slot, :a] = self.arc[slot, :a, start]
        self.cursor[slot] = start
        self.speed[slot] = 0.0
        self.speed[slot, :a] = np.maximum(speed[start], 0.0)
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
        rows = np.arange(self.num_slots)[:, None]
        cols = np.arange(self.path.shape[1])[None, :]
        lower = self.cursor
        upper = np.minimum(lower + 1, self.path.shape[2] - 1)
        span = self.arc[rows, cols, upper] - self.arc[rows, cols, lower]
        weight = np.where(
            span > 1e-9, (self.station - self.arc[rows, cols, lower]) / np.maximum(span, 1e-9), 0.0
        )
        weight = np.clip(weight, 0.0, 1.0)[..., None]
        xy = self.path[rows, cols, lower] * (1 - weight) + self.path[rows, cols, upper] * weight
        heading = self.path_heading[rows, cols, np.where(weight[..., 0] > 0.5, upper, lower)]
        t = np.minimum(time_index, self.path.shape[2] - 1)[:, None]
        valid = self.path_valid[rows, cols, t] & self.path_valid[rows, cols, lower]
        pose = np.concatenate([xy, heading[..., None]], axis=-1)
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
        objects = AgentFrame(ego_pose[:, None], ego_speed[:, None], np.ones((self.num_slots, 1), bool))
        sizes = np.broadcast_to(ego_size, (self.num_slots, 1, 2))
        if stops is not None and stop_size is not None:
            objects = AgentFrame(
                np.concatenate([objects.pose, stops.pose], axis=1),
                np.concatenate([objects.speed, np.zeros(stops.valid.shape)], axis=1),
                np.concatenate([objects.valid, stops.valid], axis=1),
            )
            sizes = np.concatenate([sizes, stop_size], axis=1)
        gap, leader_speed = self._leaders(frame, objects, sizes)
        accel = idm_acceleration(self.speed, self.desired_speed, gap, leader_speed, self.params)
        new_speed = np.maximum(self.speed + accel * DT, 0.0)
        # parked agents and agents at the end of their logged path stay put
        at_end = self.station >= self.arc[:, :, -1] - 1e-6
        new_speed = np.where(self.moving & ~at_end, new_speed, 0.0)
        self.station += 0.5 * (self.speed + new_speed) * DT
        self.speed = new_speed
        # keep the cursor at the last path index at or before the station (agents move < 3 samples a step)
        rows = np.arange(self.num_slots)[:, None]
        cols = np.arange(self.path.shape[1])[None, :]
        last = self.path.shape[2] - 1
        for _ in range(3):
            nxt = np.minimum(self.cursor + 1, last)
            self.cursor = np.where(self.arc[rows, cols, nxt] <= self.station, nxt, self.cursor)

    def _leaders(
        self, frame: AgentFrame, objects: AgentFrame, sizes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gap to and speed of the nearest agent or object ahead of each agent, within its lane width [N, A]."""
        pose = np.concatenate([frame.pose, objects.pose], axis=1)  # [N, A+O, 3]
        speed = np.concatenate([frame.speed, objects.speed], axis=1)
        size = np.concatenate([self.size, sizes], axis=1)
        valid = np.concatenate([frame.valid, objects.valid], axis=1)
        cos, sin = np.cos(frame.pose[..., 2])[..., None], np.sin(frame.pose[..., 2])[..., None]
        dx = pose[:, None, :, 0] - frame.pose[:, :, None, 0]  # [N, A, A+1]
        dy = pose[:, None, :, 1] - frame.pose[:, :, None, 1]
        ahead = dx * cos + dy * sin
        side = -dx * sin + dy * cos
        half_widths = 0.5 * (self.size[..., 1][..., None] + size[:, None, :, 1]) + LEADER_LATERAL_MARGIN
        gap = ahead - 0.5 * (self.size[..., 0][..., None] + size[:, None, :, 0])
        num_agents = frame.pose.shape[1]
        not_self = ~np.eye(num_agents, pose.shape[1], dtype=bool)[None]
        candidate = (ahead > 0) & (np.abs(side) < half_widths) & valid[:, None, :] & not_self
        gap = np.where(candidate, np.maximum(gap, 0.1), np.inf)
        nearest = np.argmin(gap, axis=-1)
        best_gap = np.take_along_axis(gap, nearest[..., None], axis=-1)[..., 0]
        leader_speed = np.take_along_axis(
            np.broadcast_to(speed[:, None, :], gap.shape), nearest[..., None], axis=-1
        )[..., 0]
        return best_gap, leader_speed
