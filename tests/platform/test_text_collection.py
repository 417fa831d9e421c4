"""Collecting from envs with text actions: a policy answering in text, with its tokens as extras."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.text_obs import decode_texts, encode_texts, text_width
from omnigym.core.types import Obs, PolicyStep
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.groups import GroupCollector
from omnigym.platform.vec_env import EnvConfig, make_env, make_vec_env

WORDS = ("+", "-", "<answer>+</answer>", "jump")
"""Three answers NumberLine reads and one it does not."""


@dataclass
class WordsConfig(PolicyConfig):
    type: str = "words"


class Words(Policy):
    """Answers with random words; 'generates' one token per answer (its word's index) as extras."""

    name: ClassVar[str] = "words"
    config_class: ClassVar[type[PolicyConfig]] = WordsConfig

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space) -> None:
        super().__init__(WordsConfig(), observation_space, action_space)
        self.rng = np.random.default_rng(0)

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        texts: Any = obs["text"]
        assert all(text.startswith("game: NumberLine") for text in texts)  # text reaches the policy
        index = self.rng.integers(len(WORDS), size=len(texts))
        tokens = torch.from_numpy(index).unsqueeze(-1)
        logprob = torch.full((len(texts), 1), float(np.log(1 / len(WORDS))))
        return PolicyStep(
            [WORDS[i] for i in index],
            logprob,
            torch.ones(len(texts), 1, dtype=torch.bool),
            {"tokens": tokens},
        )


def text_envs(num_envs: int) -> Any:
    kwargs = {"action_space": "text", "obs_keys": ["image", "text"]}
    return make_vec_env(EnvConfig(id="omnigym/NumberLine-v0", num_envs=num_envs, kwargs=kwargs))


def test_rollout_of_text_actions_keeps_tokens_and_numeric_observations() -> None:
    envs = text_envs(4)
    policy = Words(envs.single_observation_space, envs.single_action_space)
    collector = RolloutCollector(envs, policy, num_steps=12)
    collector.reset(seed=0)
    rollout, stats = collector.collect()
    assert rollout.actions.shape == (12, 4) and not rollout.actions.any()  # placeholders
    assert rollout.extras["tokens"].shape == (12, 4, 1)
    # Text observations are stored as fixed-width UTF-8 rows and decode to what the envs showed.
    assert set(rollout.obs) == {"image", "text"} and rollout.obs["text"].dtype == torch.uint8
    assert rollout.obs["text"].shape[:2] == (12, 4) and rollout.next_obs["text"].shape[0] == 4
    first = make_env("omnigym/NumberLine-v0", action_space="text").reset(seed=2)[0]["text"]
    assert decode_texts(rollout.obs["text"][0])[2] == first
    moved = [text.splitlines()[-1] for text in decode_texts(rollout.obs["text"][:, 0])]
    assert len(set(moved)) > 1  # the current number changes along the episode
    invalid = rollout.extras["tokens"][..., 0] == WORDS.index("jump")
    # a 'jump' never moves the number: its step pays the invalid-action penalty (and nothing else)
    torch.testing.assert_close(rollout.rewards[invalid], torch.full((int(invalid.sum()),), -0.1))
    assert len(stats) > 0


def test_group_rollout_of_text_actions() -> None:
    envs = text_envs(4)
    policy = Words(envs.single_observation_space, envs.single_action_space)
    rollout, _ = GroupCollector(envs, policy, group_size=2, max_steps=20).collect()
    assert rollout.extras["tokens"].shape == (20, 4, 1)
    torch.testing.assert_close(rollout.obs["image"][0, 0], rollout.obs["image"][0, 1])  # one start per group


def test_text_encoding_round_trip_and_width() -> None:
    texts = ["game: Maze\n#..", "", "héllo ünïcode"]
    codes = encode_texts(texts, 32)
    assert codes.shape == (3, 32) and codes.dtype == np.uint8
    assert decode_texts(codes) == texts and decode_texts(torch.from_numpy(codes)) == texts
    assert text_width(spaces.Text(16, charset="abc")) == 16  # ASCII: a byte per character
    assert text_width(spaces.Text(16, charset="aé")) == 64  # UTF-8: up to 4 bytes each
    with pytest.raises(ValueError, match="exceeds"):
        encode_texts(["x" * 33], 32)
