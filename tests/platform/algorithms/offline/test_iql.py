"""IQL: the expectile and AWR sanity values of docs/algorithms, hand-computed losses, one update."""

from __future__ import annotations

import math
from functools import partial
from typing import cast

import pytest
import torch
from gymnasium import spaces
from torch import nn

from omnigym.platform.algorithms.offline.iql import IQL, awr_weights, cosine_lr, expectile_loss

OBS_SPACE = spaces.Dict({"state": spaces.Box(-10.0, 10.0, (3,))})
ACT_SPACE = spaces.Box(-1.0, 1.0, (2,))
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@pytest.fixture
def make_iql(mlp_agent):
    """``make_iql(**overrides)``: IQL with (16, 16) networks and a Gaussian policy, seeded 0."""
    policy = {"action_head": "gaussian", "hidden_sizes": (16, 16)}
    return partial(mlp_agent, IQL, OBS_SPACE, ACT_SPACE, seed=0, policy=policy, hidden_sizes=(16, 16))


@torch.no_grad()
def set_constant_v(algo: IQL, value: float) -> None:
    last = cast(nn.Linear, algo.value.net.layers[-1])
    last.weight.zero_()
    last.bias.fill_(value)


# --- pure functions: the spec's sanity values ------------------------------------------------------


def test_expectile_loss_sanity() -> None:
    assert expectile_loss(torch.tensor([1.0, -1.0]), 0.7).item() == pytest.approx(0.5)
    # tau > 0.5: under-estimates (u > 0) cost tau, over-estimates 1 - tau
    assert expectile_loss(torch.tensor([2.0]), 0.9).item() == pytest.approx(0.9 * 4)
    assert expectile_loss(torch.tensor([-2.0]), 0.9).item() == pytest.approx(0.1 * 4)


def test_expectile_half_regresses_to_the_mean() -> None:
    targets = torch.tensor([1.0, 2.0, 6.0])
    v = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.SGD([v], lr=0.5)
    for _ in range(100):
        optimizer.zero_grad()
        expectile_loss(targets - v, 0.5).backward()
        optimizer.step()
    assert v.item() == pytest.approx(3.0, abs=1e-4)  # the mean: tau = 0.5 is half the MSE
    assert expectile_loss(targets - 1.0, 0.5).item() == pytest.approx(
        0.5 * ((targets - 1) ** 2).mean().item()
    )


def test_upper_expectile_sits_above_the_mean() -> None:
    targets = torch.tensor([1.0, 2.0, 6.0])
    grid = torch.linspace(0, 7, 7001)
    losses = torch.stack([expectile_loss(targets - v, 0.9) for v in grid])
    best = grid[losses.argmin()].item()
    # stationary point: 0.9 * sum(t - v for t > v) = 0.1 * sum(v - t for t < v) -> v = 4.857 (between 2 and 6)
    assert best == pytest.approx((0.9 * 6 + 0.1 * 3) / (0.9 + 0.1 * 2), abs=2e-3)


def test_awr_weights_sanity() -> None:
    weights = awr_weights(torch.tensor([0.5, 2.0, -1.0]), beta=3.0, max_weight=100.0)
    assert weights.tolist() == pytest.approx([4.48169, 100.0, math.exp(-3.0)], rel=1e-5)


def test_cosine_lr() -> None:
    assert cosine_lr(3e-4, 0, 100) == pytest.approx(3e-4)
    assert cosine_lr(3e-4, 50, 100) == pytest.approx(1.5e-4)
    assert cosine_lr(3e-4, 100, 100) == pytest.approx(0.0, abs=1e-12)
    assert cosine_lr(3e-4, 500, 100) == pytest.approx(0.0, abs=1e-12)


# --- losses on hand-made batches --------------------------------------------------------------------
def test_q_target_bootstraps_only_non_terminal(make_iql, toy_batch, set_constant_q) -> None:
    algo = make_iql(gamma=0.99)
    set_constant_v(algo, 5.0)
    batch = toy_batch()  # rewards [1, 2], terminated [0, 1]
    _, next_v = algo._inputs(batch)
    assert next_v.tolist() == pytest.approx([5.0, 5.0])
    target = algo.q_target_value(batch.rewards, batch.terminated, next_v)
    assert target.tolist() == pytest.approx([1 + 0.99 * 5.0, 2.0])
    # Q_1 = 0, Q_2 = 1 everywhere: mean over critics and samples of the squared errors
    set_constant_q(algo.q, [0.0, 1.0])
    loss, metrics = algo.critic_loss(algo.critic_input(batch.obs), batch, next_v)
    expected = ((0 - 5.95) ** 2 + (0 - 2) ** 2 + (1 - 5.95) ** 2 + (1 - 2) ** 2) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert metrics["train/q_mean"].item() == pytest.approx(0.5)


def test_reward_transform_enters_the_target(make_iql) -> None:
    algo = make_iql(reward_scale=10.0, reward_bias=-1.0)
    target = algo.q_target_value(torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([3.0]))
    assert target.item() == pytest.approx(9.0)


def test_value_loss_uses_min_of_target_critics(make_iql, toy_batch, set_constant_q) -> None:
    algo = make_iql(expectile=0.7)
    set_constant_q(algo.q_target, [3.0, 4.0])
    set_constant_q(algo.q, [50.0, 60.0])  # the online critics play no part
    set_constant_v(algo, 1.0)
    batch = toy_batch()
    loss, adv, _ = algo.value_loss(algo.critic_input(batch.obs), batch.actions)
    assert adv.tolist() == pytest.approx([2.0, 2.0])  # min(3, 4) - 1
    assert loss.item() == pytest.approx(0.7 * 4.0)
    set_constant_v(algo, 5.0)  # V above Q: weight 1 - tau
    loss, adv, _ = algo.value_loss(algo.critic_input(batch.obs), batch.actions)
    assert loss.item() == pytest.approx(0.3 * 4.0)


def test_actor_loss_is_weighted_log_likelihood(make_iql, toy_batch, set_standard_normal_policy) -> None:
    algo = make_iql(beta=3.0)
    set_standard_normal_policy(algo.policy)
    batch = toy_batch()
    batch.actions = torch.zeros(2, 2)  # log N(0; 0, I) = -2 * log sqrt(2 pi)
    loss, metrics = algo.actor_loss(batch, torch.tensor([0.5, 2.0]))
    logprob = -2 * HALF_LOG_2PI
    assert loss.item() == pytest.approx(-(4.48169 * logprob + 100.0 * logprob) / 2, rel=1e-5)
    assert metrics["train/weight_mean"].item() == pytest.approx((4.48169 + 100.0) / 2, rel=1e-5)


# --- update -----------------------------------------------------------------------------------------
def test_update_follows_corl_order_and_changes_weights(make_iql, toy_batch, weights, assert_stepped) -> None:
    algo = make_iql(total_updates=10)
    batch = toy_batch(n=32)
    before = weights(algo)
    # every loss of the step is computed with the pre-step networks, V(s') included (CORL's order)
    _, expected = algo.compute_loss(batch)
    metrics = algo.update(batch)
    for key in ("train/value_loss", "train/critic_loss", "train/actor_loss", "train/adv_mean"):
        assert metrics[key] == pytest.approx(expected[key].item(), rel=1e-5), key
    assert all(key.startswith("train/") and math.isfinite(v) for key, v in metrics.items())
    assert all(isinstance(v, float) for v in metrics.values())
    assert metrics["train/actor_lr"] == pytest.approx(3e-4)  # update 0: the initial lr
    assert algo.updates == 1
    # every network changed; the target moved by tau = 0.005 towards the stepped critic
    assert_stepped(algo, before)


def test_actor_lr_decays_with_updates(make_iql, toy_batch) -> None:
    algo = make_iql(total_updates=4)
    batch = toy_batch(n=8)
    lrs = [algo.update(batch)["train/actor_lr"] for _ in range(5)]
    assert lrs == pytest.approx([3e-4 * 0.5 * (1 + math.cos(math.pi * min(t, 4) / 4)) for t in range(5)])
    assert algo.optimizers["actor"].param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_state_round_trips(make_iql, toy_batch, assert_state_round_trips) -> None:
    assert_state_round_trips(make_iql, toy_batch(n=8))
