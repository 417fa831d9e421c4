"""The small decoupled-PPO CartPole experiment the async and ray runtime tests share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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
