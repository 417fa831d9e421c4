"""``omnigym train`` and ``omnigym demo``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from omnigym.platform.cli.errors import UsageError

if TYPE_CHECKING:
    from omnigym.platform.experiment import ExperimentConfig


RESUME_KEYS = ("total_steps", "eval.", "log.", "checkpoint.")
"""What ``--resume`` may change: the budget and how the run evaluates, logs and checkpoints."""


def _cmd_train(args: argparse.Namespace) -> int:
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.run_dirs import check_new_run_dir, move_aside
    from omnigym.platform.trainers.on_policy import new_run_dir

    if args.seeds:
        if args.resume or not args.experiment:
            raise UsageError("train --seeds: name an experiment (and no --resume)")
        return _train_seeds(args)
    if args.resume:
        overrides = [*([args.experiment] if args.experiment else []), *args.overrides]
        if any("=" not in o for o in overrides):
            raise UsageError(
                "train --resume RUN_DIR takes no experiment, only overrides such as total_steps=N"
            )
        if args.overwrite:
            raise UsageError("train: --overwrite starts a new run; it cannot go with --resume")
        return _resume(Path(args.resume), overrides)
    if not args.experiment:
        raise UsageError("train: name an experiment (see `omnigym list`) or pass --resume RUN_DIR")
    config = load_experiment(args.experiment, args.overrides)
    run_dir = new_run_dir(config)
    if args.overwrite:
        moved = move_aside(run_dir)
        if moved is not None:
            print(f"moved the existing {run_dir} aside to {moved}", file=sys.stderr)
    else:
        check_new_run_dir(run_dir)  # refused before anything is built
    return _run(config, run_dir, resume=False)


def _resume(run_dir: Path, overrides: list[str]) -> int:
    """Continue a run from its latest checkpoint; a finished run is extended by a larger total_steps."""
    from omnigym.core.config import apply_overrides, config_to_dict
    from omnigym.platform.checkpoint import find_checkpoint
    from omnigym.platform.experiment import build_experiment
    from omnigym.platform.run_dirs import RESULTS_FILE
    from omnigym.platform.trainers.on_policy import load_run_config

    config = load_run_config(run_dir)
    if overrides:
        bad = [o for o in overrides if not o.split("=", 1)[0].lstrip("~").startswith(RESUME_KEYS)]
        if bad:
            raise UsageError(
                f"train --resume: {', '.join(bad)} would change the run itself; a resume may change only "
                "total_steps, eval.*, log.* and checkpoint.* (start a new run for the rest)"
            )
        config = build_experiment(apply_overrides(config_to_dict(config), overrides))
    found = find_checkpoint(run_dir)
    if found.step is not None and found.step >= config.total_steps and (run_dir / RESULTS_FILE).is_file():
        print(
            f"{run_dir} is finished ({found.step:,} steps, total_steps={config.total_steps:,}); nothing to "
            f"do. To train further: omnigym train --resume {run_dir} total_steps=N (N > {found.step:,})",
            file=sys.stderr,
        )
        return 0
    return _run(config, run_dir, resume=True, save_config=bool(overrides))


def _run(config: ExperimentConfig, run_dir: Path, *, resume: bool, save_config: bool = False) -> int:
    """Build the trainer, train, write the report; an interrupt exits 130 after its checkpoint."""
    import yaml

    from omnigym.core.config import config_to_dict
    from omnigym.platform.interrupts import INTERRUPT_EXIT_CODE, TrainingInterrupted
    from omnigym.platform.report import write_run_report
    from omnigym.platform.run_dirs import CONFIG_FILE, remove_failed_start
    from omnigym.platform.trainers import build_trainer

    existed = run_dir.exists()
    start = time.perf_counter()
    try:
        trainer = build_trainer(config, run_dir, resume=resume)
        if save_config:  # the resume's new budget or settings become the run's config
            (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(config_to_dict(config), sort_keys=False))
        print(f"run directory: {trainer.run_dir}", file=sys.stderr)
        result = trainer.train()
    except TrainingInterrupted as exc:
        print(f"omnigym train: {exc}", file=sys.stderr)
        return INTERRUPT_EXIT_CODE
    except BaseException:
        if not resume and remove_failed_start(run_dir, existed):
            print(
                f"omnigym train: removed {run_dir} (the run failed before saving anything)", file=sys.stderr
            )
        raise
    report = write_run_report(
        run_dir, config, result.final_eval, result.best_eval,
        total_steps=result.total_steps, wall_minutes=(time.perf_counter() - start) / 60,
    )  # fmt: skip
    _print_result(result.final_eval, result.best_eval)
    print(f"report: {report}")
    return 0


def _train_seeds(args: argparse.Namespace) -> int:
    from omnigym.platform.trainers.seeds import train_seeds

    summary = train_seeds(args.experiment, args.seeds, args.overrides)
    print(f"{len(args.seeds)} seeds, runs under {summary['root']}:")
    for label in ("final_return", "best_return", "final_normalized_score", "best_normalized_score"):
        if label not in summary:
            continue
        a = summary[label]
        mean_ci, iqm_ci = (f"[{a[f'{k}_ci_low']:.2f}, {a[f'{k}_ci_high']:.2f}]" for k in ("mean", "iqm"))
        print(
            f"{label.replace('_', ' ')}: mean {a['mean']:.2f} {mean_ci}  median {a['median']:.2f}"
            f"  IQM {a['iqm']:.2f} {iqm_ci}"
        )
    return 0


def _print_result(final_eval: dict[str, float], best_eval: dict[str, float] | None) -> None:
    from omnigym.platform.evaluate import format_summary

    print("final evaluation (policy at the end of training):")
    print(format_summary(final_eval))
    if best_eval is not None:
        print(f"best evaluation (at step {int(best_eval.get('step', 0))}):")
        print(format_summary(best_eval))


def _cmd_demo(args: argparse.Namespace) -> int:
    from omnigym.platform.demo import run_demo

    report = run_demo(Path(args.out) if args.out else None, overrides=args.overrides)
    print(f"report: {report}")
    return 0


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"seeds are comma-separated integers, e.g. 1,2,3; got {text!r}"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("give at least one seed, e.g. --seeds 1,2,3")
    return seeds


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``train`` and ``demo`` commands."""
    train = sub.add_parser("train", help="train an experiment, or resume a run")
    train.add_argument("experiment", nargs="?", help="experiment name (configs/experiment) or a YAML path")
    train.add_argument(
        "overrides", nargs="*", help="dotted overrides, e.g. algo.learning_rate=1e-3 env=pendulum"
    )
    train.add_argument(
        "--resume", metavar="RUN_DIR",
        help="continue a run from its latest checkpoint; with total_steps=N, extend a finished run",
    )  # fmt: skip
    train.add_argument(
        "--overwrite", action="store_true",
        help="if run_dir holds a run, move it aside (renamed <run_dir>.old-<time>, never deleted)",
    )  # fmt: skip
    train.add_argument(
        "--seeds", type=_seed_list, metavar="S1,S2,...",
        help="train once per seed and aggregate (mean, median, IQM with 95%% bootstrap CIs)",
    )  # fmt: skip
    train.set_defaults(func=_cmd_train)

    demo = sub.add_parser("demo", help="the main job: train, evaluate and write a report")
    demo.add_argument("--out", help="run directory (default runs/demo-<timestamp>)")
    demo.add_argument("overrides", nargs="*", help="dotted overrides for the demo experiment")
    demo.set_defaults(func=_cmd_demo)
