"""Fidelity measurements by hand: k-step errors of exact and biased models, Spearman, the report files."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.world_models.base import WorldModel, WorldModelConfig
from omnigym.world_models.fidelity import (
    DreamVsReal,
    FidelityReport,
    KStepError,
    PolicyReturn,
    k_step_errors,
    spearman,
)

OBS_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACTION_SPACE = spaces.Box(-2.0, 2.0, (1,), np.float32)
GAIN = 0.1


def true_step(obs: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, float]:
    """The "real" dynamics: every dim moves by ``GAIN * action``; reward = sum of the next obs."""
    nxt = obs + GAIN * action[0]
    return nxt.astype(np.float32), float(nxt.sum())


@dataclass
class ShiftConfig(WorldModelConfig):
    type: str = "test_shift"
    bias: tuple[float, ...] = (0.0, 0.0, 0.0)


class ShiftModel(WorldModel):
    """The real dynamics plus a constant ``bias`` per step; its ``step`` takes no ``deterministic``."""

    name = "test_shift"
    config_class = ShiftConfig

    def __init__(
        self, config: ShiftConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self.bias = torch.tensor(config.bias)

    def reset(self, obs: dict[str, Tensor]) -> Tensor:
        return obs["state"].clone()

    def step(self, state: Any, action: Tensor, *, generator: torch.Generator | None = None) -> Any:
        nxt = state + GAIN * action + self.bias
        return nxt, {"state": nxt}, nxt.sum(-1), torch.zeros(len(nxt), dtype=torch.bool), {}


class NoisyShiftModel(ShiftModel):
    """Adds noise unless stepped ``deterministic``: k-step errors must ask for the mean."""

    def step(self, state: Any, action: Tensor, *, generator: Any = None, deterministic: bool = False) -> Any:
        nxt, _, _, terminated, info = super().step(state, action)
        if not deterministic:
            nxt = nxt + torch.randn(nxt.shape, generator=generator)
        return nxt, {"state": nxt}, nxt.sum(-1), terminated, info


def episode(length: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    obs = [rng.normal(size=3).astype(np.float32)]
    actions = rng.uniform(-2, 2, size=(length, 1)).astype(np.float32)
    rewards = []
    for action in actions:
        nxt, reward = true_step(obs[-1], action)
        obs.append(nxt)
        rewards.append(reward)
    return {"observations": {"state": np.stack(obs)}, "actions": actions, "rewards": np.array(rewards)}


EPISODES = [episode(30, 0), episode(8, 1)]
KS = (1, 5, 10, 20)


def model(bias: tuple[float, ...] = (0.0, 0.0, 0.0), cls: type[ShiftModel] = ShiftModel) -> ShiftModel:
    return cls(ShiftConfig(bias=bias), OBS_SPACE, ACTION_SPACE)


def test_an_exact_model_has_zero_error_and_windows_are_counted_per_k() -> None:
    rows = k_step_errors(model(), EPISODES, KS)
    assert [r.k for r in rows] == list(KS)
    # Starts t with t + k <= T: T - k + 1 per episode; the 8-step episode has none of 10 or 20.
    assert [r.windows for r in rows] == [30 + 8, 26 + 4, 21, 11]
    for r in rows:
        assert r.obs_mse == pytest.approx(0.0, abs=1e-10)
        assert r.obs_nmse == pytest.approx(0.0, abs=1e-10)
        assert r.reward_mse == pytest.approx(0.0, abs=1e-8)


def test_a_biased_model_drifts_exactly_as_hand_computed() -> None:
    # A bias of 0.1 on dim 0 per step: after k open-loop steps the prediction is off by 0.1 k on
    # that dim (0 on the others) and the reward (sum of the next obs) by 0.1 k.
    rows = k_step_errors(model((0.1, 0.0, 0.0)), EPISODES, KS)
    all_obs = np.concatenate([e["observations"]["state"] for e in EPISODES])
    variance0 = all_obs[:, 0].var()
    for r in rows:
        assert r.obs_mse == pytest.approx((0.1 * r.k) ** 2 / 3, rel=1e-4)
        assert r.obs_nmse == pytest.approx((0.1 * r.k) ** 2 / variance0 / 3, rel=1e-4)
        assert r.reward_mse == pytest.approx((0.1 * r.k) ** 2, rel=1e-4)
    assert [r.obs_mse for r in rows] == sorted(r.obs_mse for r in rows)


def test_models_that_can_are_stepped_deterministically() -> None:
    rows = k_step_errors(model(cls=NoisyShiftModel), EPISODES, KS)
    assert all(r.obs_mse == pytest.approx(0.0, abs=1e-10) for r in rows)


def test_a_known_reward_function_replaces_the_models_reward() -> None:
    def zero_reward(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
        return torch.zeros(len(obs))

    rows = k_step_errors(model(), EPISODES, (1,), reward_fn=zero_reward)
    rewards = np.concatenate([e["rewards"] for e in EPISODES])
    assert rows[0].reward_mse == pytest.approx(float(np.mean(rewards**2)), rel=1e-5)
    assert rows[0].obs_mse == pytest.approx(0.0, abs=1e-10)


def test_max_windows_measures_a_subset() -> None:
    rows = k_step_errors(model((0.1, 0.0, 0.0)), EPISODES, (1, 5), max_windows=10)
    assert rows[0].windows == 10 and rows[1].windows <= 10
    assert rows[1].obs_mse == pytest.approx(0.5**2 / 3, rel=1e-4)  # the error does not depend on the start


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="horizons >= 1"):
        k_step_errors(model(), EPISODES, (0, 1))
    with pytest.raises(ValueError, match="non-empty real episode"):
        k_step_errors(model(), [episode(0, 0)], KS)


def test_spearman_matches_hand_values() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Monotone but not linear: ranks only.
    assert spearman([-1500, -900, -300, -150], [-1400, -1000, -250, -240]) == pytest.approx(1.0)
    # Ties take their average rank: x ranks [1, 2.5, 2.5, 4], y ranks [1, 3, 2, 4]; the Pearson
    # correlation of the ranks is 4.5 / sqrt(4.5 * 5) (the no-ties formula would give 0.95).
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    # One swap among five: 1 - 6 * (1 + 1) / (5 * 24) = 0.9.
    assert spearman([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.9)


def test_spearman_edge_cases() -> None:
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="equal length"):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="at least two"):
        spearman([1], [1])


def test_dream_vs_real_score_is_relative_to_random() -> None:
    # (dream - random) / (real - random) = (-400 + 1400) / (-200 + 1400)
    assert DreamVsReal(-400.0, -200.0, -1400.0, 3000).score == pytest.approx(1000 / 1200)


def test_report_is_written_as_json_and_markdown_and_loads_back(tmp_path) -> None:
    report = FidelityReport(
        env_id="Pendulum-v1", model="m", k_step=[KStepError(1, 0.01, 0.02, 0.5, 100)], holdout_episodes=2,
        fit={"eval/obs_mse": 0.003},
        policies=[PolicyReturn("a", -200.0, -180.0), PolicyReturn("b", -900.0, -1000.0)],
        rank_correlation=1.0, dream_vs_real=DreamVsReal(-400.0, -200.0, -1400.0, 3000),
    )  # fmt: skip
    json_path, md_path = report.write(tmp_path)
    data = json.loads(json_path.read_text())
    assert data["k_step"][0] == {"k": 1, "obs_mse": 0.01, "obs_nmse": 0.02, "reward_mse": 0.5, "windows": 100}
    assert data["dream_vs_real"]["score"] == pytest.approx(1000 / 1200)
    loaded = FidelityReport.load(tmp_path)
    assert loaded == report
    text = md_path.read_text()
    assert "| 1 | 0.01 | 0.02 | 0.5 | 100 |" in text
    assert "Spearman rank correlation (model vs real): 1.000" in text
    assert "score (dream - random) / (real - random) = 0.833" in text
    assert FidelityReport.load(tmp_path / "nothing") is None


def test_spearman_p_value_is_exact_for_few_policies() -> None:
    from omnigym.world_models.fidelity import spearman_p_value

    assert spearman_p_value([1, 2], [5, 9]) == 1.0  # both orderings reach |rho| = 1
    assert spearman_p_value([1, 2, 3], [1, 2, 3]) == pytest.approx(2 / 6)  # identity and reversal
    assert spearman_p_value([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(2 / 24)
    # rho 0.8 over four: |rho| >= 0.8 for 8 orderings of 24 (the identity and the three adjacent
    # swaps, and their reversals)
    assert spearman_p_value([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(8 / 24)
    assert math.isnan(spearman_p_value([1, 1, 1], [1, 2, 3]))
    # above the exact limit: scipy's approximation, small for a near-perfect ranking of nine
    assert spearman_p_value(list(range(9)), [0, 2, 1, 3, 4, 5, 6, 8, 7]) < 1e-3


def test_rank_correlation_caveat_below_four_policies() -> None:
    from omnigym.world_models.fidelity import rank_correlation_caveat

    two = rank_correlation_caveat(2, 1.0)
    assert two is not None and two.startswith("not informative: with only 2 policies")
    assert "can only be +1, -1 (exact two-sided p = 1.00)" in two
    three = rank_correlation_caveat(3, 1 / 3)
    assert three is not None and "can only be +1, +0.5, -0.5, -1 (exact two-sided p = 0.33)" in three
    assert rank_correlation_caveat(4, 0.08) is None


def test_report_of_two_policies_carries_the_caveat_in_json_and_markdown(tmp_path) -> None:
    report = FidelityReport(
        env_id="Pendulum-v1", model="m", rank_correlation=1.0,
        policies=[PolicyReturn("a", -200.0, -180.0), PolicyReturn("b", -900.0, -1000.0)],
    )  # fmt: skip
    json_path, md_path = report.write(tmp_path)
    data = json.loads(json_path.read_text())
    assert data["rank_p_value"] == 1.0 and data["rank_caveat"].startswith("not informative")
    text = md_path.read_text()
    assert "Spearman rank correlation (model vs real): 1.000 over 2 policies (two-sided p = 1)" in text
    assert "**Caveat:** not informative: with only 2 policies" in text
    assert FidelityReport.load(tmp_path) == report  # the derived keys are recomputed, not loaded
    four = FidelityReport(
        env_id="Pendulum-v1", model="m", rank_correlation=1.0,
        policies=[PolicyReturn(str(i), float(i), float(i)) for i in range(4)],
    )  # fmt: skip
    assert four.rank_caveat is None and four.rank_p_value == pytest.approx(2 / 24)
    assert (
        "Caveat" not in four.to_markdown() and "over 4 policies (two-sided p = 0.0833)" in four.to_markdown()
    )
