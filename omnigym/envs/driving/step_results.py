"""What one simulator step yields: per-step reward components, episode ends and window bookkeeping.

Every 0.1 s the per-step checks (:mod:`~omnigym.envs.driving.step_checks`) score each slot;
:func:`step_outcome` turns them into the step's reward (the PDMS or EPDMS formula on one step),
failure, the time limit, and whether a NAVSIM window ends or starts, keeping each window's running
minima. A plan step drives several such sub-steps; :func:`accumulate` adds up their
:class:`StepResult` s. The simulator (:mod:`~omnigym.envs.driving.simulator`) does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from omnigym.envs.driving import metrics
from omnigym.envs.driving.scene import HORIZON_STEPS
from omnigym.envs.driving.step_checks import CHECKS

WINDOW = HORIZON_STEPS
"""Steps per scoring window (one NAVSIM horizon)."""
STEP_COMPONENTS = (*CHECKS, "ec")
"""Per-step reward components, each in [0, 1] per 0.1 s (summed over the sub-steps of a plan step)."""
WINDOW_MINIMA = ("nc", "dac", "ddc", "tlc", "ttc", "lk")
"""Sub-metrics whose window score is the minimum of the per-step scores (NAVSIM takes the min
over the trajectory's steps; DDC's and LK's per-step values already look back 1 s / 2 s)."""
WINDOW_MINIMA_COLUMNS = np.array([STEP_COMPONENTS.index(name) for name in WINDOW_MINIMA])
WINDOW_MINIMA_METRICS = np.array([metrics.SUB_METRICS.index(name) for name in WINDOW_MINIMA])


@dataclass
class StepResult:
    """What one simulator step returns, batched over slots [N]."""

    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    components: dict[str, np.ndarray]
    episode_metrics: dict[str, np.ndarray] = field(default_factory=dict)
    """Filled for slots whose episode ended this step (NaN elsewhere)."""


def accumulate(total: StepResult, result: StepResult, active: np.ndarray) -> StepResult:
    """Sum rewards and components of consecutive sub-steps; ends and episode metrics carry over."""
    total.reward = total.reward + result.reward
    total.components = {k: total.components[k] + result.components[k] for k in total.components}
    total.terminated = total.terminated | result.terminated
    total.truncated = total.truncated | result.truncated
    for key, value in result.episode_metrics.items():
        if key in total.episode_metrics:
            total.episode_metrics[key] = np.where(np.isnan(value), total.episode_metrics[key], value)
        else:
            total.episode_metrics[key] = value
    return total


@njit(cache=True)
def step_outcome(
    checks: np.ndarray,
    active: np.ndarray,
    elapsed: np.ndarray,
    episode_steps: np.ndarray,
    step_limit: int,
    epdms: bool,
    terminate_on_failure: bool,
    window_min: np.ndarray,
    minima_columns: np.ndarray,
    failed: np.ndarray,
    reward: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    window_end: np.ndarray,
    starting: np.ndarray,
) -> None:
    """What this step's checks ``[N, len(STEP_COMPONENTS)]`` mean for each slot's episode.

    The reward (the PDMS or EPDMS formula on the per-step checks), failure, the time limit, and
    whether a window ends or starts; window minima and ``failed`` are updated, and the checks of
    slots not ``active`` (ended earlier in a plan step) are zeroed.
    """
    nc, dac, ddc, tlc, ttc, ep, c, lk, ec = range(9)  # STEP_COMPONENTS
    for n in range(len(checks)):
        row = checks[n]
        if not active[n]:
            row[:] = 0.0
            reward[n], terminated[n], truncated[n], window_end[n], starting[n] = (
                0.0,
                False,
                False,
                False,
                False,
            )
            continue
        if epdms:
            weighted = 5 * row[ep] + 5 * row[ttc] + 2 * row[lk] + 2 * row[c] + 2 * row[ec]
            reward[n] = row[nc] * row[dac] * row[ddc] * row[tlc] * weighted / 16
            failure = row[nc] < 1 or row[dac] < 1 or row[tlc] < 1
        else:
            reward[n] = row[nc] * row[dac] * (5 * row[ttc] + 5 * row[ep] + 2 * row[c]) / 12
            failure = row[nc] < 1 or row[dac] < 1
        for i in range(len(minima_columns)):
            window_min[n, i] = min(window_min[n, i], row[minima_columns[i]])
        limit = episode_steps[n] if step_limit < 0 else min(episode_steps[n], step_limit)
        terminated[n] = failure and terminate_on_failure
        truncated[n] = elapsed[n] >= limit and not terminated[n]
        failed[n] |= terminated[n]
        boundary = elapsed[n] % WINDOW == 0
        window_end[n] = boundary or terminated[n] or truncated[n]
        starting[n] = boundary and not (terminated[n] or truncated[n])
