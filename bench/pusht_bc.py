"""Diffusion Policy vs one-step MeanFlow, both behaviour-cloned from the PushT expert (state obs).

1. Demonstrations: ``pusht_expert`` (deterministic) pushes the T on ``omnigym/PushT-v0`` (state
   observations); the episodes are written as a Minari dataset with
   :func:`~omnigym.platform.datasets.collect_dataset` (in a temporary ``$MINARI_DATASETS_PATH``).
2. Behaviour cloning with :func:`~omnigym.policies.chunking.train.imitate_dataset` of ``diffusion``
   (DDPM, 10-step DDIM sampling) and ``meanflow`` (one network call per chunk): same U-Net, same
   data, same optimiser settings (AdamW, cosine schedule, EMA), same number of steps.
3. Evaluation from a fixed seed (deterministic acting): success rate and mean final coverage of
   the T over the target for the expert and both policies; the latency of one action chunk at
   batch 1 on one CPU thread (median of ``LATENCY_CALLS`` calls after warm-up); training wall time.

Last line: one JSON object; ``ratio`` = diffusion's chunk latency / MeanFlow's (the issue asks
for >= 8), with the success rates, coverages, latencies, training times and budgets.

Usage: ``omnigym bench pusht_bc [--quick]`` (full: 200 demonstrations, 20,000 BC steps of 64
windows per policy, the configs' U-Net, 50 test episodes; quick: 50 demonstrations, 600 steps,
a smaller U-Net, 10 test episodes). Diffusion Policy's PushT results take hours of GPU
training: on a CPU the quick budget measures the latencies, not a policy that solves the task.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ENV_ID = "omnigym/PushT-v0"
DATASET_ID = "omnigym/pusht-expert-v0"
EVAL_SEED = 10_000
"""First test episode's seed (the demonstrations use seeds 0, 1, ...)."""
POLICIES = ("diffusion", "meanflow")
LEARNING_RATE = 1e-3
"""The rate of the better earlier CPU attempt on PushT (docs/policies.md: flow at 1e-3 for 1,500
steps reached coverage 0.20, diffusion at 3e-4 for 3,000 steps 0.11); not tuned further."""
LATENCY_WARMUP, LATENCY_CALLS = 5, 50
PROGRESS_EPISODES = 10
"""Test episodes of the progress evaluations a full run logs every quarter of training."""
QUICK_NET = ["down_dims=[32,64,128]", "state_hidden_sizes=[128,128]", "time_embed_dim=64"]
"""Policy overrides of the quick run: 1.6 M parameters instead of the configs' 6.3 M."""


def demonstrations(episodes: int) -> Any:
    """``pusht_expert``'s episodes (seeds 0..episodes-1) collected to ``DATASET_ID``."""
    from omnigym.platform.datasets import collect_dataset

    return collect_dataset(expert_policy(), ENV_ID, DATASET_ID, episodes=episodes, seed=0)


def expert_policy() -> Any:
    """The scripted expert, as it is registered."""
    from omnigym.platform.registry import POLICIES as REGISTRY
    from omnigym.platform.vec_env import make_env

    cls = REGISTRY.get("pusht_expert")
    env = make_env(ENV_ID, **cls.env_kwargs)
    policy = cls(cls.config_class(), env.observation_space, env.action_space)
    env.close()
    return policy


def evaluate(policy: Any, episodes: int) -> dict[str, float]:
    """Success rate and mean final coverage of deterministic episodes from ``EVAL_SEED``."""
    from omnigym.platform.evaluate import evaluate_policy

    env_kwargs = dict(getattr(policy, "env_kwargs", {}))
    summary = evaluate_policy(
        policy, ENV_ID, episodes=episodes, seed=EVAL_SEED, num_envs=min(episodes, 10), env_kwargs=env_kwargs
    ).summary()
    return {
        "success": round(summary.get("success_rate", 0.0), 4),
        "coverage": round(summary.get("coverage_mean", float("nan")), 4),
        "length": round(summary["length_mean"], 1),
    }


def chunk_latency_ms(policy: Any, history: dict[str, torch.Tensor]) -> float:
    """Median wall time of one deterministic chunk at batch 1 on one thread (ms)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy.eval()
        for _ in range(LATENCY_WARMUP):
            policy.sample_chunks(history, deterministic=True)
        times = []
        for _ in range(LATENCY_CALLS):
            tic = time.perf_counter()
            policy.sample_chunks(history, deterministic=True)
            times.append(time.perf_counter() - tic)
    finally:
        torch.set_num_threads(threads)
    return 1000 * statistics.median(times)


def first_history(n_obs_steps: int) -> dict[str, torch.Tensor]:
    """The first demonstration's first observation, repeated as a ``[1, To, 15]`` history."""
    from omnigym.platform.datasets import load_dataset_steps

    state = torch.as_tensor(load_dataset_steps(DATASET_ID).obs["state"][:1], dtype=torch.float32)
    return {"state": state.unsqueeze(1).expand(1, n_obs_steps, -1).contiguous()}


def main() -> None:
    """Demonstrate, clone both policies, evaluate and time them; the last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="50 demonstrations, 600 BC steps, small U-Net, 10 test episodes"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads (0: 1 with --quick, else torch's default)"
    )
    args = parser.parse_args()
    if args.threads or args.quick:
        torch.set_num_threads(args.threads or 1)  # one thread is steadier on a shared 2-core CPU
    from omnigym.policies.chunking.train import ImitationConfig, imitate_dataset

    if not args.quick:  # hours of training: show the imitation log and progress evaluations
        logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.quick:
        episodes, bc_steps, batch_size, test_episodes, overrides = 50, 600, 64, 10, QUICK_NET
    else:
        episodes, bc_steps, batch_size, test_episodes, overrides = 200, 20_000, 64, 50, []
    start = time.perf_counter()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(tmp) / "datasets")
        summary = demonstrations(episodes)
        demo_steps = summary.steps
        print(
            f"demonstrations: {episodes} expert episodes, {demo_steps} steps, success "
            f"{summary.success_rate} ({time.perf_counter() - start:.0f} s)"
        )
        tic = time.perf_counter()
        figures["expert"] = evaluate(expert_policy(), test_episodes)
        print(
            f"pusht_expert: success {figures['expert']['success']:.2f}, coverage "
            f"{figures['expert']['coverage']:.3f} ({time.perf_counter() - tic:.0f} s)"
        )
        for name in POLICIES:
            imitation = ImitationConfig(
                steps=bc_steps, batch_size=batch_size, learning_rate=LEARNING_RATE,
                warmup_steps=500, log_every=0 if args.quick else 1000, seed=0,
                eval_every=0 if args.quick else bc_steps // 4,
                eval_episodes=0 if args.quick else PROGRESS_EPISODES,
            )  # fmt: skip
            tic = time.perf_counter()
            policy, history = imitate_dataset(
                DATASET_ID, name, list(overrides), imitation, device=args.device
            )
            train_s = time.perf_counter() - tic
            policy.to("cpu")
            latency = chunk_latency_ms(policy, first_history(policy.config.n_obs_steps))
            tic = time.perf_counter()
            row = evaluate(policy, test_episodes)
            losses = {k: round(v, 4) for k, v in history[-1].items() if k.startswith("train/loss")}
            figures[name] = {
                **row, "latency_ms": round(latency, 2), "train_s": round(train_s, 1),
                "eval_s": round(time.perf_counter() - tic, 1), "final_loss": losses,
                "parameters": sum(p.numel() for p in policy.model.parameters()),
            }  # fmt: skip
            print(
                f"{name}: success {row['success']:.2f}, coverage {row['coverage']:.3f}, "
                f"chunk latency {latency:.1f} ms, BC {train_s:.0f} s ({bc_steps} steps, {losses}), "
                f"eval {figures[name]['eval_s']:.0f} s"
            )
    dp, mf, ex = figures["diffusion"], figures["meanflow"], figures["expert"]
    ratio = dp["latency_ms"] / mf["latency_ms"] if mf["latency_ms"] else float("inf")
    relative = dp["success"] / ex["success"] if ex["success"] else 0.0
    print(
        f"diffusion reaches {relative:.0%} of the expert's success (target >= 70%); meanflow is "
        f"{abs(dp['success'] - mf['success']) * 100:.0f} points from it (target <= 10) at "
        f"{ratio:.1f}x lower chunk latency (target >= 8x)"
    )
    print(json.dumps({
        "bench": "pusht_bc",
        "ratio": ratio,
        "diffusion_success": dp["success"], "meanflow_success": mf["success"],
        "expert_success": ex["success"],
        "diffusion_coverage": dp["coverage"], "meanflow_coverage": mf["coverage"],
        "expert_coverage": ex["coverage"],
        "diffusion_latency_ms": dp["latency_ms"], "meanflow_latency_ms": mf["latency_ms"],
        "diffusion_train_s": dp["train_s"], "meanflow_train_s": mf["train_s"],
        "diffusion_vs_expert": round(relative, 4),
        "figures": figures, "demo_episodes": episodes, "demo_steps": demo_steps,
        "bc_steps": bc_steps, "batch_size": batch_size, "learning_rate": LEARNING_RATE,
        "policy_overrides": list(overrides), "test_episodes": test_episodes,
        "device": args.device, "threads": torch.get_num_threads(), "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
