"""FQL: the sanity values of docs/algorithms, hand-computed losses, the frozen-critic Q term, one update."""

from __future__ import annotations

import math

import pytest
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.platform.algorithms.offline.fql import FQL, FQLConfig, euler_solve, flow_matching_loss
from omnigym.policies.flow.one_step import OneStepFlowPolicy, OneStepFlowPolicyConfig
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

OBS_SPACE = spaces.Dict({"state": spaces.Box(-10.0, 10.0, (3,))})
ACT_SPACE = spaces.Box(-1.0, 1.0, (2,))
WIDE_ACT_SPACE = spaces.Box(-100.0, 100.0, (2,))  # no clipping of N(0, I)-sized actions


def make_fql(action_space: spaces.Box = ACT_SPACE, **overrides: object) -> FQL:
    torch.manual_seed(0)
    policy = OneStepFlowPolicy(OneStepFlowPolicyConfig(hidden_sizes=(16, 16)), OBS_SPACE, action_space)
    config = FQLConfig(hidden_sizes=(16, 16), flow_hidden_sizes=(16, 16), **overrides)  # type: ignore[arg-type]
    return FQL(config, policy, OBS_SPACE, action_space)


@pytest.fixture
def make_batch(toy_batch):
    """``make_batch(n=4, seed=0)``: rewards ``1, ..., n``, terminated ``[0, 1, 0, 1, ...]``."""
    return lambda n=4, seed=0: toy_batch(n, seed)


# --- pure functions -------------------------------------------------------------------------------
@pytest.mark.parametrize("steps", [1, 10])
def test_euler_solve_of_a_constant_field_adds_it(steps: int) -> None:
    z, c = torch.randn(5, 2), torch.tensor([0.5, -2.0])
    times: list[Tensor] = []

    def velocity(x: Tensor, t: Tensor) -> Tensor:
        times.append(t)
        return c.expand_as(x)

    torch.testing.assert_close(euler_solve(velocity, z, steps), z + c)
    assert [float(t[0, 0]) for t in times] == pytest.approx([i / steps for i in range(steps)])
    assert times[0].shape == (5, 1)


def test_euler_solve_of_the_single_point_flow_reaches_the_point() -> None:
    """For one data point a the exact field is (a - x) / (1 - t); Euler on t = 0, 1/N, ... ends on a."""
    z, a = torch.randn(6, 2, dtype=torch.float64), torch.rand(6, 2, dtype=torch.float64)
    torch.testing.assert_close(euler_solve(lambda x, t: (a - x) / (1 - t), z, 10), a)


def test_flow_matching_loss_is_zero_for_the_true_velocity() -> None:
    """x_t = (1 - t) x_0 + t a: a network outputting a - x_0 has loss 0, and the loss is its MSE."""
    actions, noise, t = torch.rand(8, 2), torch.randn(8, 2), torch.rand(8, 1)
    assert flow_matching_loss(lambda x, tt: actions - noise, actions, noise, t).item() == 0.0
    # a zero field: loss = mean (a - x_0)^2; the interpolant it sees is (1 - t) x_0 + t a
    seen: list[Tensor] = []
    loss = flow_matching_loss(lambda x, tt: seen.append(x) or torch.zeros_like(x), actions, noise, t)
    torch.testing.assert_close(loss, (actions - noise).square().mean())
    torch.testing.assert_close(seen[0], (1 - t) * noise + t * actions)


# --- losses ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("q_agg", "next_value"), [("mean", 2.0), ("min", 1.0)])
def test_critic_target_on_a_crafted_batch(q_agg: str, next_value: float, make_batch, set_constant_q) -> None:
    """y = r + gamma (1 - done) agg_j Q'_j; target members are 1 and 3, online members 0 and 4."""
    algo = make_fql(q_agg=q_agg, gamma=0.9)
    set_constant_q(algo.q_target, [1.0, 3.0])
    set_constant_q(algo.q, [0.0, 4.0])
    batch = make_batch(n=2)  # rewards [1, 2], terminated [0, 1]
    loss, metrics = algo.critic_loss(batch)
    target = torch.tensor([1 + 0.9 * next_value, 2.0])
    expected = ((0 - target).square().sum() + (4 - target).square().sum()) / 4  # mean over members and batch
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert metrics["train/q_mean"].item() == pytest.approx(2.0)


def test_critic_target_uses_transformed_rewards(make_batch, set_constant_q) -> None:
    algo = make_fql(reward_scale=2.0, reward_bias=-1.0, gamma=0.5)
    set_constant_q(algo.q_target, [2.0, 2.0])
    set_constant_q(algo.q, [0.0, 0.0])
    loss, _ = algo.critic_loss(make_batch(n=2))
    target = torch.tensor([1 * 2 - 1 + 0.5 * 2, 2 * 2 - 1])
    assert loss.item() == pytest.approx(target.square().mean().item())


@pytest.mark.parametrize("clip", [True, False])
def test_distill_loss_is_zero_when_mu_is_the_solved_flow(
    clip: bool, monkeypatch: pytest.MonkeyPatch, make_batch
) -> None:
    """Spec sanity: if mu(s, z) equals the Euler-solved flow action for every z, L_distill = 0."""
    algo = make_fql(clip_flow_target=clip, alpha=1e6)
    monkeypatch.setattr(algo.policy, "noise_to_action", lambda features, z: algo.flow_actions(features, z))
    _, metrics = algo.actor_loss(make_batch())
    assert metrics["train/distill_loss"].item() == 0.0


def test_distill_loss_of_a_constant_flow(monkeypatch: pytest.MonkeyPatch, make_batch) -> None:
    """v = c everywhere solves z to z + c; a policy outputting z is c^2 away on every dimension."""
    algo = make_fql(WIDE_ACT_SPACE)
    monkeypatch.setattr(algo, "velocity", lambda features, x, t: torch.full_like(x, 0.5))
    monkeypatch.setattr(algo.policy, "noise_to_action", lambda features, z: z)
    _, metrics = algo.actor_loss(make_batch())
    assert metrics["train/distill_loss"].item() == pytest.approx(0.25, rel=1e-5)


def test_flow_loss_is_zero_for_the_single_point_field(monkeypatch: pytest.MonkeyPatch, make_batch) -> None:
    """With one action in the batch, v(x_t, t) = (a - x_t) / (1 - t) is exactly a - x_0 (noise at t = 0)."""
    algo = make_fql()
    batch = make_batch()
    batch.actions = batch.actions[:1].expand(4, 2).clone()
    monkeypatch.setattr(algo, "velocity", lambda features, x, t: (batch.actions - x) / (1 - t))
    _, metrics = algo.actor_loss(batch)
    assert metrics["train/flow_loss"].item() == pytest.approx(0.0, abs=1e-8)


@pytest.mark.parametrize(("normalize", "q_loss"), [(False, -3.0), (True, -1.0)])
def test_actor_loss_sums_its_terms_and_leaves_the_critic_alone(
    normalize: bool, q_loss: float, make_batch, set_constant_q
) -> None:
    """L_actor = L_flow + alpha L_distill + L_q, L_q = -mean_j Q_j (/ mean |Q| when normalised);
    its gradient reaches policy and flow but not the critics."""
    algo = make_fql(alpha=7.0, normalize_q_loss=normalize)
    set_constant_q(algo.q, [2.0, 4.0])
    loss, metrics = algo.actor_loss(make_batch())
    assert metrics["train/q_loss"].item() == pytest.approx(q_loss)
    expected = metrics["train/flow_loss"] + 7.0 * metrics["train/distill_loss"] + q_loss
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()
    assert all(p.grad is None for p in algo.q.parameters()), "the Q term updated the critic"
    assert all(p.requires_grad for p in algo.q.parameters()), "the critic stays trainable"
    assert all(p.grad is not None for p in algo.flow.parameters())
    assert all(p.grad is not None for p in algo.policy.parameters())


def test_q_term_gradient_is_minus_dq_da(monkeypatch: pytest.MonkeyPatch, make_batch) -> None:
    """With alpha = 0 and Q_j(s, a) = a[0], L_q = -mean a[0]: d/d(bias of mu's last layer) = [-1, 0]."""
    algo = make_fql(WIDE_ACT_SPACE, alpha=0.0)
    monkeypatch.setattr(algo.q, "forward", lambda features, actions: actions[:, 0].expand(2, -1))
    bias = algo.policy.net.layers[-1].bias
    loss, _ = algo.actor_loss(make_batch())
    loss.backward()
    assert bias.grad is not None
    torch.testing.assert_close(bias.grad, torch.tensor([-1.0, 0.0]))


# --- construction and update ----------------------------------------------------------------------
def test_rejects_a_policy_without_noise_input() -> None:
    policy = MLPPolicy(MLPPolicyConfig(action_head="squashed_gaussian"), OBS_SPACE, ACT_SPACE)
    with pytest.raises(ValueError, match="capabilities"):
        FQL(FQLConfig(hidden_sizes=(8,), flow_hidden_sizes=(8,)), policy, OBS_SPACE, ACT_SPACE)


def test_config_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="q_agg"):
        FQLConfig(q_agg="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="flow_steps"):
        FQLConfig(flow_steps=0)


def test_defaults_follow_the_reference() -> None:
    config = FQLConfig()
    assert (config.alpha, config.flow_steps, config.q_agg, config.normalize_q_loss) == (
        10.0,
        10,
        "mean",
        False,
    )
    assert config.hidden_sizes == config.flow_hidden_sizes == (512, 512, 512, 512)
    assert config.critic_layer_norm and config.num_critics == 2
    assert FQL.policy_defaults == {"type": "one_step_flow"}


def test_update_changes_weights_and_returns_finite_metrics(make_batch) -> None:
    algo = make_fql()
    nets = {"policy": algo.policy, "flow": algo.flow, "q": algo.q, "q_target": algo.q_target}
    before = {name: [p.detach().clone() for p in net.parameters()] for name, net in nets.items()}
    metrics = algo.update(make_batch(n=16))
    assert algo.updates == 1
    for name, net in nets.items():
        changed = [not torch.equal(a, b) for a, b in zip(before[name], net.parameters(), strict=True)]
        assert any(changed), f"{name} did not change"
    expected = {
        "critic_loss",
        "q_mean",
        "actor_loss",
        "flow_loss",
        "distill_loss",
        "q_loss",
        "q_policy",
        "bc_mse",
    }
    assert set(metrics) == {f"train/{k}" for k in expected}
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
