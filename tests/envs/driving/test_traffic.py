"""IDM, MOBIL, signal cycles and the lane-based traffic simulator on hand-made maps."""

from __future__ import annotations

import numpy as np
import pytest

from omnigym.envs.driving.lane_network import LaneNetwork
from omnigym.envs.driving.scene import DT, LIGHT_GREEN, LIGHT_RED, LIGHT_YELLOW, RoadMap
from omnigym.envs.driving.traffic import (
    IDMParams,
    LightCycle,
    MOBILParams,
    idm_acceleration,
    light_states,
    mobil_incentive,
)
from omnigym.envs.driving.traffic_sim import TrafficAgents, simulate


def _line(start, end, step=1.0):
    start, end = np.asarray(start, float), np.asarray(end, float)
    count = int(np.ceil(np.linalg.norm(end - start) / step)) + 1
    return start + np.linspace(0.0, 1.0, count)[:, None] * (end - start)


def _road_map(lanes, successors=(), left=(), connectors=(), lights=(), roads=None):
    """A RoadMap from polylines; ``successors`` and ``left`` are (lane, other) pairs."""
    size = max(len(p) for p in lanes)
    points = np.stack([np.concatenate([p, np.repeat(p[-1:], size - len(p), 0)]) for p in lanes])
    succ = np.full((len(lanes), 2), -1, np.int32)
    for lane, other in successors:
        succ[lane, (succ[lane] >= 0).sum()] = other
    lane_left, lane_right = np.full(len(lanes), -1, np.int32), np.full(len(lanes), -1, np.int32)
    for lane, other in left:
        lane_left[lane], lane_right[other] = other, lane
    return RoadMap(
        lane_points=points.astype(np.float32),
        lane_num_points=np.array([len(p) for p in lanes], np.int32),
        lane_width=np.full(len(lanes), 3.5, np.float32),
        lane_speed_limit=np.full(len(lanes), 12.0, np.float32),
        lane_is_connector=np.isin(np.arange(len(lanes)), connectors),
        lane_road=np.arange(len(lanes), dtype=np.int32) if roads is None else np.asarray(roads, np.int32),
        lane_left=lane_left,
        lane_right=lane_right,
        lane_successors=succ,
        intersections=np.zeros((0, 4, 2), np.float32),
        light_lane=np.asarray(lights, np.int32),
    )


def _agents(lane, station, speed, static=None, length=4.5):
    n = len(lane)
    return TrafficAgents(
        lane=np.asarray(lane),
        station=np.asarray(station, float),
        speed=np.asarray(speed, float),
        length=np.full(n, length),
        width=np.full(n, 1.9),
        speed_factor=np.ones(n),
        static=np.zeros(n, bool) if static is None else np.asarray(static),
        lateral=np.zeros(n),
    )


def _no_lights(steps):
    return np.zeros((steps, 0), np.int8)


# --- IDM and MOBIL ------------------------------------------------------------------------------
def test_idm_free_road_matches_hand_computation():
    # a = a_max (1 - (v/v0)^4) = 1.5 (1 - (10/15)^4) = 1.5 * 65/81
    assert idm_acceleration(10.0, 15.0, np.inf, 0.0) == pytest.approx(1.5 * 65 / 81)
    assert idm_acceleration(0.0, 15.0, np.inf, 0.0) == pytest.approx(1.5)
    assert idm_acceleration(15.0, 15.0, np.inf, 0.0) == pytest.approx(0.0)


def test_idm_close_leader_matches_hand_computation():
    # s* = 2 + 10*1.5 + 10*(10-8)/(2 sqrt(1.5*2)) = 22.7735; a = 1.5 (1 - (10/15)^4 - (22.7735/20)^2)
    assert idm_acceleration(10.0, 15.0, 20.0, 8.0) == pytest.approx(-0.74124, abs=1e-4)
    # a stopped car 3 m behind a stopped one: 1.5 (1 - (2/3)^2) = 0.8333
    assert idm_acceleration(0.0, 15.0, 3.0, 0.0) == pytest.approx(1.5 * 5 / 9)
    # overlapping: braking is capped at b_max
    assert idm_acceleration(10.0, 15.0, -1.0, 0.0, IDMParams(b_max=6.0)) == pytest.approx(-6.0)


def test_idm_is_elementwise_over_agents():
    a = idm_acceleration(np.array([10.0, 10.0]), 15.0, np.array([np.inf, 20.0]), np.array([0.0, 8.0]))
    np.testing.assert_allclose(a, [1.5 * 65 / 81, -0.74124], atol=1e-4)


def test_mobil_incentive_and_safety():
    # ã_c - a_c + p (ã_n - a_n + ã_o - a_o) = 0.5 + 1 + 0.2 (-0.8 + 0.6) = 1.46
    inc = mobil_incentive(-1.0, 0.5, 0.3, -0.5, -0.2, 0.4, MOBILParams())
    assert inc == pytest.approx(1.46)
    assert mobil_incentive(-1.0, 0.5, 0.3, -4.5, -0.2, 0.4) == -np.inf  # new follower brakes > b_safe
    assert mobil_incentive(-1.0, -4.5, 0.3, 0.0, -0.2, 0.4) == -np.inf  # the changer itself would
    # politeness: the same own gain is not worth a large loss for the new follower
    assert mobil_incentive(0.0, 0.3, 0.0, -2.0, 0.0, 0.0) < MOBILParams().threshold


def test_light_cycle_gives_one_approach_at_a_time():
    cycle = LightCycle(green=8.0, yellow=3.0, all_red=1.0)
    steps = int(48 / DT)
    states = light_states(steps, np.array([0, 0, 1, 2, 3]), 4, offset=0.0, cycle=cycle)
    assert states.shape == (steps, 5) and states.dtype == np.int8
    assert np.array_equal(states[:, 0], states[:, 1])  # lights of one approach share state
    not_red = (states[:, 1:] != LIGHT_RED).sum(axis=1)
    assert not_red.max() == 1 and (not_red == 0).sum() == 4 * round(1.0 / DT)  # all-red once per phase
    column = states[:, 0]
    assert (column == LIGHT_GREEN).sum() == 80 and (column == LIGHT_YELLOW).sum() == 30
    assert column[0] == LIGHT_GREEN and column[80] == LIGHT_YELLOW and column[110] == LIGHT_RED
    assert states[120, 2] == LIGHT_GREEN  # the next approach, 12 s in
    shifted = light_states(steps, np.array([0]), 4, offset=12.0, cycle=cycle)
    assert shifted[0, 0] == LIGHT_RED and shifted[int(36 / DT), 0] == LIGHT_GREEN


# --- the simulator -------------------------------------------------------------------------------
def _signalised_approach():
    """Lane 0 (100 m) -> connector 1 (20 m, one light) -> lane 2 (100 m)."""
    lanes = [_line((0, 0), (100, 0)), _line((100, 0), (120, 0)), _line((120, 0), (220, 0))]
    return _road_map(lanes, successors=[(0, 1), (1, 2)], connectors=[1], lights=[1])


@pytest.mark.parametrize("state", [LIGHT_RED, LIGHT_GREEN])
def test_agents_stop_before_a_red_light_and_pass_a_green_one(state):
    road_map = _signalised_approach()
    steps = 200
    result = simulate(
        LaneNetwork(road_map, np.array([0, 1, 2])),
        _agents([0, 0], [40.0, 10.0], [10.0, 10.0]),
        np.full((steps, 1), state, np.int8),
        np.random.default_rng(0),
    )
    front = np.where(result.lane == 0, result.station + 2.25, np.inf)
    if state == LIGHT_RED:
        assert np.all(result.lane == 0)  # nobody enters the connector
        assert np.all(front <= 100.0)
        assert result.speed[-1, 0] < 0.05 and front[-1, 0] > 95.0  # stopped just before the line
        assert result.station[-1, 0] - result.station[-1, 1] > 4.5 + 1.0  # the follower queues behind
    else:
        assert (result.lane[:, 0] == 2).any() and (result.lane[:, 1] == 2).any()


def test_follower_stops_behind_a_parked_car_without_touching_it():
    road_map = _road_map([_line((0, 0), (300, 0))])
    steps = 300
    agents = _agents([0, 0], [10.0, 150.0], [12.0, 0.0], static=[False, True])
    result = simulate(
        LaneNetwork(road_map, np.array([0])), agents, _no_lights(steps), np.random.default_rng(0)
    )
    gap = result.station[:, 1] - result.station[:, 0] - 4.5
    assert gap.min() > 1.0 and result.speed[-1, 0] < 0.05
    assert gap[-1] == pytest.approx(IDMParams().min_gap, abs=1.0)
    np.testing.assert_allclose(result.pose[:, 1], result.pose[:1, 1].repeat(steps, 0))  # it never moves
    assert np.all(np.diff(result.station[:, 0]) >= 0) and np.all(result.speed >= 0)


def test_scripted_hard_stop_brakes_to_a_standstill_waits_and_drives_on():
    # agent 1 (lead, 30 m ahead) brakes at 4 m/s² from step 10 to 80; agent 0 follows with IDM
    road_map = _road_map([_line((0, 0), (400, 0))])
    steps, decel = 160, 4.0
    agents = _agents([0, 0], [10.0, 40.0], [10.0, 10.0])
    agents.brake_at, agents.brake_until = np.array([-1, 10]), np.array([-1, 80])
    agents.brake_decel = np.array([0.0, decel])
    result = simulate(
        LaneNetwork(road_map, np.array([0])), agents, _no_lights(steps), np.random.default_rng(0)
    )
    lead = result.speed[:, 1]
    assert lead[10] == pytest.approx(lead[9], abs=0.2)  # nothing before the brake
    # the applied deceleration reaches the scripted one within the jerk limit (25 m/s³) and holds it
    decel_applied = -np.diff(lead[11:30]) / DT
    assert decel_applied.max() == pytest.approx(decel, abs=1e-6)
    stopped = np.flatnonzero(lead < 1e-6)
    assert stopped[0] < 10 + 10.0 / decel / DT + 5  # at rest about v/a after the brake starts
    assert np.all(lead[stopped[0] : 80] < 1e-6)  # waits until brake_until
    assert lead[-1] > 3.0  # then drives on
    gap = result.station[:, 1] - result.station[:, 0] - 4.5
    assert gap.min() > 1.0  # the IDM follower stops in time


def test_agents_without_a_scripted_stop_are_unchanged_by_the_fields():
    road_map = _road_map([_line((0, 0), (400, 0))])
    net, lights = LaneNetwork(road_map, np.array([0])), _no_lights(100)
    plain = simulate(net, _agents([0, 0], [10.0, 40.0], [10.0, 8.0]), lights, np.random.default_rng(0))
    agents = _agents([0, 0], [10.0, 40.0], [10.0, 8.0])
    agents.brake_decel = np.array([6.0, 6.0])  # no brake_at: never used
    scripted = simulate(net, agents, lights, np.random.default_rng(0))
    np.testing.assert_array_equal(plain.pose, scripted.pose)


def _two_lanes():
    """Lane 0 (left) and lane 1 (right), 400 m, one road block."""
    return _road_map([_line((0, 0), (400, 0)), _line((0, -3.5), (400, -3.5))], left=[(1, 0)], roads=[0, 0])


def test_mobil_overtakes_a_parked_car_through_the_free_lane():
    steps = 250
    # the ego drives away ahead on lane 0; agent 1 meets a parked car (agent 2) on lane 1
    agents = _agents([0, 1, 1], [300.0, 20.0, 150.0], [12.0, 12.0, 0.0], static=[False, False, True])
    result = simulate(
        LaneNetwork(_two_lanes(), np.array([0])), agents, _no_lights(steps), np.random.default_rng(0)
    )
    assert result.lane[0, 1] == 1 and result.lane[-1, 1] == 0 and result.station[-1, 1] > 160.0
    change = np.flatnonzero(result.lane[:, 1] == 0)[0]
    changing = slice(change, change + 20)
    # lateral motion: the pose leaves lane 1 smoothly (heading turns left, then back), no jumps
    y, heading = result.pose[:, 1, 1], result.pose[:, 1, 2]
    assert y[change] == pytest.approx(-3.5, abs=0.05) and y[-1] == pytest.approx(0.0, abs=0.01)
    assert heading[changing].max() > 0.02 and abs(heading[-1]) < 1e-6
    step = np.linalg.norm(np.diff(result.pose[:, 1, :2], axis=0), axis=1)
    assert np.all(step <= result.speed[:-1, 1] * DT + 0.1)
    assert (result.station[:, 2] - result.station[:, 1])[result.lane[:, 1] == 1].min() > 4.5


def test_mobil_waits_for_a_safe_gap():
    steps = 250
    # as above, but agent 3 drives beside agent 1 on lane 0: changing at once would cut it off
    agents = _agents([0, 1, 1, 0], [300.0, 20.0, 150.0, 22.0], [12.0, 12.0, 0.0, 12.0], static=[0, 0, 1, 0])
    result = simulate(
        LaneNetwork(_two_lanes(), np.array([0])), agents, _no_lights(steps), np.random.default_rng(0)
    )
    change = np.flatnonzero(result.lane[:, 1] == 0)[0]
    assert change > 0
    gap = np.abs(result.station[change, 3] - result.station[change, 1]) - 4.5
    assert gap >= IDMParams().min_gap  # it changed only into a gap behind (or ahead of) agent 3
    for other in (2, 3):
        same_lane = result.lane[:, 1] == result.lane[:, other]
        assert np.abs(result.station[:, other] - result.station[:, 1])[same_lane].min() > 4.5


def test_agents_leaving_the_map_become_invalid_and_reserves_replace_them():
    road_map = _road_map([_line((0, 0), (200, 0))])
    steps = 150
    agents = _agents([0, 0, -1], [100.0, 170.0, 0.0], [0.0, 12.0, 0.0], static=[True, False, False])
    result = simulate(
        LaneNetwork(road_map, np.array([0])), agents, _no_lights(steps), np.random.default_rng(0)
    )
    left = np.flatnonzero(~result.valid[:, 1])[0]
    assert 10 < left < 60 and not result.valid[left:, 1].any()
    assert np.all(result.pose[left:, 1] == 0) and np.all(result.speed[left:, 1] == 0)
    entered = np.flatnonzero(result.valid[:, 2])[0]
    assert entered == left and result.valid[entered:, 2].all()  # the reserve takes its place at once
    assert result.station[entered, 2] == pytest.approx(2.25)  # whole box on the entry lane


def test_simulation_is_reproducible_from_its_generator():
    road_map = _signalised_approach()
    agents = _agents([0, 0, 0], [10.0, 40.0, 70.0], [8.0, 9.0, 10.0])
    lights = light_states(120, np.array([0]), 4, offset=0.0)
    runs = [
        simulate(LaneNetwork(road_map, np.array([0, 1, 2])), agents, lights, np.random.default_rng(5))
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].pose, runs[1].pose)


def test_agents_leave_a_lane_drop_before_it_ends():
    # lane 1 runs beside lane 0, then tapers into it; both continue as lane 2
    taper = np.linspace(0.0, 1.0, 51)[1:, None]
    ramp = np.concatenate(
        [
            _line((0, -3.5), (150, -3.5)),
            np.hstack([150 + 50 * taper, -3.5 + 3.5 * taper**2 * (3 - 2 * taper)]),
        ]
    )
    lanes = [_line((0, 0), (200, 0)), ramp, _line((200, 0), (400, 0))]
    road_map = _road_map(lanes, successors=[(0, 2), (1, 2)], left=[(1, 0)], roads=[0, 0, 1])
    network = LaneNetwork(road_map, np.array([0, 2]))
    assert (
        network.leave_dir[1] == 1 and 150.0 <= network.leave_by[1] <= 156.0 and np.isinf(network.leave_by[0])
    )
    steps = 250
    # agent 1 must merge; agent 2 drives beside it on lane 0, so it has to find a gap
    agents = _agents([2, 1, 0], [150.0, 30.0, 28.0], [12.0, 11.0, 11.0])
    result = simulate(network, agents, _no_lights(steps), np.random.default_rng(0))
    on_drop = result.lane[:, 1] == 1
    assert not on_drop[-1] and (result.lane[:, 1] == 0).any()
    assert np.all(result.station[on_drop, 1] + 2.25 <= network.leave_by[1])
    same_lane = result.lane[:, 1] == result.lane[:, 2]
    assert np.abs(result.station[:, 2] - result.station[:, 1])[same_lane].min() > 4.5
