"""Compiled loops of the reactive traffic agents: loading logs, leader search, path advance, forecasts.

:class:`~omnigym.envs.driving.agents.ReactiveAgents` calls these once per 0.1 s step for all slots.
Each loops over slots and agents directly instead of building ``[N, A, C]`` pairwise arrays: with
them a step of 64 scenes of about 50 vehicles takes 0.35-0.46 ms more than replaying the log
(``omnigym bench driving_throughput``, docs/envs/driving.md).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from omnigym.envs.driving.traffic import idm_one

TRACK_FIELDS = 4
"""A logged path sample: x, y, heading and the arc length from the path's start."""
X, Y, HEADING, ARC = range(TRACK_FIELDS)
STATE_FIELDS = 6
"""Per-agent state rows of :func:`load_slot`: where the path ends, where and how fast the agent
starts, where it is and how fast it goes now, and its IDM desired speed."""
ARC_END, FIRST_STATION, FIRST_SPEED, STATION, SPEED, DESIRED_SPEED = range(STATE_FIELDS)
_CHUNK = 8
"""Candidates per chunk of :func:`find_leaders`' loops (a 512-bit vector of float64)."""


@njit(cache=True)
def load_slot(
    pose: np.ndarray,
    speed: np.ndarray,
    valid: np.ndarray,
    size: np.ndarray,
    start: int,
    previous_count: int,
    track: np.ndarray,
    path_valid: np.ndarray,
    state: np.ndarray,
    first_valid: np.ndarray,
    cursor: np.ndarray,
    moving: np.ndarray,
    agent_size: np.ndarray,
    agent_pose: np.ndarray,
) -> None:
    """Write one scene's log into one slot's arrays, its agents at their state at log index ``start``.

    The log: ``pose [T, A, 3]``, ``speed/valid [T, A]``, ``size [A, 2]``. The slot's arrays, ``A'``
    agents of ``T'`` steps: ``track [A', T', TRACK_FIELDS]`` and ``path_valid [T', A']``, where the
    arc length grows along consecutive valid samples only and a path past the log's end keeps its
    final arc length (agents stop there) and is invalid; ``state [STATE_FIELDS, A']`` (see
    :data:`STATE_FIELDS`); ``first_valid``, ``cursor``, ``moving`` ``[A']``, ``agent_size [A', 2]``
    and ``agent_pose [A', 3]``.
    Agents that enter the log later wait at their first logged pose until their log starts. Agents
    from A up to ``previous_count`` (a larger scene's) are cleared; padding is zero and never valid.
    """
    num_steps, num_agents = valid.shape
    capacity = track.shape[1]
    for a in range(num_agents):
        arc, first, top_speed = 0.0, -1, 0.0
        for t in range(num_steps):
            if valid[t, a]:
                first = t if first < 0 else first
                top_speed = max(top_speed, speed[t, a])
                if t > 0 and valid[t - 1, a]:
                    arc += math.hypot(pose[t, a, 0] - pose[t - 1, a, 0], pose[t, a, 1] - pose[t - 1, a, 1])
            track[a, t, X], track[a, t, Y], track[a, t, HEADING] = pose[t, a, 0], pose[t, a, 1], pose[t, a, 2]
            track[a, t, ARC] = arc
            path_valid[t, a] = valid[t, a]
        for t in range(num_steps, capacity):
            track[a, t, X] = track[a, t, Y] = track[a, t, HEADING] = 0.0
            track[a, t, ARC] = arc
            path_valid[t, a] = False
        begin = max(num_steps - 1 if first < 0 else first, start)
        first_valid[a], cursor[a] = num_steps - 1 if first < 0 else first, begin
        state[ARC_END, a], state[FIRST_STATION, a] = arc, track[a, begin, ARC]
        state[FIRST_SPEED, a] = 0.0 if first < 0 else max(speed[begin, a], 0.0)
        state[STATION, a], state[SPEED, a] = state[FIRST_STATION, a], state[FIRST_SPEED, a]
        state[DESIRED_SPEED, a] = max(top_speed, 1.0)
        moving[a] = top_speed > 0.1
        agent_size[a, 0], agent_size[a, 1] = size[a, 0], size[a, 1]
        _place(track, a, begin, state[STATION, a], agent_pose)
    for a in range(num_agents, max(num_agents, previous_count)):
        track[a] = 0.0
        path_valid[:, a] = False
        agent_pose[a] = 0.0
        state[:, a] = 0.0
        first_valid[a] = cursor[a] = 0
        moving[a] = False
        agent_size[a] = 0.0


@njit(cache=True)
def find_leaders(
    rows: np.ndarray,
    pose: np.ndarray,
    speed: np.ndarray,
    valid: np.ndarray,
    size: np.ndarray,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    ego_size: np.ndarray,
    stop_pose: np.ndarray,
    stop_valid: np.ndarray,
    stop_size: np.ndarray,
    margin: float,
    gap_out: np.ndarray,
    speed_out: np.ndarray,
) -> None:
    """Bumper gap to and speed of the nearest object ahead of each agent in ``rows``, in its lane band.

    A candidate (another valid agent, the ego, an active stop box) leads an agent when its centre is
    ahead along the agent's heading and sideways within both half widths plus ``margin``; the gap is
    bumper to bumper along the heading. With overlapping candidates the most overlapped leads; on a
    tie the first (agents, then the ego, then stop boxes) does.

    Shapes: ``rows/speed/valid [N, A]``, ``pose [N, A, 3]``, ``size [N, A, 2]`` (length, width),
    ``ego_pose [N, 3]``, ``ego_speed [N]``, ``ego_size [2]``, ``stop_pose [N, K, 3]``,
    ``stop_valid [N, K]``, ``stop_size [N, K, 2]``. Writes ``gap_out`` (``inf`` without a leader,
    else at least 0.1 m) and ``speed_out`` (0 without a leader), each ``[N, A]``.
    """
    num_slots, num_agents = rows.shape
    num_stops = stop_valid.shape[1]
    most = num_agents + 1 + num_stops + _CHUNK
    cx, cy = np.empty(most), np.empty(most)
    half_width, half_length, lead_speed = np.empty(most), np.empty(most), np.empty(most)
    owner, gaps = np.empty(most, np.int64), np.empty(most)
    for n in range(num_slots):
        count = 0  # the slot's candidates, packed
        for a in range(num_agents):
            if valid[n, a]:
                cx[count], cy[count] = pose[n, a, 0], pose[n, a, 1]
                half_length[count], half_width[count] = 0.5 * size[n, a, 0], 0.5 * size[n, a, 1]
                lead_speed[count], owner[count] = speed[n, a], a
                count += 1
        cx[count], cy[count] = ego_pose[n, 0], ego_pose[n, 1]
        half_length[count], half_width[count] = 0.5 * ego_size[0], 0.5 * ego_size[1]
        lead_speed[count], owner[count] = ego_speed[n], -1
        count += 1
        for k in range(num_stops):
            if stop_valid[n, k]:
                cx[count], cy[count] = stop_pose[n, k, 0], stop_pose[n, k, 1]
                half_length[count], half_width[count] = 0.5 * stop_size[n, k, 0], 0.5 * stop_size[n, k, 1]
                lead_speed[count], owner[count] = 0.0, -1
                count += 1
        # whole chunks, padded with candidates that never lead (no lateral band): the gap loop then
        # runs in full vectors and the minimum a chunk at a time
        while count % _CHUNK:
            cx[count] = cy[count] = half_length[count] = lead_speed[count] = 0.0
            half_width[count], owner[count] = -np.inf, -1
            count += 1
        for a in range(num_agents):
            gap_out[n, a], speed_out[n, a] = np.inf, 0.0
            if not rows[n, a]:
                continue
            x, y = pose[n, a, 0], pose[n, a, 1]
            cos, sin = math.cos(pose[n, a, 2]), math.sin(pose[n, a, 2])
            own_length, own_width = 0.5 * size[n, a, 0], 0.5 * size[n, a, 1] + margin
            _gaps(
                x, y, cos, sin, own_length, own_width, a, cx, cy, half_length, half_width, owner, count, gaps
            )
            best = _smallest(gaps, count)
            if best < np.inf:
                first = 0  # the first candidate at the smallest gap leads
                while gaps[first] != best:
                    first += 1
                gap_out[n, a], speed_out[n, a] = max(best, 0.1), lead_speed[first]


@njit(cache=True)
def _smallest(values: np.ndarray, count: int) -> float:
    """The smallest of ``values[:count]`` (``count`` a multiple of :data:`_CHUNK`), NaN ignored.

    A chunk at a time: each chunk's minimum is a short chain the processor overlaps with the next's.
    """
    best = np.inf
    for start in range(0, count, _CHUNK):
        chunk_best = np.inf
        for c in range(start, start + _CHUNK):
            chunk_best = values[c] if values[c] < chunk_best else chunk_best
        best = chunk_best if chunk_best < best else best
    return best


@njit(cache=True)
def _gaps(
    x: float,
    y: float,
    cos: float,
    sin: float,
    own_length: float,
    own_width: float,
    agent: int,
    cx: np.ndarray,
    cy: np.ndarray,
    half_length: np.ndarray,
    half_width: np.ndarray,
    owner: np.ndarray,
    count: int,
    out: np.ndarray,
) -> None:
    """Bumper gap from one agent to each of the first ``count`` candidates, ``inf`` where it does not lead.

    Branch-free, as which candidates lead is unpredictable, so the compiler can vectorise it.
    """
    for c in range(count):
        dx, dy = cx[c] - x, cy[c] - y
        ahead, side = cos * dx + sin * dy, cos * dy - sin * dx
        leads = (ahead > 0.0) & (abs(side) < own_width + half_width[c]) & (owner[c] != agent)
        out[c] = ahead - own_length - half_length[c] if leads else np.inf


@njit(cache=True)
def advance_on_paths(
    accel: np.ndarray,
    idm: tuple[float, float, float, float, float, float] | None,
    gap: np.ndarray,
    leader_speed: np.ndarray,
    desired_speed: np.ndarray,
    free: np.ndarray,
    waiting: np.ndarray,
    station: np.ndarray,
    speed: np.ndarray,
    cursor: np.ndarray,
    count: np.ndarray,
    track: np.ndarray,
    first_station: np.ndarray,
    first_speed: np.ndarray,
    dt: float,
    pose: np.ndarray,
) -> None:
    """Move every agent along its path by one step (in place), ``pose [N, A, 3]`` included.

    ``free`` agents accelerate by ``accel``, or by IDM from their leader's ``gap`` and
    ``leader_speed`` when ``idm`` holds its parameters (:func:`~omnigym.envs.driving.traffic.
    idm_params_tuple`), never below standstill; the others stop; ``waiting`` ones (not in the log
    yet) are held at their entry. ``cursor`` then follows the station: the last path index at or
    before it (an agent moves fewer than 3 samples a step; one whose station did not change keeps
    its cursor and pose). Agents from ``count [N]`` on are padding and stay as they are. Shapes
    ``[N, A]``, ``track [N, A, T, TRACK_FIELDS]``.
    """
    num_slots = station.shape[0]
    last = track.shape[2] - 1
    moved = np.empty(station.shape[1], np.bool_)
    for n in range(num_slots):
        slot_track, slot_pose = track[n], pose[n]
        for a in range(count[n]):  # padding agents never move
            before = station[n, a]
            if waiting[n, a]:
                station[n, a], speed[n, a] = first_station[n, a], first_speed[n, a]
            else:
                new_speed = 0.0
                if free[n, a]:
                    if idm is None:
                        acceleration = accel[n, a]
                    else:
                        acceleration = idm_one(
                            speed[n, a], desired_speed[n, a], gap[n, a], leader_speed[n, a], *idm
                        )
                    new_speed = max(speed[n, a] + acceleration * dt, 0.0)
                station[n, a] += 0.5 * (speed[n, a] + new_speed) * dt
                speed[n, a] = new_speed
            moved[a] = station[n, a] != before
        # a second pass over the paths: its loads (scattered over the tracks, rarely in cache) do not
        # wait behind the IDM arithmetic, so many are in flight at once; an agent that stands still
        # (parked, at its path's end, waiting to enter) keeps its cursor and pose, so its track is not read
        for a in range(count[n]):
            if not moved[a]:
                continue
            index = cursor[n, a]
            for _ in range(3):
                following = min(index + 1, last)
                if slot_track[a, following, ARC] <= station[n, a]:
                    index = following
            cursor[n, a] = index
            _place(slot_track, a, index, station[n, a], slot_pose)


@njit(cache=True)
def _place(track: np.ndarray, agent: int, lower: int, station: float, pose: np.ndarray) -> None:
    """Pose ``pose[agent]`` of an agent at ``station`` on a slot's ``track [A, T, TRACK_FIELDS]``.

    Linear between its cursor's sample ``lower`` and the next; the heading is the nearer sample's.
    """
    start, end = track[agent, lower], track[agent, min(lower + 1, track.shape[1] - 1)]
    span = end[ARC] - start[ARC]
    weight = (station - start[ARC]) / span if span > 1e-9 else 0.0
    weight = min(max(weight, 0.0), 1.0)
    pose[agent, 0] = start[X] * (1.0 - weight) + end[X] * weight
    pose[agent, 1] = start[Y] * (1.0 - weight) + end[Y] * weight
    pose[agent, 2] = end[HEADING] if weight > 0.5 else start[HEADING]


@njit(cache=True, inline="always")
def _valid_on_path(
    time_index: np.ndarray, cursor: np.ndarray, path_valid: np.ndarray, n: int, a: int
) -> bool:
    """Whether slot ``n``'s agent ``a`` has a log now (``time_index[n]``, clipped) and at its cursor."""
    now = min(time_index[n], path_valid.shape[1] - 1)
    return path_valid[n, now, a] and path_valid[n, cursor[n, a], a]


@njit(cache=True)
def valid_on_paths(
    time_index: np.ndarray, count: np.ndarray, cursor: np.ndarray, path_valid: np.ndarray, out: np.ndarray
) -> None:
    """Which agents ``out [N, A]`` are valid at ``time_index [N]``: where their log is, now and at the cursor.

    ``path_valid [N, T, A]``; padding agents (from ``count [N]`` on) never are.
    """
    num_slots = cursor.shape[0]
    for n in range(num_slots):
        for a in range(count[n]):
            out[n, a] = _valid_on_path(time_index, cursor, path_valid, n, a)
        out[n, count[n] :] = False


@njit(cache=True)
def write_frame_rows(
    time_index: np.ndarray,
    count: np.ndarray,
    cursor: np.ndarray,
    path_valid: np.ndarray,
    pose: np.ndarray,
    speed: np.ndarray,
    out_pose: np.ndarray,
    out_speed: np.ndarray,
    out_valid: np.ndarray,
) -> None:
    """Write every slot's agents into row ``time_index[n]`` of its log arrays, in one pass.

    ``pose [N, A, 3]`` and ``speed [N, A]`` as they are; validity as :func:`valid_on_paths`.
    Shapes: ``out_pose [N, T, A, 3]``, ``out_speed/out_valid [N, T, A]``. Padding agents (from
    ``count [N]`` on) are not written: a scene's load left them zero and invalid in every row, and
    the rows are rarely in cache, so every line not written is a memory access saved.
    """
    for n in range(speed.shape[0]):
        row = time_index[n]
        for a in range(count[n]):
            out_pose[n, row, a, 0], out_pose[n, row, a, 1] = pose[n, a, 0], pose[n, a, 1]
            out_pose[n, row, a, 2], out_speed[n, row, a] = pose[n, a, 2], speed[n, a]
            out_valid[n, row, a] = _valid_on_path(time_index, cursor, path_valid, n, a)


@njit(cache=True)
def forecast_constant_velocity(
    pose: np.ndarray, speed: np.ndarray, times: np.ndarray, out: np.ndarray
) -> None:
    """Poses ``out [N, O, A, 3]`` of agents ``pose [N, A, 3]`` moved on at constant speed and heading.

    In float64 whatever the inputs, as :func:`~omnigym.envs.driving.agent_checks.ttc_ok_at` forecasts.
    """
    num_slots, num_agents = speed.shape
    for n in range(num_slots):
        for a in range(num_agents):
            x, y, heading = float(pose[n, a, 0]), float(pose[n, a, 1]), float(pose[n, a, 2])
            vx, vy = float(speed[n, a]) * math.cos(heading), float(speed[n, a]) * math.sin(heading)
            for o in range(times.shape[0]):
                out[n, o, a, 0] = x + times[o] * vx
                out[n, o, a, 1] = y + times[o] * vy
                out[n, o, a, 2] = heading
