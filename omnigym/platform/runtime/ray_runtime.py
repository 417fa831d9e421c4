"""The ``ray`` runtime: the ``async`` runtime with each env worker's envs and policy in a Ray actor.

Wiring (docs/runtime.md)::

    RolloutActor (Ray actor: n envs + a CPU policy copy, batched inference over its envs)
        <-- collect(weight payloads)   one call per chunk, from its RayEnvWorker thread
    RayEnvWorker (a thread in the learner's process, one per actor)
        --chunk tagged (version, (worker_id, sequence))--> DataManager (eta filter) --> learner

Everything but where the envs step is the ``async`` runtime's: the learner runs in the trainer's
process, the :class:`~omnigym.platform.runtime.admission.AdmissionGate` decides when each actor may
start a chunk, the :class:`~omnigym.platform.runtime.weight_channel.WeightChannel` decides which
payloads (sparse deltas, or one full payload for a new actor) bring an actor up to date, and the
:class:`~omnigym.platform.runtime.workers.WorkerPool` replaces a worker whose actor died (killed,
out of memory, node lost) or whose env raised: the replacement gets a fresh actor, fresh env seeds
and a full weight sync; the chunk it had in flight is recorded as discarded and never reaches the
learner, so no chunk is trained on twice.

Ray is optional (``pip install 'omnigym[ray]'``). ``runtime.ray.address`` None starts a local Ray
for the run (and stops it at the end); an already initialised Ray (a notebook, a test session) is
used as it is and left running.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

import torch

from omnigym.core.policy import Policy
from omnigym.core.types import EpisodeStats, Rollout
from omnigym.platform.experiment import ExperimentConfig
from omnigym.platform.runtime.admission import AdmissionGate
from omnigym.platform.runtime.async_runtime import AsyncRuntime, EnvFactory
from omnigym.platform.runtime.data_manager import DataManager
from omnigym.platform.runtime.rollout_actor import RolloutActor
from omnigym.platform.runtime.weight_channel import WeightChannel
from omnigym.platform.runtime.weight_sync import WeightPayload
from omnigym.platform.runtime.workers import Chunk, ChunkWorker, WorkerStats

log = logging.getLogger(__name__)


def import_ray() -> Any:
    """The ``ray`` module, or an error that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("runtime.type ray needs Ray: pip install 'omnigym[ray]'") from exc
    return ray


class PayloadStore:
    """Puts each weight payload into Ray's object store once, for every actor (thread-safe).

    A payload of a 17 MB model sent by value to 8 actors is 8 serialisations and copies; by
    reference it is one. Entries older than the newest ``keep`` versions are dropped (the
    actors' calls hold their own references while they run).
    """

    def __init__(self, ray: Any, keep: int) -> None:
        self._ray, self.keep = ray, keep
        self._refs: dict[tuple[int, int | None], Any] = {}
        self._lock = threading.Lock()

    def refs(self, payloads: list[WeightPayload]) -> list[Any]:
        """Object references of ``payloads``, in order (put on first use)."""
        with self._lock:
            out = []
            for payload in payloads:
                key = (payload.version, payload.base_version)
                if key not in self._refs:
                    self._refs[key] = self._ray.put(payload)
                out.append(self._refs[key])
            newest = max(version for version, _ in self._refs)
            for key in [k for k in self._refs if k[0] <= newest - self.keep]:
                del self._refs[key]
            return out


class RayEnvWorker(ChunkWorker):
    """An env worker whose envs and policy live in a :class:`RolloutActor`; this thread drives it.

    The thread waits for admission, sends the actor the weight payloads it lacks with the collect
    call, and queues the chunk that comes back. When the actor dies or its call raises, the thread
    ends with that error (the pool restarts the slot) and the actor is killed.

    Args:
        worker_id: the first half of every chunk id; kept by a restarted replacement.
        make_actor: creates this worker's actor (called on the worker's thread).
        channel: the learner's published weights.
        payloads: the object-store copies of the payloads, shared by the workers.
        data, gate, stop, stats, first_sequence, poll_interval_s: as for
            :class:`~omnigym.platform.runtime.workers.ChunkWorker`.
    """

    def __init__(
        self,
        worker_id: int,
        *,
        make_actor: Callable[[], Any],
        channel: WeightChannel,
        payloads: PayloadStore,
        data: DataManager[Chunk],
        gate: AdmissionGate,
        stop: Any,
        stats: WorkerStats,
        first_sequence: int = 0,
        poll_interval_s: float = 0.5,
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
        self._ray = import_ray()
        self._make_actor, self._channel, self._store = make_actor, channel, payloads
        self.actor: Any = None
        """The Ray actor handle (None until the thread has created it)."""
        self.weights_version: int | None = None
        """The version of the weights the actor's policy holds."""

    def remote_weights(self) -> tuple[int | None, dict[str, torch.Tensor]]:
        """The actor's weights version and state dict (a remote call; for checks)."""
        if self.actor is None:
            raise RuntimeError(f"env worker {self.worker_id} has no actor yet")
        result: tuple[int | None, dict[str, torch.Tensor]] = self._ray.get(self.actor.weights.remote())
        return result

    def remote_where(self) -> dict[str, Any]:
        """Where the actor runs (:meth:`RolloutActor.where`; a remote call)."""
        if self.actor is None:
            raise RuntimeError(f"env worker {self.worker_id} has no actor yet")
        result: dict[str, Any] = self._ray.get(self.actor.where.remote())
        return result

    def kill(self) -> None:
        """Kill the actor (idempotent; a dead actor is fine)."""
        if self.actor is None:
            return
        try:
            self._ray.kill(self.actor, no_restart=True)
        except Exception:  # already gone
            log.debug("env worker %d: killing its actor failed", self.worker_id, exc_info=True)

    def _open(self) -> None:
        self.actor = self._make_actor()

    def _collect(self) -> tuple[Rollout, EpisodeStats, int]:
        payloads = self._channel.payloads_since(self.weights_version)
        pending = self.actor.collect.remote(*self._store.refs(payloads))
        while not self._ray.wait([pending], timeout=self.poll_interval_s)[0]:
            log.debug("env worker %d: waiting for chunk %s", self.worker_id, self.in_flight)
        rollout, episodes, version, counters = self._ray.get(pending)
        self.weights_version = version
        self._count_remote_chunk(payloads, counters)
        return rollout, episodes, version

    def _close(self) -> None:
        if self.actor is not None and self.error is None:
            try:  # a clean stop: let the envs close (browsers, sockets) before the kill
                self._ray.get(self.actor.close.remote(), timeout=self.poll_interval_s * 10)
            except Exception:
                log.debug("env worker %d: closing its actor's envs failed", self.worker_id, exc_info=True)
        self.kill()


class RayRuntime(AsyncRuntime):
    """The ``async`` runtime with :class:`RolloutActor` env workers on a Ray cluster.

    Args:
        config: the experiment (``runtime.ray`` says where; the rest as for ``async``).
        policy: the learner's policy; each actor acts with a CPU copy.
        make_envs: builds an actor's vector env (default :func:`make_vec_env`); it is pickled to
            the actors, so it must be importable there or picklable by value.
    """

    def __init__(self, config: ExperimentConfig, policy: Policy, make_envs: EnvFactory | None = None) -> None:
        self._ray = import_ray()
        super().__init__(config, policy, make_envs)
        self._owns_ray = False
        self._actor_class: Any = None
        self._payloads = PayloadStore(self._ray, keep=config.runtime.max_staleness + 3)

    def start(self, version: int) -> None:
        """Connect to (or start) Ray, then publish and start the workers as ``async`` does."""
        if self.started or self.closed:
            super().start(version)  # a no-op, or the "closed" error
            return
        self._connect()
        super().start(version)

    def close(self) -> None:
        """Stop the workers, kill every actor, and stop Ray when this runtime started it."""
        if self.closed:
            return
        super().close()  # kills every worker's actor
        if self._owns_ray:
            self._ray.shutdown()
            self._owns_ray = False

    def _connect(self) -> None:
        ray, settings = self._ray, self.config.runtime.ray
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
            if settings.address is None:
                options["num_cpus"] = settings.num_cpus
            ray.init(address=settings.address, **options)
            self._owns_ray = True
        cluster = ray.cluster_resources()
        needs = {"CPU": settings.cpus_per_worker, **settings.resources_per_worker}
        for resource, each in needs.items():
            needed, available = each * self.num_workers, float(cluster.get(resource, 0.0))
            if needed > available:
                if self._owns_ray:
                    ray.shutdown()
                    self._owns_ray = False
                raise ValueError(self._shortfall(resource, needed, available))
        self._actor_class = ray.remote(
            num_cpus=settings.cpus_per_worker,
            resources=dict(settings.resources_per_worker) or None,
            max_restarts=0,
        )(RolloutActor)

    def _shortfall(self, resource: str, needed: float, available: float) -> str:
        """The error for a cluster without room for the workers, with the way out."""
        settings = self.config.runtime.ray
        if resource == "CPU":
            return (
                f"runtime.ray: {self.num_workers} workers x cpus_per_worker {settings.cpus_per_worker} "
                f"need {needed:g} CPUs but the Ray cluster has {available:g}; lower runtime.num_workers or "
                "runtime.ray.cpus_per_worker (fractions share a core), or raise runtime.ray.num_cpus"
            )
        return (
            f"runtime.ray: {self.num_workers} workers x resources_per_worker {resource}: "
            f"{settings.resources_per_worker[resource]:g} need {needed:g} but the Ray cluster has "
            f"{available:g}; start nodes with ray start --resources='{{\"{resource}\": N}}' or lower "
            "runtime.num_workers"
        )

    def _new_worker(self, worker_id: int, restart: int, first_sequence: int) -> ChunkWorker:
        """A worker and (once its thread starts) a fresh actor for slot ``worker_id``."""
        assert self.gate is not None and self._actor_class is not None
        env_config = dataclasses.replace(self.config.env, num_envs=self.envs_per_worker)
        policy = copy.deepcopy(self.policy).to("cpu")  # on the learner's thread: copying is safe
        actor_class, make_envs = self._actor_class, self._make_envs
        seed, threads = self._worker_seed(worker_id, restart), self.config.runtime.torch_threads

        def make_actor() -> Any:
            return actor_class.remote(make_envs, env_config, policy, self.num_steps, seed, threads)

        return RayEnvWorker(
            worker_id,
            make_actor=make_actor,
            channel=self.channel,
            payloads=self._payloads,
            data=self.data,
            gate=self.gate,
            stop=self._stop,
            stats=self._slot_stats[worker_id],
            first_sequence=first_sequence,
            poll_interval_s=self.config.runtime.poll_interval_s,
        )
