"""A tiny language model learns to drive omnigym/DrivingVLM-v0 in meta actions from PDM-Closed.

The default-run version of ``bench/vlm_driving.py`` (which adds the image, GRPO and 30 test
scenes): ``pdm_closed_meta``'s answers on training scenes recorded as a Minari dataset, a short
SFT of a text-only tiny Qwen2 on the scene text, then the model drives held-out test scenes on
its own. Untrained, every reply is invalid; after SFT the replies are meta actions that mostly
agree with the teacher's, and the car it drives scores well above constant velocity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from omnigym.core.text_actions import ActionParseError
from omnigym.envs.driving.env import PLAN_HIGH, PLAN_LOW
from omnigym.envs.driving.experts import (
    ConstantVelocityConfig,
    ConstantVelocityPolicy,
    PDMClosedMetaConfig,
    PDMClosedMetaPolicy,
)
from omnigym.envs.driving.text_actions import parse_driving_action
from omnigym.platform.datasets import collect_dataset, load_dataset_steps
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.trainers.vlm_sft import SFTConfig, answer_targets, supervised_finetune
from omnigym.platform.vec_env import make_env
from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig

ENV_ID = "omnigym/DrivingVLM-v0"
SCENES = {"num_scenes": 12, "scene": {"episode_seconds": 4.0}}
KWARGS = {"action_space": "text", "obs_keys": ("state", "text"), "image_size": 16, **SCENES}


def first_texts() -> list[str]:
    """The first observation texts of the test scenes the policies drive."""
    env = make_env(ENV_ID, **{**KWARGS, "split": "test"})
    texts = [env.reset(seed=seed)[0]["text"] for seed in range(6)]
    env.close()
    return texts


def answer_valid(reply: str) -> bool:
    """Whether a reply is a meta action the env reads."""
    try:
        return parse_driving_action(reply, PLAN_LOW, PLAN_HIGH).plan is None
    except ActionParseError:
        return False


def scores(policy) -> dict[str, float]:
    """PDMS and the invalid-reply rate on 6 held-out test scenes, greedy."""
    result = evaluate_policy(
        policy, ENV_ID, episodes=6, seed=0, num_envs=6, env_kwargs={**KWARGS, "split": "test"}
    )
    summary = result.summary()
    invalid = float(np.sum(result.metrics.get("invalid_actions", [0.0]))) / float(np.sum(result.lengths))
    return {"pdms": float(summary["pdms_mean"]), "invalid": invalid}


@pytest.mark.timeout(300)
def test_tiny_language_model_learns_to_drive_in_meta_actions(
    tiny_models, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    teacher_env = make_env(ENV_ID, **{**KWARGS, "split": "train", **PDMClosedMetaPolicy.env_kwargs})
    teacher = PDMClosedMetaPolicy(
        PDMClosedMetaConfig(), teacher_env.observation_space, teacher_env.action_space
    )
    teacher_env.close()
    collect_dataset(
        teacher, ENV_ID, "driving/test-meta-v0", episodes=12, env_kwargs={**KWARGS, "split": "train"}
    )
    steps = load_dataset_steps("driving/test-meta-v0")

    torch.manual_seed(0)
    env = make_env(ENV_ID, **KWARGS)
    config = VLMPolicyConfig(
        model=str(tiny_models["qwen2"]),
        obs_keys=("text",),
        max_new_tokens=24,
        max_prompt_tokens=320,
        system_prompt="You drive a car. Answer with a meta action inside <answer></answer>.",
    )
    policy = VLMPolicy(config, env.observation_space, env.action_space)
    env.close()
    untrained = [
        answer_valid(reply) for reply in policy.act({"text": first_texts()}, deterministic=True).action
    ]
    supervised_finetune(
        policy,
        {"text": steps.obs["text"]},
        answer_targets(steps.actions),
        SFTConfig(steps=40, batch_size=16, learning_rate=2e-3, log_every=0),
    )
    trained = scores(policy)
    cv_env = make_env(ENV_ID, **{**KWARGS, "split": "test"})
    floor = scores(
        ConstantVelocityPolicy(ConstantVelocityConfig(), cv_env.observation_space, cv_env.action_space)
    )
    cv_env.close()
    figures = f"untrained valid {untrained}, after SFT {trained}, constant velocity {floor}"
    assert not any(untrained), figures  # a random model writes no meta action
    assert trained["invalid"] <= 0.1, figures  # it answers in the teacher's vocabulary
    assert trained["pdms"] >= floor["pdms"] + 0.1, figures  # and drives the test scenes on its own
