"""Env workers as child processes: ``runtime.async.workers: process``.

Wiring (docs/runtime.md)::

    child process (spawned): RolloutActor = n envs + a CPU policy copy
        <-- ("collect", weight payloads)   over a torch.multiprocessing pipe
        --> (rollout, episodes, version, counters)   pickled bytes
    ProcessEnvWorker (a thread in the learner's process, one per child)
        --chunk tagged (version, (worker_id, sequence))--> DataManager (eta filter) --> learner

Thread workers share the GIL with the learner: an env or a policy that computes in Python slows
the learner's update and each other. A process worker steps its envs and runs its policy copy in a
process of its own; only the thread that drives it (waiting on a pipe) lives in the learner's
process. Everything else is the thread runtime's: the admission gate, the weight channel (sparse
deltas, a full payload for a new process), the data manager's staleness filter, and crash handling:
a child that dies (killed, out of memory) or whose env raises ends its driving thread with that
error, the pool starts a fresh child (fresh env seeds, full weight sync), and the chunk it had in
flight is recorded as discarded, never trained on.

Children are started with ``spawn`` (safe with torch and threads); the env factory and the policy
copy travel with ``cloudpickle`` (closures and functions of a ``__main__`` script included).
Messages are pickled to bytes rather than passed as shared-memory handles: a chunk is a few
megabytes at most, copied in milliseconds, and a child killed mid-message leaves nothing behind
(no shared segment or file descriptor the learner would wait for).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import pickle
import traceback
from typing import Any

import cloudpickle
import torch

from omnigym.core.types import EpisodeStats, Rollout
from omnigym.platform.runtime.rollout_actor import RolloutActor
from omnigym.platform.runtime.weight_channel import WeightChannel
from omnigym.platform.runtime.workers import ChunkWorker

log = logging.getLogger(__name__)
PROCESS_PREFIX = "omnigym-env-process"
"""Worker processes are named ``<prefix>-<worker_id>``."""


Connection = multiprocessing.connection.Connection


def send(conn: Connection, message: Any) -> None:
    """Send ``message`` as plain pickled bytes (tensors copied, never shared)."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> Any:
    """The next message :func:`send` sent."""
    return pickle.loads(conn.recv_bytes())


def serve_rollout_actor(conn: Connection, recipe: bytes) -> None:
    """The child's main loop: build a :class:`RolloutActor` from ``recipe``, answer commands.

    Commands are ``(name, args)``: ``collect`` (weight payloads), ``weights``, ``close``. Every
    answer is ``("ok", value)`` or ``("error", traceback text)``; the loop ends after ``close``
    or when the learner's end of the pipe closes.
    """
    try:
        actor = RolloutActor(*cloudpickle.loads(recipe))
    except BaseException:
        send(conn, ("error", traceback.format_exc()))
        return
    send(conn, ("ok", None))
    while True:
        try:
            name, args = receive(conn)
        except (EOFError, OSError):  # the learner is gone
            actor.close()
            return
        try:
            value = getattr(actor, name)(*args)
        except BaseException:
            send(conn, ("error", traceback.format_exc()))
            continue
        send(conn, ("ok", value))
        if name == "close":
            return


class WorkerProcessError(RuntimeError):
    """A worker process died, or its env or policy raised (the message has the child's traceback)."""


class ProcessEnvWorker(ChunkWorker):
    """An env worker whose envs and policy live in a child process; this thread drives it.

    Args:
        worker_id: the first half of every chunk id; kept by a restarted replacement.
        recipe: the child's :class:`RolloutActor` arguments, cloudpickled.
        channel: the learner's published weights.
        start_timeout_s: how long the child may take to build its envs.
        **common: ``data``, ``gate``, ``stop``, ``stats``, ``first_sequence``, ``poll_interval_s``
            of :class:`~omnigym.platform.runtime.workers.ChunkWorker`.
    """

    def __init__(
        self,
        worker_id: int,
        *,
        recipe: bytes,
        channel: WeightChannel,
        start_timeout_s: float = 300.0,
        **common: Any,
    ) -> None:
        super().__init__(worker_id, **common)
        self._recipe, self._channel, self.start_timeout_s = recipe, channel, start_timeout_s
        self.process: Any = None
        """The child process (None until this worker's thread has started it)."""
        self._conn: Connection | None = None
        self.weights_version: int | None = None
        """The version of the weights the child's policy holds."""

    def kill(self) -> None:
        """Kill the child process (idempotent; a dead one is fine)."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(timeout=5.0)

    def _open(self) -> None:
        context = multiprocessing.get_context("spawn")
        learner_end, child_end = context.Pipe()
        self.process = context.Process(
            target=serve_rollout_actor,
            args=(child_end, self._recipe),
            name=f"{PROCESS_PREFIX}-{self.worker_id}",
            daemon=True,  # never outlives the learner's process
        )
        self.process.start()
        child_end.close()
        self._conn = learner_end
        self._receive(self.start_timeout_s, "starting")

    def _collect(self) -> tuple[Rollout, EpisodeStats, int]:
        assert self._conn is not None
        payloads = self._channel.payloads_since(self.weights_version)
        try:
            send(self._conn, ("collect", tuple(payloads)))
        except OSError as exc:  # a broken pipe: the child is gone
            raise WorkerProcessError(f"env worker process {self.worker_id} died between chunks") from exc
        rollout, episodes, version, counters = self._receive(None, f"collecting chunk {self.in_flight}")
        self.weights_version = version
        self._count_remote_chunk(payloads, counters)
        return rollout, episodes, version

    def _receive(self, timeout_s: float | None, doing: str) -> Any:
        """The child's next answer; raises when it died, raised, or took longer than ``timeout_s``."""
        assert self._conn is not None and self.process is not None
        waited = 0.0
        while not self._conn.poll(self.poll_interval_s):
            waited += self.poll_interval_s
            if not self.process.is_alive():
                raise WorkerProcessError(
                    f"env worker process {self.worker_id} died while {doing} "
                    f"(exit code {self.process.exitcode})"
                )
            if timeout_s is not None and waited >= timeout_s:
                hint = " (runtime.async.start_timeout_s)" if doing == "starting" else ""
                raise WorkerProcessError(
                    f"env worker process {self.worker_id}: {doing} took over {timeout_s:g} s{hint}"
                )
        try:
            status, value = receive(self._conn)
        except (EOFError, OSError) as exc:
            raise WorkerProcessError(f"env worker process {self.worker_id} died while {doing}") from exc
        if status == "error":
            raise WorkerProcessError(f"env worker process {self.worker_id} failed while {doing}:\n{value}")
        return value

    def _close(self) -> None:
        if self._conn is not None and self.error is None and self.process.is_alive():
            try:  # a clean stop: let the envs close (browsers, sockets) before the process ends
                send(self._conn, ("close", ()))
                self._receive(self.poll_interval_s * 10, "closing")
            except Exception:
                log.debug("env worker %d: closing its process's envs failed", self.worker_id, exc_info=True)
        self.kill()
        if self._conn is not None:
            self._conn.close()


def process_worker_recipe(
    make_envs: Any, env_config: Any, policy: torch.nn.Module, num_steps: int, seed: int, threads: int
) -> bytes:
    """The cloudpickled arguments of a child's :class:`RolloutActor` (the policy as a CPU copy)."""
    return cloudpickle.dumps((make_envs, env_config, policy, num_steps, seed, threads))
