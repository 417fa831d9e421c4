"""Where the pieces run. The device and thread count are chosen here and nowhere else.

Three runtimes (``runtime.type``):

* ``local``: the synchronous loop: collect a rollout, then update, in this thread.
* ``async``: ``num_workers`` env workers (threads, or processes with ``runtime.async.workers:
  process``) collect rollout chunks with copies of the policy while the learner (the trainer's
  thread) updates; weights travel through
  :mod:`~omnigym.platform.runtime.weight_sync`, chunks through
  :mod:`~omnigym.platform.runtime.data_manager` with the staleness bound ``max_staleness``
  (docs/runtime.md).
* ``ray``: the same, with each env worker's envs and policy copy in a Ray actor
  (:mod:`~omnigym.platform.runtime.ray_runtime`); a local Ray by default, a cluster with
  ``runtime.ray.address``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

import torch

from omnigym.platform.runtime.weight_sync import WeightSyncConfig


@dataclass
class RayConfig:
    """Where the ``ray`` runtime's actors run (``runtime.ray``)."""

    address: str | None = None
    """None: start a local Ray in this process (stopped when training ends); ``auto`` or
    ``ray://host:port``: join that cluster. An already running ``ray.init`` is used as it is."""
    num_cpus: int | None = None
    """CPUs of the local Ray (None: Ray counts them); ignored when joining a cluster."""
    cpus_per_worker: float = 1.0
    """CPUs each rollout actor reserves; fractions pack several actors on a core (slow, waiting envs)."""
    resources_per_worker: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources each rollout actor needs, e.g. ``{env_node: 1}`` to place the actors on
    the nodes started with ``ray start --resources='{"env_node": 8}'``."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if any(amount <= 0 for amount in self.resources_per_worker.values()):
            raise ValueError(
                f"runtime.ray.resources_per_worker amounts must be > 0, got {self.resources_per_worker}"
            )
        if self.cpus_per_worker < 0:
            raise ValueError(f"runtime.ray.cpus_per_worker must be >= 0, got {self.cpus_per_worker}")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise ValueError(f"runtime.ray.num_cpus must be >= 1 or null, got {self.num_cpus}")


@dataclass
class AsyncConfig:
    """How the ``async`` runtime's env workers run (``runtime.async``)."""

    workers: Literal["thread", "process"] = "thread"
    """``thread``: each worker a thread of the learner's process (envs whose steps wait: sleep and
    I/O release the GIL); ``process``: each worker a child process with its own envs and policy
    copy (envs or policies that compute in Python: no GIL shared with the learner)."""
    start_timeout_s: float = 300.0
    """``process``: how long a worker process may take to start (import, build its envs)."""
    interrupt_every_tokens: int = 0
    """Partial rollouts (AReaL): a worker whose policy generates (``vlm``) checks for newer weights
    every this many generated tokens and continues the reply under them, each token's version
    recorded (``extras["token_version"]``) for decoupled PPO / A-3PO. 0: a reply is generated
    under the weights it started with. Thread workers only."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.interrupt_every_tokens < 0:
            raise ValueError(
                f"runtime.async.interrupt_every_tokens must be >= 0, got {self.interrupt_every_tokens}"
            )
        if self.interrupt_every_tokens and self.workers != "thread":
            raise ValueError(
                "runtime.async.interrupt_every_tokens needs thread workers (a worker process gets new "
                "weights only between chunks); set runtime.async.workers: thread"
            )
        if self.workers not in ("thread", "process"):
            raise ValueError(f"runtime.async.workers must be 'thread' or 'process', got {self.workers!r}")
        if self.start_timeout_s <= 0:
            raise ValueError(f"runtime.async.start_timeout_s must be > 0, got {self.start_timeout_s}")


@dataclass
class RuntimeConfig:
    """Where collection and learning run."""

    type: Literal["local", "async", "ray"] = "local"
    """``local``: collect then update in this thread; ``async``: env worker threads collect while the
    learner updates; ``ray``: the workers are Ray actors (docs/runtime.md)."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    torch_threads: int = 1
    """Threads for torch's CPU kernels; 1 is fastest for the small networks of state-based RL."""
    num_workers: int = 2
    """``async``/``ray``: env workers (threads or Ray actors); ``env.num_envs`` is split evenly
    between them (each its own vector env, vectorised as ``env.vectorization`` says)."""
    max_staleness: int = 1
    """``async``/``ray``: eta, the most versions a consumed chunk's policy may lag the learner's
    (AReaL's ``max_head_offpolicyness``). 0 is synchronous (no overlap); 1 lets one collection
    overlap one update."""
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)
    """``async``/``ray``: how the learner's weights reach the workers (sparse deltas by default,
    lossless)."""
    poll_interval_s: float = 0.5
    """``async``/``ray``: how often the waiting learner checks its workers' health (crashed ones
    restart)."""
    stall_timeout_s: float = 600.0
    """``async``/``ray``: the learner gives up (an error) when no batch arrived for this long."""
    max_restarts: int = 10
    """``async``/``ray``: crashed env workers restarted in one run before the run fails."""
    shutdown_timeout_s: float = 60.0
    """``async``/``ray``: how long closing waits for each worker to finish its current step and stop."""
    ray: RayConfig = field(default_factory=RayConfig)
    """``ray``: the Ray cluster and each actor's resources."""
    async_: AsyncConfig = field(default_factory=AsyncConfig, metadata={"config_key": "async"})
    """``async``: threads or processes as env workers (the config key is ``async``)."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.num_workers < 1:
            raise ValueError(f"runtime.num_workers must be >= 1, got {self.num_workers}")
        if self.max_staleness < 0:
            raise ValueError(f"runtime.max_staleness (eta) must be >= 0, got {self.max_staleness}")
        if self.poll_interval_s <= 0 or self.stall_timeout_s <= 0 or self.shutdown_timeout_s <= 0:
            raise ValueError(
                "runtime.poll_interval_s, stall_timeout_s and shutdown_timeout_s must be > 0, got "
                f"{self.poll_interval_s}, {self.stall_timeout_s}, {self.shutdown_timeout_s}"
            )
        if self.max_restarts < 0:
            raise ValueError(f"runtime.max_restarts must be >= 0, got {self.max_restarts}")
        if self.async_.workers == "process" and self.type != "async":
            raise ValueError(
                f"runtime.async.workers: process applies to runtime.type async, not {self.type}"
                + (" (Ray actors are processes already)" if self.type == "ray" else "")
            )


def resolve_device(name: str = "auto") -> torch.device:
    """The torch device for a config value; ``auto`` prefers CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"runtime.device={name!r} but CUDA is not available; use 'cpu' or 'auto'")
    return device


def setup_runtime(config: RuntimeConfig) -> torch.device:
    """Apply the thread count and return the device to use."""
    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    return resolve_device(config.device)


THREADS_ENV_VAR = "OMNIGYM_THREADS"
"""Environment variable with the torch thread count for commands given no ``--threads``."""


def apply_thread_policy(threads: int | None = None) -> int:
    """Set torch's CPU thread count for this process and return it.

    ``threads`` None takes ``$OMNIGYM_THREADS``, else 1: the small networks of RL gain little from
    intra-op threads and lose much when another process competes for the cores (one thread per
    process is the policy of every command, worker and benchmark; docs/runtime.md).

    Raises:
        ValueError: if the count is not a positive integer.
    """
    if threads is None:
        text = os.environ.get(THREADS_ENV_VAR, "1")
        try:
            threads = int(text)
        except ValueError:
            raise ValueError(f"${THREADS_ENV_VAR} must be a positive integer, got {text!r}") from None
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    return threads
