"""Interrupt-safe training: Ctrl-C or SIGTERM end a run at the next update boundary, checkpointed.

The first SIGINT/SIGTERM only sets a flag that the training loop reads after each update; the loop
then writes a checkpoint and raises :class:`TrainingInterrupted`. A second Ctrl-C stops at once
(``KeyboardInterrupt``), for a loop that hangs.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

INTERRUPT_EXIT_CODE = 130
"""The shell's status for a process ended by SIGINT (128 + 2)."""


class TrainingInterrupted(Exception):  # noqa: N818 (an outcome the caller expects, not a fault)
    """A run stopped on a signal after checkpointing; ``omnigym train --resume run_dir`` continues it."""

    def __init__(self, run_dir: Path, step: int, checkpoint: Path | None) -> None:
        self.run_dir, self.step, self.checkpoint = Path(run_dir), step, checkpoint
        where = f"checkpoint {checkpoint}" if checkpoint is not None else "no checkpoint"
        super().__init__(
            f"interrupted at step {step:,}; wrote {where}; continue with: omnigym train --resume {run_dir}"
        )


class GracefulStop:
    """While active, SIGINT and SIGTERM ask the loop to stop instead of killing it.

    Handlers are installed only in the main thread (signals are delivered there); elsewhere the
    context does nothing and ``requested`` stays False. The previous handlers come back on exit.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without a checkpoint
        self.requested = True
        self.signal_name = signal.Signals(signum).name
        print(
            f"\n{self.signal_name}: finishing the current update, then checkpointing "
            "(Ctrl-C again to stop at once, without a checkpoint)",
            file=sys.stderr,
            flush=True,
        )
