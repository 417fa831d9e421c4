"""Progress with an ETA for long steps (issue 27, item 6): the helper, and where it is used."""

from __future__ import annotations

import re

import pytest

from omnigym.platform import loggers
from omnigym.platform.loggers import TaskProgress, eta_seconds, format_eta, progress


def test_plain_lines_carry_counts_percent_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a TTY (pytest's stderr): a line per 10 %, then a final one."""
    with TaskProgress(20, "collect Maze", unit="episode", delay_s=0.0) as bar:
        for _ in range(20):
            bar.update(postfix="(last: seed 3)")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 11  # 10 %, 20 %, ..., 100 %, and the final line
    assert re.fullmatch(
        r"\[omnigym\] collect Maze: 2/20 episodes \(10%\), 0:00:00 elapsed, eta 0:00:00 \(last: seed 3\)",
        lines[0],
    )
    assert lines[-1].startswith("[omnigym] collect Maze: 20 episodes done in ")


def test_short_jobs_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress(range(50), desc="quick")) == list(range(50))  # len() as total, default delay
    with TaskProgress(None, "unknown total", delay_s=0.0, enabled=False) as bar:
        bar.update(3)
    assert bar.done == 3 and capsys.readouterr().err == ""


def test_a_job_of_unknown_size_prints_without_eta(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loggers, "TASK_PROGRESS_MAX_SILENCE_S", 0.0)
    for _ in progress(iter(range(3)), desc="scenes", unit="scene", delay_s=0.0):
        pass
    err = capsys.readouterr().err
    assert "[omnigym] scenes: 1 scenes, 0:00:00 elapsed" in err and "eta" not in err


def test_eta_arithmetic() -> None:
    assert eta_seconds(25, 100, 10.0) == 30.0
    assert eta_seconds(0, 100, 10.0) is None and eta_seconds(5, None, 1.0) is None
    assert format_eta(50, 100, 3_600.0) == "eta 1:00:00" and format_eta(0, 10, 1.0) == "eta ?"


def test_world_model_epochs_report_elapsed_and_eta() -> None:
    import numpy as np

    from omnigym.world_models.training import _timing

    assert _timing(10.0, 2, 20, 5, None) == {"time/elapsed_s": 10.0, "time/eta_s": 15.0}
    assert _timing(10.0, 2, 20, 5, 30)["time/eta_s"] == 5.0  # the nearer budget
    assert np.isnan(_timing(10.0, 2, 20, None, None)["time/eta_s"])  # early stopping only: unknown
