"""The trajectory queue between rollout workers and the learner of the asynchronous runtime.

Workers :meth:`~DataManager.put` trajectories (or rollout chunks) tagged with the version of the
policy that produced them; the learner takes batches of them with :meth:`~DataManager.get`. On the
way the data manager enforces what keeps asynchronous training sound (AReaL, Fu et al., 2025;
docs/runtime.md):

* **Staleness** ``learner_version - policy_version <= max_staleness`` (AReaL's eta): older items are
  dropped, counted, and never returned. Staleness only grows as the learner advances, so items are
  checked on arrival and the queue is purged whenever the learner's version moves.
* **Capacity**: a bounded FIFO; when full, ``put`` either blocks (up to a timeout) or evicts the
  oldest item (the stalest), by config. Both outcomes are counted.
* **Per-task budgets**: at most ``task_budgets[task]`` items of a task are accepted per learner
  version (the window restarts whenever the learner's version advances), so a fast task cannot
  crowd out slow ones; workers ask :meth:`~DataManager.should_produce` before starting work.
* **Exactly once**: every item has a ``trajectory_id = (worker_id, sequence)``, assigned by its
  worker (sequence counts that worker's items from 0, so no coordination between processes is
  needed). An id is remembered for the manager's lifetime (about 100 bytes each) and a second put
  with it is rejected, so no item is returned twice. A restarted worker must take a new worker id or
  continue its sequence. :meth:`~DataManager.discard_worker` drops the queued items of a crashed
  worker (its partial trajectories).

Thread-safe: one :class:`threading.Condition` guards all state; producers and the consumer wait on
it for space and for data.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

ItemT = TypeVar("ItemT")
TrajectoryId = tuple[int, int]
"""``(worker_id, sequence)``: unique per item, assigned by the worker that produced it."""


@dataclass
class DataManagerConfig:
    """Bounds of the trajectory queue."""

    capacity: int = 1024
    """Items held at most."""
    on_full: Literal["block", "drop_oldest"] = "block"
    """When full, ``put`` waits for space (``block``, up to its timeout) or evicts the oldest item."""
    max_staleness: int | None = None
    """eta: items produced more than this many versions before the learner's are dropped (None: no bound)."""
    task_budgets: dict[str, int] = field(default_factory=dict)
    """task -> items accepted per learner version; tasks not listed are unlimited."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.capacity < 1:
            raise ValueError(f"data_manager.capacity must be >= 1, got {self.capacity}")
        if self.on_full not in ("block", "drop_oldest"):
            raise ValueError(f"data_manager.on_full must be 'block' or 'drop_oldest', got {self.on_full!r}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"data_manager.max_staleness must be >= 0 or null, got {self.max_staleness}")
        negative = {task: b for task, b in self.task_budgets.items() if b < 0}
        if negative:
            raise ValueError(f"data_manager.task_budgets must be >= 0, got {negative}")


@dataclass(frozen=True)
class TrajectoryEntry(Generic[ItemT]):
    """One queued item and its tags.

    Attributes:
        item: the trajectory or rollout chunk, as the worker produced it.
        policy_version: version of the policy that produced it (for a chunk whose steps span
            several versions, the oldest: staleness is bounded by its stalest step).
        trajectory_id: ``(worker_id, sequence)``.
        task: the task key used for budgets and per-task counts.
    """

    item: ItemT
    policy_version: int
    trajectory_id: TrajectoryId
    task: str

    @property
    def worker_id(self) -> int:
        """The worker that produced the item."""
        return self.trajectory_id[0]


@dataclass
class DataMetrics:
    """Counters of a :class:`DataManager` since it was created (or its state loaded).

    Attributes:
        queue_depth: items waiting now.
        accepted: items ever accepted by ``put``.
        returned: items handed to the learner.
        dropped_stale: items dropped for staleness (on arrival or while queued).
        dropped_capacity: items lost to a full queue (evicted, or ``put`` timed out).
        dropped_budget: items refused because their task's budget was used up.
        duplicates: puts refused because their trajectory id was seen before.
        discarded: queued items removed by ``discard`` / ``discard_worker``.
        staleness: staleness -> number of returned items with it.
        accepted_per_task: task -> items accepted.
        queued_per_task: task -> items waiting now.
    """

    queue_depth: int
    accepted: int
    returned: int
    dropped_stale: int
    dropped_capacity: int
    dropped_budget: int
    duplicates: int
    discarded: int
    staleness: dict[int, int]
    accepted_per_task: dict[str, int]
    queued_per_task: dict[str, int]

    def flat(self, prefix: str = "data/") -> dict[str, float]:
        """Scalars for a logger: counters, ``staleness_<k>`` and ``accepted/<task>``."""
        scalars = {name: float(getattr(self, name)) for name in ("queue_depth", *_COUNTERS)}
        scalars.update({f"staleness_{k}": float(n) for k, n in self.staleness.items()})
        scalars.update({f"accepted/{task}": float(n) for task, n in self.accepted_per_task.items()})
        return {prefix + name: value for name, value in scalars.items()}


_COUNTERS = (
    "accepted",
    "returned",
    "dropped_stale",
    "dropped_capacity",
    "dropped_budget",
    "duplicates",
    "discarded",
)


class DataManager(Generic[ItemT]):
    """A bounded, staleness-filtered FIFO of trajectories between rollout workers and the learner.

    See the module docstring for the rules. The learner's version is what it last passed to
    :meth:`get` or :meth:`set_learner_version` (0 at the start); it may only increase.

    Args:
        config: capacity, behaviour when full, eta and task budgets.
    """

    def __init__(self, config: DataManagerConfig | None = None) -> None:
        self.config = config or DataManagerConfig()
        self._cond = threading.Condition()
        self._queue: deque[TrajectoryEntry[ItemT]] = deque()
        self._seen: set[TrajectoryId] = set()
        self._learner_version = 0
        self._window: Counter[str] = Counter()
        self._counts: Counter[str] = Counter()
        self._staleness: Counter[int] = Counter()
        self._accepted_per_task: Counter[str] = Counter()

    # --- producers ----------------------------------------------------------------------------
    def put(
        self,
        item: ItemT,
        policy_version: int,
        trajectory_id: TrajectoryId,
        task: str = "default",
        timeout: float | None = None,
    ) -> bool:
        """Offer an item; True when it was queued.

        Refused (False, counted) when its id was seen before, it is already too stale, its task's
        budget for this learner version is used up, or, with ``on_full="block"``, no space freed up
        within ``timeout`` seconds (None: wait as long as it takes).

        Args:
            item: the trajectory or chunk.
            policy_version: version of the policy that produced it (the oldest one for a chunk).
            trajectory_id: ``(worker_id, sequence)``, unique per item.
            task: task key for budgets and counts.
            timeout: longest wait for space in ``block`` mode.
        """
        entry = TrajectoryEntry(item, int(policy_version), _as_id(trajectory_id), task)
        with self._cond:
            reason = self._refusal(entry)
            if reason is not None:
                self._counts[reason] += 1
                return False
            if not self._make_room(timeout):
                self._counts["dropped_capacity"] += 1
                return False
            # While this put waited for room, the learner may have moved on or another put may
            # have taken the id or the budget.
            reason = self._refusal(entry)
            if reason is not None:
                self._counts[reason] += 1
                return False
            self._accept(entry)
            return True

    def should_produce(self, task: str = "default") -> bool:
        """Whether an item of ``task`` would fit its budget for the learner's current version."""
        with self._cond:
            return self._within_budget(task)

    def discard(self, trajectory_ids: Iterable[TrajectoryId]) -> int:
        """Remove queued items by id (e.g. partial trajectories); returns how many were queued."""
        ids = {_as_id(i) for i in trajectory_ids}
        return self._remove(lambda entry: entry.trajectory_id in ids)

    def discard_worker(self, worker_id: int) -> int:
        """Remove every queued item of a (crashed) worker; returns how many there were."""
        return self._remove(lambda entry: entry.worker_id == worker_id)

    # --- the learner --------------------------------------------------------------------------
    def get(
        self, batch_size: int, learner_version: int, timeout: float | None = None
    ) -> list[TrajectoryEntry[ItemT]]:
        """The ``batch_size`` oldest items that are fresh enough for ``learner_version``.

        Moving to a newer version first drops the items it makes too stale and restarts the
        task-budget window. Returns exactly ``batch_size`` entries, oldest first; the staleness of
        each is recorded for :meth:`metrics`.

        Args:
            batch_size: items wanted, at most the capacity.
            learner_version: the version of the weights the learner is about to train.
            timeout: longest wait in seconds (None: as long as it takes).

        Raises:
            TimeoutError: fewer than ``batch_size`` fresh items arrived in time; none were taken.
        """
        if not 1 <= batch_size <= self.config.capacity:
            raise ValueError(f"batch_size must be in [1, capacity={self.config.capacity}], got {batch_size}")
        with self._cond:
            self._advance(learner_version)
            if not self._cond.wait_for(lambda: len(self._queue) >= batch_size, timeout):
                raise TimeoutError(
                    f"{len(self._queue)} of {batch_size} items after {timeout} s (learner version "
                    f"{learner_version})"
                )
            batch = [self._queue.popleft() for _ in range(batch_size)]
            for entry in batch:
                self._staleness[learner_version - entry.policy_version] += 1
            self._counts["returned"] += batch_size
            self._cond.notify_all()
            return batch

    def set_learner_version(self, version: int) -> None:
        """Tell the manager the learner moved to ``version`` (purges stale items, resets budgets)."""
        with self._cond:
            self._advance(version)

    @property
    def learner_version(self) -> int:
        """The newest version the learner announced."""
        return self._learner_version

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    # --- metrics and checkpoints --------------------------------------------------------------
    def metrics(self) -> DataMetrics:
        """A snapshot of the counters."""
        with self._cond:
            return DataMetrics(
                queue_depth=len(self._queue),
                **{name: self._counts[name] for name in _COUNTERS},
                staleness=dict(sorted(self._staleness.items())),
                accepted_per_task=dict(self._accepted_per_task),
                queued_per_task=dict(Counter(entry.task for entry in self._queue)),
            )

    def state_dict(self) -> dict[str, Any]:
        """The counters and the learner's version (not the queued items nor the seen ids)."""
        with self._cond:
            return {
                "learner_version": self._learner_version,
                "counts": dict(self._counts),
                "staleness": dict(self._staleness),
                "accepted_per_task": dict(self._accepted_per_task),
                "window": dict(self._window),
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; the queue itself starts empty."""
        with self._cond:
            self._learner_version = int(state["learner_version"])
            self._counts = Counter({k: int(v) for k, v in state["counts"].items()})
            self._staleness = Counter({int(k): int(v) for k, v in state["staleness"].items()})
            self._accepted_per_task = Counter({k: int(v) for k, v in state["accepted_per_task"].items()})
            self._window = Counter({k: int(v) for k, v in state["window"].items()})

    # --- internals (called with the lock held) ------------------------------------------------
    def _refusal(self, entry: TrajectoryEntry[ItemT]) -> str | None:
        """The counter to bump when ``entry`` must be refused, None when it may be queued."""
        if entry.trajectory_id in self._seen:
            return "duplicates"
        if self._is_stale(entry):
            return "dropped_stale"
        if not self._within_budget(entry.task):
            return "dropped_budget"
        return None

    def _is_stale(self, entry: TrajectoryEntry[ItemT]) -> bool:
        eta = self.config.max_staleness
        return eta is not None and self._learner_version - entry.policy_version > eta

    def _within_budget(self, task: str) -> bool:
        budget = self.config.task_budgets.get(task)
        return budget is None or self._window[task] < budget

    def _make_room(self, timeout: float | None) -> bool:
        """Ensure a free slot: evict the oldest item, or wait for the learner to take some."""
        if len(self._queue) < self.config.capacity:
            return True
        if self.config.on_full == "drop_oldest":
            self._queue.popleft()
            self._counts["dropped_capacity"] += 1
            return True
        return self._cond.wait_for(lambda: len(self._queue) < self.config.capacity, timeout)

    def _accept(self, entry: TrajectoryEntry[ItemT]) -> None:
        self._queue.append(entry)
        self._seen.add(entry.trajectory_id)
        self._window[entry.task] += 1
        self._accepted_per_task[entry.task] += 1
        self._counts["accepted"] += 1
        self._cond.notify_all()

    def _advance(self, version: int) -> None:
        """Move to the learner's ``version``: drop what became stale, restart the budget window."""
        if version < self._learner_version:
            raise ValueError(f"learner version went back from {self._learner_version} to {version}")
        if version == self._learner_version:
            return
        self._learner_version = version
        self._window.clear()
        self._counts["dropped_stale"] += self._filter(lambda entry: not self._is_stale(entry))

    def _filter(self, keep: Callable[[TrajectoryEntry[ItemT]], bool]) -> int:
        """Keep the queued entries ``keep`` accepts (order unchanged); returns how many went."""
        before = len(self._queue)
        self._queue = deque(entry for entry in self._queue if keep(entry))
        removed = before - len(self._queue)
        if removed:
            self._cond.notify_all()
        return removed

    def _remove(self, match: Callable[[TrajectoryEntry[ItemT]], bool]) -> int:
        with self._cond:
            removed = self._filter(lambda entry: not match(entry))
            self._counts["discarded"] += removed
            return removed


def _as_id(trajectory_id: TrajectoryId) -> TrajectoryId:
    """Normalise ids to ``(int, int)`` so that lists and numpy ints from other processes match."""
    worker_id, sequence = trajectory_id
    return int(worker_id), int(sequence)
