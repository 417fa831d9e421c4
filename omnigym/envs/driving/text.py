"""A compact, factual text description of the driving situation, for vision-language policies.

:func:`describe` turns a handful of ego-frame facts into fixed-format sentences, for example::

    Command: turn left. Speed 8.3 m/s (30 km/h), limit 13.9 m/s (50 km/h). Vehicle ahead in lane:
    23.4 m ahead at 7.9 m/s. Left lane: vehicle 5.2 m behind at 9.0 m/s. Right lane: clear.
    Traffic light: red, 31.0 m ahead. Offset 0.4 m left of the route centreline. Not in an
    intersection.

(one line in practice). Distances are between box centres along the ego heading; numbers have one
decimal (km/h are whole) and are clipped to +-9999.9 so the text always fits :func:`text_space`.
"""

from __future__ import annotations

import math
import string

import numpy as np
from gymnasium import spaces

from omnigym.envs.driving.scene import COMMAND_NAMES, LIGHT_GREEN, LIGHT_RED, LIGHT_YELLOW

TEXT_MAX_LENGTH = 512
CHARSET = string.ascii_letters + string.digits + " .,:()/-"
"""Every character :func:`describe` can emit."""

LANE_SAME, LANE_LEFT, LANE_RIGHT, LANE_OTHER = 0, 1, 2, 3
"""Where an agent is relative to the ego lane (``agent_lane`` of :func:`describe`)."""
AHEAD_RANGE = 60.0
"""Metres ahead within which a vehicle in the ego lane is reported."""
SIDE_RANGE = 30.0
"""Metres ahead or behind within which vehicles in the neighbouring lanes are reported."""

_LIGHT_NAMES = {LIGHT_GREEN: "green", LIGHT_YELLOW: "yellow", LIGHT_RED: "red"}
_NUMBER_LIMIT = 9999.9
_CENTRED = 0.05
"""Route offsets below this many metres read as "on the route centreline"."""


def text_space() -> spaces.Text:
    """The observation space of :func:`describe`'s strings."""
    return spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=CHARSET)


def _number(value: float) -> str:
    """One decimal, clipped to +-9999.9, never "-0.0"; "unknown" for NaN or infinities."""
    value = float(value)
    if not math.isfinite(value):
        return "unknown"
    text = f"{min(max(value, -_NUMBER_LIMIT), _NUMBER_LIMIT):.1f}"
    return "0.0" if text == "-0.0" else text


def _speed(value: float) -> str:
    """``"8.3 m/s (30 km/h)"``."""
    value = float(value)
    if not math.isfinite(value):
        return "unknown"
    clipped = min(max(value, -_NUMBER_LIMIT), _NUMBER_LIMIT)
    return f"{_number(clipped)} m/s ({round(clipped * 3.6)} km/h)"


def lane_relation(agent_xy: np.ndarray, lane_width: float) -> np.ndarray:
    """Guess ``[A]`` LANE_* relations from lateral offsets, for straight-ish roads.

    Args:
        agent_xy: ``[A, 2]`` ego-frame positions (forward, left) in metres.
        lane_width: Width of the ego lane; neighbours are assumed as wide.

    Returns:
        ``[A]`` int: LANE_SAME within half a lane width of the ego's line, LANE_LEFT / LANE_RIGHT
        up to 1.5 lane widths to that side, LANE_OTHER beyond.
    """
    left = np.asarray(agent_xy, np.float64).reshape(-1, 2)[:, 1]
    half = lane_width / 2
    conditions = [
        np.abs(left) <= half,
        (left > half) & (left <= 3 * half),
        (left < -half) & (left >= -3 * half),
    ]
    return np.select(conditions, [LANE_SAME, LANE_LEFT, LANE_RIGHT], LANE_OTHER).astype(np.int64)


def _agent(forward: float, speed: float, static: bool) -> str:
    """``"vehicle 5.2 m behind at 9.0 m/s"``."""
    noun = "static object" if static else "vehicle"
    where = "ahead" if forward >= 0 else "behind"
    return f"{noun} {_number(abs(forward))} m {where} at {_number(speed)} m/s"


def _lead(forward: np.ndarray, speed: np.ndarray, static: np.ndarray, same_lane: np.ndarray) -> str:
    """The nearest agent ahead in the ego lane, or that the road ahead is clear."""
    ahead = np.flatnonzero(same_lane & (forward > 0) & (forward <= AHEAD_RANGE))
    if len(ahead) == 0:
        return "Road ahead is clear."
    i = ahead[np.argmin(forward[ahead])]
    noun = "Static object" if static[i] else "Vehicle"
    return f"{noun} ahead in lane: {_number(forward[i])} m ahead at {_number(speed[i])} m/s."


def _side(name: str, forward: np.ndarray, speed: np.ndarray, static: np.ndarray, in_lane: np.ndarray) -> str:
    """The nearest agent in one neighbouring lane, ahead or behind."""
    near = np.flatnonzero(in_lane & (np.abs(forward) <= SIDE_RANGE))
    if len(near) == 0:
        return f"{name} lane: clear."
    i = near[np.argmin(np.abs(forward[near]))]
    return f"{name} lane: {_agent(forward[i], speed[i], bool(static[i]))}."


def _light(state: int | None, distance: float | None) -> str:
    if state is None or distance is None or int(state) not in _LIGHT_NAMES:
        return "No traffic light ahead."
    return f"Traffic light: {_LIGHT_NAMES[int(state)]}, {_number(distance)} m ahead."


def _offset(route_offset: float) -> str:
    if not math.isfinite(route_offset):
        return "Offset from the route centreline unknown."
    if abs(route_offset) < _CENTRED:
        return "On the route centreline."
    side = "left" if route_offset > 0 else "right"
    return f"Offset {_number(abs(route_offset))} m {side} of the route centreline."


def describe(
    *,
    command: int,
    ego_speed: float,
    speed_limit: float,
    agent_xy: np.ndarray,
    agent_speed: np.ndarray,
    agent_valid: np.ndarray,
    agent_lane: np.ndarray | None = None,
    agent_static: np.ndarray | None = None,
    lane_width: float = 3.5,
    light_state: int | None = None,
    light_distance: float | None = None,
    route_offset: float = 0.0,
    in_intersection: bool = False,
) -> str:
    """Describe one env's situation in a few fixed-format sentences (see the module docstring).

    Args:
        command: COMMAND_LEFT / STRAIGHT / RIGHT.
        ego_speed: Ego speed in m/s.
        speed_limit: Speed limit of the ego lane in m/s.
        agent_xy: ``[A, 2]`` other agents' centres in the ego frame (forward, left), metres.
        agent_speed: ``[A]`` their speeds in m/s.
        agent_valid: ``[A]`` bool, agents present (padding False).
        agent_lane: ``[A]`` LANE_* relation of each agent to the ego lane, e.g. from lane ids of a
            map raster; ``None`` guesses it from lateral offsets (:func:`lane_relation`).
        agent_static: ``[A]`` bool, static objects (named "static object" rather than "vehicle").
        lane_width: Ego lane width in metres, for the guess when ``agent_lane`` is ``None``.
        light_state: LIGHT_* state of the next traffic light on the route, ``None`` for none.
        light_distance: Metres along the route to that light's stop line, ``None`` for none.
        route_offset: Signed lateral offset from the route centreline, positive to the left.
        in_intersection: Whether the ego is inside an intersection.

    Returns:
        At most ``TEXT_MAX_LENGTH`` characters, all in ``CHARSET``.
    """
    xy = np.asarray(agent_xy, np.float64).reshape(-1, 2)
    speed = np.asarray(agent_speed, np.float64).reshape(-1)
    valid = np.asarray(agent_valid, bool).reshape(-1) & np.all(np.isfinite(xy), axis=1)
    lane = lane_relation(xy, lane_width) if agent_lane is None else np.asarray(agent_lane).reshape(-1)
    static = np.zeros(len(xy), bool) if agent_static is None else np.asarray(agent_static, bool).reshape(-1)
    forward = xy[:, 0]
    speed_text = f"Speed {_speed(ego_speed)}, limit {_speed(speed_limit)}"
    # compare the numbers as printed, so "over the limit" never follows two equal speeds
    if (
        math.isfinite(ego_speed)
        and math.isfinite(speed_limit)
        and round(ego_speed, 1) > round(speed_limit, 1)
    ):
        speed_text += ", over the limit"
    sentences = [
        f"Command: {COMMAND_NAMES[int(command)]}.",
        speed_text + ".",
        _lead(forward, speed, static, valid & (lane == LANE_SAME)),
        _side("Left", forward, speed, static, valid & (lane == LANE_LEFT)),
        _side("Right", forward, speed, static, valid & (lane == LANE_RIGHT)),
        _light(light_state, light_distance),
        _offset(float(route_offset)),
        "In an intersection." if in_intersection else "Not in an intersection.",
    ]
    return " ".join(sentences)
