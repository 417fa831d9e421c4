"""Simulated step latency: the option's forms, the distributions' numbers, and envs left unchanged."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import omnigym.envs  # noqa: F401  (registers the ids)
from omnigym.envs.latency import LatencyModel, StepDelay


def test_parse_accepts_seconds_ranges_and_distributions() -> None:
    assert LatencyModel.parse(0.02) == LatencyModel("fixed", 0.02, 0.02)
    assert LatencyModel.parse((0.01, 0.03)) == LatencyModel("uniform", 0.01, 0.03)
    assert LatencyModel.parse([0.02, 0.02]).dist == "fixed"
    assert LatencyModel.parse({"dist": "fixed", "ms": 5}) == LatencyModel("fixed", 0.005, 0.005)
    assert LatencyModel.parse({"dist": "uniform", "low_ms": 10, "high_ms": 30}) == LatencyModel(
        "uniform", 0.01, 0.03
    )
    lognormal = LatencyModel.parse({"dist": "lognormal", "median_ms": 20, "sigma": 1.0, "max_ms": 400})
    assert (lognormal.median, lognormal.sigma, lognormal.cap) == (0.02, 1.0, 0.4)
    assert LatencyModel.parse(0.0).is_zero and not lognormal.is_zero


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (-0.1, ">= 0 seconds"),
        ((0.2, 0.1), ">= 0 seconds"),
        ((0.1, 0.2, 0.3), "two numbers"),
        ({"dist": "pareto", "ms": 1}, "dist must be one of fixed, uniform, lognormal"),
        ({"dist": "lognormal", "median_ms": 20}, "missing ['sigma']"),
        ({"dist": "lognormal", "median_ms": 20, "sigma": 1, "mean_ms": 3}, "unknown ['mean_ms']"),
        ({"dist": "uniform", "low_ms": 30, "high_ms": 10}, "low_ms must be <= high_ms"),
        ({"dist": "fixed", "ms": -1}, "must be >= 0"),
    ],
)
def test_parse_rejects_malformed_latency_with_the_reason(spec: object, message: str) -> None:
    with pytest.raises(ValueError) as error:
        LatencyModel.parse(spec)  # type: ignore[arg-type]
    assert message in str(error.value)


def test_lognormal_draws_have_the_median_mean_and_cap_asked_for() -> None:
    model = LatencyModel.parse({"dist": "lognormal", "median_ms": 20, "sigma": 1.0})
    draws = model.sample(np.random.default_rng(0), 200_000)
    assert np.median(draws) == pytest.approx(0.02, rel=0.02)
    assert draws.mean() == pytest.approx(0.02 * math.exp(0.5), rel=0.02) == model.mean()
    capped = LatencyModel.parse({"dist": "lognormal", "median_ms": 20, "sigma": 1.0, "max_ms": 50})
    assert capped.sample(np.random.default_rng(0), 10_000).max() == pytest.approx(0.05)


def test_expected_max_grows_with_the_batch_and_is_the_mean_for_one() -> None:
    model = LatencyModel.parse({"dist": "lognormal", "median_ms": 20, "sigma": 1.0})
    assert model.expected_max(1) == pytest.approx(model.mean(), rel=0.03)
    # the slowest of 8 is about twice the slowest of 2 with this tail (what decoupling saves)
    two, eight = model.expected_max(2), model.expected_max(8)
    assert 1.7 < eight / two < 2.4
    uniform = LatencyModel.parse((0.015, 0.025))
    assert uniform.expected_max(8) == pytest.approx(0.015 + 0.01 * 8 / 9, rel=0.01)  # (n / (n + 1))
    assert LatencyModel.parse(0.02).expected_max(8) == pytest.approx(0.02)


def test_step_delay_repeats_under_a_seed_and_sleeps_nothing_when_zero() -> None:
    delay = StepDelay({"dist": "uniform", "low_ms": 1, "high_ms": 3})
    delay.reseed(7)
    first = [delay() for _ in range(4)]
    delay.reseed(7)
    assert [delay() for _ in range(4)] == first
    assert all(0.001 <= d <= 0.003 for d in first)
    assert StepDelay(0.0)() == 0.0


@pytest.mark.parametrize("env_id", ["omnigym/Sokoban-v0", "omnigym/Blackjack-v0"])
def test_game_latency_sleeps_without_changing_the_game(env_id: str) -> None:
    plain = gym.make(env_id, obs_keys=("text",))
    slow = gym.make(env_id, obs_keys=("text",), latency={"dist": "fixed", "ms": 2})
    for env in (plain, slow):
        env.reset(seed=3)
    for action in [0, 1, 2, 0]:
        a, b = plain.step(action), slow.step(action)
        assert a[0] == b[0] and a[1] == b[1] and a[2] == b[2]
        assert "latency_s" not in a[4] and b[4]["latency_s"] == pytest.approx(0.002)
        if a[2]:
            break
    with pytest.raises(ValueError, match="dist must be one of"):
        gym.make(env_id, latency={"dist": "normal"})
