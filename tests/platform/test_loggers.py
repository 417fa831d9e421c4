"""Tests for omnigym.platform.loggers: JSONL, resume truncation, TensorBoard, progress, video."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from omnigym.platform import loggers
from omnigym.platform.loggers import RunLogger, read_metrics, write_video


class _FakeTime:
    """Replaces the ``time`` module inside loggers with a settable clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_jsonl_has_one_line_per_log(tmp_path: Path) -> None:
    with RunLogger(tmp_path, total_steps=100, tensorboard=False, progress=False) as logger:
        logger.log(10, {"train/loss_policy": 0.5, "rollout/episode_return": 3})
        logger.log(20, {"train/loss_policy": float("nan"), "eval/x": float("inf")})

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["step"] == 10 and first["train/loss_policy"] == 0.5
    assert first["rollout/episode_return"] == 3.0
    assert first["wall_time"] >= 0.0
    assert second["train/loss_policy"] is None and second["eval/x"] is None  # NaN/inf -> null
    assert read_metrics(tmp_path) == [first, second]


def test_wall_time_is_seconds_since_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _FakeTime()
    monkeypatch.setattr(loggers, "time", clock)
    with RunLogger(tmp_path, total_steps=10, tensorboard=False, progress=False) as logger:
        clock.now += 2.5
        logger.log(1, {"a": 1.0})
    assert read_metrics(tmp_path)[0]["wall_time"] == 2.5


def test_resume_drops_lines_after_start_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _FakeTime()
    monkeypatch.setattr(loggers, "time", clock)
    with RunLogger(tmp_path, total_steps=100, tensorboard=False, progress=False) as logger:
        for step in (10, 20, 30, 40):
            clock.now += 1.0
            logger.log(step, {"a": float(step)})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 50, "a"')  # torn by the kill

    with RunLogger(tmp_path, total_steps=100, start_step=20, tensorboard=False, progress=False) as logger:
        clock.now += 100.0
        logger.log(30, {"a": -30.0})

    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [10, 20, 30]
    assert records[-1]["a"] == -30.0
    assert records[-1]["wall_time"] == pytest.approx(2.0 + 100.0)  # continues from the kept line
    assert not (tmp_path / "metrics.jsonl.tmp").exists()


def test_fresh_logger_after_torn_line_keeps_file_parseable(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "a": 1.0}\n{"step": 2, "a"')
    with RunLogger(tmp_path, total_steps=10, tensorboard=False, progress=False) as logger:
        logger.log(3, {"a": 3.0})
    with pytest.raises(ValueError, match=":2:"):
        read_metrics(tmp_path)  # the torn line is now a complete, bad middle line
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 3


def test_read_metrics_ignores_torn_last_line(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "a":')
    assert read_metrics(tmp_path) == [{"step": 1}, {"step": 2}]


def test_reserved_metric_names_and_closed_logger(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, total_steps=10, tensorboard=False, progress=False)
    with pytest.raises(ValueError, match="reserved"):
        logger.log(1, {"step": 1.0})
    logger.close()
    logger.close()
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(2, {"a": 1.0})


def test_tensorboard_event_file_holds_the_scalars(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunLogger(tmp_path, total_steps=10, progress=False) as logger:
        logger.log(1, {"train/loss_policy": 0.25})
        logger.log(2, {"train/loss_policy": 0.125})

    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    accumulator = EventAccumulator(str(tmp_path / "tensorboard"))
    accumulator.Reload()
    scalars = accumulator.Scalars("train/loss_policy")
    assert [(s.step, s.value) for s in scalars] == [(1, 0.25), (2, 0.125)]


def test_progress_false_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with RunLogger(tmp_path, total_steps=10, tensorboard=False, progress=False) as logger:
        logger.log(5, {"rollout/episode_return": 1.0})
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_plain_progress_is_throttled_and_final(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _FakeTime()
    monkeypatch.setattr(loggers, "time", clock)
    with RunLogger(tmp_path, total_steps=1000, tensorboard=False) as logger:  # stderr is no TTY here
        clock.now += 1.0
        logger.log(100, {"rollout/episode_return": 7.5})
        clock.now += 1.0
        logger.log(200, {})  # within 10 s of the first line: silent
        clock.now += 10.0
        logger.log(300, {"time/sps": 50.0})
        clock.now += 1.0
        logger.log(400, {})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    assert "100/1,000" in lines[0] and "sps=100" in lines[0] and "return=7.5" in lines[0]
    assert "300/1,000" in lines[1] and "sps=50" in lines[1] and "eta=0:00:14" in lines[1]
    assert "400/1,000" in lines[2]  # the final state, at close


def _frames(count: int, height: int = 48, width: int = 64) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]


def test_write_video_produces_readable_mp4(tmp_path: Path) -> None:
    import cv2

    frames = _frames(12)
    frames[0][:] = (255, 0, 0)  # pure red in RGB
    path = write_video(frames, tmp_path / "videos" / "episode.mp4", fps=10)

    assert path.stat().st_size > 0
    capture = cv2.VideoCapture(str(path))
    count, first = 0, None
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        first = frame if first is None else first
        count += 1
    capture.release()
    assert count == 12
    assert first is not None and first.shape == (48, 64, 3)
    blue, green, red = first.reshape(-1, 3).mean(axis=0)
    assert red > 200 and blue < 60 and green < 60  # RGB input was converted to OpenCV's BGR


@pytest.mark.parametrize(
    "frames",
    [
        [],
        [np.zeros((8, 8, 3), np.uint8), np.zeros((8, 10, 3), np.uint8)],
        [np.zeros((8, 8), np.uint8)],
        [np.zeros((8, 8, 4), np.uint8)],
        [np.zeros((8, 8, 3), np.float32)],
    ],
    ids=["empty", "mixed-shapes", "grayscale", "rgba", "float"],
)
def test_write_video_rejects_bad_frames(tmp_path: Path, frames: list[np.ndarray]) -> None:
    with pytest.raises(ValueError):
        write_video(frames, tmp_path / "bad.mp4")
    assert not (tmp_path / "bad.mp4").exists()
