"""Offline-to-online: fine-tuning an offline policy online vs SAC from scratch, on hopper-medium.

1. Offline: TD3+BC (``configs/experiment/td3bc_hopper_medium.yaml``; ``--algo iql`` for IQL)
   learns from the locally generated ``hopper-medium`` dataset (``omnigym datasets make
   hopper-medium``).
2. Online fine-tuning (``td3bc_hopper_finetune.yaml`` / ``iql_hopper_finetune.yaml``): the same
   agent (policy, critics, targets, reward scale: ``init_from``) keeps learning on Hopper-v5, each
   batch half offline data and half its own online transitions, one update per env step.
3. From scratch (``sac_hopper.yaml``): SAC with the same env-step budget.

Both online runs are evaluated every ``EVAL_EVERY`` env steps (deterministic, D4RL normalised
score). The question is the issue's: does fine-tuning improve on the offline start without the
initial collapse? So the report gives the offline start, the worst and mean score over the first
10% of online steps, the final score, and the same for SAC from scratch.

Last line: one JSON object; ``ratio`` = the fine-tuned run's final score / SAC from scratch's
final score at the same env steps (> 1: the offline start helped), with the curves. "Final" is
the mean of the last three evaluations: one evaluation of 10 Hopper episodes swings by about 10
points. ``improved``: that figure is above the offline start.

Usage: ``omnigym bench offline_to_online [--quick] [--algo td3bc|iql]`` (full: 60k offline
updates, 20k online env steps, 10 evaluation episodes every 2k online steps, seeds 1-2; quick: the quick
hopper-medium dataset, 1k updates, 3k env steps, 5 episodes, seed 1).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def run(experiment: str, run_dir: Path, overrides: list[str]) -> list[dict[str, Any]]:
    """Train ``experiment``; returns its evaluations as ``{"step", "score", "return"}`` rows."""
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers import build_trainer

    config = load_experiment(experiment, [*overrides, f"run_dir={run_dir}", "log.tensorboard=false"])
    build_trainer(config, run_dir).train()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {"step": r["step"], "score": r["eval/normalized_score_mean"], "return": r["eval/return_mean"]}
        for r in rows
        if r.get("eval/normalized_score_mean") is not None
    ]


def early(curve: list[dict[str, Any]], total: int) -> dict[str, float]:
    """Worst and mean score over the first 10% of ``total`` steps; the final and last-three scores.

    One Hopper evaluation of 10 episodes swings by about 10 points, so runs compare the mean of
    their last three evaluations.
    """
    first = [r["score"] for r in curve if r["step"] <= max(total // 10, curve[0]["step"])]
    last = [r["score"] for r in curve[-3:]]
    return {
        "first10_min": min(first), "first10_mean": float(np.mean(first)), "final": curve[-1]["score"],
        "last3_mean": float(np.mean(last)),
    }  # fmt: skip


def main() -> None:
    """Offline training, then online fine-tuning vs SAC from scratch; the last line is JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="quick dataset, 1k updates, 3k env steps, 1 seed"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 1 2; quick: 1)")
    parser.add_argument("--algo", choices=["td3bc", "iql"], default="td3bc", help="offline algorithm (td3bc)")
    parser.add_argument("--offline-updates", type=int, default=60_000, help="offline updates (60k)")
    parser.add_argument("--online-steps", type=int, default=20_000, help="online env steps (20k)")
    args = parser.parse_args()
    import torch

    from omnigym.platform.dataset_recipes import ensure_dataset

    torch.set_num_threads(1)
    offline_updates, online_steps, eval_every = (
        (1_000, 3_000, 1_000) if args.quick else (args.offline_updates, args.online_steps, 2_000)
    )
    episodes = 5 if args.quick else 10
    seeds = args.seeds or ([1] if args.quick else [1, 2])
    dataset = ensure_dataset("hopper-medium", quick=args.quick)
    start = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            root = Path(tmp) / f"seed_{seed}"
            common = [f"seed={seed}", f"dataset={dataset}", "log.progress=false", "checkpoint.every_steps=0"]
            common += [f"eval.episodes={episodes}"]
            budget = [
                f"total_steps={offline_updates}",
                f"eval.every_steps={max(eval_every, offline_updates // 6)}",
            ]
            budget += [f"algo.total_updates={offline_updates}"] if args.algo == "iql" else []
            offline = run(f"{args.algo}_hopper_medium", root / "offline", [*common, *budget])
            online = [
                f"init_from={root / 'offline'}",
                f"total_steps={online_steps}",
                f"eval.every_steps={eval_every}",
            ]
            online += [f"algo.total_updates={online_steps}"] if args.algo == "iql" else []
            tuned = run(f"{args.algo}_hopper_finetune", root / "finetune", [*common, *online])
            scratch = run(
                "sac_hopper",
                root / "scratch",
                [*common, f"total_steps={online_steps}", f"eval.every_steps={eval_every}"],
            )
            results[str(seed)] = {
                "offline_final": offline[-1]["score"], "finetune": early(tuned, online_steps),
                "scratch": early(scratch, online_steps), "finetune_curve": tuned, "scratch_curve": scratch,
            }  # fmt: skip
            r = results[str(seed)]
            print(
                f"seed {seed}: offline {args.algo} {r['offline_final']:.1f} -> fine-tuned: first 10% min "
                f"{r['finetune']['first10_min']:.1f}, last 3 {r['finetune']['last3_mean']:.1f}; "
                f"SAC from scratch: first 10% min {r['scratch']['first10_min']:.1f}, "
                f"last 3 {r['scratch']['last3_mean']:.1f}",
                flush=True,
            )
    mean = {
        k: float(np.mean([r[k]["last3_mean"] for r in results.values()])) for k in ("finetune", "scratch")
    }
    offline_mean = float(np.mean([r["offline_final"] for r in results.values()]))
    collapse = float(np.mean([r["finetune"]["first10_min"] - r["offline_final"] for r in results.values()]))
    print(
        f"normalised score: offline start {offline_mean:.1f}, fine-tuned (mean of the last 3 evaluations) "
        f"{mean['finetune']:.1f}, SAC from scratch {mean['scratch']:.1f}; "
        f"first 10% worst minus start {collapse:+.1f} (negative: a dip)"
    )
    print(json.dumps({
        "bench": "offline_to_online",
        "ratio": mean["finetune"] / mean["scratch"] if mean["scratch"] else float("inf"),
        "offline_score": offline_mean, "finetune_final": mean["finetune"], "scratch_final": mean["scratch"],
        "early_dip": collapse, "improved": mean["finetune"] > offline_mean, "algo": args.algo,
        "seeds": seeds, "dataset": dataset,
        "offline_updates": offline_updates,
        "online_steps": online_steps, "eval_every": eval_every, "runs": results,
        "seconds": round(time.perf_counter() - start, 1), "quick": args.quick,
    }))  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
