"""train_seeds: per-seed runs aggregated, D4RL normalised scores (final and best) included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omnigym.platform.trainers import seeds as seeds_module
from omnigym.platform.trainers.on_policy import TrainResult

# (final return, final score, best return, best score) per seed: a crafted D4RL-like run.
EVALS = {1: (100.0, 10.0, 300.0, 30.0), 2: (200.0, 20.0, 200.0, 20.0), 3: (600.0, 60.0, 900.0, 90.0)}


class FakeTrainer:
    """Stands in for a trainer: reports the crafted evaluations of its seed."""

    def __init__(self, config, run_dir: Path) -> None:
        self.seed, self.run_dir = config.seed, Path(run_dir)

    def train(self) -> TrainResult:
        self.run_dir.mkdir(parents=True)
        (self.run_dir / "metrics.jsonl").write_text("")  # what write_run_report reads
        final_return, final_score, best_return, best_score = EVALS[self.seed]
        return TrainResult(
            run_dir=self.run_dir,
            final_eval={"return_mean": final_return, "normalized_score_mean": final_score},
            best_eval={"return_mean": best_return, "normalized_score_mean": best_score, "step": 5.0},
            total_steps=10,
        )


def test_train_seeds_aggregates_final_and_best_normalized_scores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seeds_module, "build_trainer", FakeTrainer)
    summary = seeds_module.train_seeds("td3bc_reach", [1, 2, 3], root=tmp_path / "runs")
    assert summary["final_normalized_score"]["mean"] == pytest.approx(30.0)
    assert summary["best_normalized_score"]["mean"] == pytest.approx(140.0 / 3)
    assert summary["final_normalized_score"]["median"] == pytest.approx(20.0)
    assert summary["best_return"]["mean"] == pytest.approx(1400.0 / 3)
    assert summary["runs"]["3"]["best_normalized_score"] == 90.0
    on_disk = json.loads((tmp_path / "runs" / "aggregate.json").read_text())
    assert on_disk["best_normalized_score"] == summary["best_normalized_score"]


def test_train_seeds_without_normalized_scores_reports_returns_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoScores(FakeTrainer):
        def train(self) -> TrainResult:
            result = super().train()
            result.final_eval.pop("normalized_score_mean")
            return result

    monkeypatch.setattr(seeds_module, "build_trainer", NoScores)
    summary = seeds_module.train_seeds("td3bc_reach", [1, 2], root=tmp_path / "runs")
    assert "final_normalized_score" not in summary and "best_normalized_score" not in summary
    assert summary["final_return"]["mean"] == pytest.approx(150.0)
