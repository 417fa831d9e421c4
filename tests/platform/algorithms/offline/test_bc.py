"""BC: the loss is the policy's supervised loss (by hand), it learns a linear expert, state round-trips."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.offline.bc import BC
from omnigym.policies.mlp import MLPPolicy

OBS_SPACE = spaces.Dict({"state": spaces.Box(-10.0, 10.0, (4,))})
ACT_SPACE = spaces.Box(-1.0, 1.0, (2,))
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
EXPERT = torch.tensor([[0.3, -0.2], [0.1, 0.25], [-0.2, 0.1], [0.15, 0.05]])  # action = state @ EXPERT


@pytest.fixture
def make_bc(mlp_agent):
    """``make_bc(action_head="gaussian", **overrides)``: BC with a (64, 64) ReLU MLP policy, seeded 0."""

    def make(action_head: str = "gaussian", **overrides: object) -> BC:
        policy = {"hidden_sizes": (64, 64), "activation": "relu", "action_head": action_head}
        return mlp_agent(BC, OBS_SPACE, ACT_SPACE, seed=0, policy=policy, **overrides)

    return make


def expert_batch(n: int, generator: torch.Generator) -> TransitionBatch:
    obs = torch.randn(n, 4, generator=generator)
    return TransitionBatch(
        obs={"state": obs},
        actions=obs @ EXPERT,
        rewards=torch.zeros(n),
        next_obs={"state": obs},
        terminated=torch.zeros(n),
    )


def test_gaussian_loss_is_negative_log_likelihood(make_bc, set_standard_normal_policy) -> None:
    algo = make_bc()
    set_standard_normal_policy(algo.policy)  # pi(.|s) = N(0, I)
    batch = expert_batch(3, torch.Generator().manual_seed(0))
    batch.actions = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, -1.0]])
    loss, metrics = algo.compute_loss(batch)
    expected = 2 * HALF_LOG_2PI + 0.5 * (0 + 1 + 2) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["train/bc_loss"].item() == pytest.approx(expected, rel=1e-6)


def test_deterministic_loss_is_squared_error(make_bc) -> None:
    algo = make_bc(action_head="deterministic")
    with torch.no_grad():  # action = tanh(0) = 0
        for p in cast(MLPPolicy, algo.policy).head.parameters():
            p.zero_()
    batch = expert_batch(2, torch.Generator().manual_seed(0))
    batch.actions = torch.tensor([[0.5, 0.0], [1.0, -1.0]])
    loss, _ = algo.compute_loss(batch)
    assert loss.item() == pytest.approx((0.25 + 2.0) / 2, rel=1e-6)


def test_learns_a_linear_expert(make_bc) -> None:
    algo = make_bc(actor_lr=1e-3)
    g = torch.Generator().manual_seed(0)
    test = expert_batch(512, g)

    def mse() -> float:
        with torch.no_grad():
            action = algo.policy.act(test.obs, deterministic=True).action
            return float((action - test.actions).square().mean())

    initial = mse()
    for _ in range(300):
        metrics = algo.update(expert_batch(256, g))
    assert algo.updates == 300
    assert all(key.startswith("train/") and math.isfinite(v) for key, v in metrics.items())
    assert mse() < initial / 20, (initial, mse())


def test_state_round_trips_the_optimiser(make_bc, saved) -> None:
    algo = make_bc()
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        algo.update(expert_batch(16, g))
    state = saved(algo.state_dict())
    assert state["networks"] == {} and state["optimizers"]["actor"]["state"]
    clone = make_bc()
    clone.policy.load_state_dict(algo.policy.state_dict())
    clone.load_state_dict(state)
    assert clone.updates == 3
    batch = expert_batch(16, g)
    assert algo.update(batch) == clone.update(batch)
