"""Driver models for procedural traffic: IDM car following, MOBIL lane changes and signal cycles.

The models (:func:`idm_acceleration`, :func:`mobil_incentive`, :func:`light_states`) are pure,
vectorised functions over numpy arrays. The lane-based traffic simulator
(:mod:`omnigym.envs.driving.traffic_sim`) drives its agents with them, and the env's reactive
agents and planners reuse IDM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit, vectorize

from omnigym.envs.driving.scene import DT, LIGHT_GREEN, LIGHT_RED, LIGHT_YELLOW


@dataclass(frozen=True)
class IDMParams:
    """Intelligent Driver Model parameters (Treiber, Hennecke and Helbing 2000)."""

    a_max: float = 1.5
    """Maximum acceleration a (m/s²)."""
    b_comfortable: float = 2.0
    """Comfortable deceleration b (m/s²)."""
    time_headway: float = 1.5
    """Desired time gap T (s)."""
    min_gap: float = 2.0
    """Jam distance s0 (m), bumper to bumper."""
    delta: float = 4.0
    """Acceleration exponent."""
    b_max: float = 8.0
    """Physical braking limit (m/s²): the output is clipped to -b_max."""


def idm_acceleration(
    speed: npt.ArrayLike,
    desired_speed: npt.ArrayLike,
    gap: npt.ArrayLike,
    leader_speed: npt.ArrayLike,
    params: IDMParams = IDMParams(),
) -> np.ndarray:
    """IDM acceleration, elementwise over broadcastable arrays (Treiber et al. 2000, eq. 2-3).

    ``a = a_max (1 - (v/v0)^δ - (s*/s)²)`` with the desired gap
    ``s* = s0 + max(0, vT + v Δv / (2 sqrt(a_max b)))`` and ``Δv = v - v_leader``.

    Args:
        speed: v (m/s), >= 0.
        desired_speed: v0 (m/s).
        gap: s, bumper-to-bumper distance to the leader (m); ``np.inf`` for a free road.
        leader_speed: the leader's speed (m/s), finite; ignored where the gap is infinite.
        params: model parameters.

    Returns:
        Accelerations in ``[-b_max, a_max]`` (m/s²), the broadcast shape of the inputs.
    """
    inputs = (np.asarray(x, dtype=np.float64) for x in (speed, desired_speed, gap, leader_speed))
    return _idm(*inputs, *idm_params_tuple(params))


@njit(cache=True)
def idm_one(
    v: float,
    desired_speed: float,
    gap: float,
    leader_speed: float,
    a_max: float,
    b_comfortable: float,
    time_headway: float,
    min_gap: float,
    delta: float,
    b_max: float,
) -> float:
    """:func:`idm_acceleration` of one vehicle, for compiled loops (the parameters as :class:`IDMParams`)."""
    ratio = v / np.maximum(desired_speed, 0.1)
    squared = ratio * ratio
    free = 1.0 - (squared * squared if delta == 4.0 else ratio**delta)  # the usual 4 without pow()
    approach = v * (v - leader_speed) / (2.0 * np.sqrt(a_max * b_comfortable))
    desired_gap = min_gap + np.maximum(0.0, v * time_headway + approach)
    interaction = (desired_gap / np.maximum(gap, 0.1)) ** 2
    return np.maximum(a_max * (free - interaction), -b_max)  # free <= 1 caps it at a_max


@vectorize(cache=True)  # compiled at its first call (float64 inputs), not at import
def _idm(
    v: float, v0: float, s: float, vl: float, a: float, b: float, t: float, s0: float, d: float, bm: float
) -> float:
    """:func:`idm_one` as a NumPy ufunc (broadcasting, compiled)."""
    return idm_one(v, v0, s, vl, a, b, t, s0, d, bm)


def idm_params_tuple(params: IDMParams) -> tuple[float, float, float, float, float, float]:
    """``params`` in :func:`idm_one`'s argument order."""
    return params.a_max, params.b_comfortable, params.time_headway, params.min_gap, params.delta, params.b_max


@dataclass(frozen=True)
class MOBILParams:
    """MOBIL lane-change parameters (Kesting, Treiber and Helbing 2007)."""

    politeness: float = 0.2
    """p: weight of the followers' advantage."""
    threshold: float = 0.2
    """Δa_th (m/s²): the net advantage a change must bring."""
    b_safe: float = 4.0
    """Maximum deceleration (m/s²) a change may impose on the new follower (or the changer)."""
    mandatory_bonus: float = 1.0
    """m/s² added to the incentive of a mandatory change (a lane drop, or a lane off the route)."""


def mobil_incentive(
    a_self: npt.ArrayLike,
    a_self_new: npt.ArrayLike,
    a_new_follower: npt.ArrayLike,
    a_new_follower_new: npt.ArrayLike,
    a_old_follower: npt.ArrayLike,
    a_old_follower_new: npt.ArrayLike,
    params: MOBILParams = MOBILParams(),
) -> np.ndarray:
    """MOBIL's net incentive to change lanes, ``-inf`` where unsafe (Kesting et al. 2007, eq. 1-2).

    Safety: ``ã_n >= -b_safe`` (and the same for the changer). Incentive:
    ``ã_c - a_c + p ((ã_n - a_n) + (ã_o - a_o))``; change when it exceeds ``params.threshold``.
    ``_new`` values are accelerations after the change; ``n`` is the follower in the target lane,
    ``o`` the follower in the current lane (pass zeros for a missing follower).
    """
    a_self_new, a_new_follower_new = np.asarray(a_self_new), np.asarray(a_new_follower_new)
    followers = (a_new_follower_new - a_new_follower) + (np.asarray(a_old_follower_new) - a_old_follower)
    incentive = a_self_new - a_self + params.politeness * followers
    safe = (a_new_follower_new >= -params.b_safe) & (a_self_new >= -params.b_safe)
    return np.where(safe, incentive, -np.inf)


@dataclass(frozen=True)
class LightCycle:
    """A fixed-time signal plan: approaches get green one after another (no conflicting flows)."""

    green: float = 8.0
    yellow: float = 3.0
    all_red: float = 1.0

    @property
    def phase(self) -> float:
        """Seconds from one approach's green to the next approach's green."""
        return self.green + self.yellow + self.all_red


def light_states(
    num_steps: int, light_group: np.ndarray, num_groups: int, offset: float, cycle: LightCycle = LightCycle()
) -> np.ndarray:
    """States ``[T, K]`` (int8) of lights whose approach (signal group) is ``light_group [K]``.

    Group ``g`` is green from ``g * cycle.phase`` seconds into the cycle; log step ``t`` is
    ``t * DT + offset`` seconds into it.
    """
    time = np.arange(num_steps) * DT + offset
    into = np.mod(time, max(num_groups, 1) * cycle.phase)
    active, within = into // cycle.phase, np.mod(into, cycle.phase)
    mine = active[:, None] == np.asarray(light_group)[None, :]
    state = np.full(mine.shape, LIGHT_RED, np.int8)
    state[mine & (within[:, None] < cycle.green + cycle.yellow)] = LIGHT_YELLOW
    state[mine & (within[:, None] < cycle.green)] = LIGHT_GREEN
    return state
