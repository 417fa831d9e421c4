"""PPO learns: small fixed-seed runs that must reach the issue's targets (Pendulum is slow-marked)."""

from pathlib import Path

import pytest

from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

QUIET = ["log.progress=false", "log.tensorboard=false"]


def train(experiment: str, tmp_path: Path, *overrides: str):
    config = load_experiment(experiment, [*QUIET, f"run_dir={tmp_path}", *overrides])
    return OnPolicyTrainer(config, tmp_path).train()


def test_ppo_solves_cartpole(tmp_path):
    result = train("ppo_cartpole", tmp_path, "total_steps=50000", "eval.every_steps=25000")
    assert result.final_eval["episodes"] == 20
    assert result.final_eval["return_mean"] >= 475, result.final_eval


@pytest.mark.slow  # ~40 s on 2 cores: run with scripts/test.sh -m slow
def test_ppo_learns_pendulum(tmp_path):
    result = train("ppo_pendulum", tmp_path, "eval.every_steps=0")
    assert result.final_eval["episodes"] == 20
    assert result.final_eval["return_mean"] >= -250, result.final_eval
