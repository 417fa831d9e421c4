"""AWAC: hand-computed critic target, advantage weights and actor loss (docs/algorithms), one update."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.types import Evaluation, Obs
from omnigym.platform.algorithms.offline.awac import AWAC, awac_weights

OBS_SPACE = spaces.Dict({"state": spaces.Box(-10.0, 10.0, (3,))})
ACT_SPACE = spaces.Box(-1.0, 1.0, (2,))


@pytest.fixture
def make_awac(mlp_agent):
    """``make_awac(**overrides)``: AWAC with (16, 16) critics and squashed-Gaussian policy, seeded 0."""
    return partial(
        mlp_agent,
        AWAC,
        OBS_SPACE,
        ACT_SPACE,
        seed=0,
        policy={"hidden_sizes": (16, 16)},
        hidden_sizes=(16, 16),
    )


@pytest.fixture
def make_batch(toy_batch):
    """``make_batch(n=2, seed=0)``: actions in [-0.9, 0.9], rewards 1, terminated [0, 1, 0, 1, ...]."""
    return lambda n=2, seed=0: toy_batch(n, seed, action_bound=0.9, reward=1.0)


class SumQ(nn.Module):
    """Two critics: ``Q_1 = sum(a)`` and ``Q_2 = 2 sum(a)``."""

    def forward(self, features: Tensor, actions: Tensor) -> Tensor:
        total = actions.sum(-1)
        return torch.stack([total, 2 * total])


def test_awac_weights() -> None:
    weights = awac_weights(torch.tensor([0.5, 10.0, -1.0]), lam=1.0, max_weight=100.0)
    assert weights.tolist() == pytest.approx([math.exp(0.5), 100.0, math.exp(-1.0)], rel=1e-6)
    assert awac_weights(torch.tensor([2.0]), lam=2.0, max_weight=100.0).item() == pytest.approx(math.e)


def test_critic_target_without_entropy_and_no_bootstrap_at_terminals(
    make_awac, make_batch, set_constant_q
) -> None:
    algo = make_awac(gamma=0.99)
    set_constant_q(algo.q_target, [2.0, 3.0])  # min = 2 whatever a' ~ pi(s') is
    set_constant_q(algo.q, [0.0, 1.0])
    batch = make_batch()  # rewards [1, 1], terminated [0, 1]
    loss, metrics = algo.critic_loss(batch)
    y = [1 + 0.99 * 2.0, 1.0]
    expected = (
        sum((q - t) ** 2 for t in y for q in (0.0, 1.0)) / 2
    )  # sum over critics of the mean over samples
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert metrics["train/q_mean"].item() == pytest.approx(0.5)


def test_advantage_and_actor_loss_by_hand(monkeypatch: pytest.MonkeyPatch, make_awac, make_batch) -> None:
    algo = make_awac(awac_lambda=1.0)
    algo.q = SumQ()  # type: ignore[assignment]
    batch = make_batch()
    batch.actions = torch.tensor([[0.5, 0.5], [-0.5, 0.0]])  # min_j Q_j(s, a) = [1, -1]

    def rsample(obs: Obs, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        return torch.zeros(2, 2), torch.zeros(2)  # a~pi = 0: min_j Q_j(s, a~pi) = 0

    def evaluate(obs: Obs, actions: Tensor, extras: object = None) -> Evaluation:
        logprob = torch.tensor([[-1.0], [-2.0]])
        return Evaluation(logprob=logprob, entropy=torch.zeros_like(logprob))

    monkeypatch.setattr(algo.policy, "rsample", rsample)
    monkeypatch.setattr(algo.policy, "evaluate", evaluate)
    assert algo.advantage(batch).tolist() == pytest.approx([1.0, -1.0])
    loss, metrics = algo.actor_loss(batch)
    assert loss.item() == pytest.approx((math.e * 1 + math.exp(-1) * 2) / 2, rel=1e-6)
    assert metrics["train/weight_mean"].item() == pytest.approx((math.e + math.exp(-1)) / 2, rel=1e-6)
    algo.config.awac_lambda = 0.1  # A / lambda = 10 -> exp(10) clipped to 100
    loss, _ = algo.actor_loss(batch)
    assert loss.item() == pytest.approx((100.0 * 1 + math.exp(-10) * 2) / 2, rel=1e-6)


def test_actor_gradient_only_through_log_likelihood(make_awac, make_batch) -> None:
    algo = make_awac()
    loss, _ = algo.actor_loss(make_batch(n=8))
    loss.backward()
    assert all(p.grad is None for p in algo.q.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in algo.policy.parameters())


def test_update_changes_weights_and_reports_metrics(make_awac, make_batch, weights, assert_stepped) -> None:
    algo = make_awac()
    batch = make_batch(n=32)
    before = weights(algo)
    metrics = algo.update(batch)
    assert {"train/critic_loss", "train/actor_loss", "train/adv_mean", "train/weight_mean"} <= set(metrics)
    assert all(
        key.startswith("train/") and isinstance(v, float) and math.isfinite(v) for key, v in metrics.items()
    )
    assert algo.updates == 1
    assert_stepped(algo, before)  # every network changed, the target moved by tau = 0.005


def test_state_round_trips(make_awac, make_batch, assert_state_round_trips) -> None:
    assert_state_round_trips(make_awac, make_batch(n=8))
