"""The planner env: sub-goal replies as text actions, bad replies as a defined outcome, GRPO on it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from omnigym.platform.vec_env import make_env
from omnigym.policies.hierarchical.planner_env import MODULE_ENV_ID

K = 3


@pytest.fixture(scope="module")
def env():
    made = make_env(MODULE_ENV_ID, every_k_steps=K, invalid_penalty=0.25)
    yield made
    made.close()


def test_a_reply_names_the_subgoal_the_controller_runs_for_k_steps(env) -> None:
    obs, info = env.reset(seed=3)
    assert info["subgoal"] == "move above the cube"
    assert obs["text"].splitlines()[2] == "current sub-goal: move above the cube"
    obs, reward, terminated, truncated, info = env.step("Let me lower. <answer>Lower onto the cube</answer>")
    assert info["action_valid"] and "action_error" not in info
    assert info["subgoal"] == "lower onto the cube" and info["task_steps"] == K
    assert reward == 0.0 and not terminated and not truncated  # sparse task reward, not solved
    assert "current sub-goal: lower onto the cube" in obs["text"]


@pytest.mark.parametrize("reply", ["<answer>fly to the moon</answer>", "", "x" * 600, 7, None])
def test_a_bad_reply_keeps_the_previous_subgoal_with_the_penalty(env, reply) -> None:
    env.reset(seed=4)
    env.step("<answer>grasp the cube</answer>")
    before = env.unwrapped.task.unwrapped.data.qpos.copy()
    _, reward, _, _, info = env.step(reply)
    assert info["action_valid"] is False
    assert info["subgoal"] == "grasp the cube"  # kept, and run
    assert reward == pytest.approx(-0.25)
    assert info["task_steps"] == K and not (before == env.unwrapped.task.unwrapped.data.qpos).all()
    assert "not a sub-goal" in info["action_error"] or "must be a str" in info["action_error"]


def test_bad_env_arguments_fail_with_one_clear_error() -> None:
    with pytest.raises(ValueError, match="every_k_steps must be >= 1"):
        make_env(MODULE_ENV_ID, every_k_steps=0)


def test_grpo_trains_a_tiny_vlm_planner_through_the_experiment_config(tmp_path: Path) -> None:
    """`omnigym train hierarchical_pickplace`'s path: the experiment config, the on-policy trainer."""
    pytest.importorskip("transformers")
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    overrides = [
        "total_steps=8", "env.num_envs=2", "env.max_episode_steps=4", "algo.group_size=2",
        "algo.max_episode_steps=4", "algo.num_minibatches=1", "algo.learning_rate=1e-2",
        "policy.max_new_tokens=6", "eval.every_steps=0", "eval.episodes=1", "eval.num_envs=1",
        "checkpoint.every_steps=0", "log.progress=false", "log.tensorboard=false", f"run_dir={tmp_path}",
    ]  # fmt: skip
    trainer = OnPolicyTrainer(load_experiment("hierarchical_pickplace", overrides), tmp_path)
    metrics = trainer.train_iteration()
    assert math.isfinite(metrics["train/loss_policy"]) and metrics["train/num_updates"] >= 1
    # the env's validity flag reaches the rollout metrics: an untrained LM's replies are mostly not
    # sub-goals, each costing the 0.1 penalty, so no episode return is above 0 unless it succeeded
    assert 0.0 <= metrics["rollout/action_valid"] <= 1.0
    assert metrics["rollout/episode_return"] <= metrics["rollout/is_success"]
