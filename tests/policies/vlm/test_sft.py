"""Supervised fine-tuning of a tiny VLM on demonstrations, from arrays and from a Minari dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from omnigym.core.policy import Policy
from omnigym.envs.games.experts import GameSolver
from omnigym.platform.cli import main
from omnigym.platform.datasets import collect_dataset
from omnigym.platform.trainers.vlm_sft import SFTConfig, _minibatch_order, answer_targets, supervised_finetune
from omnigym.platform.vec_env import make_env
from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig

KWARGS = {"action_space": "text", "instructions": True}


def solver_demonstrations(count: int) -> tuple[dict, list[str], object]:
    """The solver's first action on ``count`` NumberLine starts, as observations and action words."""
    env = make_env("omnigym/NumberLine-v0", **KWARGS)
    solver = GameSolver(GameSolver.config_class(), env.observation_space, env.action_space)
    obs = [env.reset(seed=seed)[0] for seed in range(count)]
    batch = {"image": np.stack([o["image"] for o in obs]), "text": [o["text"] for o in obs]}
    actions = solver.act({"text": np.array(batch["text"], dtype=object)}).action
    return batch, list(actions), env


def test_minibatch_order_passes_over_every_row_before_repeating() -> None:
    order = _minibatch_order(10, 4, steps=5, seed=0)
    assert [len(rows) for rows in order] == [4, 4, 4, 4, 4]
    assert len(set(np.concatenate(order[:2]).tolist())) == 8  # no row twice within a pass
    assert [len(rows) for rows in _minibatch_order(3, 8, steps=2, seed=0)] == [3, 3]


def test_sft_teaches_the_reply_format_and_the_demonstrated_answers(tiny_models) -> None:
    obs, actions, env = solver_demonstrations(24)
    assert set(actions) == {"-", "+"}
    config = VLMPolicyConfig(model=str(tiny_models["idefics3"]), max_new_tokens=4, max_prompt_tokens=256)
    torch.manual_seed(0)
    policy = VLMPolicy(config, env.observation_space, env.action_space)
    before = policy.act({"image": torch.from_numpy(obs["image"]), "text": obs["text"]}, deterministic=True)
    assert not any(a in ("-", "+") for a in before.action)  # a random model answers nonsense
    history = supervised_finetune(
        policy,
        obs,
        answer_targets(actions),
        SFTConfig(steps=60, batch_size=12, learning_rate=1e-3, log_every=20),
    )
    assert [row["step"] for row in history] == [20, 40, 60]
    assert history[-1]["train/sft_nll"] < 0.5 * history[0]["train/sft_nll"]
    after = policy.act({"image": torch.from_numpy(obs["image"]), "text": obs["text"]}, deterministic=True)
    assert all(a in ("-", "+") for a in after.action)  # the format is learned
    with pytest.raises(ValueError, match="one observation per target"):
        supervised_finetune(policy, obs, ["<answer>+</answer>"])


def test_vlm_sft_command_on_a_collected_dataset(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path / "cache"))
    env = make_env("omnigym/NumberLine-v0", **KWARGS)
    solver = GameSolver(GameSolver.config_class(), env.observation_space, env.action_space)
    collect_dataset(solver, "omnigym/NumberLine-v0", "omnigym/nl-test-v0", episodes=6, env_kwargs=KWARGS)
    out = tmp_path / "sft"
    code = main([
        "vlm", "sft", "--dataset", "omnigym/nl-test-v0", "--out", str(out), "--steps", "4",
        "--batch-size", "4", "--eval-episodes", "2",
        "model=tiny:idefics3", "max_new_tokens=4", "max_prompt_tokens=256",
    ])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "step 4/4: nll" in printed and "success_rate" in printed
    loaded = Policy.from_pretrained(out)
    assert isinstance(loaded, VLMPolicy) and loaded.config.max_new_tokens == 4
    assert (out / "hf" / "config.json").exists()  # a plain Hugging Face model to start RL from
    assert main(["vlm", "sft", "--dataset", "omnigym/nl-test-v0", "--out", str(out), "unknown_key=1"]) != 0
    assert "Unknown config key 'policy.unknown_key'" in capsys.readouterr().err
