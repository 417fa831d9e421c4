"""The human-readable run report: ``report.md`` with a learning curve, evaluations and video."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

REPORT_FILE = "report.md"
CURVE_FILE = "learning_curve.png"


def _points(metrics: list[dict[str, Any]], x: str, y: str) -> tuple[list[float], list[float]]:
    """``(xs, ys)`` of the rows that have finite numbers under both ``x`` and ``y``."""
    xs: list[float] = []
    ys: list[float] = []
    for row in metrics:
        x_value, y_value = _finite(row.get(x)), _finite(row.get(y))
        if x_value is not None and y_value is not None:
            xs.append(x_value)
            ys.append(y_value)
    return xs, ys


def _finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number (not a string or bool), else None."""
    if isinstance(value, (str, bool)) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def plot_learning_curve(
    metrics: list[dict[str, Any]],
    path: Path,
    *,
    x: str = "step",
    y: str = "rollout/episode_return",
    eval_y: str = "eval/return_mean",
) -> Path:
    """Plot the training return and the evaluation points against ``x`` into a PNG.

    Uses a standalone ``Figure`` on the Agg canvas, so pyplot's global state is never touched.

    Args:
        metrics: logged rows (e.g. a run's ``metrics.jsonl``); keys may be missing from some rows,
            and rows without both ``x`` and the plotted key are skipped.
        path: the PNG to write (parent folders are made).
        x: key of the horizontal axis.
        y: key of the training curve.
        eval_y: key of the evaluation points (plotted when present).

    Returns:
        ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    train_x, train_y = _points(metrics, x, y)
    eval_x, eval_y_values = _points(metrics, x, eval_y)
    if train_x:
        axes.plot(train_x, train_y, label=f"train ({y})", linewidth=1.2)
    if eval_x:
        axes.plot(eval_x, eval_y_values, "o--", label=f"eval ({eval_y})", markersize=4)
    if train_x or eval_x:
        axes.legend(loc="best")
    else:
        axes.text(0.5, 0.5, "no data logged", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlabel(x)
    axes.set_ylabel("return")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def _format_value(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_format_value(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _evaluation_section(final_eval: dict[str, float], best_eval: dict[str, float] | None) -> str:
    """Final and best evaluation side by side, each labelled, so neither is mistaken for the other."""
    intro = (
        "- **Final**: the policy as it was at the end of training.\n"
        "- **Best**: the best evaluation seen during training (the checkpoint kept as best)."
    )
    if best_eval is None:
        note = "\n\nNo best evaluation was recorded: only the final evaluation is shown."
        rows = [[name, value] for name, value in final_eval.items()]
        return f"{intro}{note}\n\n" + _table(["metric", "final"], rows)
    names = list(dict.fromkeys([*final_eval, *best_eval]))
    rows = [[name, final_eval.get(name), best_eval.get(name)] for name in names]
    return f"{intro}\n\n" + _table(["metric", "final", "best"], rows)


def _relative(target: Path, run_dir: Path) -> str:
    """``target`` relative to ``run_dir``, with forward slashes, for a markdown link."""
    return Path(os.path.relpath(Path(target).resolve(), Path(run_dir).resolve())).as_posix()


def write_report(
    run_dir: Path,
    *,
    title: str,
    metrics: list[dict[str, Any]],
    summary: dict[str, float | str],
    final_eval: dict[str, float],
    best_eval: dict[str, float] | None,
    video: Path | None,
    extra_sections: dict[str, str] | None = None,
) -> Path:
    """Write ``run_dir/report.md`` and its ``learning_curve.png``.

    Args:
        run_dir: the run's folder (made if missing).
        title: the report's heading.
        metrics: logged rows for the learning curve (see :func:`plot_learning_curve`).
        summary: config and run facts (env, algorithm, steps, wall time, ...), shown as a table.
        final_eval: evaluation summary of the policy at the end of training.
        best_eval: evaluation summary of the best checkpoint, or None when none was kept.
        video: an evaluation video to link (relative to ``run_dir``), or None.
        extra_sections: more ``heading -> markdown`` sections, appended in order.

    Returns:
        The path of ``report.md``.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    plot_learning_curve(metrics, run_dir / CURVE_FILE)
    sections = [
        f"# {title}",
        "## Run summary\n\n" + _table(["key", "value"], [[k, v] for k, v in summary.items()]),
        "## Evaluation\n\n" + _evaluation_section(final_eval, best_eval),
        f"## Learning curve\n\n![learning curve]({CURVE_FILE})",
    ]
    if video is not None:
        sections.append(f"## Video\n\n[evaluation video]({_relative(Path(video), run_dir)})")
    sections += [f"## {heading}\n\n{body.strip()}" for heading, body in (extra_sections or {}).items()]
    path = run_dir / REPORT_FILE
    path.write_text("\n\n".join(sections) + "\n")
    return path


def write_run_report(
    run_dir: Path,
    config: Any,
    final_eval: dict[str, float],
    best_eval: dict[str, float] | None,
    *,
    total_steps: int,
    wall_minutes: float | None = None,
    title: str | None = None,
    extra_sections: dict[str, str] | None = None,
) -> Path:
    """``report.md`` for a finished run: summary, final and best evaluation, curve, videos, config.

    ``config`` is the run's :class:`~omnigym.platform.experiment.ExperimentConfig`; every
    evaluation video under ``run_dir/videos`` is linked, the last one shown first.
    """
    import yaml

    from omnigym.core.config import config_to_dict
    from omnigym.platform.loggers import read_metrics

    run_dir = Path(run_dir)
    summary: dict[str, float | str] = {
        "experiment": config.name,
        "env": config.env.id,
        "policy": config.policy.type,
        "algorithm": config.algo.type,
        "trainer": config.trainer,
        "env steps" if config.trainer != "offline" else "updates": total_steps,
        "seed": config.seed,
    }
    if wall_minutes is not None:
        summary["wall time (min)"] = round(wall_minutes, 2)
    videos = sorted((run_dir / "videos").glob("*.mp4"), key=lambda p: p.stat().st_mtime)
    sections = dict(extra_sections or {})
    if len(videos) > 1:
        sections["All evaluation videos"] = "\n".join(
            f"- [{v.name}]({_relative(v, run_dir)})" for v in reversed(videos)
        )
    sections["Config"] = (
        "The resolved config (`config.yaml`); reproduce with `omnigym train "
        f"{run_dir / 'config.yaml'} run_dir=NEW_DIR`.\n\n```yaml\n"
        + yaml.safe_dump(config_to_dict(config), sort_keys=False)
        + "```"
    )
    return write_report(
        run_dir,
        title=title or f"{config.name}: {config.algo.type} on {config.env.id}",
        metrics=read_metrics(run_dir),
        summary=summary,
        final_eval=final_eval,
        best_eval=best_eval,
        video=videos[-1] if videos else None,
        extra_sections=sections,
    )
