"""Fixtures shared by the policy tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.envs.wrappers import VectorObservationDict

TINY_CHUNK_CONFIG: dict[str, Any] = {
    "down_dims": (16, 32),
    "state_hidden_sizes": (32,),
    "time_embed_dim": 16,
    "horizon": 8,
    "n_action_steps": 4,
}
"""A U-Net and encoder small enough for millisecond tests of the action-chunk policies."""
CHUNK_OBS_SPACE = spaces.Dict({"state": spaces.Box(-1, 1, (3,), np.float32)})
CHUNK_ACTION_SPACE = spaces.Box(-1, 1, (2,), np.float32)


@pytest.fixture
def tiny_chunk_config() -> dict[str, Any]:
    """The tiny action-chunk policy config (a copy each test may change)."""
    return dict(TINY_CHUNK_CONFIG)


@pytest.fixture
def chunk_spaces() -> tuple[spaces.Dict, spaces.Box]:
    """A 3-d ``state`` observation space and a 2-d Box action space."""
    return CHUNK_OBS_SPACE, CHUNK_ACTION_SPACE


@pytest.fixture
def chunk_policy() -> Callable[..., Any]:
    """``chunk_policy(PolicyClass, **overrides)``: a tiny policy on :func:`chunk_spaces`, seeded 0."""

    def build(policy_class: type, **overrides: Any) -> Any:
        torch.manual_seed(0)
        config = policy_class.config_class(**{**TINY_CHUNK_CONFIG, **overrides})
        return policy_class(config, CHUNK_OBS_SPACE, CHUNK_ACTION_SPACE)

    return build


def _chain_bandit(policy: Any, iters: int = 15, batch: int = 64) -> tuple[float, float]:
    """Clipped-surrogate steps (epsilon 0.2, batch-normalised rewards) on the denoising chain of a
    one-step bandit with reward ``-||a - (0.5, -0.5)||^2``; mean reward of 512 fixed-seed samples
    before and after."""
    target = torch.tensor([0.5, -0.5])

    def mean_reward() -> float:
        torch.manual_seed(123)
        policy.reset()
        action = policy.act({"state": torch.zeros(512, 3)}).action
        return float(-((action - target) ** 2).sum(-1).mean())

    before = mean_reward()
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=3e-3)
    obs = {"state": torch.zeros(batch, 3)}
    for _ in range(iters):
        policy.reset()
        step = policy.act(obs)
        reward = -((step.action - target) ** 2).sum(-1)
        advantage = ((reward - reward.mean()) / (reward.std() + 1e-4)).unsqueeze(1)
        for _ in range(2):
            ratio = (policy.evaluate(obs, step.action, step.extras).logprob - step.logprob).exp()
            loss = torch.max(-advantage * ratio, -advantage * ratio.clamp(0.8, 1.2)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return before, mean_reward()


@pytest.fixture
def chain_bandit() -> Callable[..., tuple[float, float]]:
    """``chain_bandit(policy)``: (before, after) mean bandit reward around clipped-surrogate RL."""
    return _chain_bandit


class BoxBandit(gym.Env):
    """One-step episodes: reward ``-||a - (0.5, -0.5)||^2`` for a Box(-1, 1, (2,)) action."""

    observation_space = CHUNK_OBS_SPACE["state"]
    action_space = CHUNK_ACTION_SPACE
    TARGET = np.array([0.5, -0.5], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = -float(((np.asarray(action) - self.TARGET) ** 2).sum())
        return np.zeros(3, np.float32), reward, True, False, {}


@pytest.fixture
def bandit_envs() -> Callable[[int], VectorObservationDict]:
    """``bandit_envs(n)``: ``n`` :class:`BoxBandit` copies as a same-step autoreset vector env."""

    def build(n: int) -> VectorObservationDict:
        return VectorObservationDict(
            gym.vector.SyncVectorEnv([BoxBandit] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        )

    return build
