"""Statistics checked against hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest

from omnigym.platform.stats import aggregate_runs, bootstrap_ci, iqm, summarize


def test_iqm_drops_a_quarter_from_each_end() -> None:
    # n = 8: drop 2 from each end -> mean(3, 4, 5, 6).
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)
    # Order does not matter.
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)


def test_iqm_ignores_outliers() -> None:
    # n = 8: sorted [-1000, 1, 2, 3, 4, 5, 6, 1000] -> drop 2 each end -> mean(2, 3, 4, 5) = 3.5.
    values = [1000, 1, 2, 3, 4, 5, 6, -1000]
    assert iqm(values) == pytest.approx(3.5)
    assert np.mean(values) == pytest.approx(2.625)


def test_iqm_floors_the_cut() -> None:
    # n = 5: floor(5/4) = 1 -> mean(2, 3, 10) = 5.
    assert iqm([100, 2, 3, 10, -50]) == pytest.approx(5.0)
    # n = 3: nothing is dropped.
    assert iqm([1, 2, 9]) == pytest.approx(4.0)
    assert iqm([7.0]) == 7.0


def test_iqm_empty_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        iqm([])


def test_summarize_hand_numbers() -> None:
    out = summarize([1.0, 2.0, 3.0, 4.0])
    assert out["mean"] == pytest.approx(2.5)
    # Population std: sqrt(((1.5)^2 + (0.5)^2) * 2 / 4) = sqrt(1.25).
    assert out["std"] == pytest.approx(np.sqrt(1.25))
    assert out["min"] == 1.0
    assert out["max"] == 4.0
    assert out["median"] == pytest.approx(2.5)
    assert out["iqm"] == pytest.approx(2.5)  # drop 1 each end -> mean(2, 3)
    assert set(out) == {"mean", "std", "min", "max", "median", "iqm"}


def test_summarize_single_value_has_zero_std() -> None:
    assert summarize([3.0])["std"] == 0.0


def test_summarize_empty_raises() -> None:
    with pytest.raises(ValueError):
        summarize([])


def test_bootstrap_ci_contains_the_mean_and_narrows_with_more_data() -> None:
    rng = np.random.default_rng(1)
    small = rng.normal(10.0, 2.0, size=10)
    large = rng.normal(10.0, 2.0, size=1000)
    low_small, high_small = bootstrap_ci(small)
    low_large, high_large = bootstrap_ci(large)
    assert low_small <= small.mean() <= high_small
    assert low_large <= large.mean() <= high_large
    assert high_large - low_large < (high_small - low_small) / 3


def test_bootstrap_ci_is_reproducible_and_respects_confidence() -> None:
    values = np.arange(20.0)
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    low_90, high_90 = bootstrap_ci(values, confidence=0.9)
    low_99, high_99 = bootstrap_ci(values, confidence=0.99)
    assert low_99 <= low_90 < high_90 <= high_99


def test_bootstrap_ci_other_statistic() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    low, high = bootstrap_ci(values, statistic=np.median)
    assert low >= 1.0
    assert high <= 100.0


def test_bootstrap_ci_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        bootstrap_ci([])
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], num_resamples=0)


def test_aggregate_runs_single_run_collapses() -> None:
    out = aggregate_runs([42.0])
    assert out["num_runs"] == 1
    for name in ("mean", "median", "iqm"):
        assert out[name] == 42.0
        assert out[f"{name}_ci_low"] == 42.0
        assert out[f"{name}_ci_high"] == 42.0


def test_aggregate_runs_several_runs() -> None:
    scores = [100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 10_000.0]
    out = aggregate_runs(scores)
    assert out["num_runs"] == 8
    assert out["mean"] == pytest.approx(1600.0)  # 12800 / 8
    assert out["median"] == pytest.approx(450.0)
    assert out["iqm"] == pytest.approx(450.0)  # mean(300, 400, 500, 600)
    for name in ("mean", "median", "iqm"):
        assert out[f"{name}_ci_low"] <= out[name] <= out[f"{name}_ci_high"]
        assert out[f"{name}_ci_low"] < out[f"{name}_ci_high"]
    assert min(scores) <= out["iqm_ci_low"]
    assert out["iqm_ci_high"] < out["mean_ci_high"]  # the outlier widens the mean's interval


def test_aggregate_runs_empty_raises() -> None:
    with pytest.raises(ValueError):
        aggregate_runs([])
