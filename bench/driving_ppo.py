"""PPO on omnigym/Driving-v0 vs the driving baselines, on held-out test scenes.

Trains the ``ppo_driving`` experiment (direct control, log-replay traffic, vector observations),
then evaluates it and the three registered baselines (``constant_velocity``, ``pdm_closed``,
``log_replay``) on the same test-split scenes, reporting PDMS, EPDMS and every sub-metric.

Last line: one JSON object; ``ratio`` = PPO PDMS / PDM-Closed PDMS (how close the learned policy
gets to the rule-based planner).

Usage: ``omnigym bench driving_ppo [--quick]`` (full: 1M steps on 1000 training scenes, 100 test
scenes; quick: 150k steps on 200 training scenes, 24 test scenes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

DURATIONS = {"quick": "about 2 min (beside two training jobs)", "full": "training alone 505 s"}
"""On the 2-core CPU of README.md, "Benchmarks: the driving pseudo-simulator"; no whole full run
timed; quick timed 2026-12-03 beside two training jobs."""

ENV_ID = "omnigym/Driving-v0"
EVAL_SEED = 1_000_000


def evaluate(policy: Any, episodes: int, env_kwargs: dict[str, Any]) -> dict[str, float]:
    """Mean episode metrics of ``policy`` on the test scenes."""
    from omnigym.envs.driving.metrics import EPISODE_METRICS
    from omnigym.platform.evaluate import evaluate_policy

    summary = evaluate_policy(
        policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, env_kwargs=env_kwargs
    ).summary()
    return {name: round(float(summary[f"{name}_mean"]), 4) for name in EPISODE_METRICS}


def baseline(name: str, env_kwargs: dict[str, Any]) -> Any:
    """A registered baseline policy built for the driving env."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get(name)
    env = make_env(ENV_ID, **{**cls.env_kwargs, **env_kwargs})
    try:
        return cls(cls.config_class(), env.observation_space, env.action_space)
    finally:
        env.close()


def main() -> None:
    """Train, evaluate everything, print the figures (the last line is JSON)."""
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.runtime import apply_thread_policy
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="150k steps and 24 test scenes")
    args = parser.parse_args()
    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1: training and every evaluation
    steps = 150_000 if args.quick else 1_000_000
    episodes = 24 if args.quick else 100
    test = {"split": "test", "num_scenes": episodes}
    with tempfile.TemporaryDirectory() as run_dir:
        config = load_experiment(
            "ppo_driving",
            [
                f"run_dir={run_dir}",
                "log.tensorboard=false",
                f"total_steps={steps}",
                "eval.every_steps=0",
                "eval.episodes=1",
                f"runtime.torch_threads={threads}",
                *(["env.kwargs.num_scenes=200"] if args.quick else []),  # fewer scenes to generate
            ],
        )
        start = time.perf_counter()
        trainer = OnPolicyTrainer(config, Path(run_dir))
        trainer.train()
        train_seconds = time.perf_counter() - start
        results = {"ppo": evaluate(trainer.policy, episodes, test)}
    for name in ("constant_velocity", "pdm_closed", "log_replay"):
        results[name] = evaluate(baseline(name, test), episodes, test)
    for name, figures in results.items():
        print(f"{name:18s} " + " ".join(f"{k}={v}" for k, v in figures.items()))
    print(
        json.dumps(
            {
                "bench": "driving_ppo",
                "ratio": results["ppo"]["pdms"] / results["pdm_closed"]["pdms"],
                "ppo_pdms": results["ppo"]["pdms"],
                "constant_velocity_pdms": results["constant_velocity"]["pdms"],
                "pdm_closed_pdms": results["pdm_closed"]["pdms"],
                "log_replay_pdms": results["log_replay"]["pdms"],
                "train_steps": steps,
                "train_seconds": round(train_seconds, 1),
                "test_scenes": episodes,
                "torch_threads": threads,
                "results": results,
                "quick": args.quick,
            }
        )
    )


if __name__ == "__main__":
    main()
