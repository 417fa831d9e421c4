"""``runtime.async.workers: process``: learning, a killed worker process, failing children, clean ends."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
import torch

from omnigym.core.config import ConfigError
from omnigym.platform.runtime.async_runtime import AsyncRuntime
from omnigym.platform.runtime.process_workers import PROCESS_PREFIX, ProcessEnvWorker
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

PROCESS = {"async": {"workers": "process"}}
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the children cannot import this module


def worker_processes() -> list[str]:
    return [p.name for p in multiprocessing.active_children() if p.name.startswith(PROCESS_PREFIX)]


def test_process_workers_learn_cartpole_within_staleness(
    make_experiment, runtime_checks, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    config = make_experiment(tmp_path / "run", "async", total_steps=16384, runtime=PROCESS)
    trainer = OnPolicyTrainer(config, tmp_path / "run")
    lines = runtime_checks.run_iterations(trainer)

    runtime = trainer.runtime
    assert runtime is not None and all(isinstance(w, ProcessEnvWorker) for w in runtime.workers)
    assert all(w.process.pid != os.getpid() for w in runtime.workers)
    returns = [m["rollout/episode_return"] for m in lines if "rollout/episode_return" in m]
    assert np.mean(returns[:3]) < 40, returns[:3]  # the random policy's episodes (about 22)
    assert np.mean(returns[-5:]) > 60, returns[-5:]  # 3x random, as for thread workers
    staleness = [learner - version for _, version, learner in runtime.consumed]
    assert max(staleness) <= config.runtime.max_staleness and min(staleness) >= 0
    assert Counter(staleness)[1] > len(staleness) // 2, "acting and learning did not overlap"
    assert len(runtime.consumed) == trainer.num_iterations * config.runtime.num_workers
    runtime_checks.assert_exactly_once(runtime.consumed)
    assert lines[-1]["sync/full_syncs"] == config.runtime.num_workers  # one full sync each, deltas after
    assert lines[-1]["runtime/env_steps_total"] >= trainer.global_step
    assert worker_processes() == []


def test_a_killed_worker_process_is_replaced_and_its_chunk_discarded(
    make_experiment, runtime_checks, tmp_path: Path
) -> None:
    config = make_experiment(tmp_path / "run", "async", total_steps=128 * 2000, runtime=PROCESS)  # a cap
    trainer = OnPolicyTrainer(config, tmp_path / "run")
    runtime = trainer.runtime
    assert runtime is not None
    replaced_at = None
    try:
        while not runtime.workers or runtime.workers[0].next_sequence < 2:  # worker 0 has started
            trainer.train_iteration()
        killed = runtime.workers[0]
        assert isinstance(killed, ProcessEnvWorker)
        os.kill(killed.process.pid, signal.SIGKILL)
        while replaced_at is None or trainer.iteration < replaced_at + 5:
            lines = trainer.train_iteration()
            replacement = runtime.workers[0]
            fresh = [s for (w, s), _, _ in runtime.consumed if w == 0 and s > killed.next_sequence - 1]
            if replaced_at is None and replacement is not killed and fresh:
                replaced_at = trainer.iteration
            assert trainer.iteration < 200, "the replacement never delivered a chunk"
    finally:
        trainer.close()
    assert runtime.pool.restarts == 1 and lines["runtime/restarts"] == 1.0
    assert runtime.discarded_ids == [(0, killed.next_sequence - 1)]  # in flight, or the next one
    assert isinstance(killed.error, RuntimeError) and "died" in str(killed.error)
    runtime_checks.assert_exactly_once(runtime.consumed, runtime.discarded_ids)
    assert runtime.workers[0].process.pid != killed.process.pid
    assert worker_processes() == []


def failing_envs(env_config) -> None:
    raise RuntimeError("injected env construction failure")


def test_children_that_keep_failing_end_the_run_with_their_traceback(make_experiment, tmp_path: Path) -> None:
    config = make_experiment(tmp_path / "run", "async", runtime={**PROCESS, "max_restarts": 1})
    trainer = OnPolicyTrainer(config, tmp_path / "run")
    trainer.runtime = AsyncRuntime(config, trainer.policy, make_envs=failing_envs)
    with pytest.raises(RuntimeError, match="max_restarts") as info:
        trainer.train()
    cause = str(info.value.__cause__)
    assert "failed while starting" in cause and "injected env construction failure" in cause
    assert worker_processes() == []


def test_process_workers_refuse_what_cannot_work(make_experiment, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"applies to runtime\.type async, not ray"):
        make_experiment(tmp_path / "a", "ray", runtime=PROCESS)
    with pytest.raises(ConfigError, match=r"runtime\.async\.workers' must be one of 'thread', 'process'"):
        make_experiment(tmp_path / "b", "async", runtime={"async": {"workers": "fork"}})
    with pytest.raises(ConfigError, match=r"interrupt_every_tokens needs thread workers"):
        make_experiment(
            tmp_path / "d", "async", runtime={"async": {"workers": "process", "interrupt_every_tokens": 4}}
        )
    mlp = make_experiment(tmp_path / "e", "async", runtime={"async": {"interrupt_every_tokens": 4}})
    with pytest.raises(ValueError, match=r"does not generate replies token by token; use a vlm policy"):
        OnPolicyTrainer(mlp, tmp_path / "e")
    config = make_experiment(tmp_path / "c", "async", runtime=PROCESS, env={"vectorization": "async"})
    with pytest.raises(ValueError, match=r"use env\.vectorization sync"):
        OnPolicyTrainer(config, tmp_path / "c")
