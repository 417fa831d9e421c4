"""The ego against the other agents: at-fault collisions (NC) and time to collision (TTC).

NAVSIM's two agent-based sub-metrics of :mod:`~omnigym.envs.driving.metrics`, each at two scales:
one step of many egos (:func:`collisions`, :func:`ttc_ok`, compiled per ego as ``collisions_at``
and ``ttc_ok_at``, which :mod:`~omnigym.envs.driving.step_checks` shares) and whole trajectories
(:func:`no_at_fault_collision`, :func:`ttc_trajectory`, vectorised over every step, for
:func:`~omnigym.envs.driving.trajectory_scores.score_trajectories`). Both decide each object at
its first contact, as NAVSIM's scorer does.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from omnigym.envs.driving.geometry import advance, bearing, box_overlap, obb_overlap
from omnigym.envs.driving.metrics import (
    AHEAD_ANGLE,
    BEHIND_ANGLE,
    STOPPED_SPEED,
    TTC_OFFSETS,
    TTC_STOPPED_SPEED,
    AreaFlags,
    ScoringWorld,
    StepState,
)
from omnigym.envs.driving.scene import AGENT_STATIC


# --- shared by both ---------------------------------------------------------------------------------
def _per_query(array: np.ndarray, extra: int) -> np.ndarray:
    """``[B, X...]`` -> ``[B, 1 x extra, X...]`` to broadcast against extra batch axes."""
    return array.reshape(array.shape[:1] + (1,) * extra + array.shape[1:])


Hits = tuple[np.ndarray, ...]
"""Indices (as ``np.nonzero`` gives them) of the ego-object overlaps in a ``[B, ..., A]`` array."""


def _first_per_object(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``[n]`` bool: True at the earliest (lowest ``order``) of the hits sharing a ``key``."""
    sort = np.lexsort((order, key))
    sorted_key = key[sort]
    starts = np.ones(len(key), bool)
    starts[1:] = sorted_key[1:] != sorted_key[:-1]
    first = np.zeros(len(key), bool)
    first[sort[starts]] = True
    return first


@njit(cache=True)
def _bearing(x: float, y: float, cos: float, sin: float, px: float, py: float) -> float:
    """:func:`~omnigym.envs.driving.geometry.bearing` of a point from one pose (heading as cos, sin)."""
    dx, dy = px - x, py - y
    return np.arctan2(abs(cos * dy - sin * dx), cos * dx + sin * dy)


# --- at-fault collisions (NC) -----------------------------------------------------------------------
def _contacts(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    area: AreaFlags,
) -> tuple[Hits, np.ndarray]:
    """Ego-agent overlaps in ``[B, ..., A]`` and the NC value each would cost, ``[n]``."""
    extra = ego_pose.ndim - 2
    ego_size = np.asarray(world.ego_size, dtype=np.float64)
    hit = obb_overlap(ego_pose[..., None, :], ego_size, agent_pose, _per_query(world.agent_size, extra))
    index = np.nonzero(hit & agent_valid)
    if not index[0].size:
        return index, np.ones(0)
    at_ego, agent = index[:-1], (index[0], index[-1])
    ego, pose, kind = ego_pose[at_ego], agent_pose[index], world.agent_type[agent]
    # get_collision_type, in its order: stopped ego, stopped track, track behind, front edge, lateral
    ego_stopped = np.abs(ego_speed[at_ego]) <= STOPPED_SPEED
    track_stopped = (np.abs(agent_speed[index]) <= STOPPED_SPEED) | (kind == AGENT_STATIC)  # is_track_stopped
    behind = bearing(advance(ego, -world.ego_rear_axle), pose[:, :2]) > BEHIND_ANGLE
    front_edge = np.array([0.0, ego_size[1]])
    front = obb_overlap(advance(ego, ego_size[0] / 2), front_edge, pose, world.agent_size[agent])
    lateral_fault = area.multiple_lanes[at_ego] | area.non_drivable[at_ego]
    # _calculate_no_at_fault_collision: front or stopped-track hits, laterals off a single lane
    at_fault = ~ego_stopped & (track_stopped | (~behind & (front | lateral_fault)))
    return index, np.where(at_fault, np.where(kind == AGENT_STATIC, 0.5, 0.0), 1.0)


def collisions(
    world: ScoringWorld, step: StepState, area: AreaFlags, ignore: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """NC at one step: at-fault collisions of the ego box with agent boxes.

    Args:
        world: footprints and types.
        step: the state at this step.
        area: :func:`~omnigym.envs.driving.map_checks.ego_area` at this step.
        ignore: ``[B, A]`` bool, objects collided with earlier (skipped, as NAVSIM's
            ``collided_track_ids``); the caller accumulates ``ignore |= colliding``.

    Returns:
        ``(nc [B], colliding [B, A])``: 0 for an at-fault collision with an agent, 0.5 with a
        static object, else 1; and every new (not ignored) overlap, at fault or not.
    """
    nc = np.ones(len(ignore))
    colliding = np.zeros(ignore.shape, bool)
    _step_collisions(
        np.asarray(step.ego_pose, dtype=np.float64),
        np.asarray(step.ego_speed, dtype=np.float64),
        np.asarray(world.ego_size, dtype=np.float64),
        float(world.ego_rear_axle),
        np.asarray(step.agent_pose, dtype=np.float64),
        np.asarray(step.agent_speed, dtype=np.float64),
        step.agent_valid,
        np.asarray(world.agent_size, dtype=np.float64),
        world.agent_type,
        area.multiple_lanes | area.non_drivable,
        ignore,
        nc,
        colliding,
    )
    return nc, colliding


@njit  # the per-step reference form (tests): off the env's path, so not cached on disk
def _step_collisions(
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    ego_size: np.ndarray,
    rear_axle: float,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    agent_size: np.ndarray,
    agent_type: np.ndarray,
    lateral_fault: np.ndarray,
    ignore: np.ndarray,
    nc: np.ndarray,
    colliding: np.ndarray,
) -> None:
    """:func:`collisions` for one step, writing ``nc`` and ``colliding``."""
    for n in range(len(ego_pose)):
        nc[n] = collisions_at(
            ego_pose[n],
            ego_speed[n],
            ego_size,
            rear_axle,
            agent_pose[n],
            agent_speed[n],
            agent_valid[n],
            agent_size[n],
            agent_type[n],
            lateral_fault[n],
            ignore[n],
            colliding[n],
        )


@njit(cache=True)
def collisions_at(
    ego_pose: np.ndarray,
    ego_speed: float,
    ego_size: np.ndarray,
    rear_axle: float,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    agent_size: np.ndarray,
    agent_type: np.ndarray,
    lateral_fault: bool,
    ignore: np.ndarray,
    colliding: np.ndarray,
) -> float:
    """NC of one ego ``[3]`` against agents ``[A, ...]``; marks new overlaps in ``colliding [A]``."""
    x, y, heading = ego_pose[0], ego_pose[1], ego_pose[2]
    length, width = ego_size[0], ego_size[1]
    cos, sin = np.cos(heading), np.sin(heading)
    ego_stopped = abs(ego_speed) <= STOPPED_SPEED
    rear_x, rear_y = x - rear_axle * cos, y - rear_axle * sin
    front_x, front_y = x + length / 2 * cos, y + length / 2 * sin  # the front edge's centre
    nc = 1.0
    for a in range(len(agent_pose)):
        if not agent_valid[a] or ignore[a]:
            continue
        ax, ay, ah = agent_pose[a, 0], agent_pose[a, 1], agent_pose[a, 2]
        al, aw = agent_size[a, 0], agent_size[a, 1]
        if not box_overlap(x, y, heading, length, width, ax, ay, ah, al, aw):
            continue
        colliding[a] = True
        # get_collision_type, in its order: stopped ego, stopped track, track behind, front edge, lateral
        if ego_stopped:
            continue
        static = agent_type[a] == AGENT_STATIC
        at_fault = static or abs(agent_speed[a]) <= STOPPED_SPEED  # is_track_stopped
        behind = _bearing(rear_x, rear_y, cos, sin, ax, ay) > BEHIND_ANGLE
        if not at_fault and not behind:
            front = box_overlap(front_x, front_y, heading, 0.0, width, ax, ay, ah, al, aw)
            at_fault = lateral_fault or front
        if at_fault:  # _calculate_no_at_fault_collision
            nc = min(nc, 0.5 if static else 0.0)
    return nc


def no_at_fault_collision(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    area: AreaFlags,
    ignore: np.ndarray,
) -> np.ndarray:
    """NC ``[B]``: the worst first contact with each object over the horizon."""
    (rows, steps, agents), penalty = _contacts(
        world, ego_pose, ego_speed, agent_pose, agent_speed, agent_valid, area
    )
    # an object is typed at its first contact and ignored afterwards (collided_track_ids)
    new = ~ignore[rows, agents]
    rows, steps, agents, penalty = rows[new], steps[new], agents[new], penalty[new]
    first = _first_per_object(rows * ignore.shape[1] + agents, steps)
    nc = np.ones(len(ignore))
    np.minimum.at(nc, rows[first], penalty[first])
    return nc


# --- time to collision (TTC) -----------------------------------------------------------------------
def _ttc_hits(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    area: AreaFlags,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    skip: np.ndarray,
    offsets: np.ndarray,
) -> tuple[Hits, np.ndarray]:
    """Overlaps of the projected ego with agents in ``[B, ..., O, A]``, and whether each counts."""
    extra = ego_pose.ndim - 2
    # _calculate_ttc: the box slides along its heading at constant speed, heading fixed
    projected = advance(ego_pose[..., None, :], ego_speed[..., None] * offsets)  # [B, ..., O, 3]
    size = _per_query(world.agent_size, extra + 1)
    hit = obb_overlap(projected[..., None, :], np.asarray(world.ego_size), agent_pose, size) & agent_valid
    index = np.nonzero(hit)
    if not index[0].size:
        return index, np.zeros(0, bool)
    at_ego = index[:-2]
    # skipped: a (nearly) stopped ego, objects ignored
    keep = (np.abs(ego_speed[at_ego]) >= TTC_STOPPED_SPEED) & ~skip[index[0], index[-1]]
    index, at_ego = tuple(i[keep] for i in index), tuple(i[keep] for i in at_ego)
    # counts if ahead, or (in multiple lanes / off-road / intersection) and not behind
    angle = bearing(advance(ego_pose[at_ego], -world.ego_rear_axle), agent_pose[index][:, :2])
    special = area.multiple_lanes[at_ego] | area.non_drivable[at_ego] | area.in_intersection[at_ego]
    return index, (angle < AHEAD_ANGLE) | (special & (angle <= BEHIND_ANGLE))


def ttc_ok(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    area: AreaFlags,
    agent_pose_at_offsets: np.ndarray,
    agent_valid_at_offsets: np.ndarray,
    ignore: np.ndarray,
    *,
    tolerated: np.ndarray | None = None,
    time_index: np.ndarray | None = None,
) -> np.ndarray:
    """TTC at one step: no object within reach of the ego over the next second.

    The ego box, moved along its heading at constant speed by each of
    :data:`~omnigym.envs.driving.metrics.TTC_OFFSETS`, is tested against the agents at those
    times. An overlap is skipped when the ego is (nearly) stopped or the object is ignored; it
    counts when the object is ahead (within 30 degrees of the heading, seen from the rear axle),
    or when the ego is in multiple lanes, off-road or in an intersection and the object is not
    behind (beyond 150 degrees). NAVSIM decides each object at its first overlap and then
    tolerates one that did not count for the rest of the horizon: pass the same ``tolerated``
    array every step to carry that (it is updated in place).

    Args:
        world: footprints.
        ego_pose: ``[B, 3]`` at this step.
        ego_speed: ``[B]``.
        area: :func:`~omnigym.envs.driving.map_checks.ego_area` at this step.
        agent_pose_at_offsets: ``[B, O, A, 3]`` agents at this step + each offset; with
            ``time_index``, ``[B, T, A, 3]`` agents over time (e.g. a whole log).
        agent_valid_at_offsets: ``[B, O, A]`` (``[B, T, A]`` with ``time_index``).
        ignore: ``[B, A]`` objects already collided with.
        tolerated: optional ``[B, A]`` bool, updated in place.
        time_index: optional ``[B, O]`` rows of the agent arrays at each offset (saves gathering
            them from a log); by default row ``o`` is offset ``o``.

    Returns:
        ``[B]`` bool, True where TTC is within bound.
    """
    num, offsets = len(ignore), np.asarray(TTC_OFFSETS)
    if time_index is None:
        time_index = np.broadcast_to(np.arange(len(offsets)), (num, len(offsets)))
    ok = np.ones(num, bool)
    _step_ttc(
        np.asarray(ego_pose, dtype=np.float64),
        np.asarray(ego_speed, dtype=np.float64),
        np.asarray(world.ego_size, dtype=np.float64),
        float(world.ego_rear_axle),
        offsets,
        np.asarray(agent_pose_at_offsets, dtype=np.float64),
        agent_valid_at_offsets,
        np.asarray(time_index, dtype=np.int64),
        np.asarray(world.agent_size, dtype=np.float64),
        area.multiple_lanes | area.non_drivable | area.in_intersection,
        ignore,
        np.zeros(ignore.shape, bool) if tolerated is None else tolerated,
        ok,
    )
    return ok


@njit  # the per-step reference form (tests): off the env's path, so not cached on disk
def _step_ttc(
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    ego_size: np.ndarray,
    rear_axle: float,
    offsets: np.ndarray,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    time_index: np.ndarray,
    agent_size: np.ndarray,
    special: np.ndarray,
    ignore: np.ndarray,
    tolerated: np.ndarray,
    ok: np.ndarray,
) -> None:
    """:func:`ttc_ok` for one step, writing ``ok`` and ``tolerated``."""
    for n in range(len(ego_pose)):
        ok[n] = ttc_ok_at(
            ego_pose[n],
            ego_speed[n],
            ego_size,
            rear_axle,
            offsets,
            agent_pose[n],
            agent_valid[n],
            time_index[n],
            agent_size[n],
            special[n],
            ignore[n],
            tolerated[n],
        )


@njit(cache=True)
def ttc_ok_at(
    ego_pose: np.ndarray,
    ego_speed: float,
    ego_size: np.ndarray,
    rear_axle: float,
    offsets: np.ndarray,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    time_index: np.ndarray,
    agent_size: np.ndarray,
    special: bool,
    ignore: np.ndarray,
    tolerated: np.ndarray,
    max_travel: float = np.inf,
    agent_speed: np.ndarray | None = None,
) -> bool:
    """TTC of one ego ``[3]`` against agents over time ``[T, A, ...]`` read at ``time_index [O]``.

    ``max_travel`` bounds how far any agent valid at the first offset moves by the others: one
    farther than that from everywhere the projected ego box reaches is skipped unread. With
    ``agent_speed [T, A]``, every offset reads row ``time_index[0]`` and moves the agent on at that
    speed and heading, as :func:`~omnigym.envs.driving.agents.constant_velocity_forecast` does
    (reactive traffic: only the agents the ego can reach are forecast); ``max_travel`` then comes
    from those speeds.
    """
    if abs(ego_speed) < TTC_STOPPED_SPEED:  # _calculate_ttc: a (nearly) stopped ego is never at fault
        return True
    x, y, heading = ego_pose[0], ego_pose[1], ego_pose[2]
    length, width = ego_size[0], ego_size[1]
    cos, sin = np.cos(heading), np.sin(heading)
    rear_x, rear_y = x - rear_axle * cos, y - rear_axle * sin
    sweep = ego_speed * offsets[-1]  # the ego's centre moves along [0, sweep] on its heading
    low, high = min(sweep, 0.0), max(sweep, 0.0)
    first = time_index[0]
    if agent_speed is not None:  # the fastest valid agent bounds every forecast's travel
        fastest = 0.0
        for a in range(agent_pose.shape[1]):
            if agent_valid[first, a]:
                fastest = max(fastest, abs(float(agent_speed[first, a])))
        max_travel = fastest * offsets[-1]
    ok = True
    for a in range(agent_pose.shape[1]):
        if ignore[a] or tolerated[a]:
            continue
        if max_travel < np.inf and agent_valid[first, a]:
            # half-diagonals are at most half of length + width: a cheap, safe reach
            reach = (length + width + agent_size[a, 0] + agent_size[a, 1]) / 2 + max_travel + 1e-6
            dx, dy = agent_pose[first, a, 0] - x, agent_pose[first, a, 1] - y
            along = min(max(dx * cos + dy * sin, low), high)
            gap_x, gap_y = dx - along * cos, dy - along * sin
            if gap_x * gap_x + gap_y * gap_y > reach * reach:
                continue
        for o in range(len(offsets)):  # each object is decided at its first overlap
            t = first if agent_speed is not None else time_index[o]
            if not agent_valid[t, a]:
                continue
            ax, ay, ah = float(agent_pose[t, a, 0]), float(agent_pose[t, a, 1]), float(agent_pose[t, a, 2])
            if agent_speed is not None:
                speed = float(agent_speed[t, a])
                ax, ay = ax + offsets[o] * (speed * math.cos(ah)), ay + offsets[o] * (speed * math.sin(ah))
            reach = ego_speed * offsets[o]
            if not box_overlap(
                x + reach * cos, y + reach * sin, heading, length, width,
                ax, ay, ah, agent_size[a, 0], agent_size[a, 1],
            ):  # fmt: skip
                continue
            angle = _bearing(rear_x, rear_y, cos, sin, ax, ay)
            if angle < AHEAD_ANGLE or (special and angle <= BEHIND_ANGLE):
                ok = False
            else:
                tolerated[a] = True
            break
    return ok


def ttc_trajectory(
    world: ScoringWorld,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    agent_pose: np.ndarray,
    agent_valid: np.ndarray,
    area: AreaFlags,
    ignore: np.ndarray,
    dt: float,
) -> np.ndarray:
    """TTC ``[B]``: start steps whose every offset stays inside the trajectory (NAVSIM v2)."""
    offset_steps = np.round(np.asarray(TTC_OFFSETS) / dt).astype(int)
    num_starts = ego_pose.shape[1] - int(offset_steps.max())
    if num_starts <= 0:
        return np.ones(ego_pose.shape[0])
    future = np.arange(num_starts)[:, None] + offset_steps  # [S, O]
    index, counts = _ttc_hits(
        world,
        ego_pose[:, :num_starts],
        ego_speed[:, :num_starts],
        area.at(np.s_[:, :num_starts]),
        agent_pose[:, future],
        agent_valid[:, future],
        ignore,
        offset_steps * dt,
    )
    # each object is decided at its first overlap in NAVSIM's visiting order (step, then offset)
    rows, start, offset, agents = index
    first = _first_per_object(rows * ignore.shape[1] + agents, start * len(offset_steps) + offset)
    ttc = np.ones(len(ignore))
    ttc[rows[first & counts]] = 0.0
    return ttc
