"""Offline-to-online: fine-tuning an offline policy online vs SAC from scratch, on hopper-medium.

1. Offline: TD3+BC (``configs/experiment/td3bc_hopper_medium.yaml``; ``--algo iql`` for IQL)
   learns from the locally generated ``hopper-medium`` dataset (``omnigym datasets make
   hopper-medium``). Its final policy is evaluated on ``START_EPISODES`` episodes: the start.
2. Online fine-tuning (``td3bc_hopper_finetune.yaml`` / ``iql_hopper_finetune.yaml``): the same
   agent (policy, critics, targets, reward scale: ``init_from``) keeps learning on Hopper-v5, one
   update per env step, with each recipe (``--recipes``):

   * ``mixed``: every batch half offline data, half online (RLPD's symmetric sampling);
   * ``wsrl``: WSRL's recipe: 5,000 env steps of the offline policy fill the online buffer before
     the first update, and no offline data is kept (``offline_data_ratio: 0``).
3. From scratch (``sac_hopper.yaml``): SAC with the same env-step budget.

The online runs are evaluated every 2,000 env steps (10 deterministic episodes, D4RL normalised
score). The question is the issue's: does fine-tuning improve on the offline start without the
initial collapse? Per run the report gives the worst score over the first 10% of online steps
(the collapse), the mean over the remaining evaluations, and the mean of the last three. One
evaluation of 10 Hopper episodes swings by about 10 points, so single evaluations are not compared.

Last line: one JSON object; ``ratio`` = the first recipe's final score (mean of the last three
evaluations) / SAC from scratch's at the same env steps (> 1: the offline start helped);
``improved`` per recipe: final score above the start; ``early_dip``: worst first-10% score minus
the start (negative: a dip); and the curves.

``--task halfcheetah`` runs the same on ``halfcheetah-medium`` / HalfCheetah-v5 (the hopper
experiments with ``env=halfcheetah``): HalfCheetah never falls, so its evaluations swing far
less than Hopper's.

Usage: ``omnigym bench offline_to_online [--quick] [--algo td3bc|iql] [--recipes mixed wsrl]``
(full: 60k offline updates, 20k online env steps, seeds 1-2; quick: the quick hopper-medium
dataset, 1k updates, 3k env steps, 5 episodes, seed 1).
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

DURATIONS = {
    "quick": "about 6.5 min, about 4.5 of them making the quick datasets (beside two training jobs)",
    "full": "halfcheetah: about 20 min a seed alone, 41 with two runs in parallel",
}
"""On the 2-core CPU: docs/algorithms/offline.md, Figures (--task halfcheetah, one seed a run)."""

START_EPISODES = 30
"""Evaluation episodes of the offline start (10 per online evaluation)."""
RECIPES: dict[str, list[str]] = {
    "mixed": [],
    "wsrl": ["algo.offline_data_ratio=0", "algo.warmup_steps=5000"],
}
"""Overrides of the fine-tuning experiment per recipe (its YAML is the ``mixed`` recipe)."""


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


def summarise(curve: list[dict[str, Any]], total: int) -> dict[str, float]:
    """Scores of a curve: worst and mean over the first 10% of ``total`` steps, mean after, last three."""
    cut = max(total // 10, curve[0]["step"])
    first = [r["score"] for r in curve if r["step"] <= cut]
    after = [r["score"] for r in curve if r["step"] > cut] or first
    return {
        "first10_min": min(first), "first10_mean": float(np.mean(first)),
        "after10_mean": float(np.mean(after)), "last3_mean": float(np.mean([r["score"] for r in curve[-3:]])),
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
    parser.add_argument(
        "--recipes", nargs="+", choices=sorted(RECIPES), default=["wsrl", "mixed"], help="fine-tuning recipes"
    )
    parser.add_argument("--task", choices=["hopper", "halfcheetah"], default="hopper", help="task (hopper)")
    parser.add_argument("--offline-updates", type=int, default=60_000, help="offline updates (60k)")
    parser.add_argument("--online-steps", type=int, default=20_000, help="online env steps (20k)")
    args = parser.parse_args()
    import torch

    from omnigym.platform.dataset_recipes import ensure_dataset

    torch.set_num_threads(1)
    offline_updates, online_steps, eval_every = (
        (1_000, 3_000, 1_000) if args.quick else (args.offline_updates, args.online_steps, 2_000)
    )
    episodes, start_episodes = (5, 5) if args.quick else (10, START_EPISODES)
    warmup = [f"algo.warmup_steps={online_steps // 10}"] if args.quick else []  # quick: 300, not 5000
    seeds = args.seeds or ([1] if args.quick else [1, 2])
    dataset = ensure_dataset(f"{args.task}-medium", quick=args.quick)
    tic = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            root = Path(tmp) / f"seed_{seed}"
            common = [f"seed={seed}", f"dataset={dataset}", "log.progress=false", "checkpoint.every_steps=0"]
            common += [f"env={args.task}"]  # the experiments are written for hopper; same settings
            offline_budget = [f"total_steps={offline_updates}", f"eval.every_steps={offline_updates}"]
            offline_budget += [f"eval.episodes={start_episodes}"]
            offline_budget += [f"algo.total_updates={offline_updates}"] if args.algo == "iql" else []
            start = run(f"{args.algo}_hopper_medium", root / "offline", [*common, *offline_budget])[-1][
                "score"
            ]
            online = [*common, f"total_steps={online_steps}", f"eval.every_steps={eval_every}"]
            online += [f"eval.episodes={episodes}"]
            row: dict[str, Any] = {"start": start, "finetune": {}, "curves": {}}
            for recipe in args.recipes:
                overrides = [*online, f"init_from={root / 'offline'}", *RECIPES[recipe]]
                overrides += warmup if recipe == "wsrl" else []
                overrides += [f"algo.total_updates={online_steps}"] if args.algo == "iql" else []
                curve = run(f"{args.algo}_hopper_finetune", root / recipe, overrides)
                row["finetune"][recipe], row["curves"][recipe] = summarise(curve, online_steps), curve
            scratch = run("sac_hopper", root / "scratch", online)
            row["scratch"], row["curves"]["scratch"] = summarise(scratch, online_steps), scratch
            results[str(seed)] = row
            for name, s in [*row["finetune"].items(), ("SAC from scratch", row["scratch"])]:
                print(
                    f"seed {seed} {name}: start {start:.1f}, first 10% min {s['first10_min']:.1f}, "
                    f"mean after {s['after10_mean']:.1f}, last 3 {s['last3_mean']:.1f}",
                    flush=True,
                )

    def mean_of(pick: Any) -> float:
        return float(np.mean([pick(r) for r in results.values()]))

    start_mean = mean_of(lambda r: r["start"])
    scratch = mean_of(lambda r: r["scratch"]["last3_mean"])
    summary: dict[str, dict[str, Any]] = {}
    for recipe in args.recipes:
        final = mean_of(lambda r: r["finetune"][recipe]["last3_mean"])  # noqa: B023  (called at once)
        summary[recipe] = {
            "final": final,
            "after10_mean": mean_of(lambda r: r["finetune"][recipe]["after10_mean"]),  # noqa: B023
            "early_dip": mean_of(lambda r: r["finetune"][recipe]["first10_min"] - r["start"]),  # noqa: B023
            "improved": final > start_mean,
        }
        print(
            f"{recipe}: start {start_mean:.1f} -> final (last 3) {final:.1f}, mean after the first 10% "
            f"{summary[recipe]['after10_mean']:.1f}, first 10% worst minus start "
            f"{summary[recipe]['early_dip']:+.1f}; SAC from scratch final {scratch:.1f}"
        )
    first = summary[args.recipes[0]]
    print(json.dumps({
        "bench": "offline_to_online",
        "ratio": first["final"] / scratch if scratch else float("inf"),
        "offline_score": start_mean, "finetune_final": first["final"], "scratch_final": scratch,
        "early_dip": first["early_dip"], "improved": first["improved"], "recipes": summary,
        "algo": args.algo, "task": args.task, "seeds": seeds, "dataset": dataset,
        "offline_updates": offline_updates, "online_steps": online_steps, "eval_every": eval_every,
        "runs": results, "torch_threads": torch.get_num_threads(),
        "seconds": round(time.perf_counter() - tic, 1), "quick": args.quick,
    }))  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
