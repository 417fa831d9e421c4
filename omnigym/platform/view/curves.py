"""Learning curves for the viewer: the metrics a run logged in ``metrics.jsonl``, as ``(step, value)`` points.

The file is read again on every request, so the page shows a run that is still training as it
grows; a line cut short by a killed process is skipped (see :func:`omnigym.platform.loggers.read_metrics`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omnigym.platform.loggers import METRICS_FILE, read_metrics

NON_METRIC_KEYS = frozenset({"step", "wall_time"})
"""Keys of a ``metrics.jsonl`` line that are bookkeeping, not metrics to plot against the step."""


@dataclass(frozen=True)
class Run:
    """A run directory the viewer plots, under the name the page shows."""

    name: str
    path: Path

    def records(self) -> list[dict[str, Any]]:
        """The run's ``metrics.jsonl`` lines, read now (a training run may still be writing it)."""
        return read_metrics(self.path)


def open_runs(paths: Sequence[str | Path]) -> list[Run]:
    """The runs at ``paths``, named by their directory (the parent's name too when two would clash).

    Raises:
        FileNotFoundError: a path that is no run directory (it has no ``metrics.jsonl``).
    """
    resolved = [Path(p).expanduser() for p in paths]
    for path in resolved:
        if not (path / METRICS_FILE).is_file():
            what = "no such directory" if not path.exists() else f"no {METRICS_FILE} in it"
            raise FileNotFoundError(
                f"--run {path}: not a run directory ({what}); give a directory `omnigym train` wrote"
            )
    names = [p.resolve().name for p in resolved]
    return [
        Run(name if names.count(name) == 1 else f"{p.resolve().parent.name}/{name}", p)
        for name, p in zip(names, resolved, strict=True)
    ]


def metric_names(records: Sequence[dict[str, Any]]) -> list[str]:
    """Every numeric metric the records hold, in first-logged order."""
    names: dict[str, None] = {}
    for record in records:
        for key, value in record.items():
            if key not in NON_METRIC_KEYS and _number(value) is not None:
                names.setdefault(key, None)
    return list(names)


def curve(records: Sequence[dict[str, Any]], metric: str) -> list[tuple[float, float]]:
    """``metric``'s ``(step, value)`` points in step order (lines without it or without a number skipped)."""
    points = []
    for record in records:
        step, value = _number(record.get("step")), _number(record.get(metric))
        if step is not None and value is not None:
            points.append((step, value))
    return sorted(points, key=lambda point: point[0])


def run_summary(run: Run) -> dict[str, Any]:
    """What the curves page lists for a run: its name, path, metrics and last step."""
    records = run.records()
    steps = [s for r in records if (s := _number(r.get("step"))) is not None]
    return {
        "name": run.name, "path": str(run.path), "metrics": metric_names(records),
        "lines": len(records), "last_step": max(steps) if steps else None,
    }  # fmt: skip


def curves(runs: Sequence[Run], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """For each run, ``{"name", "curves": {metric: [[step, value], ...]}}`` of the asked metrics it logged."""
    result = []
    for run in runs:
        records = run.records()
        found = {m: [list(p) for p in curve(records, m)] for m in metrics}
        result.append({"name": run.name, "curves": {m: points for m, points in found.items() if points}})
    return result


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (bools count: a success flag plots as 0/1)."""
    if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
        return float(value)
    return None
