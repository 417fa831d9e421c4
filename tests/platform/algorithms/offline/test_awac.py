"""AWAC: hand-computed critic target, advantage weights and actor loss (ALGORITHMS.md 8.4), one update."""

from __future__ import annotations

import io
import math
from typing import Any, cast

import pytest
import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.platform.algorithms.critics import EnsembleLinear, QEnsemble
from omnigym.platform.algorithms.offline.awac import AWAC, AWACConfig, awac_weights
from omnigym.platform.types import Evaluation, Obs, TransitionBatch
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

OBS_SPACE = spaces.Dict({"state": spaces.Box(-10.0, 10.0, (3,))})
ACT_SPACE = spaces.Box(-1.0, 1.0, (2,))


def make_awac(**overrides: object) -> AWAC:
    torch.manual_seed(0)
    config = MLPPolicyConfig(hidden_sizes=(16, 16), action_head="squashed_gaussian")
    policy = MLPPolicy(config, OBS_SPACE, ACT_SPACE)
    return AWAC(AWACConfig(hidden_sizes=(16, 16), **overrides), policy, OBS_SPACE, ACT_SPACE)  # type: ignore[arg-type]


def make_batch(n: int = 2, seed: int = 0) -> TransitionBatch:
    g = torch.Generator().manual_seed(seed)
    return TransitionBatch(
        obs={"state": torch.randn(n, 3, generator=g)},
        actions=torch.rand(n, 2, generator=g) * 1.8 - 0.9,
        rewards=torch.ones(n),
        next_obs={"state": torch.randn(n, 3, generator=g)},
        terminated=(torch.arange(n) % 2).float(),  # [0, 1, 0, 1, ...]
    )


@torch.no_grad()
def set_constant_q(q: nn.Module, values: list[float]) -> None:
    """Every member ``j`` of the ensemble outputs ``values[j]`` everywhere."""
    out = cast(QEnsemble, q).out
    out.weight.zero_()
    out.bias.copy_(torch.tensor(values).view(-1, 1, 1))


class SumQ(nn.Module):
    """Two critics: ``Q_1 = sum(a)`` and ``Q_2 = 2 sum(a)``."""

    def forward(self, features: Tensor, actions: Tensor) -> Tensor:
        total = actions.sum(-1)
        return torch.stack([total, 2 * total])


def first_weight(q: nn.Module) -> Tensor:
    """The first layer's weights of an ensemble."""
    return cast(EnsembleLinear, cast(QEnsemble, q).layers[0]).weight


def saved(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` through ``torch.save`` / ``torch.load``, as a checkpoint would (sharing no tensors)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)


def test_awac_weights() -> None:
    weights = awac_weights(torch.tensor([0.5, 10.0, -1.0]), lam=1.0, max_weight=100.0)
    assert weights.tolist() == pytest.approx([math.exp(0.5), 100.0, math.exp(-1.0)], rel=1e-6)
    assert awac_weights(torch.tensor([2.0]), lam=2.0, max_weight=100.0).item() == pytest.approx(math.e)


def test_critic_target_without_entropy_and_no_bootstrap_at_terminals() -> None:
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


def test_advantage_and_actor_loss_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_actor_gradient_only_through_log_likelihood() -> None:
    algo = make_awac()
    loss, _ = algo.actor_loss(make_batch(n=8))
    loss.backward()
    assert all(p.grad is None for p in algo.q.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in algo.policy.parameters())


def test_update_changes_weights_and_reports_metrics() -> None:
    algo = make_awac()
    batch = make_batch(n=32)
    before = {
        name: [p.detach().clone() for p in net.parameters()]
        for name, net in {**algo.networks, "policy": algo.policy}.items()
    }
    metrics = algo.update(batch)
    assert {"train/critic_loss", "train/actor_loss", "train/adv_mean", "train/weight_mean"} <= set(metrics)
    assert all(
        key.startswith("train/") and isinstance(v, float) and math.isfinite(v) for key, v in metrics.items()
    )
    assert algo.updates == 1
    after = {name: list(net.parameters()) for name, net in {**algo.networks, "policy": algo.policy}.items()}
    for name, params in after.items():
        assert any(not torch.equal(a, b) for a, b in zip(before[name], params, strict=True)), (
            f"{name} did not change"
        )
    target_old = before["q_target"][0]
    expected_target = target_old + 0.005 * (first_weight(algo.q).detach() - target_old)
    assert torch.allclose(first_weight(algo.q_target), expected_target, atol=1e-6)


def test_state_round_trips() -> None:
    algo = make_awac()
    batch = make_batch(n=8)
    for _ in range(3):
        algo.update(batch)
    clone = make_awac()
    clone.policy.load_state_dict(algo.policy.state_dict())
    clone.load_state_dict(saved(algo.state_dict()))
    assert clone.updates == 3
    torch.manual_seed(1)
    a = algo.update(batch)
    torch.manual_seed(1)
    b = clone.update(batch)
    assert a == b
