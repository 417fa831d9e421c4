"""Env workers of the ``async`` runtime: threads that collect rollout chunks with a policy copy.

Each :class:`EnvWorker` owns a vector env and a copy of the policy. Before every chunk it waits for
the :class:`~omnigym.platform.runtime.admission.AdmissionGate` (the staleness window), brings its
weights to the learner's latest version through the
:class:`~omnigym.platform.runtime.weight_channel.WeightChannel`, collects ``T`` steps of its envs
with the ordinary :class:`~omnigym.platform.collect.RolloutCollector` (episodes continue across
chunks) and puts the chunk, tagged with the policy version and the id ``(worker_id, sequence)``,
into the :class:`~omnigym.platform.runtime.data_manager.DataManager`.

Threads suit envs whose steps wait (GUIs, browsers, simulators behind a socket, the GUI env's
``latency``): sleeping and I/O release the GIL, so the workers' waits overlap each other and the
learner's computation. For CPU-heavy envs, ``env.vectorization: async`` gives each worker's envs
processes of their own.

Faults: an exception anywhere in a worker (env construction, ``env.step``, the policy) ends its
thread and is kept in :attr:`EnvWorker.error`; :class:`WorkerPool.check` (called by the learner)
replaces the worker with a fresh one (new envs, new policy copy, full weight sync) that continues
the same id sequence. The crashed worker's in-flight chunk was never put, so it is lost, recorded
in :attr:`WorkerPool.discarded_ids` and never duplicated; chunks it had already queued are complete
segments (each carries its own bootstrap observation) and stay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch

from omnigym.core.policy import Policy
from omnigym.core.types import EpisodeStats, Rollout
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.runtime.admission import AdmissionGate
from omnigym.platform.runtime.data_manager import DataManager, TrajectoryId
from omnigym.platform.runtime.weight_channel import WeightChannel
from omnigym.platform.runtime.weight_sync import WeightPayload, WeightReceiver

log = logging.getLogger(__name__)
THREAD_PREFIX = "omnigym-env-worker"
"""Worker threads are named ``<prefix>-<worker_id>`` (tests look for leftovers by it)."""


@dataclass
class Chunk:
    """One worker's rollout segment, as queued for the learner.

    Attributes:
        rollout: ``T`` steps of the worker's ``n`` envs, on the CPU. Shapes: [T, n, ...].
        stats: the episodes that ended in it.
        trajectory_id: ``(worker_id, sequence)``.
        policy_version: the version of the weights that acted (all ``T`` steps).
    """

    rollout: Rollout
    stats: EpisodeStats
    trajectory_id: TrajectoryId
    policy_version: int


class WorkerStats:
    """Time and traffic counters of one worker slot (kept across restarts; thread-safe)."""

    FIELDS = (
        "env_s",
        "wait_s",
        "sync_s",
        "sync_bytes",
        "sync_dense_bytes",
        "full_syncs",
        "chunks",
        "env_steps",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(self.FIELDS, 0.0)

    def add(self, **amounts: float) -> None:
        """Add to counters named in :attr:`FIELDS`."""
        with self._lock:
            for name, amount in amounts.items():
                self._totals[name] += amount

    def snapshot(self) -> dict[str, float]:
        """The running totals."""
        with self._lock:
            return dict(self._totals)


class TimedVectorEnv(gym.vector.VectorWrapper):
    """Adds the wall time of every ``step`` and ``reset`` to ``stats.env_s`` (env utilisation)."""

    def __init__(self, env: gym.vector.VectorEnv, stats: WorkerStats) -> None:
        super().__init__(env)
        self.stats = stats

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset, timed."""
        start = time.perf_counter()
        try:
            return self.env.reset(seed=seed, options=options)
        finally:
            self.stats.add(env_s=time.perf_counter() - start)

    def step(self, actions: Any) -> Any:
        """Step, timed."""
        start = time.perf_counter()
        try:
            return self.env.step(actions)
        finally:
            self.stats.add(env_s=time.perf_counter() - start)


class ChunkWorker:
    """A worker thread that collects chunks while the staleness window admits them.

    The loop, the chunk ids, the queueing and the crash record are shared; subclasses say where the
    envs and the acting policy live (:class:`EnvWorker`: in this thread;
    :class:`~omnigym.platform.runtime.ray_runtime.RayEnvWorker`: in a Ray actor).

    Args:
        worker_id: the first half of every chunk id; kept by a restarted replacement.
        data: where chunks go.
        gate: the staleness window (admission).
        stop: set by the pool to stop every worker.
        stats: the counters of this worker slot.
        first_sequence: the sequence number of this worker's first chunk.
        poll_interval_s: longest single wait (admission, queue space) before checking ``stop``.
    """

    def __init__(
        self,
        worker_id: int,
        *,
        data: DataManager[Chunk],
        gate: AdmissionGate,
        stop: threading.Event,
        stats: WorkerStats,
        first_sequence: int = 0,
        poll_interval_s: float = 0.5,
    ) -> None:
        self.worker_id = worker_id
        self._data, self._gate, self._stop, self.stats = data, gate, stop, stats
        self.next_sequence = first_sequence
        self.poll_interval_s = poll_interval_s
        self.in_flight: TrajectoryId | None = None
        """The id of the chunk being collected (None between chunks)."""
        self.error: BaseException | None = None
        """The exception that ended the thread (None while running or after a clean stop)."""
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}-{worker_id}", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread.is_alive()

    def kill(self) -> None:
        """Release what outlives the thread (a worker process, a Ray actor); a thread worker has none."""

    def _count_remote_chunk(self, payloads: Sequence[WeightPayload], counters: dict[str, float]) -> None:
        """Count a chunk collected elsewhere: the payloads sent with it, env and sync time there."""
        if payloads:
            self.stats.add(
                sync_bytes=sum(p.bytes for p in payloads),
                sync_dense_bytes=sum(p.dense_bytes for p in payloads),
                full_syncs=float(payloads[0].is_full),
            )
        self.stats.add(env_s=counters["env_s"], sync_s=counters["sync_s"])

    @property
    def crashed(self) -> bool:
        """The thread ended with an exception."""
        return not self.is_alive() and self.error is not None

    # --- what subclasses provide ---------------------------------------------------------------
    def _open(self) -> None:
        """Build the envs and the acting policy (on the worker's thread)."""

    def _collect(self) -> tuple[Rollout, EpisodeStats, int]:
        """Bring the weights up to date and collect one chunk: ``(rollout, episodes, policy version)``."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release the envs (also after a crash; must not raise)."""

    # --- the loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._open()
            while not self._stop.is_set():
                start = time.perf_counter()
                admitted = self._gate.acquire(timeout=self.poll_interval_s)
                self.stats.add(wait_s=time.perf_counter() - start)
                if not admitted:
                    continue  # timed out (check stop) or closed (stop is already set)
                try:
                    self._collect_chunk()
                finally:
                    self._gate.release()
        except BaseException as exc:  # any failure: the pool restarts the worker
            self.error = exc
            if not self._stop.is_set():
                log.warning("env worker %d crashed: %r", self.worker_id, exc, exc_info=exc)
        finally:
            self._close()

    def _collect_chunk(self) -> None:
        """Collect one chunk under a fresh id and queue it (or abandon it when stopping)."""
        chunk_id = (self.worker_id, self.next_sequence)
        self.next_sequence += 1
        self.in_flight = chunk_id
        rollout, episodes, version = self._collect()
        if self._stop.is_set():
            return  # shutting down: the chunk is abandoned, never put
        chunk = Chunk(rollout, episodes, chunk_id, version)
        self._data.put(chunk, chunk.policy_version, chunk_id, timeout=self.poll_interval_s)
        self.in_flight = None
        self.stats.add(chunks=1, env_steps=rollout.num_steps * rollout.num_envs)


class EnvWorker(ChunkWorker):
    """An env worker whose vector env and policy copy live in its own thread.

    Args:
        worker_id: the first half of every chunk id; kept by a restarted replacement.
        make_envs: builds this worker's vector env (called on the worker's thread).
        policy: this worker's own copy of the policy (weights come from ``channel``).
        channel: the learner's published weights.
        data: where chunks go.
        gate: the staleness window (admission).
        num_steps: T, steps per env per chunk.
        seed: reset seed of the envs (sub-env ``i`` gets ``seed + i``).
        stop: set by the pool to stop every worker.
        stats: the counters of this worker slot.
        first_sequence: the sequence number of this worker's first chunk.
        poll_interval_s: longest single wait (admission, queue space) before checking ``stop``.
        interrupt_every_tokens: > 0: the policy generates in segments of this many tokens and
            takes the newest published weights before each (partial rollouts).
    """

    def __init__(
        self,
        worker_id: int,
        *,
        make_envs: Callable[[], gym.vector.VectorEnv],
        policy: Policy,
        channel: WeightChannel,
        data: DataManager[Chunk],
        gate: AdmissionGate,
        num_steps: int,
        seed: int,
        stop: threading.Event,
        stats: WorkerStats,
        first_sequence: int = 0,
        poll_interval_s: float = 0.5,
        interrupt_every_tokens: int = 0,
    ) -> None:
        super().__init__(
            worker_id,
            data=data,
            gate=gate,
            stop=stop,
            stats=stats,
            first_sequence=first_sequence,
            poll_interval_s=poll_interval_s,
        )
        self.policy = policy.eval()
        if interrupt_every_tokens > 0:  # this copy only: the learner's policy generates in one go
            setattr(self.policy, "segment_tokens", interrupt_every_tokens)  # noqa: B010 (a vlm's)
            setattr(self.policy, "segment_hook", self._newest_version)  # noqa: B010
        self.device = policy.device
        self._make_envs, self._channel = make_envs, channel
        self.num_steps, self.seed = num_steps, seed
        self.receiver = WeightReceiver(self.device)
        self._envs: gym.vector.VectorEnv | None = None
        self._collector: RolloutCollector | None = None

    @property
    def weights_version(self) -> int | None:
        """The version of the weights this worker's policy holds."""
        return self.receiver.version

    def _open(self) -> None:
        self._envs = TimedVectorEnv(self._make_envs(), self.stats)
        self._collector = RolloutCollector(self._envs, self.policy, self.num_steps, self.device)
        self._collector.reset(seed=self.seed)

    def _collect(self) -> tuple[Rollout, EpisodeStats, int]:
        assert self._collector is not None
        self._sync_weights()
        version = self.receiver.version
        assert version is not None
        self._collector.policy_version = version
        rollout, episodes = self._collector.collect()
        return rollout, episodes, version

    def _close(self) -> None:
        if self._envs is None:
            return
        try:
            self._envs.close()
        except Exception:  # a broken env may fail to close: nothing to do
            log.debug("env worker %d: closing its envs failed", self.worker_id, exc_info=True)

    def _newest_version(self) -> int:
        """Take the newest published weights (if any came) and return their version (a segment hook)."""
        self._sync_weights()
        version = self.receiver.version
        assert version is not None, "the first chunk syncs the weights before acting"
        return version

    def _sync_weights(self) -> None:
        record = self._channel.sync(self.receiver)
        if record is None:
            return
        start = time.perf_counter()
        with torch.no_grad():
            self.receiver.load_into(self.policy)
        self.stats.add(
            sync_s=record.seconds + time.perf_counter() - start,
            sync_bytes=record.bytes,
            sync_dense_bytes=record.dense_bytes,
            full_syncs=float(record.full),
        )


WorkerFactory = Callable[[int, int, int], ChunkWorker]
"""``factory(worker_id, restart, first_sequence)``: a new, unstarted worker for a slot."""


class WorkerPool:
    """Starts ``num_workers`` workers, replaces crashed ones, stops them all.

    Args:
        factory: builds the worker of a slot (``restart`` is 0 at first, then counts that slot's
            replacements, for fresh env seeds).
        num_workers: K.
        stop: the event every worker watches.
        max_restarts: replacements allowed in total; one more crash raises.
    """

    def __init__(
        self, factory: WorkerFactory, num_workers: int, stop: threading.Event, max_restarts: int
    ) -> None:
        self._factory, self.num_workers, self._stop = factory, num_workers, stop
        self.max_restarts = max_restarts
        self.workers: list[ChunkWorker] = []
        self.restarts = 0
        self.discarded_ids: list[TrajectoryId] = []
        """In-flight chunks lost with crashed workers (never put, so never returned)."""
        self._slot_restarts = [0] * num_workers

    def start(self) -> None:
        """Build and start every worker."""
        self.workers = [self._factory(i, 0, 0) for i in range(self.num_workers)]
        for worker in self.workers:
            worker.start()

    def check(self) -> int:
        """Replace crashed workers (call from the learner's thread); returns how many.

        Raises:
            RuntimeError: more than ``max_restarts`` crashes in this run (chained to the last).
        """
        replaced = 0
        for slot, worker in enumerate(self.workers):
            if not worker.crashed or self._stop.is_set():
                continue
            if self.restarts >= self.max_restarts:
                raise RuntimeError(
                    f"env worker {worker.worker_id} crashed and the {self.max_restarts} restarts allowed "
                    "(runtime.max_restarts) are used up"
                ) from worker.error
            if worker.in_flight is not None:
                self.discarded_ids.append(worker.in_flight)
            self.restarts += 1
            self._slot_restarts[slot] += 1
            replacement = self._factory(worker.worker_id, self._slot_restarts[slot], worker.next_sequence)
            self.workers[slot] = replacement
            replacement.start()
            replaced += 1
        return replaced

    def stop(self, timeout: float) -> list[str]:
        """Stop and join every worker; returns the names of threads still alive after ``timeout`` each."""
        self._stop.set()
        for worker in self.workers:
            worker.join(timeout)
        return [f"{THREAD_PREFIX}-{w.worker_id}" for w in self.workers if w.is_alive()]

    def totals(self) -> dict[str, float]:
        """Every worker slot's counters, summed."""
        total = dict.fromkeys(WorkerStats.FIELDS, 0.0)
        for worker in self.workers:
            for name, value in worker.stats.snapshot().items():
                total[name] += value
        return total
