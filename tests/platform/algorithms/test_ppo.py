"""PPO: the clipped surrogate and value loss by hand, bookkeeping invariants, and learning."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from omnigym.core.types import Evaluation, OnPolicyBatch
from omnigym.platform.algorithms.ppo import PPO, PPOConfig, masked_mean
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.vec_env import EnvConfig, make_vec_env
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig


def build(env_id="CartPole-v1", num_envs=2, **ppo):
    envs = make_vec_env(EnvConfig(id=env_id, num_envs=num_envs))
    policy = MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    algo = PPO(PPOConfig(**ppo), policy, envs.single_observation_space, envs.single_action_space)
    return envs, policy, algo


def fix_logprob(policy, logprob):
    """Make the policy's evaluation (alone or with its features) return chosen log-probabilities."""
    evaluation = Evaluation(logprob, torch.zeros_like(logprob))
    policy.evaluate = lambda obs, actions, extras=None: evaluation
    policy.evaluate_with_features = lambda obs, actions, extras=None: (evaluation, policy.features(obs))


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "grad"),
    [(1.5, 1.0, -1.2, 0.0), (0.5, 1.0, -0.5, -1.0), (0.5, -1.0, 0.8, 0.0), (1.5, -1.0, 1.5, 1.0)],
)
def test_clipped_surrogate_hand_numbers(ratio, adv, loss, grad):
    """docs/algorithms: loss and d loss / d ratio for single samples, eps = 0.2."""
    envs, policy, algo = build(norm_adv=False, clip_vloss=False, vf_coef=0.0, ent_coef=0.0)
    lp_new = torch.tensor([[np.log(ratio)]], requires_grad=True)
    fix_logprob(policy, lp_new)
    batch = OnPolicyBatch(
        obs={"state": torch.zeros(1, 4)},
        actions=torch.zeros(1, dtype=torch.long),
        logprob=torch.zeros(1, 1),
        mask=torch.ones(1, 1, dtype=torch.bool),
        values=torch.zeros(1),
        advantages=torch.tensor([adv]),
        returns=torch.zeros(1),
    )
    total, metrics = algo.compute_loss(batch)
    assert float(metrics["train/loss_policy"]) == pytest.approx(loss, abs=1e-6)
    total.backward()
    # d loss / d ratio = d loss / d logprob / ratio
    assert float(lp_new.grad) / ratio == pytest.approx(grad, abs=1e-6)
    envs.close()


def test_value_clipping_hand_numbers():
    """CleanRL value clipping: V_old=0, V_new=1, R=1, eps=0.2 -> 0.5 * (0.2 - 1)^2 = 0.32."""
    envs, policy, algo = build(clip_coef=0.2, clip_vloss=True)
    algo.value_from_features = lambda features: torch.ones(1)
    fix_logprob(policy, torch.zeros(1, 1))
    batch = OnPolicyBatch(
        obs={"state": torch.zeros(1, 4)}, actions=torch.zeros(1, dtype=torch.long), logprob=torch.zeros(1, 1),
        mask=torch.ones(1, 1, dtype=torch.bool), values=torch.zeros(1), advantages=torch.zeros(1),
        returns=torch.ones(1),
    )  # fmt: skip
    _, metrics = algo.compute_loss(batch)
    assert float(metrics["train/loss_value"]) == pytest.approx(0.32)
    algo.config.clip_vloss = False
    _, metrics = algo.compute_loss(batch)
    assert float(metrics["train/loss_value"]) == pytest.approx(0.0)
    envs.close()


def test_masked_mean_ignores_padding_parts():
    x = torch.tensor([[4.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[True, False, False], [True, True, True]])
    assert float(masked_mean(x, mask)) == pytest.approx(7 / 4)  # token-mean, docs/algorithms


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_first_minibatch_ratio_is_exactly_one(normalize_obs):
    """Log-prob bookkeeping: before any step the new policy equals the behaviour policy, also
    after observation statistics were updated between rollouts (they change only after updates)."""
    envs = make_vec_env(EnvConfig(id="Pendulum-v1", num_envs=2))
    policy = MLPPolicy(
        MLPPolicyConfig(normalize_obs=normalize_obs), envs.single_observation_space, envs.single_action_space
    )
    algo = PPO(
        PPOConfig(num_steps=64, num_epochs=1), policy, envs.single_observation_space, envs.single_action_space
    )
    collector = RolloutCollector(envs, policy, 64)
    collector.reset(seed=0)
    for _ in range(3):
        rollout = algo.process_rollout(collector.collect()[0])
        _, metrics = algo.compute_loss(rollout.flatten())
        # Acting saw batches of 2, the loss sees 128: only float summation order may differ.
        assert abs(float(metrics["train/approx_kl"])) < 1e-7
        assert float(metrics["train/clipfrac"]) == 0.0
        algo.update(rollout)
        policy.update_obs_stats(rollout.obs)
    if normalize_obs:
        assert float(policy.obs_rms.count) > 300
    envs.close()


def test_update_changes_weights_and_anneals_lr():
    envs, policy, algo = build(num_steps=32, num_epochs=2, num_minibatches=2)
    collector = RolloutCollector(envs, policy, 32)
    collector.reset(seed=0)
    before = [p.detach().clone() for p in policy.parameters()]
    algo.set_progress(0.5)
    metrics = algo.update(algo.process_rollout(collector.collect()[0]))
    assert metrics["train/learning_rate"] == pytest.approx(algo.config.learning_rate * 0.5)
    assert metrics["train/num_updates"] == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    envs.close()


def test_truncated_steps_bootstrap_from_final_observation():
    """A time-limit cut must add gamma * V(final obs); a termination must not."""
    envs = make_vec_env(EnvConfig(id="Pendulum-v1", num_envs=1, max_episode_steps=5))
    policy = MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    algo = PPO(
        PPOConfig(gamma=0.5, gae_lambda=1.0), policy, envs.single_observation_space, envs.single_action_space
    )
    collector = RolloutCollector(envs, policy, 8)
    collector.reset(seed=0)
    rollout = algo.process_rollout(collector.collect()[0])
    assert rollout.truncated[4, 0] and len(rollout.final_index) == 1
    with torch.no_grad():
        v_final = algo.value(rollout.final_obs)[0]
    expected = rollout.rewards[4, 0] + 0.5 * v_final - rollout.values[4, 0]
    assert float(rollout.advantages[4, 0]) == pytest.approx(float(expected), abs=1e-5)
    envs.close()


def test_reward_normalisation_scales_by_return_std():
    envs, policy, algo = build("Pendulum-v1", normalize_reward=True, num_steps=200)
    collector = RolloutCollector(envs, policy, 200)
    collector.reset(seed=0)
    rollout = collector.collect()[0]
    scaled = algo._scale_rewards(rollout)
    # Pendulum rewards are in [-16.3, 0]; scaled by a return std of tens they shrink a lot.
    assert scaled.abs().max() < rollout.rewards.abs().max() / 2
    assert algo.return_rms.count > 399
    envs.close()


def test_requires_policy_capabilities():
    from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig

    env = gym.make("CartPole-v1")
    obs_space = gym.spaces.Dict({"state": env.observation_space})
    policy = RandomPolicy(RandomPolicyConfig(), obs_space, env.action_space)
    with pytest.raises(ValueError, match="capabilities"):
        PPO(PPOConfig(), policy, obs_space, env.action_space)


def test_reward_normalisation_survives_steps_where_every_env_resets():
    """next_step autoreset with one env: some steps hold no valid transition at all."""
    envs = make_vec_env(
        EnvConfig(id="Pendulum-v1", num_envs=1, max_episode_steps=5, autoreset_mode="next_step")
    )
    policy = MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    algo = PPO(
        PPOConfig(num_steps=12, normalize_reward=True),
        policy,
        envs.single_observation_space,
        envs.single_action_space,
    )
    collector = RolloutCollector(envs, policy, 12)
    collector.reset(seed=0)
    rollout = algo.process_rollout(collector.collect()[0])
    assert not bool(rollout.valid.all())
    assert torch.isfinite(rollout.advantages).all() and torch.isfinite(algo.return_rms.var)
    envs.close()


def test_unknown_critic_activation_is_a_config_error():
    from omnigym.core.config import ConfigError, build_dataclass

    with pytest.raises(ConfigError, match="critic_activation"):
        build_dataclass(PPOConfig, {"critic_activation": "swish"}, path="algo")


def test_critic_learning_rate_is_its_own_and_anneals_alike():
    """Adam's first step moves every element with a gradient by its group's learning rate (times
    |g| / (|g| + eps), within 1 % of 1 for the largest gradients)."""
    envs, policy, algo = build(
        num_steps=16, num_epochs=1, num_minibatches=1, learning_rate=1e-4, critic_learning_rate=1e-2
    )
    collector = RolloutCollector(envs, policy, 16)
    collector.reset(seed=0)
    actor = [p.detach().clone() for p in policy.parameters()]
    critic = [p.detach().clone() for p in algo.critic.parameters()]
    algo.update(algo.process_rollout(collector.collect()[0]))

    def largest_step(before, after):
        return max(float((a - b.detach()).abs().max()) for a, b in zip(before, after, strict=True))

    actor_step = largest_step(actor, policy.parameters())
    critic_step = largest_step(critic, algo.critic.parameters())
    assert actor_step == pytest.approx(1e-4, rel=1e-2)
    assert critic_step == pytest.approx(1e-2, rel=1e-2)
    algo.set_progress(0.75)
    assert [g["lr"] for g in algo.optimizer.param_groups] == pytest.approx([2.5e-5, 2.5e-3])
    state = algo.state_dict()  # the two groups round-trip through a checkpoint
    _, _, fresh = build(learning_rate=1e-4, critic_learning_rate=1e-2)
    fresh.load_state_dict(state)
    assert [g["lr"] for g in fresh.optimizer.param_groups] == pytest.approx([2.5e-5, 2.5e-3])
    envs.close()


def test_critic_learning_rate_must_be_positive():
    with pytest.raises(ValueError, match="critic_learning_rate"):
        PPOConfig(critic_learning_rate=0.0)
