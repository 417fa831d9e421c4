"""Learned traffic reactivity vs IDM reactivity: the driving baselines' PDMS under each, and speed.

Records IDM-teacher traffic under four ego drivers (log replay, PDM-Closed, constant velocity,
a swerving human) on training scenes, fits the ``traffic`` world model to it, then evaluates the
registered driving baselines (``constant_velocity``, ``pdm_closed``, ``log_replay``; plan mode) on
the same test scenes with log-replay, IDM and learned traffic, reporting PDMS, EPDMS and the
sub-metrics (NC: at-fault collisions). Finally it times 64 envs stepping with IDM and with
learned traffic (control mode, a cruising ego, only ``step`` timed, the two modes in alternating chunks).

Last line: one JSON object; ``ratio`` = learned-traffic env steps/s / IDM-traffic env steps/s
(the cost of the learned model relative to the rule it distils, > 1 when it is faster). It also
carries each baseline's PDMS per traffic mode, the largest PDMS gap between learned and IDM
traffic, whether the baselines rank the same under both, and the model's held-out R².

Torch (the model's fitting and its calls in the learned-traffic envs) runs on ``--threads N`` CPU
threads (default ``$OMNIGYM_THREADS``, else 1; ``torch_threads`` in the JSON). Figures measured
before this option (issue 27) used torch's default, one thread per core (2 on the 2-core machine
of the docs' figures).

Usage: ``omnigym bench traffic_reactivity [--quick] [--threads N]`` (full: 40 training scenes per
ego driver, 100 test scenes; quick: 10 and 24).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 115 s (beside two training jobs)", "full": "not recorded"}
"""Quick: timed 2026-12-03 on the 2-core CPU beside two training jobs; full: not timed."""

ENV_ID = "omnigym/DrivingPlan-v0"
EVAL_SEED = 1_000_000
BASELINES = ("constant_velocity", "pdm_closed", "log_replay")


def train_model(num_scenes: int, epochs: int, path: Path) -> dict[str, float]:
    """Record IDM-teacher data, fit the traffic model, save it to ``path``; timings and metrics."""
    import gymnasium as gym
    import torch

    from omnigym.envs.driving.env import DrivingVectorEnv
    from omnigym.world_models.driving import TrafficWorldModel, TrafficWorldModelConfig
    from omnigym.world_models.traffic_data import collect_traffic_data, fit_traffic_model

    start = time.perf_counter()
    data = collect_traffic_data(num_scenes, split="train")
    collect_seconds = time.perf_counter() - start
    env = DrivingVectorEnv(num_envs=1, action_mode="plan", split="train", num_scenes=1)
    env.close()
    assert isinstance(env.single_observation_space, gym.spaces.Dict)
    torch.manual_seed(0)
    model = TrafficWorldModel(
        TrafficWorldModelConfig(), env.single_observation_space, env.single_action_space
    )
    start = time.perf_counter()
    metrics = fit_traffic_model(model, data, epochs=epochs)
    model.save_pretrained(path)
    return {
        "rows": len(data),
        "collect_s": round(collect_seconds, 1),
        "fit_s": round(time.perf_counter() - start, 1),
        **{key: round(value, 4) for key, value in metrics.items()},
    }


def evaluate(name: str, episodes: int, env_kwargs: dict[str, Any]) -> dict[str, float]:
    """Mean episode metrics of baseline ``name`` on the test scenes."""
    from omnigym.core.registry import POLICIES
    from omnigym.envs.driving.metrics import EPISODE_METRICS
    from omnigym.platform.evaluate import evaluate_policy
    from omnigym.platform.vec_env import make_env

    cls = POLICIES.get(name)
    kwargs = {**cls.env_kwargs, **env_kwargs}
    env = make_env(ENV_ID, **kwargs)
    policy = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    summary = evaluate_policy(policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, env_kwargs=kwargs).summary()
    return {metric: round(float(summary[f"{metric}_mean"]), 4) for metric in EPISODE_METRICS}


def throughput(modes: dict[str, dict[str, Any]], steps: int, num_envs: int = 64) -> dict[str, dict[str, int]]:
    """Env steps/s and agent steps/s of ``num_envs`` control-mode envs per traffic mode (kwargs).

    The ego cruises (no throttle, straight wheel), so episodes run their course; resets are
    included. The modes step in alternating chunks of 20 steps and each reports its median chunk,
    so load from other processes on the machine hits both alike.
    """
    from omnigym.envs.driving.env import DrivingVectorEnv

    action = np.zeros((num_envs, 2), np.float32)
    envs = {
        mode: DrivingVectorEnv(num_envs, split="test", num_scenes=num_envs, **kw)
        for mode, kw in modes.items()
    }
    rates: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for env in envs.values():
        env.reset(seed=EVAL_SEED)
        for _ in range(5):  # warm-up: compiled passes loaded, buffers sized
            env.step(action)
    for _ in range(max(1, steps // 20)):
        for mode, env in envs.items():
            agents = 0
            start = time.perf_counter()
            for _ in range(20):
                env.step(action)
                agents += int(env.sim.agents_now().valid.sum())
            seconds = time.perf_counter() - start
            rates[mode].append((num_envs * 20 / seconds, agents / seconds))
    for env in envs.values():
        env.close()
    return {
        mode: {
            "env_steps_per_s": round(float(np.median([r[0] for r in chunks]))),
            "agent_steps_per_s": round(float(np.median([r[1] for r in chunks]))),
        }
        for mode, chunks in rates.items()
    }


def ranks(values: list[float]) -> list[int]:
    """Rank of each value (0 = lowest)."""
    return [int(r) for r in np.argsort(np.argsort(values))]


def main() -> None:
    """Train the model, evaluate the baselines under each traffic mode, print the figures (last line JSON)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10 training scenes per driver, 24 test scenes")
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads (default $OMNIGYM_THREADS, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy(args.threads)
    train_scenes, epochs, episodes, steps = (10, 15, 24, 100) if args.quick else (40, 30, 100, 300)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "traffic"
        fit = train_model(train_scenes, epochs, path)
        print("model " + " ".join(f"{k}={v}" for k, v in fit.items()), flush=True)
        modes = {
            "log": {"traffic": "log"},
            "idm": {"traffic": "idm"},
            "learned": {"traffic": "learned", "traffic_model_path": str(path)},
        }
        test = {"split": "test", "num_scenes": episodes}
        results: dict[str, dict[str, dict[str, float]]] = {}
        for mode, kwargs in modes.items():
            for name in BASELINES:
                results.setdefault(name, {})[mode] = evaluate(name, episodes, {**test, **kwargs})
                print(f"{name:18s} {mode:8s} " + " ".join(f"{k}={v}" for k, v in results[name][mode].items()))
        speed = throughput({mode: modes[mode] for mode in ("idm", "learned")}, steps)
    for mode, figures in speed.items():
        print(f"throughput {mode:8s} " + " ".join(f"{k}={v}" for k, v in figures.items()))
    pdms = {f"{name}_{mode}_pdms": results[name][mode]["pdms"] for name in BASELINES for mode in modes}
    nc = {f"{name}_{mode}_nc": results[name][mode]["nc"] for name in BASELINES for mode in modes}
    gap = max(abs(results[name]["learned"]["pdms"] - results[name]["idm"]["pdms"]) for name in BASELINES)
    same_ranking = ranks([results[n]["learned"]["pdms"] for n in BASELINES]) == ranks(
        [results[n]["idm"]["pdms"] for n in BASELINES]
    )
    print(
        json.dumps(
            {
                "ratio": speed["learned"]["env_steps_per_s"] / speed["idm"]["env_steps_per_s"],
                "idm_env_steps_per_s": speed["idm"]["env_steps_per_s"],
                "learned_env_steps_per_s": speed["learned"]["env_steps_per_s"],
                "idm_agent_steps_per_s": speed["idm"]["agent_steps_per_s"],
                "learned_agent_steps_per_s": speed["learned"]["agent_steps_per_s"],
                "max_pdms_gap_learned_vs_idm": round(gap, 4),
                "same_ranking_learned_vs_idm": same_ranking,
                "eval_r2": fit["eval/r2"],
                "train_rows": fit["rows"],
                "torch_threads": threads,
                **pdms,
                **nc,
            }
        )
    )


if __name__ == "__main__":
    main()
