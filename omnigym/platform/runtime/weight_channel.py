"""The learner's published weights, shared by the env worker threads of the ``async`` runtime.

The learner :meth:`~WeightChannel.publish`-es each new version once; every worker brings its own
:class:`~omnigym.platform.runtime.weight_sync.WeightReceiver` up to date with
:meth:`~WeightChannel.sync` before it starts a chunk. The channel keeps the last few payloads, so a
worker that missed versions applies the deltas in order; one further behind (or new, or restarted)
gets a full payload. A lock makes publishing and full payloads (which read the publisher's base)
safe across threads; payloads are applied outside it (their tensors are never written).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor

from omnigym.platform.runtime.weight_sync import (
    BaseVersionError,
    WeightPayload,
    WeightPublisher,
    WeightReceiver,
    WeightSyncConfig,
)


@dataclass
class SyncRecord:
    """What one publish or one sync moved.

    Attributes:
        version: the version published or reached.
        bytes: tensor data sent (published) or applied (synced).
        dense_bytes: what full payloads of the same versions would have been.
        seconds: time taken.
        full: a full payload was used.
    """

    version: int
    bytes: int
    dense_bytes: int
    seconds: float
    full: bool


class WeightChannel:
    """Publish on the learner's thread, sync on the workers' (thread-safe).

    Args:
        config: full or sparse payloads (``sparse``: only the changed elements, bit-exact).
        history: payloads kept for workers that missed versions; older gaps get a full payload.
    """

    def __init__(self, config: WeightSyncConfig | None = None, history: int = 4) -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self.publisher = WeightPublisher(config)
        self._history: deque[WeightPayload] = deque(maxlen=history)
        self._lock = threading.Lock()

    @property
    def version(self) -> int | None:
        """The latest published version (None before the first publish)."""
        with self._lock:
            return self.publisher.version

    def publish(self, state_dict: Mapping[str, Tensor], version: int) -> SyncRecord:
        """Publish the learner's weights as ``version`` (versions must increase)."""
        start = time.perf_counter()
        with self._lock:
            payload = self.publisher.publish(state_dict, version)
            self._history.append(payload)
        return SyncRecord(
            version, payload.bytes, payload.dense_bytes, time.perf_counter() - start, payload.is_full
        )

    def sync(self, receiver: WeightReceiver) -> SyncRecord | None:
        """Bring ``receiver`` to the latest version; None when it already is there.

        Raises:
            RuntimeError: nothing was published yet.
        """
        start = time.perf_counter()
        payloads = self.payloads_since(receiver.version)
        if not payloads:
            return None
        try:
            for payload in payloads:
                receiver.apply(payload)
        except BaseVersionError:  # the chain broke (cannot happen with the lock; be safe): go full
            payloads = [self._full()]
            receiver.apply(payloads[0])
        return SyncRecord(
            payloads[-1].version,
            sum(p.bytes for p in payloads),
            sum(p.dense_bytes for p in payloads),
            time.perf_counter() - start,
            payloads[0].is_full,
        )

    def payloads_since(self, version: int | None) -> list[WeightPayload]:
        """The payloads, oldest first, that take weights of ``version`` to the latest one.

        Empty when ``version`` is the latest; one full payload for ``None`` (a new receiver) or a
        version older than the history. Remote receivers (the ``ray`` runtime's actors) are sent
        these and apply them in order.
        """
        with self._lock:
            latest = self.publisher.version
            if latest is None:
                raise RuntimeError("no weights published yet")
            if version == latest:
                return []
            chain = [p for p in self._history if version is not None and p.version > version]
            if chain and (chain[0].is_full or chain[0].base_version == version):
                return chain
            return [self.publisher.full_payload()]

    def _full(self) -> WeightPayload:
        with self._lock:
            return self.publisher.full_payload()
