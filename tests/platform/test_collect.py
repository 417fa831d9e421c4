"""Collection under every Gymnasium autoreset mode, truncation vs termination, stats and groups."""

from collections import Counter
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.platform.collect import RolloutCollector, group_seeds
from omnigym.platform.vec_env import EnvConfig, make_vec_env
from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig

MODES = ["same_step", "next_step", "disabled"]


class Countdown(gym.Env):
    """A scripted env whose state counts steps from a random start in {0, 10, 20}. Reaching 23
    terminates the episode (so starts at 20 terminate after 3 steps); other starts are truncated
    by the TimeLimit after 4 steps. The reward is the new count, as two named components."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Dict({"state": spaces.Box(-100, 100, (1,), np.float32)})
        self.action_space = spaces.Discrete(2)
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.count = int(self.np_random.integers(0, 3)) * 10
        return {"state": np.array([self.count], np.float32)}, {}

    def step(self, action):
        self.count += 1
        terminated = self.count == 23
        info = {"success": terminated, "reward_components": {"base": 1.0, "bonus": float(self.count - 1)}}
        return {"state": np.array([self.count], np.float32)}, float(self.count), terminated, False, info


gym.register("omnigym_test/Countdown-v0", entry_point=Countdown, max_episode_steps=4)


def collect(mode: str, num_steps: int = 12, num_envs: int = 2, env_id: str = "omnigym_test/Countdown-v0"):
    envs = make_vec_env(EnvConfig(id=env_id, num_envs=num_envs, autoreset_mode=mode))
    policy = RandomPolicy(RandomPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    collector = RolloutCollector(envs, policy, num_steps)
    collector.reset(seed=3)
    rollout, stats = collector.collect()
    envs.close()
    return rollout, stats


@pytest.mark.parametrize("mode", MODES)
def test_shapes_and_dtypes(mode):
    rollout, _ = collect(mode)
    assert rollout.obs["state"].shape == (12, 2, 1)
    assert rollout.rewards.shape == rollout.terminated.shape == rollout.valid.shape == (12, 2)
    assert rollout.logprob.shape == rollout.mask.shape == (12, 2, 1)
    assert rollout.reward_components.shape == (12, 2, 2)
    assert rollout.reward_component_names == ("base", "bonus")
    assert rollout.terminated.dtype == rollout.truncated.dtype == torch.bool
    assert rollout.next_obs["state"].shape == (2, 1)
    assert rollout.policy_version.shape == (12, 2)


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_same_step_and_disabled_store_only_transitions(mode):
    rollout, stats = collect(mode)
    assert bool(rollout.valid.all())
    # reward = state after the step = state before + 1, on every stored step
    assert torch.equal(rollout.rewards, rollout.obs["state"][..., 0] + 1)
    # components sum to the reward, also on the steps that ended an episode
    assert torch.allclose(rollout.reward_components.sum(-1), rollout.rewards)
    # truncated episodes keep their true final observation for bootstrapping
    for (t, n), final in zip(rollout.final_index.tolist(), rollout.final_obs["state"], strict=True):
        assert rollout.truncated[t, n] and not rollout.terminated[t, n]
        assert float(final) == float(rollout.obs["state"][t, n, 0] + 1)
    assert len(rollout.final_index) == int(rollout.truncated.sum())
    assert len(stats) == int(rollout.dones.sum())


def test_next_step_marks_reset_steps_invalid():
    rollout, stats = collect("next_step")
    dones = rollout.dones
    # the step after each episode end (within the rollout) is the reset step: invalid, reward 0
    for t, n in dones[:-1].nonzero().tolist():
        assert not rollout.valid[t + 1, n]
        assert rollout.rewards[t + 1, n] == 0
        # the final observation is the next stored observation: no extra storage needed
        assert float(rollout.obs["state"][t + 1, n, 0]) == float(rollout.rewards[t, n])
    assert int((~rollout.valid).sum()) == int(dones[:-1].sum())
    assert len(rollout.final_index) == 0
    assert len(stats) == int(dones.sum())


def test_modes_see_the_same_episodes():
    """The three modes differ only in bookkeeping: the same episodes, returns and lengths."""
    results = {mode: collect(mode, num_steps=30)[1] for mode in MODES}
    same, nxt = results["same_step"], results["next_step"]
    assert same.returns == results["disabled"].returns and same.lengths == results["disabled"].lengths
    # next_step spends one step per reset, so it completes fewer of the same episodes
    assert 0 < len(nxt) < len(same)
    assert not Counter(nxt.returns) - Counter(same.returns)
    assert set(same.returns) <= {10.0, 50.0, 66.0}


def test_episode_stats_and_metrics():
    rollout, stats = collect("same_step", num_steps=12)
    assert len(stats.returns) == len(stats.lengths) == int(rollout.dones.sum()) > 0
    for ret, length in zip(stats.returns, stats.lengths, strict=True):
        # start 0: 1+2+3+4 = 10 truncated; start 10: 11+..+14 = 50 truncated; start 20: 21+22+23 terminated
        assert (ret, length) in {(10.0, 4), (50.0, 4), (66.0, 3)}
    assert stats.metrics["success"] == [1.0 if length == 3 else 0.0 for length in stats.lengths]
    assert int(rollout.terminated.sum()) == stats.lengths.count(3)


def test_episode_accumulators_continue_across_rollouts():
    envs = make_vec_env(EnvConfig(id="CartPole-v1", num_envs=2))
    policy = RandomPolicy(RandomPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    collector = RolloutCollector(envs, policy, 5)
    collector.reset(seed=0)
    torch.manual_seed(0)
    lengths = []
    for _ in range(20):
        lengths += collector.collect()[1].lengths
    envs.close()
    assert max(lengths) > 5, "episodes longer than one rollout must be counted whole"
    assert sum(lengths) <= 200  # 20 rollouts x 5 steps x 2 envs


def test_async_vector_env_matches_sync():
    torch.manual_seed(0)
    sync, _ = collect("same_step", num_steps=20, env_id="CartPole-v1")
    torch.manual_seed(0)
    envs = make_vec_env(EnvConfig(id="CartPole-v1", num_envs=2, vectorization="async"))
    try:
        policy = RandomPolicy(RandomPolicyConfig(), envs.single_observation_space, envs.single_action_space)
        collector = RolloutCollector(envs, policy, 20)
        collector.reset(seed=3)
        rollout, _ = collector.collect()
    finally:
        envs.close()
    assert torch.equal(rollout.obs["state"], sync.obs["state"])
    assert torch.equal(rollout.rewards, sync.rewards)


def test_group_seeds_and_group_reset():
    assert group_seeds(7, 6, 3) == [7, 7, 7, 8, 8, 8]
    with pytest.raises(ValueError, match="multiple"):
        group_seeds(0, 5, 2)
    envs = make_vec_env(EnvConfig(id="Pendulum-v1", num_envs=4))
    policy = RandomPolicy(RandomPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    collector = RolloutCollector(envs, policy, 1)
    collector.reset(seed=group_seeds(11, 4, 2))
    state = collector.obs["state"]
    envs.close()
    assert np.array_equal(state[0], state[1]) and np.array_equal(state[2], state[3])
    assert not np.array_equal(state[0], state[2])


def test_flatten_drops_invalid_steps():
    rollout, _ = collect("next_step")
    rollout.values = torch.zeros(12, 2)
    rollout.advantages = torch.arange(24, dtype=torch.float32).reshape(12, 2)
    rollout.returns = torch.zeros(12, 2)
    batch = rollout.flatten()
    assert len(batch) == int(rollout.valid.sum())
    assert torch.equal(batch.advantages, rollout.advantages[rollout.valid])
    with pytest.raises(ValueError, match="process_rollout"):
        collect("same_step")[0].flatten()
