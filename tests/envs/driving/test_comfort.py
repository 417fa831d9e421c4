"""Comfort from poses: the six nuPlan bounds and the two-frame extended comfort, on exact motions."""

import numpy as np
import pytest

from omnigym.envs.driving import comfort

DT = 0.1


def straight(speed, accel=0.0, jerk=0.0, steps=41):
    """Poses [T, 3] along +x with constant jerk: x = v t + a t^2 / 2 + j t^3 / 6."""
    t = np.arange(steps) * DT
    x = speed * t + accel * t**2 / 2 + jerk * t**3 / 6
    return np.stack([x, np.zeros(steps), np.zeros(steps)], -1)


def arc(speed, yaw_rate, steps=41, start=0.0):
    """Poses [T, 3] on a circle at constant speed and yaw rate, heading along the motion."""
    heading = start + yaw_rate * np.arange(steps) * DT
    radius = speed / yaw_rate
    x = radius * (np.sin(heading) - np.sin(start))
    y = radius * (np.cos(start) - np.cos(heading))
    return np.stack([x, y, heading], -1)


def test_longitudinal_acceleration_bounds():
    poses = np.stack([straight(25.0, -6.0), straight(10.0, -1.0), straight(2.0, 1.0), straight(1.0, 3.0)])
    k = comfort.kinematics(poses)
    np.testing.assert_allclose(
        k.lon_accel, np.array([-6.0, -1.0, 1.0, 3.0])[:, None].repeat(41, 1), atol=1e-6
    )
    np.testing.assert_allclose(k.lat_accel, 0.0, atol=1e-9)
    # a hard brake (-6 < -4.05) and a hard launch (3 > 2.4) break the bounds at every step
    violations = comfort.comfort_violations(poses)
    assert violations.all(axis=1).tolist() == [True, False, False, True]
    assert violations.any(axis=1).tolist() == [True, False, False, True]
    assert comfort.is_comfortable(poses).tolist() == [False, True, True, False]


def test_lateral_acceleration_and_yaw_rate():
    # v * omega: 10 * 0.6 = 6 > 4.89 fails; 10 * 0.3 = 3 passes; at 2 m/s, 1.2 rad/s > 0.95 fails
    poses = np.stack([arc(10.0, 0.6), arc(10.0, 0.3), arc(2.0, 1.2), arc(2.0, -0.9, start=2.0)])
    k = comfort.kinematics(poses)
    np.testing.assert_allclose(k.lat_accel[:, 20], [6.0, 3.0, 2.4, -1.8], rtol=2e-3)
    np.testing.assert_allclose(k.yaw_rate, np.array([0.6, 0.3, 1.2, -0.9])[:, None].repeat(41, 1), atol=1e-9)
    np.testing.assert_allclose(k.yaw_accel, 0.0, atol=1e-9)
    assert comfort.is_comfortable(poses).tolist() == [False, True, False, True]


def test_jerk_bound():
    # acceleration ramping at 5 m/s^3 (> 4.13) from -10 to 10 m/s^2: at t = 2 s only the jerk is out
    ramp = straight(10.0, -10.0, 5.0)
    k = comfort.kinematics(ramp[None])
    np.testing.assert_allclose(k.lon_jerk[0, 12:29], 5.0, atol=1e-6)
    assert abs(k.lon_accel[0, 20]) < 0.3 and comfort.comfort_violations(ramp[None])[0, 20]
    # 2 m/s^3 from -2 to 2 m/s^2 over 2 s is comfortable throughout
    gentle = straight(10.0, -2.0, 2.0, steps=21)[None]
    np.testing.assert_allclose(comfort.kinematics(gentle).lon_jerk, 2.0, atol=0.3)
    assert not comfort.comfort_violations(gentle).any()


def test_short_sequences_clip_the_windows():
    # windows shrink to the sequence (odd), so short tracks still read exact accelerations
    for steps in (3, 4, 5, 7):
        poses = np.stack([straight(20.0, -6.0, steps=steps), straight(5.0, 1.0, steps=steps)])
        np.testing.assert_allclose(comfort.kinematics(poses).lon_accel[:, steps // 2], [-6.0, 1.0], atol=1e-6)
        assert comfort.is_comfortable(poses).tolist() == [False, True]
    # too short to show an acceleration: nothing to violate
    for steps in (0, 1, 2):
        assert comfort.comfort_violations(np.zeros((2, steps, 3))).shape == (2, steps)
        assert comfort.is_comfortable(straight(5.0, -9.0, steps=steps)[None]).tolist() == [True]


def test_savgol_window_clipping():
    y = 3.0 * np.arange(4) * DT  # a line sampled 4 times: window 15 clips to 3
    np.testing.assert_allclose(comfort.savgol(y, 15, 2, deriv=1), 3.0)
    np.testing.assert_allclose(comfort.savgol(y[:2], 15, 3, deriv=2), 0.0)


def test_two_frame_extended_comfort():
    plan_a = np.stack([straight(10.0)] * 4 + [straight(1.0)] * 2)
    start = plan_a[:, 5]  # the later plan starts 0.5 s on
    plan_b = np.stack(
        [
            straight(10.0),  # the same motion: consistent
            straight(10.0, -2.0),  # now braking: RMS acceleration difference 2 > 0.7
            straight(10.0, 0.0, 0.1),  # a gentle jerk 0.1: RMS differences below every threshold
            arc(10.0, 0.05),  # a turn: yaw rate 0.05 < 0.1 but lateral acceleration 0.5 m/s^2 passes
            arc(1.0, 0.2),  # yaw rate 0.2 > 0.1 at a tiny lateral acceleration
            arc(1.0, 0.05),
        ]
    )
    plan_b[..., :2] += start[:, None, :2]
    ec = comfort.two_frame_extended_comfort(plan_a, plan_b, 5)
    assert ec.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="offset_steps"):
        comfort.two_frame_extended_comfort(plan_a, plan_b, 41)


@pytest.mark.parametrize("length", [15, 8, 4])
def test_last_step_check_matches_the_full_check(length):
    # random drives from smooth to jerky: the last-step shortcut must agree with the full check
    rng = np.random.default_rng(1)
    for scale in (0.05, 0.3, 1.0):
        speed = 10 + np.cumsum(rng.normal(0, scale, (300, length)), axis=1)
        heading = np.cumsum(rng.normal(0, scale * 0.05, (300, length)), axis=1)
        x = np.cumsum(speed * np.cos(heading) * 0.1, axis=1)
        y = np.cumsum(speed * np.sin(heading) * 0.1, axis=1)
        poses = np.stack([x, y, heading], axis=-1)
        full = comfort.comfort_violations(poses)[:, -1]
        assert 0 < full.mean() < 1 or scale != 0.3  # the middle scale mixes both outcomes
        np.testing.assert_array_equal(comfort.last_step_uncomfortable(poses), full)
