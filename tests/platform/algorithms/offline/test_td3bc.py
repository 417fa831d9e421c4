"""TD3+BC (docs/algorithms): lambda scaling, the BC term, the smoothed clipped double-Q target, cadence."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from omnigym.platform.algorithms.offline.td3bc import TD3BC, td3bc_lambda


@pytest.fixture
def make_td3bc(mlp_agent):
    return partial(mlp_agent, TD3BC, seed=0, policy={"action_head": "deterministic"}, hidden_sizes=(32, 32))


def test_lambda_keeps_the_q_term_scale_fixed() -> None:
    """Sanity: mean |Q| = 100 gives lambda = 0.025 (alpha 2.5), whatever the signs."""
    q = torch.tensor([100.0, -100.0, 50.0, -150.0], requires_grad=True)
    lam = td3bc_lambda(2.5, q)
    assert float(lam) == pytest.approx(0.025)
    assert not lam.requires_grad  # detached: no gradient through the normaliser


def test_actor_loss_by_hand_and_zero_bc_term_on_the_data(
    make_td3bc, toy_batch, constant_q, monkeypatch
) -> None:
    algo = make_td3bc()
    batch = toy_batch(n=4)
    batch.actions = batch.actions[:, :1]
    with torch.no_grad():
        actions, _ = algo.policy.rsample(batch.obs, deterministic=True)
    batch.actions = actions.clone()  # the dataset's actions are the policy's: the BC term is 0
    monkeypatch.setattr(algo.q, "member", lambda i, f, a: torch.full((f.shape[0],), 4.0) + 0 * a.sum(-1))
    loss, metrics = algo.actor_loss(batch)
    assert float(metrics["train/bc_mse"]) == pytest.approx(0.0, abs=1e-12)
    assert float(metrics["train/lambda"]) == pytest.approx(2.5 / 4.0)
    assert float(loss.detach()) == pytest.approx(-2.5 / 4.0 * 4.0)
    batch.actions = actions + 0.5
    loss, metrics = algo.actor_loss(batch)
    assert float(metrics["train/bc_mse"]) == pytest.approx(0.25)
    assert float(loss.detach()) == pytest.approx(-2.5 + 0.25)


def test_critic_target_is_the_min_of_the_targets_and_terminals_do_not_bootstrap(
    make_td3bc, toy_batch, constant_q, monkeypatch
) -> None:
    algo = make_td3bc(gamma=0.9)
    batch = toy_batch(n=2)  # rewards [1, 2], terminated [0, 1]
    batch.actions = batch.actions[:, :1]
    monkeypatch.setattr(algo, "q_target", constant_q([3.0, 5.0]))
    monkeypatch.setattr(algo, "q", constant_q([0.0, 1.0]))
    loss, _ = algo.critic_loss(batch)
    target = torch.tensor([1 + 0.9 * 3.0, 2.0])
    expected = (target - 0.0).square().mean() + (target - 1.0).square().mean()
    assert float(loss.detach()) == pytest.approx(float(expected))


def test_target_smoothing_noise_is_clipped(make_td3bc, toy_batch, monkeypatch) -> None:
    algo = make_td3bc(policy_noise=100.0, noise_clip=0.5)
    batch = toy_batch(n=256)
    batch.actions = batch.actions[:, :1]
    seen = []

    def record(features, actions):
        seen.append(actions)
        return torch.zeros(2, features.shape[0])

    monkeypatch.setattr(algo, "q_target", record)
    algo.critic_loss(batch)
    with torch.no_grad():
        mode, _ = algo.policy_target.rsample(batch.next_obs, deterministic=True)
    offset = (seen[0] - mode).abs()
    assert float(offset.max()) <= 0.5 + 1e-6  # clipped at noise_clip * half-range (1)
    assert float(offset.max()) > 0.4  # huge noise: clipping is what bounds it


def test_actor_and_targets_move_every_second_update(make_td3bc, random_batch) -> None:
    algo = make_td3bc()
    batch = random_batch(algo.observation_space, algo.action_space)
    policy_before = [p.clone() for p in algo.policy.parameters()]
    target_before = [p.clone() for p in algo.q_target.parameters()]
    metrics = algo.update(batch)
    assert "train/actor_loss" not in metrics
    assert all(torch.equal(a, b) for a, b in zip(policy_before, algo.policy.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(target_before, algo.q_target.parameters(), strict=True))
    metrics = algo.update(batch)
    assert "train/actor_loss" in metrics
    assert any(not torch.equal(a, b) for a, b in zip(policy_before, algo.policy.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(target_before, algo.q_target.parameters(), strict=True))
