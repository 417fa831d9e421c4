"""``omnigym demo``: the main job on the embedded default, end to end, with a report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from omnigym.core.config import config_to_dict
from omnigym.platform.experiment import load_experiment
from omnigym.platform.report import write_run_report
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

DEMO_EXPERIMENT = "demo"


def run_demo(run_dir: Path | None = None, overrides: Sequence[str] = ()) -> Path:
    """Train the demo experiment, evaluate it with a video, and write ``report.md``."""
    config = load_experiment(DEMO_EXPERIMENT, overrides)
    config.eval.video = True
    run_dir = run_dir or Path("runs") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    start = time.perf_counter()
    result = OnPolicyTrainer(config, run_dir).train()
    algo = config_to_dict(config.algo)
    return write_run_report(
        run_dir,
        config,
        result.final_eval,
        result.best_eval,
        total_steps=result.total_steps,
        wall_minutes=(time.perf_counter() - start) / 60,
        title=f"omnigym demo: {config.algo.type.upper()} on {config.env.id}",
        extra_sections={
            "Algorithm settings": "\n".join(f"- `{k}`: {v}" for k, v in algo.items()),
            "Reproduce": f"`omnigym train {DEMO_EXPERIMENT}` (the run's resolved config is `config.yaml`).",
        },
    )
