"""Run directories: a new run never writes into an old one, and a failed start leaves nothing behind.

``train`` refuses a ``run_dir`` that holds anything; the user resumes it (``--resume``), picks
another ``run_dir``, or passes ``--overwrite``, which moves the old run aside (renamed, never
deleted).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

CONFIG_FILE = "config.yaml"
RESULTS_FILE = "results.json"


class RunExistsError(ValueError):
    """Training was asked to start in a directory that already holds something."""


def describe_run(run_dir: Path) -> str:
    """What ``run_dir`` holds, in words: a finished run, a run with checkpoints, or other files."""
    from omnigym.platform.checkpoint import latest_checkpoint

    results = run_dir / RESULTS_FILE
    if results.is_file():
        try:
            steps = json.loads(results.read_text()).get("total_steps")
        except (OSError, json.JSONDecodeError, AttributeError):
            steps = None
        return "a finished run" + (f" ({steps:,} steps)" if isinstance(steps, int) else "")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None:
        return f"an unfinished run (latest checkpoint {checkpoint.name})"
    if (run_dir / CONFIG_FILE).is_file():
        return "a run with no checkpoint"
    count = sum(1 for _ in run_dir.iterdir())
    return f"{count} file{'s' if count != 1 else ''} that are not an omnigym run"


def check_new_run_dir(run_dir: Path) -> None:
    """Refuse ``run_dir`` when it holds anything; an empty or missing directory is fine.

    Raises:
        RunExistsError: naming what is there and the three ways on.
    """
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        what = describe_run(run_dir) if run_dir.is_dir() else "a file"
        raise RunExistsError(
            f"run directory {run_dir} already holds {what}; resume it with `omnigym train --resume "
            f"{run_dir}`, choose another run_dir=..., or pass --overwrite to move it aside"
        )


def claim_run_dir(run_dir: Path, config: dict[str, Any], *, existing_ok: bool = False) -> None:
    """Create ``run_dir`` for a new run and write its resolved config (``config.yaml``).

    ``existing_ok`` lets a run share a directory that holds files already (a model-based run's
    inner trainer writes into the model-based run's directory).

    Raises:
        RunExistsError: if ``run_dir`` already holds anything and not ``existing_ok``.
    """
    if not existing_ok:
        check_new_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))


def move_aside(run_dir: Path) -> Path | None:
    """Rename an existing ``run_dir`` to ``<name>.old-<timestamp>`` beside it; returns the new path.

    Nothing is deleted. Returns None when there is nothing to move (missing or empty directory).
    """
    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    suffix = 1
    while target.exists():
        suffix += 1
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{suffix}")
    run_dir.rename(target)
    return target


def remove_failed_start(run_dir: Path, existed_before: bool) -> bool:
    """Delete ``run_dir`` after a start that failed before saving anything; True if removed.

    Only a directory this command created, holding no checkpoint, no results and no logged
    iteration, is removed: a run that trained for a while keeps its metrics for the post-mortem.
    """
    from omnigym.platform.checkpoint import latest_checkpoint
    from omnigym.platform.loggers import METRICS_FILE

    if existed_before or not run_dir.is_dir():
        return False
    metrics = run_dir / METRICS_FILE
    if metrics.is_file() and metrics.stat().st_size > 0:
        return False
    if (run_dir / RESULTS_FILE).exists() or latest_checkpoint(run_dir) is not None:
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


def load_resume_checkpoint(run_dir: Path) -> Any:
    """The checkpoint a resumed run continues from, saying which, and naming any corrupt one skipped.

    Raises:
        FileNotFoundError: if the run has no complete checkpoint.
    """
    import sys

    from omnigym.platform.checkpoint import find_checkpoint, load_checkpoint

    search = find_checkpoint(run_dir)
    for path, why in search.skipped:
        print(f"resume: skipped corrupt checkpoint {path} ({why})", file=sys.stderr)
    if search.path is None:
        skipped = f" ({len(search.skipped)} corrupt ones skipped)" if search.skipped else ""
        raise FileNotFoundError(f"no checkpoint to resume from in {run_dir}{skipped}")
    print(f"resuming {run_dir} from {search.path.name} (step {search.step:,})", file=sys.stderr)
    return load_checkpoint(search.path)
