"""Diffusion Policy vs one-step MeanFlow, both behaviour-cloned from the PushT expert (state obs).

1. Demonstrations: ``pusht_expert`` (deterministic) pushes the T on ``omnigym/PushT-v0`` (state
   observations); the episodes are written as a Minari dataset with
   :func:`~omnigym.platform.datasets.collect_dataset` (in a temporary ``$MINARI_DATASETS_PATH``).
2. Behaviour cloning with :func:`~omnigym.platform.trainers.imitation.imitate_dataset` of ``diffusion``
   (DDPM, 10-step DDIM sampling) and ``meanflow`` (one network call per chunk): same U-Net, same
   data, same optimiser settings (AdamW, cosine schedule, EMA), same number of steps.
3. Evaluation from a fixed seed (deterministic acting): success rate and mean final coverage of
   the T over the target for the expert and both policies; the latency of one action chunk at
   batch 1 on one CPU thread (median of ``LATENCY_CALLS`` calls after warm-up, the two policies
   taking turns, before any evaluation); training wall time.

Last line: one JSON object; ``ratio`` = diffusion's chunk latency / MeanFlow's (the issue asks
for >= 8), with the success rates, coverages, latencies, training times and budgets.

Usage: ``omnigym bench pusht_bc [--quick] [--jobs N]`` (full: 1,000 demonstrations, 12,000 BC
steps of 128 windows per policy, 50 test episodes, about 60 min on a 2-core CPU; quick: 50
demonstrations, 600 steps of 64, 10 test episodes, a few minutes). Both use a CPU-sized U-Net
(``CPU_NET``, 1.6 M parameters; the configs' is 6.3 M). ``--jobs 2`` trains the two policies in
two processes of one thread each (the default on a CPU for the full run); the latencies are
measured afterwards, before the evaluations, the two policies taking turns.
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

from omnigym.core.policy import Policy
from omnigym.platform.runtime.processes import map_in_processes

DURATIONS = {"quick": "not recorded", "full": "57 min"}
"""Full run on a 2-core CPU: docs/policies.md and README.md; quick only "a few minutes", unmeasured."""

ENV_ID = "omnigym/PushT-v0"
DATASET_ID = "omnigym/pusht-expert-v0"
EVAL_SEED = 10_000
"""First test episode's seed (the demonstrations use seeds 0, 1, ...)."""
POLICIES = ("diffusion", "meanflow")
LEARNING_RATE = 1e-3
"""Peak AdamW rate (cosine decay to 0): Diffusion Policy's 1e-4 needs far more steps than a CPU
run affords; not tuned further. Most of the success comes in the last quarter of the decay
(diffusion's 20-episode progress evaluations in a trial: 0.00, 0.25, 0.30, 0.90)."""
LATENCY_WARMUP, LATENCY_CALLS, LATENCY_ROUNDS = 5, 100, 5
PROGRESS_EPISODES = 10
"""Test episodes of the progress evaluations a full run logs every quarter of training."""
CPU_NET = ["down_dims=[32,64,128]", "state_hidden_sizes=[128,128]", "time_embed_dim=64"]
"""Policy overrides of both runs: 1.6 M parameters instead of the configs' 6.3 M (a third of
the training time on a CPU)."""


def demonstrations(episodes: int) -> Any:
    """``pusht_expert``'s episodes (seeds 0..episodes-1) collected to ``DATASET_ID``."""
    from omnigym.platform.datasets import collect_dataset

    return collect_dataset(expert_policy(), ENV_ID, DATASET_ID, episodes=episodes, seed=0)


def expert_policy() -> Any:
    """The scripted expert, as it is registered."""
    from omnigym.core.registry import POLICIES as REGISTRY
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


def chunk_latencies_ms(policies: dict[str, Any], history: dict[str, torch.Tensor]) -> dict[str, float]:
    """Median wall time of one deterministic chunk at batch 1 on one thread, per policy (ms).

    The policies take turns over ``LATENCY_ROUNDS`` rounds, so a change in the machine's load
    (other processes, env workers shutting down) weighs on both alike rather than on one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {name: [] for name in policies}
    try:
        for policy in policies.values():
            policy.eval()
            for _ in range(LATENCY_WARMUP):
                policy.sample_chunks(history, deterministic=True)
        for _ in range(LATENCY_ROUNDS):
            for name, policy in policies.items():
                for _ in range(LATENCY_CALLS // LATENCY_ROUNDS):
                    tic = time.perf_counter()
                    policy.sample_chunks(history, deterministic=True)
                    times[name].append(time.perf_counter() - tic)
    finally:
        torch.set_num_threads(threads)
    return {name: 1000 * statistics.median(values) for name, values in times.items()}


def first_history(n_obs_steps: int) -> dict[str, torch.Tensor]:
    """The first demonstration's first observation, repeated as a ``[1, To, 15]`` history."""
    from omnigym.platform.datasets import load_dataset_steps

    state = torch.as_tensor(load_dataset_steps(DATASET_ID).obs["state"][:1], dtype=torch.float32)
    return {"state": state.unsqueeze(1).expand(1, n_obs_steps, -1).contiguous()}


def train_policy(name: str, imitation: dict[str, Any], out: str, device: str) -> dict[str, Any]:
    """Clone ``name`` from the demonstrations (under ``$MINARI_DATASETS_PATH``); save it to ``out``.

    Runs in the bench's process or in a worker process (``--jobs``), hence plain arguments.
    """
    from omnigym.platform.trainers.imitation import ImitationConfig, imitate_dataset

    if imitation["log_every"]:  # hours of training: show the imitation log and progress evaluations
        logging.basicConfig(level=logging.INFO, format=f"[{name}] %(message)s", force=True)
    tic = time.perf_counter()
    policy, history = imitate_dataset(
        DATASET_ID, name, list(CPU_NET), ImitationConfig(**imitation), device=device
    )
    train_s = time.perf_counter() - tic
    policy.to("cpu").save_pretrained(out)
    return {
        "train_s": round(train_s, 1),
        "final_loss": {k: round(v, 4) for k, v in history[-1].items() if k.startswith("train/loss")},
        "parameters": sum(p.numel() for p in policy.model.parameters()),
    }


def main() -> None:
    """Demonstrate, clone both policies, evaluate and time them; the last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="50 demonstrations, 600 BC steps, 10 test episodes"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--threads", type=int, default=0,
        help="torch CPU threads per training process (0: 1 with --quick or --jobs 2, else torch's default)",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=0,
        help="policies trained at once, each in its own process (0: 2 for a full run on a CPU, else 1)",
    )  # fmt: skip
    args = parser.parse_args()
    jobs = args.jobs or (2 if args.device == "cpu" and not args.quick else 1)
    if jobs < 1:
        parser.error("--jobs must be >= 1")
    threads = args.threads or (1 if jobs > 1 or args.quick else 0)
    if threads:  # also for the evaluations: closed-loop PushT outcomes change with the thread count
        torch.set_num_threads(threads)
    if args.quick:
        episodes, bc_steps, batch_size, test_episodes = 50, 600, 64, 10
    else:
        episodes, bc_steps, batch_size, test_episodes = 1000, 12_000, 128, 50
    imitation = {
        "steps": bc_steps, "batch_size": batch_size, "learning_rate": LEARNING_RATE, "warmup_steps": 500,
        "log_every": 0 if args.quick else 1000, "seed": 0, "eval_every": 0 if args.quick else bc_steps // 4,
        "eval_episodes": 0 if args.quick else PROGRESS_EPISODES,
    }  # fmt: skip
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
        tic = time.perf_counter()
        work = [(name, imitation, str(Path(tmp) / name), args.device) for name in POLICIES]
        trained = dict(zip(POLICIES, map_in_processes(train_policy, work, jobs, threads or 1), strict=True))
        training_wall_s = time.perf_counter() - tic
        policies = {name: Policy.from_pretrained(Path(tmp) / name) for name in POLICIES}
        latencies = chunk_latencies_ms(policies, first_history(policies[POLICIES[0]].config.n_obs_steps))
        for name, policy in policies.items():  # evaluated after the timing: env workers add load
            latency = latencies[name]
            tic = time.perf_counter()
            row = evaluate(policy, test_episodes)
            figures[name] = {
                **row, "latency_ms": round(latency, 2), **trained[name],
                "eval_s": round(time.perf_counter() - tic, 1),
            }  # fmt: skip
            print(
                f"{name}: success {row['success']:.2f}, coverage {row['coverage']:.3f}, "
                f"chunk latency {latency:.1f} ms, BC {trained[name]['train_s']:.0f} s ({bc_steps} steps, "
                f"{trained[name]['final_loss']}), eval {figures[name]['eval_s']:.0f} s"
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
        "policy_overrides": CPU_NET, "test_episodes": test_episodes, "jobs": jobs,
        "training_wall_s": round(training_wall_s, 1),
        "device": args.device, "threads": threads or torch.get_num_threads(),
        "torch_threads": threads or torch.get_num_threads(), "quick": args.quick,
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
