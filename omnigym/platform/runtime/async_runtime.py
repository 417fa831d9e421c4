"""The ``async`` runtime on one machine: env worker threads collect while the learner updates.

Wiring (docs/runtime.md)::

    workers (K threads, each n = N / K envs + a policy copy)
        --chunks [T, n] tagged (version, (worker_id, sequence))-->  DataManager (eta filter)
        --B = K chunks--> learner (the trainer's thread): concat [T, N] -> process_rollout -> update
        --WeightChannel (sparse deltas)--> workers, before their next chunk

The trainer calls :meth:`AsyncRuntime.next_batch` instead of collecting, then
:meth:`AsyncRuntime.publish` after each update; :meth:`AsyncRuntime.close` stops and joins every
worker. The :class:`~omnigym.platform.runtime.admission.AdmissionGate` keeps workers from starting
chunks that could only be consumed beyond eta, so little env time is wasted on stale data.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import threading
import time

import gymnasium as gym
import numpy as np
import torch

from omnigym.core.policy import Policy
from omnigym.core.types import EpisodeStats, Rollout
from omnigym.core.vector import TorchVectorEnv
from omnigym.platform.experiment import ExperimentConfig
from omnigym.platform.runtime.admission import AdmissionGate
from omnigym.platform.runtime.data_manager import DataManager, DataManagerConfig, TrajectoryId
from omnigym.platform.runtime.learner import Batch, BatchSource
from omnigym.platform.runtime.process_workers import ProcessEnvWorker, process_worker_recipe
from omnigym.platform.runtime.rollout_actor import EnvFactory
from omnigym.platform.runtime.weight_channel import SyncRecord, WeightChannel
from omnigym.platform.runtime.workers import Chunk, ChunkWorker, EnvWorker, WorkerPool, WorkerStats
from omnigym.platform.vec_env import EnvConfig, make_vec_env

log = logging.getLogger(__name__)


def probe_env_config(env: EnvConfig) -> EnvConfig:
    """A one-env, in-process version of ``env``: the trainer reads the spaces from it."""
    vectorization = "sync" if env.vectorization == "async" else env.vectorization
    return dataclasses.replace(env, num_envs=1, vectorization=vectorization)


def check_async_support(config: ExperimentConfig, *, groups: bool, probe: gym.vector.VectorEnv) -> None:
    """Reject what the ``async`` runtime cannot run, with the reason and the way out."""
    runtime, env = config.runtime, config.env
    kind = runtime.type
    if groups:
        raise ValueError(
            f"runtime.type {kind} collects fixed-length chunks; {config.algo.type!r} collects episode "
            "groups: use runtime.type local"
        )
    if isinstance(probe, TorchVectorEnv):
        raise ValueError(
            f"runtime.type {kind}: the batched torch env {env.id} steps on one device; use local"
        )
    if int(getattr(config.algo, "simulated_staleness", 0)):
        raise ValueError(
            f"algo.simulated_staleness simulates the async runtime: set it to 0 with runtime {kind}"
        )
    if runtime.async_.workers == "process" and env.vectorization == "async":
        raise ValueError(
            "runtime.async.workers process: each env worker is a process already and cannot start "
            "env processes of its own; use env.vectorization sync"
        )
    if env.num_envs % runtime.num_workers:
        raise ValueError(
            f"runtime.num_workers ({runtime.num_workers}) must divide env.num_envs ({env.num_envs}): "
            "each worker steps an equal share of the envs"
        )


def carry_over_capacity(amount: float, capacity: float) -> tuple[float, float]:
    """Split ``amount`` into what fits in ``capacity`` now and what carries to the next window."""
    reported = min(amount, capacity)
    return reported, amount - reported


class AsyncRuntime:
    """Env workers, data manager, admission gate and weight channel for one training run.

    Args:
        config: the experiment (``runtime`` settings, ``env``, ``algo.num_steps``, ``seed``).
        policy: the learner's policy; workers act with copies, weights arrive by :meth:`publish`.
        make_envs: builds a worker's vector env (default :func:`make_vec_env`).
    """

    def __init__(self, config: ExperimentConfig, policy: Policy, make_envs: EnvFactory | None = None) -> None:
        runtime = config.runtime
        self.config = config
        self.policy = policy
        self.num_steps = int(getattr(config.algo, "num_steps"))  # noqa: B009  (checked by the trainer)
        self.num_workers = runtime.num_workers
        self.envs_per_worker = config.env.num_envs // runtime.num_workers
        self.max_staleness = runtime.max_staleness
        if runtime.async_.interrupt_every_tokens and not hasattr(policy, "segment_hook"):
            raise ValueError(
                f"runtime.async.interrupt_every_tokens: the {type(policy).__name__} does not generate "
                "replies token by token; use a vlm policy or set it to 0"
            )
        self._make_envs = make_envs or functools.partial(make_vec_env, copy_observations=False)
        self.data: DataManager[Chunk] = DataManager(
            DataManagerConfig(
                capacity=(runtime.max_staleness + 1) * self.num_workers + self.num_workers,
                max_staleness=runtime.max_staleness,
            )
        )
        self.channel = WeightChannel(runtime.weight_sync, history=runtime.max_staleness + 2)
        self._stop = threading.Event()
        self._slot_stats = [WorkerStats() for _ in range(self.num_workers)]
        self.pool = WorkerPool(self._new_worker, self.num_workers, self._stop, runtime.max_restarts)
        self.source = BatchSource(
            self.data, self.pool, self.num_workers, runtime.poll_interval_s, runtime.stall_timeout_s
        )
        self.gate: AdmissionGate | None = None
        self.started = False
        self.closed = False
        self._last_sync: SyncRecord | None = None
        self._last_batch: Batch | None = None
        self._window_start = 0.0
        self._window_totals: dict[str, float] = {}
        self._env_carry_s = 0.0
        self._update_start = 0.0
        self._update_s = 0.0

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self, version: int) -> None:
        """Publish the learner's weights as ``version`` and start the workers."""
        if self.started:
            return
        if self.closed:
            raise RuntimeError("this AsyncRuntime was closed; build a new one")
        self.data.set_learner_version(version)
        self.gate = AdmissionGate(self.num_workers, self.max_staleness, self._live_chunks, version)
        self._last_sync = self.channel.publish(self._weights(), version)
        self.started = True
        self._window_start = time.perf_counter()
        self._window_totals = self.pool.totals()
        self.pool.start()

    def close(self) -> None:
        """Stop every worker and join its thread (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if not self.started:
            return
        assert self.gate is not None
        self._stop.set()  # before waking the gate: woken workers must see it and leave
        self.gate.close()
        leftover = self.pool.stop(self.config.runtime.shutdown_timeout_s)
        if leftover:
            log.warning("env worker threads still running after shutdown_timeout_s: %s", leftover)
        for worker in self.pool.workers:
            worker.kill()  # what outlives a thread: a worker process, a Ray actor

    # --- the learner's calls ------------------------------------------------------------------
    def next_batch(self, version: int) -> tuple[Rollout, EpisodeStats]:
        """The ``[T, N]`` rollout to train ``version`` on, and its episodes (starts the workers first)."""
        self.start(version)
        self._last_batch = self.source.next_batch(version)
        self._update_start = time.perf_counter()
        return self._last_batch.rollout, self._last_batch.stats

    def publish(self, version: int) -> None:
        """Send the learner's updated weights as ``version`` and open the staleness window."""
        assert self.gate is not None, "publish before next_batch"
        self._update_s = time.perf_counter() - self._update_start
        self._last_sync = self.channel.publish(self._weights(), version)
        self.data.set_learner_version(version)
        self.gate.advance(version)

    def metrics(self) -> dict[str, float]:
        """``runtime/``, ``sync/`` and ``data/`` metrics of the iteration since the last call.

        ``runtime/env_util``: fraction of the workers' wall time spent in env ``step``/``reset``
        (env time reported after the line it belongs to, as Ray actors' is when their chunk comes
        back, is carried into the next lines, so a line never reads above 1 and the run keeps it all);
        ``runtime/learner_util``: fraction of the learner's time in ``process_rollout`` + ``update``
        (the rest is waiting for data, publishing, logging); ``runtime/samples_per_s``: trained
        samples per second; ``data/staleness_<k>``: chunks consumed with staleness ``k`` so far.
        """
        now = time.perf_counter()
        totals = self.pool.totals()
        window = max(now - self._window_start, 1e-9)
        delta = {k: totals[k] - self._window_totals.get(k, 0.0) for k in totals}
        self._window_start, self._window_totals = now, totals
        capacity = window * self.num_workers
        env_s, self._env_carry_s = carry_over_capacity(delta["env_s"] + self._env_carry_s, capacity)
        out = {
            "runtime/env_util": env_s / capacity,
            "runtime/worker_wait_frac": delta["wait_s"] / (window * self.num_workers),
            "runtime/env_steps_total": totals["env_steps"],
            "runtime/restarts": float(self.pool.restarts),
            "runtime/discarded_chunks": float(len(self.pool.discarded_ids)),
            "sync/worker_bytes": delta["sync_bytes"],
            "sync/worker_apply_s": delta["sync_s"],
            "sync/full_syncs": totals["full_syncs"],
        }
        if self._last_batch is not None:
            batch = self._last_batch
            samples = batch.rollout.num_steps * batch.rollout.num_envs
            out["runtime/learner_util"] = min(1.0, self._update_s / window)
            out["runtime/learner_wait_s"] = batch.wait_s
            out["runtime/samples_per_s"] = samples / window
            out["runtime/staleness_mean"] = float(np.mean(batch.staleness))
            out["runtime/staleness_max"] = float(max(batch.staleness))
        if self._last_sync is not None:
            sync = self._last_sync
            out["sync/bytes"] = float(sync.bytes)
            out["sync/dense_bytes"] = float(sync.dense_bytes)
            out["sync/publish_s"] = sync.seconds
        out.update(self.data.metrics().flat())
        return out

    # --- records for tests and reports --------------------------------------------------------
    @property
    def consumed(self) -> list[tuple[TrajectoryId, int, int]]:
        """``(chunk id, policy version, learner version)`` of every chunk trained on, in order."""
        return self.source.consumed

    @property
    def discarded_ids(self) -> list[TrajectoryId]:
        """Ids of in-flight chunks lost with crashed workers."""
        return self.pool.discarded_ids

    @property
    def workers(self) -> list[ChunkWorker]:
        """The current workers (replacements included)."""
        return self.pool.workers

    # --- internals ----------------------------------------------------------------------------
    def _weights(self) -> dict[str, torch.Tensor]:
        return {name: tensor.detach() for name, tensor in self.policy.state_dict().items()}

    def _live_chunks(self) -> int:
        metrics = self.data.metrics()
        return metrics.returned + metrics.queue_depth

    def _worker_seed(self, worker_id: int, restart: int) -> int:
        """Sub-env seeds match the local runtime's (seed + i for env i); a replacement's differ."""
        return self.config.seed + worker_id * self.envs_per_worker + restart * self.config.env.num_envs

    def _new_worker(self, worker_id: int, restart: int, first_sequence: int) -> ChunkWorker:
        """A worker for slot ``worker_id`` (called on the learner's thread: copying the policy is safe)."""
        assert self.gate is not None
        env_config = dataclasses.replace(self.config.env, num_envs=self.envs_per_worker)
        seed = self._worker_seed(worker_id, restart)
        runtime = self.config.runtime
        if runtime.async_.workers == "process":
            policy = copy.deepcopy(self.policy).to("cpu")
            return ProcessEnvWorker(
                worker_id,
                recipe=process_worker_recipe(
                    self._make_envs, env_config, policy, self.num_steps, seed, runtime.torch_threads
                ),
                channel=self.channel,
                data=self.data,
                gate=self.gate,
                stop=self._stop,
                stats=self._slot_stats[worker_id],
                first_sequence=first_sequence,
                poll_interval_s=runtime.poll_interval_s,
                start_timeout_s=runtime.async_.start_timeout_s,
            )
        return EnvWorker(
            worker_id,
            make_envs=lambda: self._make_envs(env_config),
            policy=copy.deepcopy(self.policy),
            channel=self.channel,
            data=self.data,
            gate=self.gate,
            num_steps=self.num_steps,
            seed=seed,
            stop=self._stop,
            stats=self._slot_stats[worker_id],
            first_sequence=first_sequence,
            poll_interval_s=self.config.runtime.poll_interval_s,
            interrupt_every_tokens=runtime.async_.interrupt_every_tokens,
        )
