"""Tiny random VLMs built once per test session, fully offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from omnigym.platform.vec_env import make_env
from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig
from omnigym.policies.vlm.tiny import make_tiny


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_vlms")
    return {arch: make_tiny(arch, root / arch) for arch in ("qwen2_vl", "qwen2_5_vl", "idefics3", "qwen2")}


def env_batch(env_id: str, num: int = 4, **kwargs):
    """``num`` envs reset with seeds 0..num-1, and their observations stacked into a batch."""
    envs = [make_env(env_id, **kwargs) for _ in range(num)]
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    batch = {"text": np.array([o["text"] for o in obs], dtype=object)}
    if "image" in obs[0]:
        batch["image"] = torch.from_numpy(np.stack([o["image"] for o in obs]))
    return envs, batch


@pytest.fixture
def gui_batch():
    """Fresh GUI envs (tests step them) and their first observations."""
    return env_batch("omnigym/GUI-ClickButton-v0")


@pytest.fixture
def text_batch():
    """Fresh NumberLine envs that observe text only (for a text-only language model)."""
    return env_batch("omnigym/NumberLine-v0", action_space="text", obs_keys=("text",))


@pytest.fixture
def game_batch():
    """Fresh NumberLine envs with text actions and their first observations."""
    return env_batch("omnigym/NumberLine-v0", action_space="text")


@pytest.fixture
def make_policy():
    """``make_policy(model_dir, env, **config)``: a VLMPolicy for ``env``'s spaces."""

    def make(path: Path, env, **config) -> VLMPolicy:
        return VLMPolicy(VLMPolicyConfig(model=str(path), **config), env.observation_space, env.action_space)

    return make


def _activate_lora(policy) -> None:
    """Give LoRA adapters non-zero weights (B starts at zero, so fresh adapters change nothing)."""
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)


@pytest.fixture
def activate_lora():
    """:func:`_activate_lora`, for tests that check adapters survive saving."""
    return _activate_lora
