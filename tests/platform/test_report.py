"""The markdown run report and its learning curve."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from omnigym.platform.report import plot_learning_curve, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

METRICS = [
    {"step": 0, "rollout/episode_return": 10.0},
    {"step": 1000, "rollout/episode_return": 40.0, "train/loss_policy": 0.1},
    {"step": 1000, "eval/return_mean": 55.0},
    {"step": 2000, "rollout/episode_return": 120.0},
    {"time/sps": 900.0},  # no step: skipped
    {"step": 3000, "rollout/episode_return": 300.0, "eval/return_mean": 280.0},
]


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_SIGNATURE


def test_plot_learning_curve_writes_png_without_touching_pyplot(tmp_path: Path) -> None:
    figures_before = plt.get_fignums()
    path = plot_learning_curve(METRICS, tmp_path / "plots" / "curve.png")
    assert _is_png(path)
    assert plt.get_fignums() == figures_before


@pytest.mark.parametrize("metrics", [[], [{"step": 1, "other": 2.0}], [{"step": 1, "eval/return_mean": 5.0}]])
def test_plot_learning_curve_with_missing_keys(tmp_path: Path, metrics: list[dict]) -> None:
    assert _is_png(plot_learning_curve(metrics, tmp_path / "curve.png"))


def test_write_report_shows_final_and_best_eval(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    video = run_dir / "videos" / "eval.mp4"
    video.parent.mkdir(parents=True)
    video.write_bytes(b"")
    path = write_report(
        run_dir,
        title="PPO on CartPole-v1",
        metrics=METRICS,
        summary={"env": "CartPole-v1", "algorithm": "ppo", "total_steps": 3000.0, "wall_time_s": 12.345},
        final_eval={"return_mean": 280.0, "success_rate": 0.5},
        best_eval={"return_mean": 312.5, "step": 2000.0},
        video=video,
        extra_sections={"Notes": "Something worth knowing."},
    )
    assert path == run_dir / "report.md"
    text = path.read_text()
    assert text.startswith("# PPO on CartPole-v1")
    assert "| env | CartPole-v1 |" in text
    assert "| metric | final | best |" in text
    assert "| return_mean | 280 | 312.5 |" in text
    assert "| success_rate | 0.5 | — |" in text
    assert "**Final**" in text
    assert "**Best**" in text
    assert "![learning curve](learning_curve.png)" in text
    assert "(videos/eval.mp4)" in text
    assert "## Notes\n\nSomething worth knowing." in text
    assert _is_png(run_dir / "learning_curve.png")


def test_write_report_without_best_eval_or_video_says_so(tmp_path: Path) -> None:
    path = write_report(
        tmp_path,
        title="run",
        metrics=[],
        summary={"env": "a|b"},
        final_eval={"return_mean": 1.0},
        best_eval=None,
        video=None,
    )
    text = path.read_text()
    assert "No best evaluation was recorded" in text
    assert "| metric | final |" in text
    assert "a\\|b" in text  # pipes escaped so the table survives
    assert "## Video" not in text
    assert _is_png(tmp_path / "learning_curve.png")
