"""Statistics for reporting RL results: robust summaries and bootstrap confidence intervals.

Follows Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical Precipice"
(NeurIPS 2021): report the interquartile mean (IQM) beside the mean and median, with percentile
bootstrap confidence intervals over independent runs. Pure NumPy, no SciPy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

Statistic = Callable[[np.ndarray], float]
"""A function from a 1-D array of values to one number (``np.mean``, ``np.median``, :func:`iqm`)."""


def _as_values(values: ArrayLike) -> np.ndarray:
    """``values`` as a flat float64 array; empty input is an error."""
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.size == 0:
        raise ValueError("statistics need at least one value, got an empty input")
    return array


def iqm(x: ArrayLike) -> float:
    """Interquartile mean: the mean of the middle 50% of the values.

    Same definition as rliable and ``scipy.stats.trim_mean(x, 0.25)``: sort the ``n`` values,
    drop ``floor(n / 4)`` from each end, average the rest. With fewer than 4 values nothing is
    dropped, so it equals the mean.

    Args:
        x: the values, any shape (flattened). Shape: [N].

    Returns:
        The interquartile mean.

    Raises:
        ValueError: if ``x`` is empty.
    """
    values = np.sort(_as_values(x))
    cut = values.size // 4  # floor(n/4) == int(0.25 * n), scipy's lowercut
    return float(np.mean(values[cut : values.size - cut]))


def summarize(values: ArrayLike) -> dict[str, float]:
    """Mean, standard deviation, extremes, median and IQM of ``values``.

    Args:
        values: the values, any shape (flattened). Shape: [N].

    Returns:
        ``{"mean", "std", "min", "max", "median", "iqm"}``. ``std`` is the population standard
        deviation (``ddof=0``), so one value gives 0 rather than NaN.

    Raises:
        ValueError: if ``values`` is empty.
    """
    array = _as_values(values)
    return {
        "mean": float(np.mean(array)),
        "std": float(np.std(array, ddof=0)),
        "min": float(np.min(array)),
        "max": float(np.max(array)),
        "median": float(np.median(array)),
        "iqm": iqm(array),
    }


def bootstrap_ci(
    values: ArrayLike,
    statistic: Statistic = np.mean,
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic(values)``.

    Resamples ``values`` with replacement ``num_resamples`` times, applies ``statistic`` to each
    resample and returns the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of
    the results (Efron & Tibshirani, 1993, ch. 13).

    Args:
        values: the observations, e.g. one score per run. Shape: [N].
        statistic: maps a resample ``[N]`` to one number.
        confidence: the interval's coverage, in (0, 1).
        num_resamples: bootstrap resamples to draw.
        seed: seed of the resampling generator, so intervals are reproducible.

    Returns:
        ``(low, high)``. With one value (or all values equal) both equal the statistic.

    Raises:
        ValueError: on empty ``values``, ``confidence`` outside (0, 1) or ``num_resamples < 1``.
    """
    array = _as_values(values)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples}")
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, array.size, size=(num_resamples, array.size))
    estimates = np.array([statistic(array[row]) for row in indices], dtype=np.float64)
    alpha = 1.0 - confidence
    low, high = np.quantile(estimates, [alpha / 2, 1.0 - alpha / 2])
    return float(low), float(high)


def aggregate_runs(
    scores_per_run: Sequence[float],
    *,
    confidence: float = 0.95,
    num_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Aggregate one score per independent run (seed) into point estimates with bootstrap CIs.

    Args:
        scores_per_run: one score per run, e.g. each seed's final ``eval/return_mean``. Shape: [R].
        confidence: coverage of the intervals.
        num_resamples: bootstrap resamples (over runs).
        seed: seed of the resampling generator.

    Returns:
        ``mean``, ``median``, ``iqm``, each with ``<name>_ci_low`` and ``<name>_ci_high``, and
        ``num_runs``. With one run every interval collapses to the value itself.

    Raises:
        ValueError: if ``scores_per_run`` is empty.
    """
    scores = _as_values(scores_per_run)
    statistics: dict[str, Statistic] = {"mean": np.mean, "median": np.median, "iqm": iqm}
    result: dict[str, float] = {}
    for name, statistic in statistics.items():
        low, high = bootstrap_ci(
            scores, statistic, confidence=confidence, num_resamples=num_resamples, seed=seed
        )
        result[name] = float(statistic(scores))
        result[f"{name}_ci_low"] = low
        result[f"{name}_ci_high"] = high
    result["num_runs"] = float(scores.size)
    return result
