"""The body of an env worker that lives outside the learner's process (a Ray actor, a process).

A :class:`RolloutActor` owns one vector env and a CPU copy of the policy; each :meth:`collect`
applies the weight payloads it is sent and collects one chunk. The ``ray`` runtime wraps it in a
Ray actor, ``runtime.async.workers: process`` in a child process
(:mod:`~omnigym.platform.runtime.process_workers`); the learner's side is the same in both.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch

from omnigym.core.policy import Policy
from omnigym.core.types import EpisodeStats, Rollout
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.runtime.weight_sync import WeightPayload, WeightReceiver
from omnigym.platform.runtime.workers import TimedVectorEnv, WorkerStats
from omnigym.platform.vec_env import EnvConfig

EnvFactory = Callable[[EnvConfig], gym.vector.VectorEnv]
"""Builds one worker's vector env from the env config (``num_envs`` already the worker's share)."""


class RolloutActor:
    """Runs inside a Ray actor: one vector env and a policy copy; collects a chunk per call.

    Args:
        make_envs: builds the vector env from ``env_config`` (picklable: it travels to the actor).
        env_config: this actor's env config (``num_envs`` is its share).
        policy: a CPU copy of the learner's policy (weights arrive with every :meth:`collect`).
        num_steps: T, steps per env per chunk.
        seed: reset seed of the envs (sub-env ``i`` gets ``seed + i``).
        torch_threads: torch's CPU threads in the actor process.
    """

    def __init__(
        self,
        make_envs: EnvFactory,
        env_config: EnvConfig,
        policy: Policy,
        num_steps: int,
        seed: int,
        torch_threads: int = 1,
    ) -> None:
        if torch_threads > 0:
            torch.set_num_threads(torch_threads)
        self.stats = WorkerStats()
        self.policy = policy.eval()
        self.receiver = WeightReceiver(policy.device)
        self.envs: gym.vector.VectorEnv = TimedVectorEnv(make_envs(env_config), self.stats)
        self.collector = RolloutCollector(self.envs, self.policy, num_steps, policy.device)
        self.collector.reset(seed=seed)

    def collect(self, *payloads: WeightPayload) -> tuple[Rollout, EpisodeStats, int, dict[str, float]]:
        """Apply ``payloads`` (oldest first), then collect ``T`` steps of every env.

        The payloads come as separate arguments so that Ray resolves each from its object store
        reference (one copy per node, shared by every actor) before the call.

        Returns ``(rollout, episodes, policy version, counters)``; the counters (``env_s``,
        ``sync_s``) cover this call only.
        """
        before = self.stats.snapshot()
        start = time.perf_counter()
        if payloads:
            for payload in payloads:
                self.receiver.apply(payload)
            with torch.no_grad():
                self.receiver.load_into(self.policy)
        sync_s = time.perf_counter() - start
        version = self.receiver.version
        if version is None:
            raise RuntimeError("RolloutActor.collect: the first call must bring weights")
        self.collector.policy_version = version
        rollout, episodes = self.collector.collect()
        env_s = self.stats.snapshot()["env_s"] - before["env_s"]
        return rollout, episodes, version, {"env_s": env_s, "sync_s": sync_s}

    def weights(self) -> tuple[int | None, dict[str, torch.Tensor]]:
        """The version and the state dict of the acting policy (for checks)."""
        return self.receiver.version, {k: v.detach().clone() for k, v in self.policy.state_dict().items()}

    def where(self) -> dict[str, Any]:
        """Where this actor runs: ``pid``, ``host`` and, inside Ray, ``node_id`` (for checks, logs)."""
        ray = sys.modules.get("ray")
        node = None
        if ray is not None and ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
        return {"pid": os.getpid(), "host": socket.gethostname(), "node_id": node}

    def close(self) -> None:
        """Close the envs (before the actor is killed)."""
        self.envs.close()
