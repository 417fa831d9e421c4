"""Run logging: a JSONL metrics file, TensorBoard scalars, a progress line and videos.

``run_dir/metrics.jsonl`` holds one JSON object per :meth:`RunLogger.log` call,
``{"step": ..., "wall_time": ..., **metrics}``. NaN and infinite values are written as ``null``
so that every line is strict JSON any tool can read.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO, TypeVar

import numpy as np

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
RETURN_METRIC = "rollout/episode_return"
SPS_METRIC = "time/sps"
PLAIN_PROGRESS_INTERVAL_S = 10.0
_RESERVED_KEYS = ("step", "wall_time")


class RunLogger:
    """Logs a run's metrics to JSONL, TensorBoard and a live progress line.

    Example:
        >>> with RunLogger(run_dir, total_steps=100_000) as logger:
        ...     logger.log(step, {"train/loss_policy": 0.1, "rollout/episode_return": 12.0})

    On a resumed run (``start_step > 0``) lines of ``metrics.jsonl`` with a step above
    ``start_step`` (logged after the checkpoint the run resumes from) are dropped, TensorBoard
    events past it are purged, and ``wall_time`` continues from the last kept line.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        total_steps: int,
        start_step: int = 0,
        tensorboard: bool = True,
        progress: bool = True,
    ) -> None:
        """Open the run's logs.

        Args:
            run_dir: The run directory (created if needed).
            total_steps: The step the run ends at, for progress and ETA.
            start_step: The step the run starts (or resumes) from.
            tensorboard: Also write TensorBoard scalars to ``run_dir/tensorboard``.
            progress: Show progress on stderr: tqdm on a TTY, else a plain status line at the
                first log, then at most every 10 s, and at the end.

        Raises:
            ImportError: If ``tensorboard`` is True and the tensorboard package is missing.
        """
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        wall_offset = _truncate_metrics(self.metrics_path, start_step) if start_step > 0 else 0.0
        _end_with_newline(self.metrics_path)
        self._writer = _summary_writer(self.run_dir / TENSORBOARD_DIR, start_step) if tensorboard else None
        self._file: TextIO | None = open(self.metrics_path, "a", encoding="utf-8")  # noqa: SIM115
        self._start = time.monotonic() - wall_offset
        self._progress = _make_progress(total_steps, start_step) if progress else None

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` at ``step`` everywhere this logger writes.

        Args:
            step: The environment step the metrics belong to.
            metrics: Metric name (``rollout/…``, ``train/…``, ``eval/…``, ``time/…``) to value.

        Raises:
            ValueError: If a metric is named ``step`` or ``wall_time``.
            RuntimeError: If the logger is closed.
        """
        if self._file is None:
            raise RuntimeError("RunLogger is closed")
        for key in _RESERVED_KEYS:
            if key in metrics:
                raise ValueError(f"metric name {key!r} is reserved")
        values = {key: float(value) for key, value in metrics.items()}
        record: dict[str, float | None] = {
            "step": int(step),
            "wall_time": round(time.monotonic() - self._start, 3),
        }
        record.update({key: _finite_or_none(value) for key, value in values.items()})
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in values.items():
                self._writer.add_scalar(key, value, global_step=int(step))
        if self._progress is not None:
            self._progress.update(int(step), values.get(SPS_METRIC), values.get(RETURN_METRIC))

    def close(self) -> None:
        """Flush and close everything; the progress line prints its final state. Idempotent."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLogger:
        """Enter a ``with`` block; the logger closes at its end."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the logger."""
        self.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Parse ``run_dir/metrics.jsonl``.

    A final line cut short by a killed process is ignored.

    Args:
        run_dir: The run directory.

    Returns:
        One dict per logged line, in file order (NaN/inf values read back as None).

    Raises:
        FileNotFoundError: If the run has no metrics file.
        ValueError: If a line other than a cut-short final one is not valid JSON.
    """
    path = Path(run_dir) / METRICS_FILE
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):  # no newline after it: a torn write
                break
            raise ValueError(f"{path}:{number}: not valid JSON: {exc}") from exc
    return records


def write_video(frames: Sequence[np.ndarray], path: str | Path, fps: int = 30) -> Path:
    """Write RGB frames to an MP4 file (codec ``mp4v``) with OpenCV.

    Args:
        frames: RGB ``uint8`` images. Shape: [H, W, 3] each, all the same.
        path: Where to write the ``.mp4`` (parent directories are created).
        fps: Frames per second.

    Returns:
        ``path``.

    Raises:
        ValueError: If there are no frames, a frame is not ``uint8 [H, W, 3]``, shapes differ, or
            ``fps`` is not positive.
        RuntimeError: If OpenCV cannot open the writer or writes nothing.
    """
    import cv2

    path = Path(path)
    height, width = _check_frames(frames)
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), float(fps), (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV could not open an mp4v video writer for {path}")
    try:
        for frame in frames:
            writer.write(cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    if not path.is_file() or path.stat().st_size == 0:
        raise RuntimeError(f"OpenCV wrote no video data to {path}")
    return path


def _check_frames(frames: Sequence[np.ndarray]) -> tuple[int, int]:
    """Validate video frames; return their ``(height, width)``."""
    if len(frames) == 0:
        raise ValueError("write_video needs at least one frame")
    first = np.asarray(frames[0])
    for index, frame in enumerate(frames):
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(f"frame {index}: expected uint8 [H, W, 3], got {frame.dtype} {frame.shape}")
        if frame.shape != first.shape:
            raise ValueError(f"frame {index} has shape {frame.shape}, frame 0 has {first.shape}")
    return first.shape[0], first.shape[1]


# --- metrics file ---------------------------------------------------------------------------


def _finite_or_none(value: float) -> float | None:
    """``value``, or None for NaN and infinities (which strict JSON cannot hold)."""
    return value if math.isfinite(value) else None


def _truncate_metrics(path: Path, start_step: int) -> float:
    """Atomically drop lines with a step above ``start_step``; return the last kept wall time."""
    if not path.is_file():
        return 0.0
    kept, wall_time = [], 0.0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by the kill
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, (int, float)) and step <= start_step:
            kept.append(line)
            wall_time = float(record.get("wall_time") or wall_time)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return wall_time


def _end_with_newline(path: Path) -> None:
    """Terminate a torn last line so the next record starts on a line of its own."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")


def _summary_writer(log_dir: Path, start_step: int) -> Any:
    """A TensorBoard SummaryWriter that hides events logged after ``start_step``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError(
            "TensorBoard logging needs the tensorboard package: pip install tensorboard "
            "(or pass tensorboard=False)"
        ) from exc
    return SummaryWriter(str(log_dir), purge_step=start_step + 1 if start_step > 0 else None)


# --- progress -------------------------------------------------------------------------------


class _Progress:
    """Steps done, steps per second, recent return and ETA of a run."""

    def __init__(self, total_steps: int, start_step: int) -> None:
        self.total_steps = total_steps
        self.start_step = start_step
        self.step = start_step
        self.sps: float | None = None
        self.episode_return: float | None = None
        self._start = time.monotonic()

    def update(self, step: int, sps: float | None, episode_return: float | None) -> None:
        """Record the latest step, reported steps/s (None: measure it) and episode return."""
        self.step = step
        elapsed = time.monotonic() - self._start
        measured = (step - self.start_step) / elapsed if elapsed > 0 else None
        self.sps = sps if sps is not None else measured
        if episode_return is not None:
            self.episode_return = episode_return

    def close(self) -> None:
        """Finish the display."""

    def eta_s(self) -> float | None:
        """Seconds left at the current speed, or None when unknown."""
        if not self.sps or self.sps <= 0 or not math.isfinite(self.sps):
            return None
        return max(self.total_steps - self.step, 0) / self.sps

    def details(self) -> str:
        """``sps=… return=… eta=…`` for the display."""
        sps = f"{self.sps:,.0f}" if self.sps is not None and math.isfinite(self.sps) else "?"
        ret = f"{self.episode_return:.3g}" if self.episode_return is not None else "n/a"
        eta = self.eta_s()
        return f"sps={sps} return={ret} eta={_format_duration(eta) if eta is not None else '?'}"


class _TqdmProgress(_Progress):
    """A live tqdm bar, for interactive terminals."""

    def __init__(self, total_steps: int, start_step: int) -> None:
        from tqdm import tqdm

        super().__init__(total_steps, start_step)
        # tqdm's own rate and ETA are replaced by ours, which prefer the trainer's ``time/sps``.
        self._bar = tqdm(
            total=total_steps,
            initial=start_step,
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        )

    def update(self, step: int, sps: float | None, episode_return: float | None) -> None:
        """Move the bar to ``step`` and show steps/s, return and ETA."""
        super().update(step, sps, episode_return)
        self._bar.n = min(step, self.total_steps)
        self._bar.set_postfix_str(self.details(), refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        """Close the bar."""
        self._bar.close()


class _PlainProgress(_Progress):
    """A plain status line on stderr at the first log, then at most every 10 s, and at the end."""

    def __init__(self, total_steps: int, start_step: int) -> None:
        super().__init__(total_steps, start_step)
        self._last_print = -math.inf
        self._pending = False

    def update(self, step: int, sps: float | None, episode_return: float | None) -> None:
        """Record the state; print it if 10 s have passed since the last line."""
        super().update(step, sps, episode_return)
        self._pending = True
        if time.monotonic() - self._last_print >= PLAIN_PROGRESS_INTERVAL_S:
            self._print()

    def close(self) -> None:
        """Print the final state if it has not been printed."""
        if self._pending:
            self._print()

    def _print(self) -> None:
        done = f"{self.step:,}/{self.total_steps:,}"
        percent = 100.0 * self.step / self.total_steps if self.total_steps > 0 else 100.0
        print(f"[omnigym] step {done} ({percent:.1f}%) {self.details()}", file=sys.stderr)
        self._last_print = time.monotonic()
        self._pending = False


def _make_progress(total_steps: int, start_step: int) -> _Progress:
    """Tqdm on an interactive stderr, plain status lines otherwise."""
    isatty = getattr(sys.stderr, "isatty", None)
    if isatty is not None and isatty():
        return _TqdmProgress(total_steps, start_step)
    return _PlainProgress(total_steps, start_step)


def _format_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


# --- progress of a long step ------------------------------------------------------------------

TASK_PROGRESS_DELAY_S = 5.0
"""A long step shows no progress until it has run this long (short jobs stay quiet)."""
TASK_PROGRESS_MAX_SILENCE_S = 60.0
"""Without a TTY, a line at least this often even when no new 10 % step was reached."""
T = TypeVar("T")


class TaskProgress:
    """Progress with an ETA of a long step with a known number of units (scenes, episodes, epochs).

    On an interactive stderr a tqdm bar (shown after ``delay_s``); otherwise a plain line on stderr
    at each new ``every_percent`` % once ``delay_s`` has passed (and at least every minute), plus a
    final line if any was printed. A job shorter than ``delay_s`` prints nothing either way.

    Example:
        >>> with TaskProgress(len(items), "collect") as bar:
        ...     for item in items:
        ...         work(item)
        ...         bar.update()
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        *,
        unit: str = "it",
        delay_s: float = TASK_PROGRESS_DELAY_S,
        every_percent: float = 10.0,
        enabled: bool = True,
    ) -> None:
        """Start timing; nothing shows yet.

        Args:
            total: Units of work (None: unknown, no ETA).
            desc: What is being done, e.g. ``"collect PushT-v0"``.
            unit: The unit's name, e.g. ``"episode"``.
            delay_s: Seconds before anything shows.
            every_percent: Plain lines at each such step of the work done.
            enabled: False shows nothing (e.g. a caller's ``--quiet``).
        """
        self.total, self.desc, self.unit = total, desc, unit
        self.done = 0
        self._delay, self._every = delay_s, max(every_percent, 1e-9)
        self._start = time.monotonic()
        self._last_print = self._start
        self._last_bucket = 0
        self._printed = False
        self._bar: Any = None
        isatty = getattr(sys.stderr, "isatty", None)
        self._tty = bool(enabled and isatty is not None and isatty())
        self._enabled = enabled
        if self._tty:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                delay=delay_s,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
            )

    def update(self, n: int = 1, postfix: str = "") -> None:
        """Record ``n`` more units done; ``postfix`` (e.g. the current item) is shown beside them."""
        self.done += n
        if not self._enabled:
            return
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix_str(postfix, refresh=False)
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._start < self._delay:
            return
        bucket = int(100.0 * self.done / self.total // self._every) if self.total else 0
        if bucket > self._last_bucket or now - self._last_print >= TASK_PROGRESS_MAX_SILENCE_S:
            self._last_bucket = bucket
            self._print(postfix)

    def eta_s(self) -> float | None:
        """Seconds left at the average speed so far, or None when unknown."""
        return eta_seconds(self.done, self.total, time.monotonic() - self._start)

    def close(self) -> None:
        """End the display (a plain final line only if progress was shown). Idempotent."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._printed and self._enabled:
            elapsed = _format_duration(time.monotonic() - self._start)
            print(f"[omnigym] {self.desc}: {self.done:,} {self.unit}s done in {elapsed}", file=sys.stderr)
            self._printed = False

    def _print(self, postfix: str) -> None:
        elapsed = time.monotonic() - self._start
        if self.total:
            done = f"{self.done:,}/{self.total:,} {self.unit}s ({100.0 * self.done / self.total:.0f}%)"
        else:
            done = f"{self.done:,} {self.unit}s"
        eta = self.eta_s()
        eta_text = f", eta {_format_duration(eta)}" if eta is not None else ""
        extra = f" {postfix}" if postfix else ""
        line = f"[omnigym] {self.desc}: {done}, {_format_duration(elapsed)} elapsed{eta_text}{extra}"
        print(line, file=sys.stderr, flush=True)
        self._last_print = time.monotonic()
        self._printed = True

    def __enter__(self) -> TaskProgress:
        """Enter a ``with`` block; the display ends at its end."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the display."""
        self.close()


def progress(
    iterable: Iterable[T], total: int | None = None, desc: str = "", *, unit: str = "it", **kwargs: Any
) -> Iterator[T]:
    """Iterate ``iterable`` under a :class:`TaskProgress` (``total`` defaults to its ``len``).

    Args:
        iterable: The work items.
        total: How many there are (None: ``len(iterable)`` when it has one).
        desc: What is being done.
        unit: The unit's name.
        **kwargs: More :class:`TaskProgress` options (``delay_s``, ``every_percent``, ``enabled``).
    """
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    with TaskProgress(total, desc, unit=unit, **kwargs) as bar:
        for item in iterable:
            yield item
            bar.update()


def eta_seconds(done: float, total: float | None, elapsed_s: float) -> float | None:
    """Seconds left for ``total`` units when ``done`` took ``elapsed_s`` (None when unknown)."""
    if not total or done <= 0 or elapsed_s <= 0:
        return None
    return max(total - done, 0.0) * elapsed_s / done


def format_eta(done: float, total: float | None, elapsed_s: float) -> str:
    """``eta H:MM:SS`` for a progress line (``eta ?`` before the first unit is done)."""
    eta = eta_seconds(done, total, elapsed_s)
    return f"eta {_format_duration(eta)}" if eta is not None else "eta ?"
