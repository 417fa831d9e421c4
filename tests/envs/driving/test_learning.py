"""PPO learns to drive: a CI-sized run on omnigym/Driving-v0 beats constant velocity on PDMS.

Both are scored on the same held-out test scenes (seeds 1_000_000 + i, the trainer's evaluation
seeds) with the episode PDMS the env reports.
"""

from pathlib import Path

from omnigym.envs.driving.experts import ConstantVelocityConfig, ConstantVelocityPolicy
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer
from omnigym.platform.vec_env import make_env

TEST_SCENES = {"split": "test", "num_scenes": 24}
EVAL_SEED = 1_000_000


def test_ppo_beats_constant_velocity_on_pdms(tmp_path: Path):
    config = load_experiment(
        "ppo_driving",
        [
            "log.progress=false",
            "log.tensorboard=false",
            f"run_dir={tmp_path}",
            "total_steps=100000",  # PDMS 0.575 vs 0.480 for constant velocity; ~50 s on one thread
            "env.kwargs.num_scenes=64",
            "eval.every_steps=0",
            "eval.episodes=24",
            "eval.env_kwargs={split: test, num_scenes: 24}",
        ],
    )
    result = OnPolicyTrainer(config, tmp_path).train()
    ppo_pdms = result.final_eval["pdms_mean"]

    env = make_env("omnigym/Driving-v0", **TEST_SCENES)
    baseline = ConstantVelocityPolicy(ConstantVelocityConfig(), env.observation_space, env.action_space)
    env.close()
    cv = evaluate_policy(baseline, "omnigym/Driving-v0", episodes=24, seed=EVAL_SEED, env_kwargs=TEST_SCENES)
    cv_pdms = cv.summary()["pdms_mean"]
    assert ppo_pdms > cv_pdms + 0.05, f"PPO PDMS {ppo_pdms:.3f} vs constant velocity {cv_pdms:.3f}"
