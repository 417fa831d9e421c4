"""Admission control for rollout workers: start a chunk only if it can be consumed fresh enough.

The data manager drops what is too stale when it arrives, but a dropped chunk is wasted env time.
AReaL's staleness manager (Fu et al., 2025; docs/runtime.md) avoids the waste by not starting work the learner
could only consume beyond eta::

    capacity = (eta + v + 1) * B - (accepted + running)        start a new chunk only while > 0

with ``v`` the learner's version (counted from the runtime's start), ``B`` the chunks per training
batch, ``accepted`` the chunks accepted by the data manager that were not dropped (returned to the
learner or still queued) and ``running`` the chunks being collected. Chunk ``n`` (in acceptance
order) is consumed in batch ``n // B``, so a chunk started at version ``v`` is consumed at most eta
versions later unless chunks finish out of order; the data manager's filter stays the hard bound.

Counting only chunks that survived (rather than every accepted one) refunds dropped and crashed
work, so losses never shrink the window until the learner starves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class AdmissionGate:
    """Bounds the chunks in flight plus queued by the staleness window (thread-safe).

    Args:
        chunks_per_batch: ``B``, chunks the learner takes per update.
        max_staleness: eta.
        live_chunks: the data manager's chunks returned to the learner plus those queued
            (``accepted`` in the formula), read under the gate's lock.
        start_version: the learner's version when the runtime started (0, or the resumed one).
    """

    def __init__(
        self,
        chunks_per_batch: int,
        max_staleness: int,
        live_chunks: Callable[[], int],
        start_version: int = 0,
    ) -> None:
        if chunks_per_batch < 1 or max_staleness < 0:
            raise ValueError(
                f"need chunks_per_batch >= 1 and max_staleness >= 0, got {chunks_per_batch}, {max_staleness}"
            )
        self.chunks_per_batch = chunks_per_batch
        self.max_staleness = max_staleness
        self._live_chunks = live_chunks
        self._start_version = start_version
        self._version = start_version
        self._running = 0
        self._closed = False
        self._cond = threading.Condition()

    def capacity(self) -> int:
        """Chunks that may start now (may be negative after the learner fell behind)."""
        with self._cond:
            return self._capacity()

    def acquire(self, timeout: float | None = None) -> bool:
        """Wait until a chunk may start and count it as running; False on timeout or when closed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._closed or self._capacity() > 0, timeout):
                return False
            if self._closed:
                return False
            self._running += 1
            return True

    def release(self) -> None:
        """A chunk that :meth:`acquire` admitted is done (queued, refused or lost)."""
        with self._cond:
            if self._running <= 0:
                raise RuntimeError("AdmissionGate.release without a matching acquire")
            self._running -= 1
            self._cond.notify_all()

    def advance(self, version: int) -> None:
        """The learner published ``version``: the window moves on."""
        with self._cond:
            if version < self._version:
                raise ValueError(f"learner version went back from {self._version} to {version}")
            self._version = version
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter and refuse new chunks (shutdown)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def running(self) -> int:
        """Chunks being collected now."""
        with self._cond:
            return self._running

    def _capacity(self) -> int:
        versions = self._version - self._start_version
        window = (self.max_staleness + versions + 1) * self.chunks_per_batch
        return window - (self._live_chunks() + self._running)
