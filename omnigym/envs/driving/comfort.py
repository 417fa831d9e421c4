"""Ride comfort from ego poses: NAVSIM's six nuPlan bounds (C, HC) and two-frame extended comfort (EC).

Follows ``pdm_comfort_metrics.py`` in autonomousvision/navsim. NAVSIM reads velocities and
accelerations from its simulated ego states; omnigym scores pose sequences, so accelerations come
from second differences of the positions, rotated into the ego frame, and then go through NAVSIM's
Savitzky-Golay chain. Two consequences (see ``docs/envs/driving.md``):

- the lateral acceleration is the real one (v^2 * curvature); NAVSIM's kinematic bicycle model
  reports zero lateral acceleration for simulated plans, so there the lateral bound never fires;
- a step change of acceleration shows up one sample late (a second difference is centred).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.signal import savgol_filter

from omnigym.envs.driving.scene import DT

# nuPlan's comfort bounds (pdm_comfort_metrics.py); a value must lie strictly inside
MIN_LON_ACCEL = -4.05  # m/s^2
MAX_LON_ACCEL = 2.40  # m/s^2
MAX_ABS_LAT_ACCEL = 4.89  # m/s^2
MAX_ABS_JERK = 8.37  # m/s^3, of the acceleration magnitude
MAX_ABS_LON_JERK = 4.13  # m/s^3
MAX_ABS_YAW_ACCEL = 1.93  # rad/s^2
MAX_ABS_YAW_RATE = 0.95  # rad/s

# Savitzky-Golay windows (samples) and polynomial orders
ACCEL_WINDOW = 8  # smoothing of the accelerations (even, as NAVSIM's default)
DERIV_WINDOW = 15  # jerk, yaw rate and yaw acceleration
POLY_ORDER = 2
YAW_ACCEL_POLY_ORDER = 3

# two-frame extended comfort: largest RMS difference between consecutive plans
EC_MAX_ACCEL = 0.7  # m/s^2
EC_MAX_JERK = 0.5  # m/s^3
EC_MAX_YAW_RATE = 0.1  # rad/s
EC_MAX_YAW_ACCEL = 0.1  # rad/s^2


@dataclass
class Kinematics:
    """Smoothed motion signals of pose sequences, each ``[B, T]``."""

    lon_accel: np.ndarray  # m/s^2 along the heading
    lat_accel: np.ndarray  # m/s^2 to the left
    accel: np.ndarray  # m/s^2, magnitude
    jerk: np.ndarray  # m/s^3, time derivative of the magnitude
    lon_jerk: np.ndarray  # m/s^3
    yaw_rate: np.ndarray  # rad/s
    yaw_accel: np.ndarray  # rad/s^2


def savgol(y: np.ndarray, window: int, polyorder: int, deriv: int = 0, dt: float = DT) -> np.ndarray:
    """Savitzky-Golay smoothing or derivative along the last axis, for any sequence length.

    ``scipy.signal.savgol_filter`` (``mode="interp"``), applied as a cached ``[T, T]`` matrix: the
    filter is linear, and a matrix product is far cheaper than refitting every call. A window
    longer than the sequence is clipped to its length, minus one if that is even (so a clipped
    window is odd); the order drops below the window if needed. A sequence too short to show the
    ``deriv``-th derivative (fewer than ``deriv + 1`` samples) reads as zero.

    Args:
        y: ``[..., T]`` samples every ``dt`` seconds.
        window: nominal window length in samples.
        polyorder: nominal polynomial order.
        deriv: derivative order (0 smooths).
        dt: sample spacing in seconds.

    Returns:
        ``[..., T]``.
    """
    return np.asarray(y, dtype=np.float64) @ _savgol_matrix(y.shape[-1], window, polyorder, deriv, dt)


@functools.lru_cache(maxsize=256)
def _savgol_matrix(length: int, window: int, polyorder: int, deriv: int, dt: float) -> np.ndarray:
    """``M [T, T]`` with ``savgol_filter(y) == y @ M`` (row j: the response to a unit sample at j)."""
    if window > length:
        window = length - (1 - length % 2)
    polyorder = min(polyorder, window - 1)
    if polyorder < deriv or window < 1:
        return np.zeros((length, length))
    matrix = savgol_filter(np.eye(length), window, polyorder, deriv=deriv, delta=dt, axis=-1, mode="interp")
    matrix.flags.writeable = False
    return matrix


@njit(cache=True)
def _raw_signals_row(
    poses: np.ndarray, dt: float, lon: np.ndarray, lat: np.ndarray, heading: np.ndarray
) -> None:
    """The raw signals of one pose sequence ``[T, 3]`` (see :func:`_raw_acceleration_at`)."""
    correction = 0.0
    for t in range(len(poses)):
        lon[t], lat[t] = _raw_acceleration_at(poses, t, dt)
        correction = _unwrap_correction(poses, t, correction)
        heading[t] = poses[t, 2] + correction


@njit(cache=True)
def _raw_acceleration_at(poses: np.ndarray, t: int, dt: float) -> tuple[float, float]:
    """Longitudinal and lateral acceleration at sample ``t`` of poses ``[T, 3]``.

    Second differences of the positions, extended linearly to the ends (exact up to cubics),
    rotated into the ego frame.
    """
    length = len(poses)
    ax = ay = 0.0
    if length >= 3:
        # a(t) = (p(t+1) - 2 p(t) + p(t-1)) / dt^2 at the inner samples
        centre = min(max(t, 1), length - 2)
        ax, ay = _second_difference(poses, centre, dt)
        if length >= 4 and t != centre:  # an end: extrapolate the two nearest inner values
            bx, by = _second_difference(poses, 2 if t == 0 else length - 3, dt)
            ax, ay = 2 * ax - bx, 2 * ay - by
    cos, sin = np.cos(poses[t, 2]), np.sin(poses[t, 2])
    return ax * cos + ay * sin, -ax * sin + ay * cos


@njit(cache=True)
def _unwrap_correction(poses: np.ndarray, t: int, correction: float) -> float:
    """The running correction that unwraps the heading at sample ``t``, as ``np.unwrap`` does."""
    if t == 0:
        return 0.0
    delta = poses[t, 2] - poses[t - 1, 2]
    wrapped = (delta + np.pi) % (2 * np.pi) - np.pi
    if wrapped == -np.pi and delta > 0:
        wrapped = np.pi
    return correction + (wrapped - delta if abs(delta) >= np.pi else 0.0)


@njit(cache=True)
def _second_difference(poses: np.ndarray, t: int, dt: float) -> tuple[float, float]:
    ax = (poses[t + 1, 0] - 2 * poses[t, 0] + poses[t - 1, 0]) / dt**2
    ay = (poses[t + 1, 1] - 2 * poses[t, 1] + poses[t - 1, 1]) / dt**2
    return ax, ay


def kinematics(poses: np.ndarray, dt: float = DT, yaw_accel_order: int = YAW_ACCEL_POLY_ORDER) -> Kinematics:
    """The smoothed signals NAVSIM bounds, from poses.

    Args:
        poses: ``[B, T, 3]`` x, y, heading every ``dt`` seconds.
        dt: sample spacing in seconds.
        yaw_accel_order: polynomial order of the yaw acceleration fit (NAVSIM: 3 for C, 2 for EC).

    Returns:
        :class:`Kinematics` of ``[B, T]`` arrays.
    """
    poses = np.asarray(poses, dtype=np.float64)
    out = np.empty((len(poses), 7, poses.shape[1]))
    _kinematics_rows(poses, dt, savgol_filters(poses.shape[1], dt, yaw_accel_order), out)
    return Kinematics(*out.transpose(1, 0, 2))


@functools.lru_cache(maxsize=64)
def savgol_filters(length: int, dt: float, yaw_accel_order: int = YAW_ACCEL_POLY_ORDER) -> np.ndarray:
    """The Savitzky-Golay filters of :func:`kinematics` for ``length`` samples, ``[3, T, T]``.

    Smoothing (ACCEL_WINDOW, order 2), first derivative (DERIV_WINDOW, order 2) and the yaw
    acceleration's second derivative (DERIV_WINDOW, ``yaw_accel_order``).
    """
    filters = np.stack(
        [
            _savgol_matrix(length, ACCEL_WINDOW, POLY_ORDER, 0, dt),
            _savgol_matrix(length, DERIV_WINDOW, POLY_ORDER, 1, dt),
            _savgol_matrix(length, DERIV_WINDOW, yaw_accel_order, 2, dt),
        ]
    )
    filters.flags.writeable = False
    return filters


@njit(cache=True)
def _kinematics_rows(poses: np.ndarray, dt: float, filters: np.ndarray, out: np.ndarray) -> None:
    for b in range(len(poses)):
        kinematics_row(poses[b], dt, filters, out[b])


@njit(cache=True)
def kinematics_row(poses: np.ndarray, dt: float, filters: np.ndarray, out: np.ndarray) -> None:
    """:func:`kinematics` of one pose sequence ``[T, 3]`` into ``out [7, T]`` (Kinematics order)."""
    length = len(poses)
    raw_lon, raw_lat, heading = np.empty(length), np.empty(length), np.empty(length)
    _raw_signals_row(poses, dt, raw_lon, raw_lat, heading)
    magnitude = np.hypot(raw_lon, raw_lat)
    smooth, deriv, yaw_accel = filters[0], filters[1], filters[2]
    # _extract_ego_acceleration: accelerations smoothed, the magnitude smoothed on its own
    _filter(raw_lon, smooth, out[0])
    _filter(raw_lat, smooth, out[1])
    _filter(magnitude, smooth, out[2])
    # _extract_ego_jerk: first derivative of the smoothed acceleration
    _filter(out[2], deriv, out[3])
    _filter(out[0], deriv, out[4])
    # _extract_ego_yaw_rate: derivatives of the unwrapped heading
    _filter(heading, deriv, out[5])
    _filter(heading, yaw_accel, out[6])


@njit(cache=True)
def _filter(signal: np.ndarray, matrix: np.ndarray, out: np.ndarray) -> None:
    """``out = signal @ matrix`` (a linear filter as a ``[T, T]`` matrix)."""
    out[:] = 0.0
    for i in range(len(signal)):
        for j in range(len(out)):
            out[j] += signal[i] * matrix[i, j]


def comfort_violations(poses: np.ndarray, dt: float = DT) -> np.ndarray:
    """Steps where any of the six comfort bounds is broken.

    Args:
        poses: ``[B, T, 3]`` x, y, heading every ``dt`` seconds.
        dt: sample spacing in seconds.

    Returns:
        ``[B, T]`` bool, True where uncomfortable.
    """
    poses = np.asarray(poses, dtype=np.float64)
    out = np.empty(poses.shape[:2], bool)
    _violations_rows(poses, dt, savgol_filters(poses.shape[1], dt), out)
    return out


@njit(cache=True)
def _violations_rows(poses: np.ndarray, dt: float, filters: np.ndarray, out: np.ndarray) -> None:
    for b in range(len(poses)):
        violations_row(poses[b], dt, filters, out[b])


@njit(cache=True)
def violations_row(poses: np.ndarray, dt: float, filters: np.ndarray, out: np.ndarray) -> None:
    """:func:`comfort_violations` of one pose sequence ``[T, 3]`` into ``out [T]``."""
    signals = np.empty((7, len(poses)))
    kinematics_row(poses, dt, filters, signals)
    for t in range(len(poses)):
        out[t] = not _inside_bounds(
            signals[0, t],
            signals[1, t],
            signals[2, t],
            signals[3, t],
            signals[4, t],
            signals[5, t],
            signals[6, t],
        )


def last_step_uncomfortable(poses: np.ndarray, dt: float = DT) -> np.ndarray:
    """``comfort_violations(poses, dt)[:, -1]``, computed for the last step alone (the env's per-step check).

    Every smoothed signal is linear in the raw accelerations and headings, so its last sample is
    one dot product with the last column of the (chained) Savitzky-Golay matrices.
    """
    poses = np.asarray(poses, dtype=np.float64)
    out = np.empty(len(poses), bool)
    _uncomfortable_rows(poses, dt, last_step_weights(poses.shape[1], dt), out)
    return out


@njit(cache=True)
def _uncomfortable_rows(poses: np.ndarray, dt: float, weights: np.ndarray, out: np.ndarray) -> None:
    for b in range(len(poses)):
        out[b] = uncomfortable_at_end(poses[b], dt, weights)


@njit(cache=True)
def uncomfortable_at_end(poses: np.ndarray, dt: float, weights: np.ndarray) -> bool:
    """Whether the last pose of ``poses [T, 3]`` breaks a bound (``weights``: :func:`last_step_weights`)."""
    smooth_lon = smooth_lat = accel = jerk = lon_jerk = yaw_rate = yaw_accel = correction = 0.0
    for t in range(len(poses)):
        lon, lat = _raw_acceleration_at(poses, t, dt)
        correction = _unwrap_correction(poses, t, correction)
        heading = poses[t, 2] + correction
        magnitude = np.hypot(lon, lat)
        smooth_lon += lon * weights[0, t]
        smooth_lat += lat * weights[0, t]
        accel += magnitude * weights[0, t]
        jerk += magnitude * weights[1, t]
        lon_jerk += lon * weights[1, t]
        yaw_rate += heading * weights[2, t]
        yaw_accel += heading * weights[3, t]
    return not _inside_bounds(smooth_lon, smooth_lat, accel, jerk, lon_jerk, yaw_rate, yaw_accel)


@functools.lru_cache(maxsize=16)
def last_step_weights(length: int, dt: float) -> np.ndarray:
    """Weights ``[4, T]`` for the last sample of the smoothed acceleration, jerk, yaw rate, yaw acceleration.

    Jerk differentiates the smoothed acceleration, so its weights chain the two filters.
    """
    smooth = _savgol_matrix(length, ACCEL_WINDOW, POLY_ORDER, 0, dt)
    deriv = _savgol_matrix(length, DERIV_WINDOW, POLY_ORDER, 1, dt)
    yaw_accel = _savgol_matrix(length, DERIV_WINDOW, YAW_ACCEL_POLY_ORDER, 2, dt)
    weights = np.stack([smooth[:, -1], (smooth @ deriv)[:, -1], deriv[:, -1], yaw_accel[:, -1]])
    weights.flags.writeable = False
    return weights


@njit(cache=True)
def _inside_bounds(
    lon_accel: float,
    lat_accel: float,
    accel: float,
    jerk: float,
    lon_jerk: float,
    yaw_rate: float,
    yaw_accel: float,
) -> bool:
    """ego_is_comfortable: every signal strictly inside its bound (``accel`` has none of its own)."""
    return (
        MIN_LON_ACCEL < lon_accel < MAX_LON_ACCEL
        and abs(lat_accel) < MAX_ABS_LAT_ACCEL
        and abs(jerk) < MAX_ABS_JERK
        and abs(lon_jerk) < MAX_ABS_LON_JERK
        and abs(yaw_accel) < MAX_ABS_YAW_ACCEL
        and abs(yaw_rate) < MAX_ABS_YAW_RATE
    )


def is_comfortable(poses: np.ndarray, dt: float = DT) -> np.ndarray:
    """NAVSIM's comfort C: ``[B]`` bool, all six bounds hold at every step of ``poses [B, T, 3]``."""
    return np.asarray(~comfort_violations(poses, dt).any(axis=-1))


def _rms(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(x**2, axis=-1))


def two_frame_extended_comfort(
    plan_a: np.ndarray, plan_b: np.ndarray, offset_steps: int, dt: float = DT
) -> np.ndarray:
    """EC: whether two consecutive plans agree on their dynamics where they overlap.

    ``ego_is_two_frame_extended_comfort``: on the common time span, the RMS differences of
    acceleration magnitude, jerk, yaw rate and yaw acceleration must not exceed 0.7, 0.5, 0.1
    and 0.1. NAVSIM compares frames 0.5 s apart (``offset_steps = 5`` at 10 Hz).

    Args:
        plan_a: ``[B, T, 3]`` the earlier plan, world frame.
        plan_b: ``[B, T, 3]`` the later plan, starting ``offset_steps`` samples after ``plan_a``.
        offset_steps: samples between the two plans' starts, ``0 < offset_steps < T``.
        dt: sample spacing in seconds.

    Returns:
        ``[B]`` float, 1.0 where the plans are consistent, else 0.0.
    """
    overlap = plan_a.shape[1] - offset_steps
    if offset_steps <= 0 or overlap <= 0:
        raise ValueError(f"offset_steps must be in 1..{plan_a.shape[1] - 1}, got {offset_steps}")
    # EC fits the yaw acceleration with order 2 (extract_features)
    a = kinematics(plan_a[:, offset_steps:], dt, yaw_accel_order=POLY_ORDER)
    b = kinematics(plan_b[:, :overlap], dt, yaw_accel_order=POLY_ORDER)
    ok = _rms(a.accel - b.accel) <= EC_MAX_ACCEL
    ok &= _rms(a.jerk - b.jerk) <= EC_MAX_JERK
    ok &= _rms(a.yaw_rate - b.yaw_rate) <= EC_MAX_YAW_RATE
    ok &= _rms(a.yaw_accel - b.yaw_accel) <= EC_MAX_YAW_ACCEL
    return ok.astype(np.float64)
