"""Scene descriptions for VLMs: the right facts, fixed formatting, always inside the text space."""

import numpy as np

from omnigym.envs.driving.scene import COMMAND_LEFT, COMMAND_RIGHT, COMMAND_STRAIGHT, LIGHT_RED, LIGHT_YELLOW
from omnigym.envs.driving.text import (
    LANE_LEFT,
    LANE_OTHER,
    LANE_RIGHT,
    LANE_SAME,
    TEXT_MAX_LENGTH,
    describe,
    lane_relation,
    text_space,
)


def _describe(agents=(), speeds=None, **kwargs):
    """``agents``: ego-frame (forward, left) positions, all valid unless ``agent_valid`` is given."""
    xy = np.array(agents, np.float64).reshape(-1, 2)
    defaults = dict(
        command=COMMAND_STRAIGHT,
        ego_speed=8.33,
        speed_limit=13.89,
        agent_xy=xy,
        agent_speed=np.full(len(xy), 5.0) if speeds is None else np.asarray(speeds, np.float64),
        agent_valid=np.ones(len(xy), bool),
    )
    return describe(**{**defaults, **kwargs})


def test_command_and_speeds():
    text = _describe(command=COMMAND_LEFT)
    assert text.startswith("Command: turn left.")
    assert "Speed 8.3 m/s (30 km/h), limit 13.9 m/s (50 km/h)." in text
    assert "over the limit" not in text
    assert "Command: turn right." in _describe(command=COMMAND_RIGHT)
    assert "Speed 15.0 m/s (54 km/h), limit 13.9 m/s (50 km/h), over the limit." in _describe(ego_speed=15.0)


def test_nearest_vehicle_ahead_in_the_ego_lane():
    # in lane: 23.4 m and 40 m ahead, one behind; one 20 m ahead but in the left lane
    text = _describe([(40.0, 0.2), (23.44, -0.3), (-8.0, 0.0), (20.0, 3.5)], speeds=[3.0, 7.9, 2.0, 1.0])
    assert "Vehicle ahead in lane: 23.4 m ahead at 7.9 m/s." in text
    assert "Road ahead is clear" not in text


def test_road_ahead_is_clear():
    assert "Road ahead is clear." in _describe()
    assert "Road ahead is clear." in _describe([(-8.0, 0.0), (80.0, 0.0)])  # behind, beyond range
    invalid = _describe([(10.0, 0.0)], agent_valid=np.array([False]))
    assert "Road ahead is clear." in invalid


def test_nearest_vehicles_on_the_left_and_right():
    agents = [(12.0, 3.4), (-5.2, 3.6), (2.0, -3.5), (25.0, -3.3), (0.0, 9.0)]
    text = _describe(agents, speeds=[1.0, 9.0, 6.5, 2.0, 0.0])
    assert "Left lane: vehicle 5.2 m behind at 9.0 m/s." in text
    assert "Right lane: vehicle 2.0 m ahead at 6.5 m/s." in text
    assert "Left lane: clear. Right lane: clear." in _describe([(0.0, 9.0), (50.0, 3.5)])


def test_given_lane_relations_override_the_lateral_guess():
    agents = [(10.0, 0.0), (15.0, 0.0)]
    lanes = np.array([LANE_OTHER, LANE_RIGHT])
    text = _describe(agents, agent_lane=lanes, agent_static=np.array([False, True]))
    assert "Road ahead is clear." in text
    assert "Right lane: static object 15.0 m ahead at 5.0 m/s." in text
    assert "Static object ahead in lane: 10.0 m" in _describe(agents, agent_static=np.array([True, False]))


def test_lane_relation_guess():
    xy = np.array([[5.0, 0.5], [5.0, 2.0], [5.0, -2.0], [5.0, 6.0], [5.0, -1.75]])
    assert lane_relation(xy, 3.5).tolist() == [LANE_SAME, LANE_LEFT, LANE_RIGHT, LANE_OTHER, LANE_SAME]


def test_traffic_light():
    assert "Traffic light: red, 31.0 m ahead." in _describe(light_state=LIGHT_RED, light_distance=31.04)
    assert "Traffic light: yellow, 4.5 m ahead." in _describe(light_state=LIGHT_YELLOW, light_distance=4.5)
    assert "No traffic light ahead." in _describe()
    assert "No traffic light ahead." in _describe(light_state=-1, light_distance=10.0)  # padding state


def test_route_offset_and_intersection():
    assert "Offset 0.4 m left of the route centreline." in _describe(route_offset=0.4)
    assert "Offset 1.2 m right of the route centreline." in _describe(route_offset=-1.23)
    assert "On the route centreline." in _describe(route_offset=-0.01)
    assert _describe().endswith("Not in an intersection.")
    assert _describe(in_intersection=True).endswith(" In an intersection.")


def test_fixed_formatting_and_determinism():
    text = _describe([(10.0, 0.0)], speeds=[-0.01], ego_speed=-0.02, route_offset=0.0)
    assert "-0.0" not in text and "Speed 0.0 m/s (0 km/h)" in text and "at 0.0 m/s" in text
    assert _describe([(10.0, 0.0)], ego_speed=1e9) == _describe([(10.0, 0.0)], ego_speed=1e9)
    assert "Speed 9999.9 m/s (36000 km/h)" in _describe(ego_speed=1e9)
    assert "Speed unknown, limit" in _describe(ego_speed=float("nan"))


def test_random_situations_are_always_in_the_text_space():
    space = text_space()
    assert space.max_length == TEXT_MAX_LENGTH
    rng = np.random.default_rng(0)
    longest = 0
    for trial in range(500):
        num = int(rng.integers(0, 12))
        scale = 10.0 ** rng.integers(0, 7)  # up to absurd magnitudes, clipped when printed
        xy = rng.normal(0, 1, (num, 2)) * [scale, 3.0]
        if trial % 7 == 0 and num:
            xy[0, 0] = np.nan
        text = describe(
            command=int(rng.integers(0, 3)),
            ego_speed=float(rng.normal(0, scale)),
            speed_limit=float(rng.uniform(0, 40)),
            agent_xy=xy,
            agent_speed=rng.normal(0, scale, num),
            agent_valid=rng.random(num) < 0.8,
            agent_static=rng.random(num) < 0.3,
            light_state=int(rng.integers(-1, 3)) if rng.random() < 0.7 else None,
            light_distance=float(rng.normal(0, scale)),
            route_offset=float(rng.normal(0, scale)),
            in_intersection=bool(rng.random() < 0.5),
        )
        assert text in space, text
        longest = max(longest, len(text))
    assert longest > 250  # the long cases were exercised
