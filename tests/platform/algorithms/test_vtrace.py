"""IMPALA V-trace: docs/algorithms targets through the algorithm on tiny rollouts, the loss by hand,
on-policy reduction to Monte-Carlo (lambda = 1) returns, and learning CartPole."""

import math

import pytest
import torch

from omnigym.core.types import Evaluation, OnPolicyBatch, Rollout
from omnigym.platform.algorithms.vtrace import VTrace, VTraceConfig
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.returns import gae
from omnigym.platform.vec_env import EnvConfig, make_vec_env
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig


@pytest.fixture
def envs():
    envs = make_vec_env(EnvConfig(id="CartPole-v1", num_envs=2))
    yield envs
    envs.close()


def build(envs, **config):
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    return VTrace(VTraceConfig(**config), policy, envs.single_observation_space, envs.single_action_space)


def fix_logprob(policy, logprob):
    evaluation = Evaluation(logprob, torch.zeros_like(logprob))
    policy.evaluate = lambda obs, actions, extras=None: evaluation
    policy.evaluate_with_features = lambda obs, actions, extras=None: (evaluation, policy.features(obs))


def tiny_rollout(values, bootstrap, rewards, terminated=None):
    """One env, T steps; the critic is made to read V from the first observation entry."""
    T = len(values)
    obs = torch.zeros(T, 1, 4)
    obs[:, 0, 0] = torch.tensor(values)
    next_obs = torch.zeros(1, 4)
    next_obs[0, 0] = bootstrap
    term = (
        torch.zeros(T, 1, dtype=torch.bool) if terminated is None else torch.tensor(terminated).reshape(T, 1)
    )
    return Rollout(
        obs={"state": obs}, actions=torch.zeros(T, 1, dtype=torch.long),
        rewards=torch.tensor(rewards).reshape(T, 1), reward_components=torch.zeros(T, 1, 0),
        terminated=term, truncated=torch.zeros(T, 1, dtype=torch.bool),
        valid=torch.ones(T, 1, dtype=torch.bool),
        logprob=torch.zeros(T, 1, 1), mask=torch.ones(T, 1, 1, dtype=torch.bool),
        policy_version=torch.zeros(T, 1, dtype=torch.long), extras={}, next_obs={"state": next_obs},
        final_obs={"state": torch.zeros(0, 4)}, final_index=torch.zeros(0, 2, dtype=torch.long),
    )  # fmt: skip


def targets(envs, rhos, values, bootstrap, rewards, **config):
    algo = build(envs, gamma=0.9, **config)
    algo.value_from_features = lambda features: features[:, 0]
    fix_logprob(algo.policy, torch.log(torch.tensor(rhos)).reshape(-1, 1))  # behaviour log-prob is 0
    processed = algo.process_rollout(tiny_rollout(values, bootstrap, rewards))
    return processed.returns[:, 0].tolist(), processed.advantages[:, 0].tolist()


@pytest.mark.parametrize(("rho", "v0"), [(2.0, 1.9), (0.5, 0.95)])
def test_single_step_targets(envs, rho, v0):
    """§5.8: gamma 0.9, V(x_0) = 0, bootstrap 1, r = 1: rho 2 -> v_0 = A_0 = 1.9; rho 0.5 -> 0.95."""
    vs, adv = targets(envs, [rho], [0.0], 1.0, [1.0])
    assert vs == pytest.approx([v0], abs=1e-5) and adv == pytest.approx([v0], abs=1e-5)


def test_two_step_targets(envs):
    """§5.8: rho [2, 0.5], r [1, 0], V [0, 0], bootstrap 1 -> v = A = [1.405, 0.45]."""
    vs, adv = targets(envs, [2.0, 0.5], [0.0, 0.0], 1.0, [1.0, 0.0])
    assert vs == pytest.approx([1.405, 0.45], abs=1e-5) and adv == pytest.approx([1.405, 0.45], abs=1e-5)


def test_truncation_levels_are_configurable(envs):
    """rho_bar = c_bar = rho_pg_bar = 2 lets rho = 2 through: v_0 = 2 * (1 + 0.9 * 1) = 3.8."""
    vs, adv = targets(envs, [2.0], [0.0], 1.0, [1.0], rho_bar=2.0, c_bar=2.0, rho_pg_bar=2.0)
    assert vs == pytest.approx([3.8], abs=1e-5) and adv == pytest.approx([3.8], abs=1e-5)


def test_on_policy_targets_are_lambda_one_returns(envs):
    """mu = pi (a fresh rollout, all rho = 1): v_s is the n-step bootstrapped return, GAE(lambda=1)."""
    algo = build(envs, num_steps=64, gamma=0.97)
    collector = RolloutCollector(envs, algo.policy, 64)
    collector.reset(seed=0)
    rollout = collector.collect()[0]
    assert bool(rollout.dones.any())  # episode boundaries inside the rollout
    processed = algo.process_rollout(rollout)
    next_values = torch.cat([processed.values[1:], algo.value(rollout.next_obs).detach()[None]])
    _, expected = gae(
        rollout.rewards, processed.values, next_values, rollout.terminated, rollout.dones, 0.97, 1.0
    )
    torch.testing.assert_close(processed.returns, expected, rtol=0, atol=1e-4)
    # and the policy-gradient advantage is the one-step TD error on v_{s+1}: sum equals return - V
    torch.testing.assert_close(processed.advantages, expected - processed.values, rtol=0, atol=1e-4)


def test_loss_by_hand(envs):
    """policy -A * log pi (A constant), value 0.5 * (v_s - V)^2 * vf_coef, entropy bonus, over 2 rows."""
    algo = build(envs, vf_coef=0.5, ent_coef=0.01)
    lp = torch.tensor([[math.log(0.5)], [math.log(0.25)]], requires_grad=True)
    entropy = torch.tensor([[0.6], [0.4]])
    algo.policy.evaluate_with_features = lambda obs, actions, extras=None: (
        Evaluation(lp, entropy),
        algo.policy.features(obs),
    )
    algo.value_from_features = lambda features: torch.tensor([0.0, 1.0])
    batch = OnPolicyBatch(
        obs={"state": torch.zeros(2, 4)}, actions=torch.zeros(2, dtype=torch.long),
        logprob=lp.detach().clone(),
        mask=torch.ones(2, 1, dtype=torch.bool), values=torch.zeros(2), advantages=torch.tensor([2.0, -1.0]),
        returns=torch.tensor([1.0, 3.0]),
    )  # fmt: skip
    loss, metrics = algo.compute_loss(batch)
    pg = -(2.0 * math.log(0.5) - 1.0 * math.log(0.25)) / 2
    v = 0.5 * (1.0 + 4.0) / 2
    assert float(metrics["train/loss_policy"]) == pytest.approx(pg, abs=1e-6)
    assert float(metrics["train/loss_value"]) == pytest.approx(v, abs=1e-6)
    assert float(metrics["train/entropy"]) == pytest.approx(0.5, abs=1e-6)
    assert float(metrics["train/rho"]) == pytest.approx(1.0)
    assert float(loss.detach()) == pytest.approx(pg + 0.5 * v - 0.01 * 0.5, abs=1e-6)
    loss.backward()
    torch.testing.assert_close(lp.grad[:, 0], torch.tensor([-1.0, 0.5]))  # -A / B: the advantage is constant


def test_multi_part_actions_sum_their_valid_parts(envs):
    """log pi of an action is the sum over its valid parts; padding (even -inf) counts 0."""
    algo = build(envs, gamma=0.9)
    algo.value_from_features = lambda features: features[:, 0]
    rollout = tiny_rollout([0.0], 1.0, [1.0])
    rollout.logprob = torch.tensor([[[-1.0, -2.0, -math.inf]]])
    rollout.mask = torch.tensor([[[True, True, False]]])
    # current: parts -1 + ln 2, -2 -> log rho = ln 2 (rho = 2) -> v_0 = 1.9 (rho_bar 1)
    fix_logprob(algo.policy, torch.tensor([[-1.0 + math.log(2.0), -2.0, -math.inf]]))
    processed = algo.process_rollout(rollout)
    assert float(processed.returns[0, 0]) == pytest.approx(1.9, abs=1e-5)


def test_update_and_resume_state(envs):
    algo = build(envs, num_steps=32, num_minibatches=2)
    collector = RolloutCollector(envs, algo.policy, 32)
    collector.reset(seed=0)
    before = [p.detach().clone() for p in algo.policy.parameters()]
    metrics = algo.update(algo.process_rollout(collector.collect()[0]))
    assert metrics["train/num_updates"] == 2 and all(math.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.policy.parameters(), strict=True))
    assert set(algo.state_dict()) == {"critic", "optimizer"}


def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        VTraceConfig(rho_bar=0.0)
    with pytest.raises(ValueError):
        VTraceConfig(num_steps=0)


def test_vtrace_learns_cartpole(cartpole_learning):
    untrained, trained = cartpole_learning(
        "vtrace",
        "omnigym.platform.algorithms.vtrace:VTrace",
        20000,
        {"num_steps": 32, "num_minibatches": 1, "learning_rate": 1e-3, "gamma": 0.98, "ent_coef": 0.0},
    )
    assert untrained["return_mean"] < 30, untrained
    assert trained["return_mean"] > untrained["return_mean"] + 30, (trained, untrained)
