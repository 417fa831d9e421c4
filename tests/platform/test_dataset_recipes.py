"""D4RL-style dataset recipes: names, ids, and a tiny end-to-end run of every kind on Hopper."""

from __future__ import annotations

import json
from pathlib import Path

import minari
import pytest

from omnigym.platform.dataset_recipes import (
    RecipeConfig,
    dataset_id,
    make_dataset,
    parse_name,
    read_card,
)
from omnigym.platform.scores import normalized_score, reference_task


def test_names_and_ids() -> None:
    assert parse_name("hopper-medium-replay") == ("hopper", "medium-replay")
    assert parse_name("halfcheetah-medium-expert") == ("halfcheetah", "medium-expert")
    assert dataset_id("walker2d", "expert") == "omnigym/walker2d-expert-v0"
    assert dataset_id("hopper", "medium", quick=True) == "omnigym/hopper-medium-quick-v0"
    for bad in ("ant-medium", "hopper-great", "hopper"):
        with pytest.raises(ValueError, match="unknown dataset recipe"):
            parse_name(bad)


def test_d4rl_normalised_scores() -> None:
    """The sanity values of the D4RL-style recipes (docs/algorithms/offline.md)."""
    assert normalized_score("hopper", 3234.3) == pytest.approx(100.0)
    assert normalized_score("hopper", -20.272305) == pytest.approx(0.0)
    assert normalized_score("hopper", 1600) == pytest.approx(49.7845, abs=1e-4)
    assert normalized_score("halfcheetah", 5000) == pytest.approx(42.5300, abs=1e-4)
    assert reference_task("HalfCheetah-v5") == "halfcheetah" and reference_task("CartPole-v1") is None
    with pytest.raises(KeyError, match="no D4RL reference"):
        normalized_score("cartpole", 1.0)


def test_every_kind_end_to_end_on_a_tiny_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path / "cache"))
    config = RecipeConfig(steps=150, medium_budget=200, expert_budget=300, eval_every=100)
    cards = {
        kind: make_dataset("hopper", kind, quick=True, config=config, train_expert=True)
        for kind in ("random", "medium", "medium-replay", "expert", "medium-expert")
    }
    for kind, card in cards.items():
        assert card == read_card(dataset_id("hopper", kind, quick=True))
        assert card["env_id"] == "Hopper-v5" and card["kind"] == kind
    assert cards["random"]["steps"] >= 150 and cards["medium"]["steps"] >= 150
    # medium-replay: exactly the SAC run's transitions up to the medium policy (its budget here)
    assert cards["medium-replay"]["steps"] == 200
    assert cards["medium-replay"]["source"]["sac_steps"] == 200
    assert cards["expert"]["source"]["sac_steps"] <= 300
    combined = minari.load_dataset(dataset_id("hopper", "medium-expert", quick=True))
    assert combined.total_steps == cards["medium"]["steps"] + cards["expert"]["steps"]
    assert (tmp_path / "cache" / "d4rl" / "hopper-quick" / "policies.json").is_file()


def test_a_killed_behaviour_run_continues_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C (or a closed session) in the SAC run: the next ``make`` resumes it, not a fresh run."""
    import os
    import signal

    from omnigym.platform.interrupts import TrainingInterrupted
    from omnigym.platform.trainers.off_policy import OffPolicyTrainer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path / "cache"))
    config = RecipeConfig(steps=150, medium_budget=300, expert_budget=300, eval_every=100)
    evaluate = OffPolicyTrainer.evaluate

    def interrupted_at_200(self: OffPolicyTrainer, video: bool = False) -> dict[str, float]:
        if self.steps == 200:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: the loop checkpoints and stops
        return evaluate(self, video)

    monkeypatch.setattr(OffPolicyTrainer, "evaluate", interrupted_at_200)
    with pytest.raises(TrainingInterrupted):
        make_dataset("hopper", "medium-replay", quick=True, config=config)
    run = tmp_path / "cache" / "d4rl" / "hopper-quick" / "sac_run"
    assert not (tmp_path / "cache" / "d4rl" / "hopper-quick" / "policies.json").exists()
    monkeypatch.setattr(OffPolicyTrainer, "evaluate", evaluate)
    capfd.readouterr()
    card = make_dataset("hopper", "medium-replay", quick=True, config=config)
    assert f"resuming {run} from step_0000000200" in capfd.readouterr().err
    assert card["steps"] == 300 and card["source"]["sac_steps"] == 300  # the whole run's buffer
    logged = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert logged == [100, 200, 300]  # continued at 200: no second start from step 0
