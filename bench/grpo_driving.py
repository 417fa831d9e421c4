"""GRPO and metric-decoupled GRPO (MDPO) fine-tuning a behaviour-cloned driving planner.

1. Demonstrations: the PDM-Closed-like planner (``pdm_closed``) drives ``omnigym/DrivingPlan-v0``
   (NAVSIM-style 4 s plans, log-replay traffic, vector observations) on training scenes.
2. Behaviour cloning: an MLP Gaussian policy fits the planner's plans (negative log-likelihood).
3. Fine-tuning from that BC policy with ``grpo`` (episode return, group-normalised) and with
   ``mdpo`` (each PDM sub-metric reward normalised within its group, EPDMS-weighted), same
   settings: groups of 8 episodes from one scene, 32 envs, one update per batch of groups.
4. Evaluation on the held-out test split (deterministic plans): PDMS and EPDMS of the BC start,
   of the planner, and of both fine-tuned policies at regular intervals (the curves).

Last line: one JSON object; ``ratio`` = PDMS after MDPO fine-tuning / PDMS of the BC start (above
1 means the metric-decoupled fine-tuning improved on behaviour cloning), ``ratio_grpo`` the same
for GRPO, the curves and every figure.

Torch runs on ``--threads N`` CPU threads (default ``$OMNIGYM_THREADS``, else 1), behaviour cloning
and fine-tuning alike (``torch_threads`` in the JSON). Figures measured before this option (issue
27) ran the demonstrations, behaviour cloning and the first evaluations with torch's default, one
thread per core (2 on the 2-core machine of the docs' figures), and the fine-tuning with one
thread (``runtime.torch_threads``).

``--split hard`` evaluates on the hard split (tight curves, braking lead vehicles: see
docs/envs/driving.md) and draws the training scenes with the same settings (``scene`` =
``HARD_SCENES`` on the train split), demonstrations included.

Usage: ``omnigym bench grpo_driving [--quick] [--threads N] [--split test|hard]`` (full: 120k
fine-tuning steps per algorithm, 100 test scenes; quick: 40k steps, 48 test scenes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

DURATIONS = {"quick": "123 s", "full": "285 s"}
"""Measured on 2 CPU cores, one seed: docs/algorithms/grpo.md, the grpo_driving table."""

ENV_ID = "omnigym/DrivingPlan-v0"
OBS_KEYS = ["state", "agents", "route", "lanes", "lights"]
TRAIN = {"split": "train", "num_scenes": 200, "obs_keys": OBS_KEYS}
EVAL_SEED = 1_000_000
POLICY = {"obs_keys": OBS_KEYS, "normalize_obs": True, "hidden_sizes": [256, 256], "log_std_init": -1.0}
FINE_TUNING = {"group_size": 8, "learning_rate": 1.0e-4, "num_epochs": 2, "max_episode_steps": 40}


def scenes(split: str) -> tuple[dict[str, Any], str]:
    """The training env kwargs and the evaluation split of ``--split`` (test or hard)."""
    from omnigym.envs.driving.scenes import HARD_SCENES

    return ({**TRAIN, "scene": HARD_SCENES}, "hard") if split == "hard" else (TRAIN, "test")


def demonstrations(
    num_envs: int, rollouts: int, steps: int, train: dict[str, Any] = TRAIN
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The planner's observations and plans on training scenes, flattened to ``[B, ...]``."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.collect import RolloutCollector
    from omnigym.platform.vec_env import EnvConfig, make_vec_env

    planner_cls = POLICIES.get("pdm_closed")
    config = EnvConfig(
        id=ENV_ID, num_envs=num_envs, vectorization="vector", kwargs={**train, **planner_cls.env_kwargs}
    )
    envs = make_vec_env(config)
    planner = planner_cls(planner_cls.config_class(), envs.single_observation_space, envs.single_action_space)
    collector = RolloutCollector(envs, planner, steps)
    collector.reset(seed=0)
    obs: dict[str, list[torch.Tensor]] = {k: [] for k in OBS_KEYS}
    actions = []
    for _ in range(rollouts):
        rollout, _ = collector.collect()
        keep = rollout.valid.reshape(-1)
        for key in OBS_KEYS:
            obs[key].append(rollout.obs[key].reshape(-1, *rollout.obs[key].shape[2:])[keep])
        actions.append(rollout.actions.reshape(-1, *rollout.actions.shape[2:])[keep])
    envs.close()
    return {k: torch.cat(v) for k, v in obs.items()}, torch.cat(actions)


def behaviour_cloning(obs: dict[str, torch.Tensor], actions: torch.Tensor, epochs: int) -> Any:
    """An MLP Gaussian policy fitted to the demonstrations by negative log-likelihood."""
    from omnigym.core.types import OnPolicyBatch
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

    env = make_env(ENV_ID, **TRAIN)
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(**{**POLICY, "obs_keys": tuple(OBS_KEYS), "hidden_sizes": (256, 256)}),
                       env.observation_space, env.action_space)  # fmt: skip
    env.close()
    policy.update_obs_stats({k: v.unsqueeze(1) for k, v in obs.items()})
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    n, zeros = len(actions), torch.zeros(256)
    for _ in range(epochs):
        for index in torch.randperm(n).split(256):
            batch = OnPolicyBatch(
                obs={k: v[index] for k, v in obs.items()}, actions=actions[index],
                logprob=zeros[: len(index), None], mask=zeros[: len(index), None].bool(),
                values=zeros[: len(index)], advantages=zeros[: len(index)], returns=zeros[: len(index)],
            )  # fmt: skip
            loss, _ = policy.compute_loss(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return policy


def evaluate(
    policy: Any, episodes: int, env_kwargs: dict[str, Any] | None = None, split: str = "test"
) -> dict[str, float]:
    """PDMS and EPDMS of deterministic plans on the first ``episodes`` scenes of ``split``."""
    from omnigym.platform.evaluate import evaluate_policy

    kwargs = {"split": split, "num_scenes": episodes, "obs_keys": OBS_KEYS, **(env_kwargs or {})}
    summary = evaluate_policy(policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, env_kwargs=kwargs).summary()
    return {"pdms": round(summary["pdms_mean"], 4), "epdms": round(summary["epdms_mean"], 4)}


def fine_tune(
    algo: str,
    start: Any,
    steps: int,
    episodes: int,
    evals: int,
    run_dir: Path,
    threads: int,
    split: str = "test",
) -> list[tuple[int, float]]:
    """Fine-tune a copy of ``start`` with ``algo`` on ``threads`` threads; the PDMS curve on ``split``."""
    import yaml

    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    train, eval_split = scenes(split)

    spec = {
        "name": f"{algo}_driving_finetune", "seed": 1, "total_steps": steps,
        "defaults": {"env": "driving_plan", "policy": "mlp", "algo": algo, "runtime": "local"},
        "runtime": {"torch_threads": threads},
        "env": {"num_envs": 32, "kwargs": train},
        "policy": POLICY, "algo": FINE_TUNING,
        "eval": {"every_steps": steps // evals, "episodes": episodes, "seed": EVAL_SEED,
                 "env_kwargs": {"split": eval_split, "num_scenes": episodes}},
        "log": {"progress": False, "tensorboard": False}, "run_dir": str(run_dir),
    }  # fmt: skip
    path = run_dir.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(spec))
    trainer = OnPolicyTrainer(load_experiment(path), run_dir)
    trainer.policy.load_state_dict(start.state_dict())
    trainer.train()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        (int(row["step"]), round(float(row["eval/pdms_mean"]), 4)) for row in rows if "eval/pdms_mean" in row
    ]


def main() -> None:
    """Demonstrate, clone, fine-tune twice, evaluate; print the figures (the last line is JSON)."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.runtime import apply_thread_policy
    from omnigym.platform.vec_env import make_env

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="40k fine-tuning steps, 48 test scenes")
    parser.add_argument(
        "--split", choices=("test", "hard"), default="test",
        help="evaluate on the test or the hard split (hard: training scenes drawn like it)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="torch CPU threads (default $OMNIGYM_THREADS, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    threads = apply_thread_policy(args.threads)
    steps, episodes = (40_000, 48) if args.quick else (120_000, 100)
    start = time.perf_counter()
    train, eval_split = scenes(args.split)
    obs, actions = demonstrations(num_envs=32, rollouts=3, steps=64, train=train)
    seconds = time.perf_counter() - start
    print(f"demonstrations: {len(actions)} planner steps on training scenes ({seconds:.0f} s)")
    bc = behaviour_cloning(obs, actions, epochs=30)
    planner_cls = POLICIES.get("pdm_closed")
    env = make_env(ENV_ID, **{**train, **planner_cls.env_kwargs})
    planner = planner_cls(planner_cls.config_class(), env.observation_space, env.action_space)
    env.close()
    figures: dict[str, Any] = {
        "planner": evaluate(planner, episodes, planner_cls.env_kwargs, eval_split),
        "bc": evaluate(bc, episodes, split=eval_split),
    }
    planner_pdms, bc_pdms = figures["planner"]["pdms"], figures["bc"]["pdms"]
    print(f"{eval_split} PDMS: planner {planner_pdms:.3f}, BC start {bc_pdms:.3f}")
    with tempfile.TemporaryDirectory() as tmp:
        for algo in ("grpo", "mdpo"):
            run_dir = Path(tmp) / algo
            curve = fine_tune(algo, bc, steps, episodes, 4, run_dir, threads, split=args.split)
            figures[f"{algo}_curve"] = curve
            print(f"{algo}: {eval_split} PDMS by step {curve}")
    grpo_final, mdpo_final = figures["grpo_curve"][-1][1], figures["mdpo_curve"][-1][1]
    print(json.dumps({
        "bench": "grpo_driving",
        "ratio": mdpo_final / bc_pdms,
        "ratio_grpo": grpo_final / bc_pdms,
        "bc_pdms": bc_pdms, "grpo_pdms": grpo_final, "mdpo_pdms": mdpo_final,
        "planner_pdms": figures["planner"]["pdms"],
        **{k: v for k, v in figures.items() if k.endswith("_curve")},
        "fine_tuning_steps": steps, "test_scenes": episodes, "split": eval_split,
        "torch_threads": threads, "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
