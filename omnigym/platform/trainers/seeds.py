"""Several seeds of one experiment, aggregated as mean, median and IQM with bootstrap CIs."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omnigym.platform.experiment import load_experiment
from omnigym.platform.report import write_run_report
from omnigym.platform.run_dirs import check_new_run_dir
from omnigym.platform.stats import aggregate_runs
from omnigym.platform.trainers import build_trainer

AGGREGATE_FILE = "aggregate.json"


def train_seeds(
    experiment: str, seeds: Sequence[int], overrides: Sequence[str] = (), root: Path | None = None
) -> dict[str, Any]:
    """Train ``experiment`` once per seed and aggregate the evaluation returns across seeds.

    Runs go to ``root/seed_<s>``, each with its ``report.md``; the final and the best returns (and
    the D4RL normalised scores, where the env has them) are aggregated into ``root/aggregate.json``.
    A ``root`` that holds anything is refused.
    """
    if not seeds:
        raise ValueError("train_seeds needs at least one seed")
    first = load_experiment(experiment, overrides)
    root = root or Path("runs") / f"{first.name}-seeds-{time.strftime('%Y%m%d-%H%M%S')}"
    check_new_run_dir(root)
    finals, bests, scores, best_scores, runs = [], [], [], [], {}
    for seed in seeds:
        run_dir = root / f"seed_{seed}"
        config = load_experiment(experiment, [*overrides, f"seed={seed}", f"run_dir={run_dir}"])
        start = time.perf_counter()
        result = build_trainer(config, run_dir).train()
        write_run_report(
            run_dir, config, result.final_eval, result.best_eval,
            total_steps=result.total_steps, wall_minutes=(time.perf_counter() - start) / 60,
        )  # fmt: skip
        best_eval = result.best_eval or result.final_eval
        finals.append(result.final_eval["return_mean"])
        bests.append(best_eval["return_mean"])
        runs[str(seed)] = {"run_dir": str(run_dir), "final_return": finals[-1], "best_return": bests[-1]}
        if "normalized_score_mean" in result.final_eval:
            scores.append(result.final_eval["normalized_score_mean"])
            best_scores.append(best_eval["normalized_score_mean"])
            runs[str(seed)]["final_normalized_score"] = scores[-1]
            runs[str(seed)]["best_normalized_score"] = best_scores[-1]
    summary = {
        "experiment": experiment,
        "seeds": list(seeds),
        "final_return": aggregate_runs(finals),
        "best_return": aggregate_runs(bests),
        "runs": runs,
    }
    if len(scores) == len(finals):  # D4RL tasks: the normalised score across seeds too
        summary["final_normalized_score"] = aggregate_runs(scores)
        summary["best_normalized_score"] = aggregate_runs(best_scores)
    root.mkdir(parents=True, exist_ok=True)
    (root / AGGREGATE_FILE).write_text(json.dumps(summary, indent=2))
    summary["root"] = str(root)
    return summary
