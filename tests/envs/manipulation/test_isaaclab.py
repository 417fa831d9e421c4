"""The Isaac Lab path: the adapter, torch-native collection and evaluation, and PPO end to end, run
on omnigym/TorchReach-v0 (Isaac Lab's batched conventions in plain torch); the real Isaac Lab test
runs only where Isaac Lab and a GPU are."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from omnigym.core.vector import TorchVectorEnv
from omnigym.envs.manipulation.isaaclab import IsaacLabVectorEnv
from omnigym.envs.manipulation.torch_reach import ReachArms, TorchReachCfg, TorchReachLabEnv
from omnigym.platform.collect import TorchRolloutCollector, make_collector
from omnigym.platform.evaluate import evaluate_torch_env
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer
from omnigym.platform.vec_env import EnvConfig, make_vec_env, to_torch_env_action
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

HAS_ISAACLAB = importlib.util.find_spec("isaaclab") is not None


def reach_envs(num_envs: int = 8, device: str = "cpu", **kwargs) -> TorchVectorEnv:
    config = EnvConfig(
        id="omnigym/TorchReach-v0",
        num_envs=num_envs,
        vectorization="vector",
        kwargs={"device": device, **kwargs},
    )
    envs = make_vec_env(config)
    assert isinstance(envs, TorchVectorEnv)
    return envs


def mlp_policy(envs: TorchVectorEnv) -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)


# --- the reach task's dynamics, by hand ---------------------------------------------------------
def test_reach_kinematics_reward_and_episode_end():
    arms = ReachArms(TorchReachCfg(num_envs=2, episode_length=3))
    arms.joint_pos = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    arms.goal = torch.tensor([[1.0, 0.2], [0.0, 1.0]])
    torch.testing.assert_close(arms.end_effector(), torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    # joint speed 2 rad/s for 0.1 s: +0.2 rad on the shoulder of arm 1, nothing on arm 0
    reward, terminated, truncated, success = arms.advance(torch.tensor([[0.0, 0.0], [5.0, 0.0]]))
    torch.testing.assert_close(arms.joint_pos, torch.tensor([[0.0, 0.0], [0.2, 0.0]]))
    expected = torch.tensor([0.2, math.dist((math.cos(0.2), math.sin(0.2)), (0.0, 1.0))])
    torch.testing.assert_close(reward, -expected)
    assert not success.any() and not terminated.any() and not truncated.any()
    arms.goal = arms.end_effector().clone()
    arms.goal[0, 0] += 0.5  # arm 1 sits on its goal, arm 0 is 0.5 m away
    reward, terminated, truncated, success = arms.advance(torch.zeros(2, 2))
    assert terminated.tolist() == [False, True] and success.tolist() == [False, True]
    _, terminated, truncated, _ = arms.advance(torch.zeros(2, 2))  # step 3 of 3: time out
    assert truncated.tolist() == [True, False] and terminated.tolist() == [False, True]  # success wins


def test_reset_where_only_touches_masked_arms():
    arms = ReachArms(TorchReachCfg(num_envs=4))
    arms.reset_where(torch.ones(4, dtype=torch.bool))
    before_q, before_goal = arms.joint_pos.clone(), arms.goal.clone()
    arms.episode_length_buf[:] = 7
    arms.reset_where(torch.tensor([True, False, False, True]))
    assert torch.equal(arms.joint_pos[1:3], before_q[1:3]) and torch.equal(arms.goal[1:3], before_goal[1:3])
    assert not torch.equal(arms.joint_pos[0], before_q[0]) and not torch.equal(arms.goal[3], before_goal[3])
    assert arms.episode_length_buf.tolist() == [0, 7, 7, 0]
    radius = arms.goal.norm(dim=-1)
    assert bool(((radius >= arms.goal_radius[0]) & (radius <= arms.goal_radius[1])).all())


# --- the adapter ----------------------------------------------------------------------------------
def test_adapter_spaces_and_step_types_stay_torch():
    envs = reach_envs(num_envs=5)
    assert list(envs.single_observation_space.spaces) == ["state"]
    assert envs.single_observation_space["state"].shape == (8,)
    assert envs.single_action_space.shape == (2,) and envs.num_envs == 5
    obs, _ = envs.reset(seed=0)
    assert isinstance(obs["state"], torch.Tensor) and obs["state"].shape == (5, 8)
    obs, reward, terminated, truncated, info = envs.step(torch.zeros(5, 2))
    assert obs["state"].dtype == reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == torch.bool and reward.shape == (5,)
    assert all(t.device == envs.device for t in (obs["state"], reward, terminated, truncated))
    assert set(info) == {"final_obs", "final_info"} and info["final_info"]["is_success"].shape == (5,)


def test_finished_envs_reset_inside_step_and_final_obs_is_the_last_observation():
    """Isaac Lab returns no final observation: truncated episodes bootstrap from the observation
    before the reset (as RSL-RL does)."""
    envs = reach_envs(num_envs=3, episode_length=4, success_radius=1e-6)
    obs, _ = envs.reset(seed=1)
    for _ in range(4):
        previous = obs["state"].clone()
        obs, _, terminated, truncated, info = envs.step(torch.full((3, 2), 0.3))
    assert truncated.all() and not terminated.any()
    torch.testing.assert_close(info["final_obs"]["state"], previous)
    assert not torch.equal(obs["state"], previous)  # already the next episode
    assert envs.env.arms.episode_length_buf.tolist() == [0, 0, 0]


def test_finite_horizon_time_outs_are_terminations():
    cfg = TorchReachCfg(num_envs=2, episode_length=2, success_radius=1e-6, is_finite_horizon=True)
    envs = IsaacLabVectorEnv(TorchReachLabEnv(cfg))
    envs.reset(seed=0)
    envs.step(torch.zeros(2, 2))
    _, _, terminated, truncated, _ = envs.step(torch.zeros(2, 2))
    assert terminated.all() and not truncated.any()


class ScalarLogReach(TorchReachLabEnv):
    """Reports Isaac Lab-style scalar episode statistics (and a non-number to skip)."""

    def step(self, actions):
        out = super().step(actions)
        self.extras = {"log": {"Episode_Reward/reach": torch.tensor(2.5), "Curriculum": "stage 1"}}
        return (*out[:4], self.extras)


def test_scalar_episode_statistics_count_for_each_finished_env():
    envs = IsaacLabVectorEnv(ScalarLogReach(TorchReachCfg(num_envs=3)))
    envs.reset(seed=0)
    info = envs.step(torch.zeros(3, 2))[-1]
    assert list(info["final_info"]) == ["Episode_Reward/reach"]
    assert info["final_info"]["Episode_Reward/reach"].tolist() == [2.5, 2.5, 2.5]


def test_clip_actions_bounds_the_action_space():
    envs = IsaacLabVectorEnv(TorchReachLabEnv(TorchReachCfg(num_envs=2)), clip_actions=0.5)
    assert envs.single_action_space.low.tolist() == [-0.5, -0.5]
    assert envs.action_space.shape == (2, 2)


def test_seeded_resets_give_identical_trajectories():
    def trajectory(seed: int) -> list[torch.Tensor]:
        envs = reach_envs(num_envs=4, episode_length=5)
        generator = torch.Generator().manual_seed(99)
        out = [envs.reset(seed=seed)[0]["state"]]
        for _ in range(12):  # crosses episode ends: the auto-resets are seeded too
            obs, reward, *_ = envs.step(torch.rand(4, 2, generator=generator) * 2 - 1)
            out += [obs["state"], reward]
        return out

    first, again, other = trajectory(3), trajectory(3), trajectory(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


def test_batched_env_rejects_other_autoreset_modes_and_rendering():
    with pytest.raises(ValueError, match="same_step"):
        make_vec_env(
            EnvConfig(
                id="omnigym/TorchReach-v0", num_envs=2, vectorization="vector", autoreset_mode="next_step"
            )
        )
    with pytest.raises(ValueError, match="does not render"):
        make_vec_env(
            EnvConfig(id="omnigym/TorchReach-v0", num_envs=2, vectorization="vector"), render_mode="rgb_array"
        )


def test_torch_env_actions_are_clipped_and_nan_rejected():
    space = reach_envs(num_envs=2).single_action_space
    action = to_torch_env_action(space, torch.tensor([[3.0, -0.5], [-2.0, 1.5]]), torch.device("cpu"))
    assert action.tolist() == [[1.0, -0.5], [-1.0, 1.0]]
    with pytest.raises(ValueError, match="non-finite"):
        to_torch_env_action(space, torch.tensor([[float("nan"), 0.0]]), torch.device("cpu"))


# --- collection and evaluation --------------------------------------------------------------------
def test_collector_keeps_tensors_on_the_env_device_without_numpy(monkeypatch):
    envs = reach_envs(num_envs=6, episode_length=5)
    policy = mlp_policy(envs)
    collector = make_collector(envs, policy, num_steps=12)
    assert isinstance(collector, TorchRolloutCollector)

    def no_numpy(*args, **kwargs):
        raise AssertionError("collection went through NumPy")

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)  # also behind np.asarray(tensor)
    monkeypatch.setattr(torch, "from_numpy", no_numpy)
    collector.reset(seed=0)
    rollout, stats = collector.collect()
    monkeypatch.undo()

    for name in ("actions", "rewards", "terminated", "truncated", "valid", "logprob", "mask", "final_index"):
        value = getattr(rollout, name)
        assert isinstance(value, torch.Tensor) and value.device == envs.device, name
    assert rollout.obs["state"].shape == (12, 6, 8) and rollout.obs["state"].dtype == torch.float32
    assert rollout.rewards.dtype == torch.float32 and rollout.terminated.dtype == torch.bool
    assert rollout.actions.shape == (12, 6, 2) and bool(rollout.valid.all())
    # every truncation (not termination) has a final observation row, and only those
    expected = (rollout.truncated & ~rollout.terminated).nonzero().tolist()
    assert sorted(rollout.final_index.tolist()) == sorted(expected) and len(expected) > 0
    assert rollout.final_obs["state"].shape == (len(expected), 8)
    # episode statistics: one entry per ended episode, returns as summed by hand
    assert len(stats) == int(rollout.dones.sum()) == len(stats.metrics["is_success"])
    first_end = int(rollout.dones[:, 0].nonzero()[0])
    assert first_end <= 4  # 5-step episodes
    first_return = float(rollout.rewards[: first_end + 1, 0].sum())
    assert any(math.isclose(first_return, r, rel_tol=1e-5) for r in stats.returns)


def test_collector_continues_episodes_across_rollouts():
    envs = reach_envs(num_envs=2, episode_length=10, success_radius=1e-6)
    collector = make_collector(envs, mlp_policy(envs), num_steps=4)
    collector.reset(seed=0)
    lengths = [length for _ in range(5) for length in collector.collect()[1].lengths]
    assert lengths == [10, 10, 10, 10]  # 20 steps per env: two whole 10-step episodes each


def test_evaluate_torch_env_takes_episodes_in_round_robin_order():
    envs = reach_envs(num_envs=3, episode_length=6, success_radius=1e-6)  # every episode 6 steps
    result = evaluate_torch_env(mlp_policy(envs), envs, episodes=7, seed=2)
    assert len(result.returns) == 7 and result.lengths == [6] * 7
    assert result.env_id == "omnigym/TorchReach-v0" and "is_success" in result.metrics
    assert result.summary()["success_rate"] == 0.0
    again = evaluate_torch_env(mlp_policy(envs), envs, episodes=7, seed=2)
    assert again.returns == result.returns


# --- PPO end to end ------------------------------------------------------------------------------
def test_ppo_learns_torch_reach(tmp_path):
    """PPO from configs/experiment/ppo_torch_reach.yaml, shortened: ~10-20 s on 2 CPU cores."""
    overrides = ["total_steps=250000", f"run_dir={tmp_path}", "log.progress=false", "log.tensorboard=false"]
    config = load_experiment("ppo_torch_reach", [*overrides, "runtime.device=cpu"])
    trainer = OnPolicyTrainer(config, tmp_path)
    assert isinstance(trainer.collector, TorchRolloutCollector)
    untrained = evaluate_torch_env(
        trainer.policy, trainer.envs, episodes=64, seed=5, deterministic=False
    ).summary()
    trainer.collector.reset(seed=config.seed)
    trained = trainer.train().final_eval
    print(f"untrained {untrained}\ntrained {trained}")
    assert untrained["success_rate"] < 0.4
    assert trained["success_rate"] >= 0.8 and trained["success_rate"] >= untrained["success_rate"] + 0.5
    assert trained["return_mean"] > untrained["return_mean"] + 20


# --- GPU and the real Isaac Lab ------------------------------------------------------------------
@pytest.mark.gpu
def test_collection_stays_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    envs = reach_envs(num_envs=16, device="cuda")
    policy = mlp_policy(envs).to("cuda")
    collector = make_collector(envs, policy, num_steps=8, device="cuda")
    rollout, _ = collector.collect()
    assert rollout.obs["state"].is_cuda and rollout.rewards.is_cuda and rollout.actions.is_cuda


@pytest.mark.skipif(HAS_ISAACLAB, reason="Isaac Lab is installed")
def test_isaaclab_task_without_isaaclab_says_how_to_install():
    with pytest.raises(ImportError, match=r"pip install 'isaaclab\[isaacsim,all\]'"):
        make_vec_env(EnvConfig(id="Isaac-Reach-Franka-v0", num_envs=4, vectorization="vector"))


def test_isaaclab_task_needs_batched_config():
    with pytest.raises(ValueError, match="vectorization: vector"):
        make_vec_env(EnvConfig(id="Isaac-Reach-Franka-v0", num_envs=4))


@pytest.mark.gpu
@pytest.mark.skipif(
    not HAS_ISAACLAB, reason="Isaac Lab is not installed (docs/envs/manipulation-adapters.md)"
)
def test_isaaclab_reach_collects_on_the_gpu():
    envs = make_vec_env(
        EnvConfig(
            id="Isaac-Reach-Franka-v0", num_envs=16, vectorization="vector", kwargs={"device": "cuda:0"}
        )
    )
    try:
        policy = mlp_policy(envs).to(envs.device)
        rollout, _ = make_collector(envs, policy, num_steps=8, device=envs.device).collect()
        assert rollout.obs["state"].is_cuda and rollout.obs["state"].shape[:2] == (8, 16)
        assert np.isfinite(rollout.rewards.cpu().numpy()).all()
    finally:
        envs.close()


def test_cfg_override_reaches_the_task():
    envs = reach_envs(num_envs=2, episode_length=7, success_radius=0.2)
    assert envs.env.cfg == replace(TorchReachCfg(num_envs=2), episode_length=7, success_radius=0.2)
