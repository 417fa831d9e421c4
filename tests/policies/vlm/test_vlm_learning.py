"""A tiny VLM trained from scratch plays NumberLine from its image + state text: SFT then GRPO.

The short version of ``bench/vlm_sft_grpo.py`` (the full run goes from 0 to >= 0.9 success): the
solver's demonstrations recorded as a Minari dataset, a brief SFT that teaches the reply format
and most of the rule (move towards the target), then GRPO through the trainer with the
``grpo_vlm_numberline`` experiment. Held-out starts, greedy replies, 6-step episodes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from omnigym.envs.games.experts import GameSolver
from omnigym.platform.datasets import collect_dataset, load_dataset_steps
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer
from omnigym.platform.trainers.vlm_sft import SFTConfig, answer_targets, supervised_finetune
from omnigym.platform.vec_env import make_env
from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig

ENV_ID = "omnigym/NumberLine-v0"
ENV_KWARGS = {"action_space": "text", "obs_keys": ["image", "text"], "instructions": False}
SFT_STEPS = 100
GRPO_STEPS = 8000


def success(policy: VLMPolicy) -> float:
    result = evaluate_policy(
        policy, ENV_ID, episodes=60, seed=10_000, env_kwargs=ENV_KWARGS, max_episode_steps=6
    )
    return float(result.summary()["success_rate"])


@pytest.mark.slow  # ~150 s on 2 cores: run with scripts/test.sh -m slow
@pytest.mark.timeout(900)
def test_tiny_vlm_improves_with_sft_then_grpo(tiny_models, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    env = make_env(ENV_ID, **ENV_KWARGS)
    solver = GameSolver(GameSolver.config_class(), env.observation_space, env.action_space)
    collect_dataset(solver, ENV_ID, "omnigym/numberline-solver-v0", episodes=100, env_kwargs=ENV_KWARGS)
    steps = load_dataset_steps("omnigym/numberline-solver-v0")

    torch.manual_seed(0)
    config = VLMPolicyConfig(
        model=str(tiny_models["idefics3"]), max_new_tokens=4, max_prompt_tokens=160, eval_micro_batch_size=32
    )
    policy = VLMPolicy(config, env.observation_space, env.action_space)
    untrained = success(policy)
    assert untrained < 0.3  # a random model rarely even writes an action word

    obs = {key: steps.obs[key] for key in ("image", "text")}
    supervised_finetune(policy, obs, answer_targets(steps.actions), SFTConfig(steps=SFT_STEPS, log_every=0))
    after_sft = success(policy)
    policy.save_pretrained(tmp_path / "sft")

    overrides = [
        f"policy.model={tmp_path / 'sft' / 'hf'}",
        f"total_steps={GRPO_STEPS}",
        "algo.anneal_lr=false",  # a short run: keep the full learning rate to the end
        "eval.every_steps=0",
        "log.progress=false",
        "log.tensorboard=false",
        f"run_dir={tmp_path / 'grpo'}",
    ]
    trainer = OnPolicyTrainer(load_experiment("grpo_vlm_numberline", overrides), tmp_path / "grpo")
    trainer.train()
    after_grpo = success(trainer.policy)
    figures = f"success: untrained {untrained:.2f}, SFT {after_sft:.2f}, GRPO {after_grpo:.2f}"
    assert after_sft >= 0.5, figures  # the reply format and part of the rule are learned
    assert after_grpo >= 0.85 and after_grpo > after_sft, figures  # RL improves on the fine-tuned start
