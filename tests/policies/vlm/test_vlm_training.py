"""A tiny VLM trained by the platform's RL loop: VL-DAC (critic on the VLM's features, text
observations read back from the rollout) and GRPO with a reference KL over group rollouts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from omnigym.platform.experiment import build_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

ENV = {
    "id": "omnigym/NumberLine-v0",
    "num_envs": 2,
    "kwargs": {"action_space": "text", "obs_keys": ["image", "text"], "instructions": False},
}
POLICY = {"type": "vlm", "max_new_tokens": 4, "max_prompt_tokens": 160}


def experiment(tmp_path: Path, model: Path, algo: dict[str, Any], total_steps: int) -> Any:
    return build_experiment(
        {
            "name": "vlm_rl",
            "seed": 0,
            "total_steps": total_steps,
            "env": {**ENV, "max_episode_steps": 6},
            "policy": {**POLICY, "model": str(model)},
            "algo": algo,
            "eval": {"every_steps": 0, "episodes": 1},
            "log": {"progress": False, "tensorboard": False},
            "checkpoint": {"every_steps": 0},
            "run_dir": str(tmp_path / "run"),
        }
    )


def test_vldac_trains_a_critic_on_vlm_features(tiny_models, tmp_path: Path) -> None:
    algo = {"type": "vldac", "num_steps": 6, "num_epochs": 2, "num_minibatches": 2,
            "learning_rate": 1e-3, "value_warmup_updates": 1, "kl_coef": 0.05}  # fmt: skip
    trainer = OnPolicyTrainer(experiment(tmp_path, tiny_models["idefics3"], algo, 24), tmp_path / "run")
    critic = [p.detach().clone() for p in trainer.algorithm.critic.parameters()]
    actor = [p.detach().clone() for p in trainer.policy.parameters() if p.requires_grad]
    first = trainer.train_iteration()  # the warm-up update: critic only
    assert first["train/value_warmup"] == 1.0
    assert all(torch.equal(a, p) for a, p in zip(actor, trainer.policy.parameters(), strict=False))
    critic_now = trainer.algorithm.critic.parameters()
    assert any(not torch.equal(c, p) for c, p in zip(critic, critic_now, strict=True))
    second = trainer.train_iteration()  # then actor and critic
    assert second["train/value_warmup"] == 0.0
    moved = [p for a, p in zip(actor, trainer.policy.parameters(), strict=False) if not torch.equal(a, p)]
    assert moved, "the policy update must change the VLM's weights"
    for key in ("train/loss_value", "train/loss_policy", "train/kl_ref", "train/approx_kl"):
        assert math.isfinite(second[key]), key


def test_grpo_with_reference_kl_on_group_rollouts(tiny_models, tmp_path: Path) -> None:
    algo = {"type": "grpo", "group_size": 2, "learning_rate": 1e-3, "kl_coef": 0.05, "max_episode_steps": 6}
    trainer = OnPolicyTrainer(experiment(tmp_path, tiny_models["idefics3"], algo, 12), tmp_path / "run")
    metrics = trainer.train_iteration()
    # Untrained replies are rarely valid actions, so episodes run to the 6-step cut and a group
    # rollout is padded only when every episode ended; either way the reference re-scores it.
    assert math.isfinite(metrics["train/loss_policy"]) and metrics["train/num_updates"] >= 1


@pytest.mark.parametrize("history_steps", [0, 2])
def test_rollout_text_observations_give_the_critic_the_acting_prompt(
    tiny_models, tmp_path: Path, history_steps: int
) -> None:
    """Values come from features of the stored (decoded) text: equal to features of the live obs."""
    algo = {"type": "vldac", "num_steps": 3, "num_epochs": 1, "num_minibatches": 1}
    config = experiment(tmp_path, tiny_models["idefics3"], algo, 6)
    config.policy.history_steps = history_steps  # type: ignore[attr-defined]
    trainer = OnPolicyTrainer(config, tmp_path / "run")
    trainer.collector.reset(seed=0)
    live = {k: v for k, v in trainer.collector.obs.items()}
    rollout, _ = trainer.collector.collect()
    stored = {k: v[0] for k, v in rollout.obs.items()}
    policy = trainer.policy
    policy.reset()
    with torch.no_grad():
        expected = policy.features({"image": torch.as_tensor(live["image"]), "text": live["text"]})
        policy.reset()
        got = policy.features(stored)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
