"""Smoke tests over ``configs/``: every experiment loads and trains one tiny iteration end to end,
and every option file of the config groups is usable.

Experiments of the transition trainers (``offline``, ``off_policy``, ``model_based``) train 16
steps instead; an offline one learns from a two-episode random dataset made under its dataset id in
a temporary Minari folder. Each training test is generated only for the experiments of its trainer
(read at collection); one that starts from another run (``init_from``) is skipped, with the reason.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from omnigym.core.config import build_dataclass, list_options, load_yaml
from omnigym.core.pretrained import CONFIG_FILE, WEIGHTS_FILE
from omnigym.core.registry import ALGORITHMS, POLICIES
from omnigym.platform.checkpoint import latest_checkpoint, load_checkpoint
from omnigym.platform.experiment import ExperimentConfig, config_dir, list_experiments, load_experiment
from omnigym.platform.runtime import RuntimeConfig
from omnigym.platform.trainers.on_policy import OnPolicyTrainer, load_run_config
from omnigym.platform.vec_env import EnvConfig

CONFIG_GROUPS = ("env", "policy", "algo", "runtime")
EXPERIMENTS = list_experiments()


def load_or_none(name: str) -> ExperimentConfig | None:
    """The experiment's config, or None where it does not load (``test_experiment_loads`` says why)."""
    try:
        return load_experiment(name)
    except Exception:
        return None


LOADED = {name: load_or_none(name) for name in EXPERIMENTS}
"""Each experiment's config, read at collection to generate only the training test of its trainer
(both, to fail, for one that does not load)."""
ON_POLICY_EXPERIMENTS = [name for name, c in LOADED.items() if c is None or c.trainer == "on_policy"]
TRANSITION_EXPERIMENTS = [
    pytest.param(name, marks=pytest.mark.skip(reason="starts from another run (init_from)"))
    if c is not None and c.init_from
    else name
    for name, c in LOADED.items()
    if c is None or c.trainer != "on_policy"
]
GROUP_FILES = [f"{group}/{name}" for group in CONFIG_GROUPS for name in list_options(config_dir(), group)]

# One iteration of 8 steps x 2 envs, a 50-step single-episode evaluation, nothing optional.
TINY_OVERRIDES = [
    "total_steps=16",
    "env.num_envs=2",
    "env.max_episode_steps=50",
    "eval.episodes=1",
    "eval.num_envs=1",
    "eval.every_steps=0",
    "eval.video=false",
    "checkpoint.every_steps=0",
    "log.progress=false",
    "log.tensorboard=false",
]
TINY_ALGO = {"num_steps": 8, "num_epochs": 1, "num_minibatches": 2, "group_size": 2, "max_episode_steps": 8}
"""Group algorithms (the GRPO family) collect one episode of at most 8 steps per env instead."""


def experiment_defaults(name: str) -> dict[str, str]:
    """The group options an experiment's ``defaults`` picks (read without composing)."""
    spec = yaml.safe_load((config_dir() / "experiment" / f"{name}.yaml").read_text()) or {}
    return spec.get("defaults") or {}


def group_config_class(group: str, data: dict[str, Any]) -> type:
    """The dataclass an option file of ``group`` must build into."""
    if group == "env":
        return EnvConfig
    if group == "runtime":
        return RuntimeConfig
    registry = {"policy": POLICIES, "algo": ALGORITHMS}[group]
    return registry.get(data["type"]).config_class


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_loads(name: str) -> None:
    config = load_experiment(name)
    assert isinstance(config, ExperimentConfig)
    assert config.policy.type in POLICIES
    assert config.algo.type in ALGORITHMS


@pytest.mark.parametrize("name", ON_POLICY_EXPERIMENTS)
def test_experiment_trains_one_tiny_iteration(name: str, tmp_path: Path) -> None:
    algo_fields = vars(load_experiment(name).algo)
    algo_overrides = [f"algo.{key}={value}" for key, value in TINY_ALGO.items() if key in algo_fields]
    run_dir = tmp_path / "run"
    config = load_experiment(name, [*TINY_OVERRIDES, *algo_overrides, f"run_dir={run_dir}"])

    trainer = OnPolicyTrainer(config, run_dir)
    result = trainer.train()

    if trainer.groups:  # whole episodes: at least the budget, less than one more collection
        assert 16 <= result.total_steps < 32
    else:
        assert result.total_steps == 16
    for needed in (
        "config.yaml",
        "metrics.jsonl",
        "results.json",
        f"policy/{CONFIG_FILE}",
        f"policy/{WEIGHTS_FILE}",
    ):
        assert (run_dir / needed).is_file(), f"{needed} missing from the run directory"
    assert load_run_config(run_dir) == config, "config.yaml does not reload to the config that ran"
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == result.total_steps, f"the last logged step is not the total: {lines}"
    if not trainer.groups:
        assert len(lines) == 1, f"expected one logged iteration, got {lines}"
    assert any(key.startswith("train/") for key in lines[0])
    results = json.loads((run_dir / "results.json").read_text())
    assert results["final_eval"]["episodes"] == 1
    assert math.isfinite(results["final_eval"]["return_mean"])
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None, "no checkpoint written"
    assert load_checkpoint(checkpoint).trainer_state["iteration"] == len(lines)


TINY_TRANSITIONS = {"batch_size": 8, "learning_starts": 8, "warmup_steps": 8}
TINY_MODEL_BASED = [
    "model_based.collect_steps=60",
    "model_based.round_steps=20",
    "model_based.max_epochs=1",
    "model_based.refit_epochs=1",
    "model_based.model.num_members=2",
    "model_based.model.num_elites=1",
]
"""World-model experiments: two short real episodes, one epoch of a two-member ensemble."""


@pytest.mark.parametrize("name", TRANSITION_EXPERIMENTS)
def test_transition_experiment_trains_briefly(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = load_experiment(name)
    algo_fields = vars(experiment.algo)
    algo_overrides = [f"algo.{k}={v}" for k, v in TINY_TRANSITIONS.items() if k in algo_fields]
    run_dir = tmp_path / "run"
    overrides = [o for o in TINY_OVERRIDES if not o.startswith("env.num_envs")]
    overrides += TINY_MODEL_BASED if experiment.trainer == "model_based" else []
    config = load_experiment(name, [*overrides, *algo_overrides, f"run_dir={run_dir}", "log.every_steps=8"])
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    if config.dataset:
        from omnigym.core.registry import POLICIES as REGISTRY
        from omnigym.platform.datasets import collect_dataset
        from omnigym.platform.vec_env import make_env

        env = make_env(config.env.id, max_episode_steps=20, **config.env.kwargs)
        random_cls = REGISTRY.get("random")
        policy = random_cls(random_cls.config_class(), env.observation_space, env.action_space)
        env.close()
        collect_dataset(
            policy,
            config.env.id,
            config.dataset,
            episodes=2,
            env_kwargs={**config.env.kwargs, "max_episode_steps": 20},
        )
    from omnigym.platform.trainers import build_trainer

    result = build_trainer(config, run_dir).train()
    assert result.total_steps == 16
    for needed in ("config.yaml", "metrics.jsonl", "results.json", f"policy/{WEIGHTS_FILE}"):
        assert (run_dir / needed).is_file(), f"{needed} missing from the run directory"
    assert load_run_config(run_dir) == config
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["step"] == 16 and any(key.startswith("train/") for key in lines[-1])
    assert math.isfinite(json.loads((run_dir / "results.json").read_text())["final_eval"]["return_mean"])
    assert latest_checkpoint(run_dir) is not None


@pytest.mark.parametrize("option", GROUP_FILES)
def test_group_file_is_usable(option: str) -> None:
    """Used by an experiment (which must then load), or buildable on its own."""
    group, name = option.split("/")
    path = config_dir() / group / f"{name}.yaml"
    used_by = [exp for exp in EXPERIMENTS if experiment_defaults(exp).get(group) == name]
    raw = yaml.safe_load(path.read_text())
    identity = "id" if group == "env" else "type"
    for experiment in used_by:
        section = getattr(load_experiment(experiment), group)
        assert getattr(section, identity) == raw[identity], f"{experiment} does not compose {option}"
    if "${" in path.read_text():  # interpolations may need the other sections of an experiment
        assert used_by, f"{option} uses interpolations but no experiment uses it, so nothing checks it"
        return
    data = load_yaml(path)
    build_dataclass(group_config_class(group, data), data, path=group)
