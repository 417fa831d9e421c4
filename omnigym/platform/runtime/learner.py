"""The learner's side of the ``async`` runtime: take chunks, make the batch the algorithm expects.

:meth:`BatchSource.next_batch` waits (on the data manager's condition, with a timeout, never
spinning) for ``B`` chunks fresh enough for the learner's version, checking the workers' health
between waits, and puts the chunks side by side: ``B`` chunks of ``[T, n]`` make the ``[T, N]``
rollout (``N = B * n``) that the local runtime's collector would have produced, so
``process_rollout`` and ``update`` run unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from omnigym.core.types import EpisodeStats, Rollout
from omnigym.platform.runtime.data_manager import DataManager, TrajectoryEntry, TrajectoryId
from omnigym.platform.runtime.workers import Chunk, WorkerPool


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Rollouts of the same ``T`` side by side: ``[T, n1 + n2 + ...]``.

    ``final_obs`` rows are concatenated and their ``final_index`` env columns shifted to the new
    positions. A rollout without reward components (``K = 0``: its env reported none yet) gets
    zeros under the others' names.
    """
    if not rollouts:
        raise ValueError("concat_rollouts needs at least one rollout")
    if len({r.num_steps for r in rollouts}) != 1:
        raise ValueError(f"chunks differ in length: {[r.num_steps for r in rollouts]}")
    names = {r.reward_component_names for r in rollouts if r.reward_component_names}
    if len(names) > 1:
        raise ValueError(f"chunks report different reward components: {sorted(names)}")
    component_names = names.pop() if names else ()
    if len(rollouts) == 1:
        return rollouts[0]

    def cat(tensors: list[Tensor], dim: int = 1) -> Tensor:
        return torch.cat(tensors, dim=dim)

    offsets = torch.tensor([0, *[r.num_envs for r in rollouts]]).cumsum(0)[:-1].tolist()
    final_index = [
        r.final_index + torch.tensor([0, offset]) for r, offset in zip(rollouts, offsets, strict=True)
    ]
    first = rollouts[0]
    return replace(
        first,
        obs={k: cat([r.obs[k] for r in rollouts]) for k in first.obs},
        actions=cat([r.actions for r in rollouts]),
        rewards=cat([r.rewards for r in rollouts]),
        reward_components=cat([_components(r, len(component_names)) for r in rollouts]),
        reward_component_names=component_names,
        terminated=cat([r.terminated for r in rollouts]),
        truncated=cat([r.truncated for r in rollouts]),
        valid=cat([r.valid for r in rollouts]),
        logprob=cat([r.logprob for r in rollouts]),
        mask=cat([r.mask for r in rollouts]),
        policy_version=cat([r.policy_version for r in rollouts]),
        extras={k: cat([r.extras[k] for r in rollouts]) for k in first.extras},
        next_obs={k: cat([r.next_obs[k] for r in rollouts], 0) for k in first.next_obs},
        final_obs={k: cat([r.final_obs[k] for r in rollouts], 0) for k in first.final_obs},
        final_index=cat(final_index, 0),
    )


def _components(rollout: Rollout, k: int) -> Tensor:
    """``[T, n, k]`` reward components (zeros when the rollout has none yet)."""
    if rollout.reward_components.shape[-1] == k:
        return rollout.reward_components
    return torch.zeros((rollout.num_steps, rollout.num_envs, k), dtype=torch.float32)


def merge_stats(stats: list[EpisodeStats]) -> EpisodeStats:
    """The episodes of several chunks as one :class:`EpisodeStats`."""
    merged = EpisodeStats()
    for part in stats:
        merged.returns += part.returns
        merged.lengths += part.lengths
        for key, values in part.metrics.items():
            merged.metrics.setdefault(key, []).extend(values)
    return merged


@dataclass
class Batch:
    """What the learner trains on in one iteration.

    Attributes:
        rollout: the chunks side by side. Shapes: [T, N, ...].
        stats: the episodes that ended in them.
        ids: the chunks' ids, in the order they were placed.
        staleness: learner version minus each chunk's policy version.
        wait_s: how long the learner waited for them.
    """

    rollout: Rollout
    stats: EpisodeStats
    ids: list[TrajectoryId]
    staleness: list[int]
    wait_s: float


class BatchSource:
    """Takes ``chunks_per_batch`` chunks per learner version from the data manager.

    Args:
        data: the queue the workers fill.
        pool: the workers, health-checked (crashed ones replaced) between waits.
        chunks_per_batch: ``B``.
        poll_interval_s: the longest wait on the queue between health checks.
        stall_timeout_s: a :class:`RuntimeError` when no batch came for this long.
    """

    def __init__(
        self,
        data: DataManager[Chunk],
        pool: WorkerPool,
        chunks_per_batch: int,
        poll_interval_s: float,
        stall_timeout_s: float,
    ) -> None:
        self.data, self.pool = data, pool
        self.chunks_per_batch = chunks_per_batch
        self.poll_interval_s, self.stall_timeout_s = poll_interval_s, stall_timeout_s
        self.consumed: list[tuple[TrajectoryId, int, int]] = []
        """``(chunk id, its policy version, the learner version that consumed it)``, in order."""

    def next_batch(self, learner_version: int) -> Batch:
        """The next ``[T, N]`` batch for ``learner_version`` (waits for it).

        Raises:
            RuntimeError: no batch within ``stall_timeout_s``, or too many worker crashes.
        """
        start = time.perf_counter()
        entries = self._take(learner_version, start)
        wait_s = time.perf_counter() - start
        chunks = [entry.item for entry in entries]
        for entry in entries:
            self.consumed.append((entry.trajectory_id, entry.policy_version, learner_version))
        return Batch(
            rollout=concat_rollouts([chunk.rollout for chunk in chunks]),
            stats=merge_stats([chunk.stats for chunk in chunks]),
            ids=[entry.trajectory_id for entry in entries],
            staleness=[learner_version - entry.policy_version for entry in entries],
            wait_s=wait_s,
        )

    def _take(self, learner_version: int, start: float) -> list[TrajectoryEntry[Chunk]]:
        while True:
            self.pool.check()
            try:
                return self.data.get(self.chunks_per_batch, learner_version, timeout=self.poll_interval_s)
            except TimeoutError:
                waited = time.perf_counter() - start
                if waited >= self.stall_timeout_s:
                    alive = sum(worker.is_alive() for worker in self.pool.workers)
                    raise RuntimeError(
                        f"no batch of {self.chunks_per_batch} chunks for learner version {learner_version} "
                        f"in {waited:.0f} s (runtime.stall_timeout_s); {alive}/{len(self.pool.workers)} "
                        f"workers alive, {len(self.data)} chunks queued"
                    ) from None
