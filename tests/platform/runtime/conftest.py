"""The small decoupled-PPO CartPole experiment the async and ray runtime tests share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from omnigym.platform.experiment import ExperimentConfig, build_experiment


def runtime_experiment(run_dir: Path, kind: str, /, **overrides) -> ExperimentConfig:
    """Runtime ``kind`` with 4 CartPole envs over 2 workers, eta 1; ``overrides`` merge into the sections."""
    data = {
        "name": f"{kind}_test",
        "seed": 3,
        "total_steps": 4096,
        "run_dir": str(run_dir),
        "env": {"id": "CartPole-v1", "num_envs": 4},
        "algo": {
            "type": "decoupled_ppo",
            "num_steps": 32,
            "num_epochs": 10,
            "num_minibatches": 1,
            "learning_rate": 1e-3,
            "gamma": 0.98,
            "gae_lambda": 0.8,
            "ent_coef": 0.0,
        },
        "runtime": {"type": kind, "num_workers": 2, "max_staleness": 1, "poll_interval_s": 0.05},
        "eval": {"every_steps": 0, "episodes": 2},
        "log": {"progress": False, "tensorboard": False},
    }
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    return build_experiment(data)


@pytest.fixture
def make_experiment() -> Callable[..., ExperimentConfig]:
    """:func:`runtime_experiment`: ``make_experiment(tmp_path / "run", "async", total_steps=...)``."""
    return runtime_experiment


def run_iterations(trainer, after_iteration=None) -> list[dict[str, float]]:
    """Train to the end (``after_iteration(trainer)`` after each iteration), closing the trainer."""
    lines = []
    try:
        while trainer.iteration < trainer.num_iterations:
            lines.append(trainer.train_iteration())
            if after_iteration is not None:
                after_iteration(trainer)
    finally:
        trainer.close()
    return lines


def assert_exactly_once(consumed, discarded=()) -> None:
    """No chunk trained on twice, and no discarded in-flight chunk trained on."""
    ids = [chunk_id for chunk_id, _, _ in consumed]
    assert len(ids) == len(set(ids)), f"a chunk was consumed twice: {Counter(ids).most_common(3)}"
    assert not set(ids) & set(discarded), "a discarded in-flight chunk reached the learner"


@pytest.fixture
def runtime_checks() -> SimpleNamespace:
    """:func:`run_iterations` and :func:`assert_exactly_once` (test modules cannot import conftest)."""
    return SimpleNamespace(run_iterations=run_iterations, assert_exactly_once=assert_exactly_once)
