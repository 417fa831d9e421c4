"""Model-based pipelines end to end at tiny size: collect -> fit -> train in the model -> real evaluation.

Pendulum-v1, a 2-member ensemble of 32-32 networks fitted for 1-2 epochs on two random episodes
(one held out for the k-step errors), a few dozen SAC updates in the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from omnigym.core.registry import POLICIES
from omnigym.platform.cli import main
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers import build_trainer
from omnigym.platform.trainers.model_based import ModelBasedTrainer, default_dataset_id
from omnigym.platform.vec_env import make_env
from omnigym.world_models.env import WorldModelVectorEnv
from omnigym.world_models.fidelity import FidelityReport, spearman

TINY_MODEL = ["num_members=2", "num_elites=1", "hidden_sizes=[32,32]", "weight_decay=[1e-5]"]
TINY_RUN = [
    "total_steps=150", "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden_sizes=[32,32]",
    "policy.hidden_sizes=[32,32]", "eval.episodes=2", "eval.num_envs=2", "eval.every_steps=0",
    "log.progress=false", "log.tensorboard=false", "model_based.collect_steps=400",
    "model_based.max_epochs=2", *(f"model_based.model.{setting}" for setting in TINY_MODEL),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _minari_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    monkeypatch.chdir(tmp_path)


def test_dream_experiment_collects_fits_trains_in_the_model_and_evaluates_for_real(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = load_experiment("sac_pendulum_dream", [*TINY_RUN, f"run_dir={run_dir}"])
    trainer = build_trainer(config, run_dir)
    assert isinstance(trainer, ModelBasedTrainer)
    result = trainer.train()
    # The policy learned in the world model ...
    assert isinstance(trainer.trainer.envs, WorldModelVectorEnv)
    assert trainer.trainer.steps == 150
    # ... and every evaluation ran the real env: the same seeds on real Pendulum give the same returns.
    real = evaluate_policy(trainer.trainer.policy, "Pendulum-v1", episodes=2, seed=config.eval.seed)
    assert result.final_eval["return_mean"] == pytest.approx(np.mean(real.returns))
    model_dir = run_dir / "world_model"
    for name in ("config.json", "model.safetensors", "fidelity.json", "fidelity.md"):
        assert (model_dir / name).is_file(), name
    report = FidelityReport.load(model_dir)
    assert report is not None and report.holdout_episodes == 1
    assert [r.k for r in report.k_step] == [1, 5, 10, 20]
    assert [r.windows for r in report.k_step] == [200, 196, 191, 181]  # one 200-step held-out episode
    assert report.fit["train/epochs"] == 2
    assert [p.name for p in report.policies] == ["trained"]
    assert report.policies[0].real_return == pytest.approx(result.final_eval["return_mean"])
    assert (tmp_path / "datasets" / default_dataset_id("run")).is_dir()  # the real data, as Minari
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert "eval/return_mean" in metrics[-1]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["world_model"]["fidelity"]["k_step"][0]["k"] == 1
    assert "trainer: model_based" in (run_dir / "config.yaml").read_text()
    assert (run_dir / "policy" / "config.json").is_file()


def test_dyna_rounds_add_real_data_of_the_policy_and_refit(tmp_path: Path) -> None:
    run_dir = tmp_path / "dyna"
    overrides = [
        *TINY_RUN,
        "model_based.rounds=2",
        "model_based.round_steps=200",
        "model_based.refit_epochs=1",
    ]
    config = load_experiment("sac_pendulum_dyna", [*overrides, "total_steps=300", f"run_dir={run_dir}"])
    trainer = build_trainer(config, run_dir)
    trainer.train()
    assert trainer.trainer.steps == 300  # 150 model steps per round
    datasets = tmp_path / "datasets" / "omnigym-wm"
    assert sorted(p.name for p in datasets.iterdir() if p.is_dir()) == ["dyna-round1-v0", "dyna-v0"]
    report = FidelityReport.load(run_dir / "world_model")
    assert report is not None and report.fit["train/epochs"] == 1  # the refit of round 2 wrote it
    evaluations = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum("eval/return_mean" in m for m in evaluations) == 2  # one real evaluation per round


def test_dyna_needs_a_transition_learner() -> None:
    config = load_experiment("ppo_pendulum", ["trainer=model_based", "model_based.rounds=2"])
    with pytest.raises(ValueError, match="transition-learning algorithm"):
        build_trainer(config, Path("unused"))


def test_cli_fit_then_eval_ranks_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model"
    args = ["world-model", "fit", "Pendulum-v1", "--collect", "400", "--out", str(out), "--epochs", "1"]
    assert main([*args, "--reward", "known", "--set", *TINY_MODEL]) == 0
    printed = capsys.readouterr()
    assert "world model epoch 1:" in printed.err
    assert "| 20 |" in printed.out and f"saved to {out}" in printed.out
    report = FidelityReport.load(out)
    assert report is not None and report.env_id == "Pendulum-v1" and report.k_step[0].reward_mse < 1e-8
    env = make_env("Pendulum-v1")
    actor = POLICIES.get("mlp")(POLICIES.get("mlp").config_class(), env.observation_space, env.action_space)
    actor.save_pretrained(tmp_path / "actor")
    eval_args = ["world-model", "eval", str(out), "--policies", "random", str(tmp_path / "actor")]
    assert main([*eval_args, "--episodes", "2", "--reward", "known", "--termination", "known"]) == 0
    report = FidelityReport.load(out)
    assert report is not None and [p.name for p in report.policies] == ["random", str(tmp_path / "actor")]
    assert abs(report.rank_correlation or 0.0) == pytest.approx(1.0)  # two policies: ranks agree or not
    model_returns = [p.model_return for p in report.policies]
    assert report.rank_correlation == pytest.approx(
        spearman(model_returns, [p.real_return for p in report.policies])
    )
    assert all(r < -5 for r in model_returns)  # 200-step model episodes (known termination: none)
    assert report.k_step  # the fit's sections are kept
    assert "Spearman" in (out / "fidelity.md").read_text()
    # two policies: the correlation is +-1 by construction, and every output says so
    caveat = "not informative: with only 2 policies the rank correlation can only be +1, -1"
    assert caveat in capsys.readouterr().err
    assert caveat in (out / "fidelity.md").read_text()
    saved = json.loads((out / "fidelity.json").read_text())
    assert saved["rank_p_value"] == 1.0 and saved["rank_caveat"].startswith(
        f"{caveat} (exact two-sided p = 1.00)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "NoSuchEnv-v0", "--collect", "10", "--out", "m"], "unknown env id 'NoSuchEnv-v0'"),
        (["fit", "Pendulum-v1", "--dataset", "omnigym-wm/missing-v0", "--out", "m"], "no Minari dataset"),
        (["eval", "no_model_here", "--policies", "random", "random"], "is not a saved world model"),
    ],
)
def test_bad_input_fails_clearly(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world-model", *args]) == 2
    assert message in capsys.readouterr().err


def test_fit_needs_exactly_one_data_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world-model", "fit", "Pendulum-v1", "--out", "m"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("omnigym world-model fit: error: give exactly one of --dataset")
