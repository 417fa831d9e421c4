import threading

import pytest

from omnigym.platform.runtime.data_manager import DataManager, DataManagerConfig


def fill(manager: DataManager, versions: list[int], worker_id: int = 0, task: str = "default") -> list[bool]:
    return [
        manager.put(f"w{worker_id}s{seq}", version, (worker_id, seq), task=task)
        for seq, version in enumerate(versions)
    ]


def test_staleness_eta_is_returned_and_eta_plus_one_dropped() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(max_staleness=2))
    assert fill(manager, [0, 1, 2, 3]) == [True] * 4
    batch = manager.get(batch_size=3, learner_version=3, timeout=0)
    assert [e.policy_version for e in batch] == [1, 2, 3]  # staleness 2, 1, 0; version 0 (3 > eta) dropped
    assert [e.item for e in batch] == ["w0s1", "w0s2", "w0s3"]
    metrics = manager.metrics()
    assert metrics.dropped_stale == 1 and metrics.returned == 3 and metrics.queue_depth == 0
    assert metrics.staleness == {0: 1, 1: 1, 2: 1}


def test_items_already_too_stale_are_refused_on_arrival() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(max_staleness=2))
    manager.set_learner_version(5)
    assert manager.put("old", policy_version=2, trajectory_id=(0, 0)) is False
    assert manager.put("ok", policy_version=3, trajectory_id=(0, 1)) is True
    metrics = manager.metrics()
    assert (metrics.dropped_stale, metrics.accepted, metrics.queue_depth) == (1, 1, 1)


def test_without_eta_nothing_is_stale() -> None:
    manager: DataManager[str] = DataManager()
    fill(manager, [0, 0])
    assert len(manager.get(2, learner_version=100, timeout=0)) == 2
    assert manager.metrics().staleness == {100: 2}


def test_duplicate_ids_are_rejected_even_after_the_first_was_returned() -> None:
    manager: DataManager[str] = DataManager()
    assert manager.put("a", 0, (3, 7)) is True
    assert manager.put("a again", 0, (3, 7)) is False
    assert [e.item for e in manager.get(1, 0, timeout=0)] == ["a"]
    assert manager.put("a late", 0, [3, 7]) is False  # type: ignore[arg-type]  # ids are normalised
    metrics = manager.metrics()
    assert (metrics.duplicates, metrics.accepted, metrics.queue_depth) == (2, 1, 0)


def test_drop_oldest_evicts_and_counts() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(capacity=3, on_full="drop_oldest"))
    assert fill(manager, [0] * 5) == [True] * 5
    batch = manager.get(3, 0, timeout=0)
    assert [e.trajectory_id for e in batch] == [(0, 2), (0, 3), (0, 4)]
    assert manager.metrics().dropped_capacity == 2 and manager.metrics().accepted == 5


def test_block_times_out_when_full_and_nothing_is_taken() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(capacity=2, on_full="block"))
    fill(manager, [0, 0])
    assert manager.put("third", 0, (0, 2), timeout=0.01) is False
    assert manager.metrics().dropped_capacity == 1 and len(manager) == 2
    assert manager.put("third", 0, (0, 2), timeout=0.01) is False  # the id was not consumed by the refusal


def test_blocked_put_proceeds_once_the_learner_takes_items() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(capacity=2, on_full="block"))
    fill(manager, [0, 0])
    result: list[bool] = []
    producer = threading.Thread(
        target=lambda: result.append(manager.put("third", 0, (0, 2), timeout=10)), daemon=True
    )
    producer.start()
    producer.join(timeout=0.05)
    assert producer.is_alive()  # waiting for room
    manager.get(1, 0, timeout=0)
    producer.join(timeout=10)
    assert result == [True]
    assert [e.item for e in manager.get(2, 0, timeout=0)] == ["w0s1", "third"]


def test_two_blocked_puts_of_one_id_accept_it_once() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(capacity=1, on_full="block"))
    fill(manager, [0], worker_id=9)
    results: list[bool] = []
    producers = [
        threading.Thread(
            target=lambda: results.append(manager.put("same", 0, (1, 0), timeout=10)), daemon=True
        )
        for _ in range(2)
    ]
    for producer in producers:
        producer.start()
        producer.join(timeout=0.05)
        assert producer.is_alive()  # both wait for room with the id not yet taken
    manager.get(1, 0, timeout=0)  # room for one: it takes the id
    assert manager.get(1, 0, timeout=10)[0].trajectory_id == (1, 0)  # room again: the other re-checks
    for producer in producers:
        producer.join(timeout=10)
    assert sorted(results) == [False, True]
    assert manager.metrics().duplicates == 1 and len(manager) == 0


def test_get_times_out_without_taking_anything() -> None:
    manager: DataManager[str] = DataManager()
    fill(manager, [0, 0])
    with pytest.raises(TimeoutError, match="2 of 3 items"):
        manager.get(3, 0, timeout=0.01)
    assert len(manager) == 2 and manager.metrics().returned == 0
    with pytest.raises(ValueError, match="batch_size"):
        manager.get(2000, 0, timeout=0)


def test_learner_version_cannot_go_back() -> None:
    manager: DataManager[str] = DataManager()
    manager.set_learner_version(3)
    with pytest.raises(ValueError, match="went back from 3 to 2"):
        manager.get(1, learner_version=2, timeout=0)


def test_task_budgets_limit_each_task_per_learner_version() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(task_budgets={"easy": 2, "off": 0}))
    assert fill(manager, [0, 0, 0], worker_id=0, task="easy") == [True, True, False]
    assert fill(manager, [0, 0, 0], worker_id=1, task="hard") == [True, True, True]  # not listed: unlimited
    assert manager.put("x", 0, (2, 0), task="off") is False
    assert not manager.should_produce("easy") and manager.should_produce("hard")
    assert not manager.should_produce("off")
    manager.get(1, learner_version=1, timeout=0)  # a new version restarts the window
    assert manager.should_produce("easy")
    assert manager.put("next", 1, (0, 3), task="easy") is True
    metrics = manager.metrics()
    assert metrics.dropped_budget == 2
    assert metrics.accepted_per_task == {"easy": 3, "hard": 3}
    assert metrics.queued_per_task == {"easy": 2, "hard": 3}  # one "easy" was taken by get


def test_discard_worker_and_ids() -> None:
    manager: DataManager[str] = DataManager()
    fill(manager, [0, 0, 0], worker_id=0)
    fill(manager, [0, 0], worker_id=1)
    assert manager.discard_worker(1) == 2
    assert manager.discard_worker(1) == 0
    assert manager.discard([(0, 1), (9, 9)]) == 1
    assert manager.put("zombie", 0, (1, 0)) is False  # a crashed worker's late put is a duplicate
    assert [e.trajectory_id for e in manager.get(2, 0, timeout=0)] == [(0, 0), (0, 2)]
    metrics = manager.metrics()
    assert (metrics.discarded, metrics.duplicates, metrics.queue_depth) == (3, 1, 0)


def test_discard_frees_room_for_a_blocked_producer() -> None:
    manager: DataManager[str] = DataManager(DataManagerConfig(capacity=1))
    fill(manager, [0], worker_id=5)
    result: list[bool] = []
    producer = threading.Thread(
        target=lambda: result.append(manager.put("x", 0, (0, 0), timeout=10)), daemon=True
    )
    producer.start()
    producer.join(timeout=0.05)
    assert producer.is_alive()
    manager.discard_worker(5)
    producer.join(timeout=10)
    assert result == [True]


def test_metrics_flat_and_state_dict_round_trip() -> None:
    config = DataManagerConfig(max_staleness=1, task_budgets={"a": 10})
    manager: DataManager[str] = DataManager(config)
    fill(manager, [0, 0, 1, 2], task="a")
    manager.get(2, learner_version=2, timeout=0)
    flat = manager.metrics().flat()
    assert flat["data/accepted"] == 4.0 and flat["data/dropped_stale"] == 2.0
    assert flat["data/staleness_0"] == 1.0 and flat["data/staleness_1"] == 1.0
    assert flat["data/accepted/a"] == 4.0 and flat["data/queue_depth"] == 0.0
    restored: DataManager[str] = DataManager(config)
    restored.load_state_dict(manager.state_dict())
    assert restored.learner_version == 2
    saved, loaded = manager.metrics(), restored.metrics()
    assert loaded == saved


def test_two_producers_one_consumer_every_id_exactly_once() -> None:
    manager: DataManager[int] = DataManager(DataManagerConfig(capacity=16, on_full="block"))
    per_worker, batch_size = 200, 10

    def produce(worker_id: int) -> None:
        for seq in range(per_worker):
            assert manager.put(seq, manager.learner_version, (worker_id, seq), timeout=5)

    producers = [threading.Thread(target=produce, args=(w,), daemon=True) for w in (0, 1)]
    for producer in producers:
        producer.start()
    received = []
    for version in range(2 * per_worker // batch_size):
        received += [e.trajectory_id for e in manager.get(batch_size, version, timeout=30)]
    for producer in producers:
        producer.join(timeout=30)
    assert sorted(received) == [(w, s) for w in (0, 1) for s in range(per_worker)]
    metrics = manager.metrics()
    assert metrics.accepted == metrics.returned == 400 and metrics.dropped_capacity == 0
    assert sum(metrics.staleness.values()) == 400 and min(metrics.staleness) >= 0


def test_concurrent_staleness_filter_never_returns_stale_items() -> None:
    eta = 1
    manager: DataManager[int] = DataManager(DataManagerConfig(capacity=8, max_staleness=eta))
    per_worker = 150

    def produce(worker_id: int) -> None:
        for seq in range(per_worker):  # every third item acts with weights two versions old
            version = max(0, manager.learner_version - (2 if seq % 3 == 0 else 0))
            manager.put(seq, version, (worker_id, seq), timeout=5)

    producers = [threading.Thread(target=produce, args=(w,), daemon=True) for w in (0, 1)]
    for producer in producers:
        producer.start()
    received, version = [], 0
    while any(p.is_alive() for p in producers) or len(manager) >= 5:
        try:
            batch = manager.get(5, version, timeout=0.2)
        except TimeoutError:
            continue
        assert all(version - e.policy_version <= eta for e in batch)
        received += [e.trajectory_id for e in batch]
        version += 1
    while len(manager):  # the rest one at a time: items gone stale by now are dropped on the way
        try:
            received += [e.trajectory_id for e in manager.get(1, version, timeout=0)]
        except TimeoutError:
            break
    metrics = manager.metrics()
    assert len(received) == len(set(received)) == metrics.returned
    assert metrics.dropped_stale > 0
    assert metrics.returned + metrics.dropped_stale == 2 * per_worker
    assert max(metrics.staleness) <= eta


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="capacity"):
        DataManagerConfig(capacity=0)
    with pytest.raises(ValueError, match="on_full"):
        DataManagerConfig(on_full="spill")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_staleness"):
        DataManagerConfig(max_staleness=-1)
    with pytest.raises(ValueError, match="task_budgets"):
        DataManagerConfig(task_budgets={"a": -1})
