"""The ego's kinematic bicycle, frame conversions and the plan tracker, checked against hand numbers."""

import math

import numpy as np
import pytest

from omnigym.envs.driving.controller import PlanTracker, TrackerConfig, densify_plan
from omnigym.envs.driving.dynamics import (
    BicycleLimits,
    EgoState,
    bicycle_step,
    to_ego_frame,
    to_world_frame,
    wrap_angle,
)
from omnigym.envs.driving.scene import DT, EGO_WHEEL_BASE, HORIZON_STEPS

LIMITS = BicycleLimits()


def _ego(speed: float = 0.0, pose: tuple = (0.0, 0.0, 0.0), steer: float = 0.0) -> EgoState:
    ego = EgoState.zeros(1)
    ego.pose[0] = pose
    ego.speed[0] = speed
    ego.steer[0] = steer
    return ego


def _step(ego: EgoState, accel: float, steer_rate: float = 0.0) -> None:
    bicycle_step(ego, np.array([accel]), np.array([steer_rate]), LIMITS)


# --- bicycle_step ---------------------------------------------------------------------------------
def test_limits_are_a_passenger_car():
    assert (LIMITS.max_accel, LIMITS.max_decel, LIMITS.max_steer) == (3.0, 6.0, 0.6)
    assert LIMITS.max_steer_rate == 1.0 and LIMITS.max_speed == 25.0
    assert LIMITS.wheel_base == EGO_WHEEL_BASE == 3.09
    assert DT == 0.1


def test_straight_at_constant_speed_advances_v_dt_per_step():
    ego = _ego(speed=10.0)
    for k in range(1, 11):
        _step(ego, 0.0)
        np.testing.assert_allclose(ego.pose[0], [k * 1.0, 0.0, 0.0], atol=1e-12)
    assert ego.speed[0] == 10.0 and ego.accel[0] == 0.0 and ego.yaw_rate[0] == 0.0


def test_straight_along_a_rotated_heading():
    ego = _ego(speed=5.0, pose=(2.0, -1.0, math.pi / 2))  # facing north
    for _ in range(4):
        _step(ego, 0.0)
    np.testing.assert_allclose(ego.pose[0], [2.0, 1.0, math.pi / 2], atol=1e-12)  # 4 x 0.5 m north


def test_throttle_is_clipped_to_max_accel():
    ego = _ego(speed=10.0)
    _step(ego, 100.0)
    assert ego.speed[0] == pytest.approx(10.3)  # 10 + 3 m/s² x 0.1 s
    assert ego.accel[0] == pytest.approx(3.0)
    assert ego.pose[0, 0] == pytest.approx(0.5 * (10.0 + 10.3) * 0.1)  # mean speed x dt


def test_braking_is_clipped_to_max_decel():
    ego = _ego(speed=10.0)
    _step(ego, -100.0)
    assert ego.speed[0] == pytest.approx(9.4)  # 10 - 6 m/s² x 0.1 s
    assert ego.accel[0] == pytest.approx(-6.0)
    assert ego.pose[0, 0] == pytest.approx(0.97)


def test_speed_never_goes_negative_and_braking_at_rest_holds():
    ego = _ego(speed=0.3)
    _step(ego, -6.0)
    assert ego.speed[0] == 0.0
    assert ego.accel[0] == pytest.approx(-3.0)  # only 0.3 m/s could be shed in 0.1 s
    assert ego.pose[0, 0] == pytest.approx(0.5 * 0.3 * 0.1)
    for _ in range(5):
        _step(ego, -6.0)
    assert ego.speed[0] == 0.0 and ego.accel[0] == 0.0
    assert ego.pose[0, 0] == pytest.approx(0.015)  # no reversing


def test_speed_is_capped_at_max_speed():
    ego = _ego(speed=24.9)
    _step(ego, 3.0)
    assert ego.speed[0] == pytest.approx(25.0)
    assert ego.accel[0] == pytest.approx(1.0)  # what was actually applied
    _step(ego, 3.0)
    assert ego.speed[0] == 25.0 and ego.accel[0] == 0.0


def test_steering_rate_and_angle_are_clipped():
    ego = _ego(speed=5.0)
    _step(ego, 0.0, steer_rate=5.0)
    assert ego.steer[0] == pytest.approx(0.1)  # 1 rad/s x 0.1 s
    ego.steer[0] = 0.55
    _step(ego, 0.0, steer_rate=1.0)
    assert ego.steer[0] == pytest.approx(0.6)  # max_steer
    _step(ego, 0.0, steer_rate=-0.5)
    assert ego.steer[0] == pytest.approx(0.55)


def test_constant_steer_drives_a_circle_of_radius_wheelbase_over_tan_steer():
    steer, speed, steps = 0.3, 5.0, 100
    ego = _ego(speed=speed, steer=steer)
    radius = EGO_WHEEL_BASE / math.tan(steer)  # 9.97 m
    omega = speed * math.tan(steer) / EGO_WHEEL_BASE  # 0.50 rad/s
    centre = np.array([0.0, radius])  # left turn from the origin, heading +x
    for _ in range(steps):
        _step(ego, 0.0)
        # the midpoint rule's chords are (omega dt)²/24 = 1e-4 too long: a 1 mm larger circle
        assert np.linalg.norm(ego.pose[0, :2] - centre) == pytest.approx(radius, abs=3e-3)
    assert ego.yaw_rate[0] == pytest.approx(omega)
    assert ego.pose[0, 2] == pytest.approx(float(wrap_angle(np.array(omega * steps * DT))), abs=1e-9)
    # the arc length driven is v t: the angle swept around the centre is omega t
    swept = math.atan2(ego.pose[0, 0], radius - ego.pose[0, 1])
    assert swept == pytest.approx(float(wrap_angle(np.array(omega * steps * DT))), abs=1e-3)


def test_right_turn_is_a_mirror_image():
    left, right = _ego(speed=8.0, steer=0.2), _ego(speed=8.0, steer=-0.2)
    for _ in range(30):
        _step(left, 0.0)
        _step(right, 0.0)
    np.testing.assert_allclose(right.pose[0], left.pose[0] * [1, -1, -1], atol=1e-12)


def test_batched_egos_step_independently():
    ego = EgoState.zeros(3)
    ego.speed[:] = [0.0, 10.0, 20.0]
    bicycle_step(ego, np.array([3.0, -6.0, 0.0]), np.zeros(3), LIMITS)
    np.testing.assert_allclose(ego.speed, [0.3, 9.4, 20.0])
    np.testing.assert_allclose(ego.pose[:, 0], [0.015, 0.97, 2.0])


# --- angles and frames ----------------------------------------------------------------------------
def test_wrap_angle():
    angles = np.array([0.0, math.pi, -math.pi, 1.5 * math.pi, -1.5 * math.pi, 2 * math.pi + 0.1, 7.0])
    expected = [0.0, -math.pi, -math.pi, -0.5 * math.pi, 0.5 * math.pi, 0.1, 7.0 - 2 * math.pi]
    np.testing.assert_allclose(wrap_angle(angles), expected, atol=1e-12)


def test_to_ego_frame_hand_example():
    ego = np.array([[1.0, 2.0, math.pi / 2]])  # at (1, 2) facing north: forward is +y, left is -x
    points = np.array([[[1.0, 5.0], [0.0, 2.0], [2.0, 2.0], [1.0, 0.0]]])
    expected = [[[3.0, 0.0], [0.0, 1.0], [0.0, -1.0], [-2.0, 0.0]]]
    np.testing.assert_allclose(to_ego_frame(points, ego), expected, atol=1e-12)
    np.testing.assert_allclose(to_world_frame(np.array(expected), ego), points, atol=1e-12)


def test_frames_round_trip_for_batches_of_any_rank():
    rng = np.random.default_rng(0)
    poses = np.concatenate([rng.normal(0, 50, (3, 2)), rng.uniform(-np.pi, np.pi, (3, 1))], axis=1)
    for shape in [(3, 2), (3, 5, 2), (3, 4, 6, 2)]:
        points = rng.normal(0, 30, shape)
        local = to_ego_frame(points, poses)
        assert local.shape == shape
        np.testing.assert_allclose(to_world_frame(local, poses), points, atol=1e-9)
        # distances to the ego are frame independent
        centre = poses[(slice(None),) + (None,) * (len(shape) - 2) + (slice(0, 2),)]
        np.testing.assert_allclose(
            np.linalg.norm(local, axis=-1), np.linalg.norm(points - centre, axis=-1), atol=1e-9
        )


# --- plans and tracking ---------------------------------------------------------------------------
def _straight_plan(speed: float, lateral: float = 0.0) -> np.ndarray:
    """A plan [1, 8, 3] straight ahead at ``speed``, offset ``lateral`` (ego frame)."""
    plan = np.zeros((1, 8, 3))
    plan[0, :, 0] = speed * 0.5 * np.arange(1, 9)
    plan[0, :, 1] = lateral
    return plan


def test_densify_straight_plan_gives_41_points_one_metre_apart_along_the_heading():
    heading = 0.7
    ego = np.array([[3.0, -4.0, heading]])
    dense = densify_plan(_straight_plan(10.0), ego)
    assert dense.shape == (1, HORIZON_STEPS + 1, 2) == (1, 41, 2)
    k = np.arange(41)
    expected = np.stack([3.0 + k * math.cos(heading), -4.0 + k * math.sin(heading)], axis=1)
    np.testing.assert_allclose(dense[0], expected, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(np.diff(dense[0], axis=0), axis=1), 1.0)


def test_densify_interpolates_linearly_between_poses():
    plan = np.zeros((1, 8, 3))
    plan[0, :, 1] = 2.0 * np.arange(1, 9)  # 2 m to the left per pose, ego facing +x at the origin
    dense = densify_plan(plan, np.zeros((1, 3)))
    np.testing.assert_allclose(dense[0, :, 0], 0.0, atol=1e-12)
    np.testing.assert_allclose(dense[0, :, 1], 0.4 * np.arange(41), atol=1e-12)  # 2 m per 5 samples


def test_tracker_first_command_hand_numbers():
    tracker = PlanTracker(LIMITS, TrackerConfig())
    tracker.resize(1)
    ego = _ego(speed=0.0)
    tracker.set_plan(np.array([0]), densify_plan(_straight_plan(10.0), ego.pose))
    np.testing.assert_allclose(tracker.speed[0], 10.0)
    np.testing.assert_allclose(tracker.arc[0], np.arange(41.0))
    accel, steer_rate = tracker.command(ego)
    assert accel[0] == pytest.approx(2.0 * (10.0 - 0.0))  # speed_gain x error, no feed-forward
    assert steer_rate[0] == pytest.approx(0.0)
    assert tracker.step[0] == 1


def test_tracker_pure_pursuit_hand_numbers():
    tracker = PlanTracker(LIMITS, TrackerConfig())
    tracker.resize(1)
    ego = _ego(speed=0.0)
    dense = np.stack([np.arange(41.0), np.full(41, 0.3)], axis=1)[None]  # the line y = 0.3
    tracker.set_plan(np.array([0]), dense)
    _, steer_rate = tracker.command(ego)
    # look-ahead 2.5 m (the minimum) from the nearest plan point (0, 0.3): goal (2.5, 0.3)
    curvature = 2 * 0.3 / (2.5**2 + 0.3**2)
    wanted = math.atan(curvature * EGO_WHEEL_BASE)
    assert steer_rate[0] == pytest.approx(wanted / 0.15)


def test_tracker_steers_to_a_plan_ending_within_the_look_ahead_as_if_it_were_a_look_ahead_away():
    # a stopping plan: 0.5 m ahead and 0.1 m to the left at its end (arc > 0.1 m, so it steers)
    tracker = PlanTracker(LIMITS, TrackerConfig())
    tracker.resize(1)
    ego = _ego(speed=0.5)
    dense = np.stack([np.linspace(0.0, 0.5, 41), np.linspace(0.0, 0.1, 41)], axis=1)[None]
    tracker.set_plan(np.array([0]), dense)
    _, steer_rate = tracker.command(ego)
    # goal: the plan's end (0.5, 0.1); its distance is floored at the 2.5 m look-ahead
    wanted = math.atan(2 * 0.1 / 2.5**2 * EGO_WHEEL_BASE)
    assert steer_rate[0] == pytest.approx(wanted / 0.15)
    assert abs(wanted) < 0.2 * LIMITS.max_steer  # not the wheel at its stop (2 y / d² = 0.77 1/m)


def test_tracker_brakes_and_holds_the_wheel_for_a_plan_that_stays_put():
    tracker = PlanTracker(LIMITS, TrackerConfig())
    tracker.resize(1)
    ego = _ego(speed=5.0, steer=0.2)
    tracker.set_plan(np.array([0]), densify_plan(np.zeros((1, 8, 3)), ego.pose))
    accel, steer_rate = tracker.command(ego)
    assert accel[0] == pytest.approx(2.0 * (0.0 - 5.0))
    assert steer_rate[0] == 0.0


def _track(ego: EgoState, plan_of, seconds: float) -> list[tuple[float, np.ndarray, float]]:
    """Re-plan every 0.5 s (as the env does) and track; returns (t, pose, speed) after each step."""
    tracker = PlanTracker(LIMITS, TrackerConfig())
    tracker.resize(1)
    out = []
    for k in range(round(seconds / DT)):
        if k % 5 == 0:
            tracker.set_plan(np.array([0]), densify_plan(plan_of(ego), ego.pose))
        accel, steer_rate = tracker.command(ego)
        bicycle_step(ego, accel, steer_rate, LIMITS)
        assert abs(ego.steer[0]) <= LIMITS.max_steer + 1e-12
        assert -LIMITS.max_decel - 1e-9 <= ego.accel[0] <= LIMITS.max_accel + 1e-9
        out.append(((k + 1) * DT, ego.pose[0].copy(), float(ego.speed[0])))
    return out


def test_tracking_a_straight_plan_from_rest_reaches_plan_speed():
    trace = _track(_ego(speed=0.0), lambda ego: _straight_plan(10.0), seconds=8.0)
    for t, pose, speed in trace:
        if t <= 2.8 + 1e-9:  # throttle saturated while 2 (10 - v) >= 3, i.e. until v = 8.5 m/s
            assert speed == pytest.approx(3.0 * t)
        assert speed <= 10.0 + 1e-9  # no overshoot
        assert pose[1] == 0.0 and pose[2] == 0.0  # no lateral error at all on a straight plan
    assert trace[-1][2] == pytest.approx(10.0, abs=0.01)  # error decays as exp(-2 t) after saturation


def test_tracking_a_laterally_offset_plan_converges():
    def plan_of(ego: EgoState) -> np.ndarray:
        # the world line y = 2 (heading +x) at 10 m/s, as a plan in the ego's frame
        times = 0.5 * np.arange(1, 9)
        world = np.stack([ego.pose[0, 0] + 10.0 * times, np.full(8, 2.0)], axis=1)[None]
        plan = np.zeros((1, 8, 3))
        plan[..., :2] = to_ego_frame(world, ego.pose)
        return plan

    trace = _track(_ego(speed=10.0), plan_of, seconds=10.0)
    lateral = np.array([pose[1] for _, pose, _ in trace])
    assert lateral[9] > 0.2  # moving toward the line within 1 s
    assert lateral.max() < 2.3  # little overshoot
    assert abs(lateral[-1] - 2.0) < 0.05
    assert abs(trace[-1][1][2]) < 0.01  # heading back along the line
    assert trace[-1][2] == pytest.approx(10.0, abs=0.1)
