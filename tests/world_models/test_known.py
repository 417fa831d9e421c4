"""Known reward and termination functions against the real envs they describe.

Each real env is stepped with random actions (restarting after every episode end); the known
function, given the same observations and actions, must return what the env returned.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omnigym.platform.vec_env import make_env
from omnigym.world_models.known import (
    KNOWN_REWARDS,
    KNOWN_TERMINATIONS,
    known_reward,
    known_termination,
)


def real_transitions(env_id: str, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``steps`` random transitions of ``env_id``: obs, action, next_obs, reward, terminated."""
    env = make_env(env_id)
    env.action_space.seed(seed)
    rows: dict[str, list] = {k: [] for k in ("obs", "action", "next_obs", "reward", "terminated")}
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(
            rows, (obs["state"], action, next_obs["state"], reward, terminated), strict=True
        ):
            rows[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    return {k: np.asarray(v) for k, v in rows.items()}


def as_tensors(data: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.as_tensor(data[k], dtype=torch.float32) for k in ("obs", "action", "next_obs"))


@pytest.mark.parametrize("env_id", sorted(KNOWN_REWARDS))
def test_known_reward_matches_the_real_env(env_id: str) -> None:
    data = real_transitions(env_id, 400)
    reward = known_reward(env_id)(*as_tensors(data))
    assert reward.dtype == torch.float32 and reward.shape == (400,)
    np.testing.assert_allclose(reward.numpy(), data["reward"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("env_id", sorted(KNOWN_TERMINATIONS))
def test_known_termination_matches_the_real_env(env_id: str) -> None:
    data = real_transitions(env_id, 400)
    terminated = known_termination(env_id)(*as_tensors(data))
    assert terminated.dtype == torch.bool and terminated.shape == (400,)
    np.testing.assert_array_equal(terminated.numpy(), data["terminated"])
    if env_id not in ("Pendulum-v1", "HalfCheetah-v5"):  # the others end under random actions
        assert data["terminated"].any() and not data["terminated"].all(), "both outcomes must be tested"


def test_hopper_health_ranges_are_strict_and_per_entry() -> None:
    """Each of Hopper's three health conditions alone ends the episode, at Gymnasium's bounds."""
    healthy = torch.zeros(1, 11)
    healthy[0, 0] = 1.25
    fn = known_termination("Hopper-v5")

    def ends(index: int, value: float) -> bool:
        obs = healthy.clone()
        obs[0, index] = value
        return bool(fn(obs, torch.zeros(1, 3), obs)[0])

    assert not ends(0, 1.25)
    assert ends(0, 0.7) and not ends(0, 0.7001)  # height: (0.7, inf)
    assert ends(1, 0.2) and ends(1, -0.2) and not ends(1, 0.199)  # torso angle: (-0.2, 0.2)
    assert ends(5, 100.0) and not ends(5, 99.9)  # the other entries: (-100, 100)


def test_unknown_env_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"no known reward function for 'Hopper-v5'.*learned"):
        known_reward("Hopper-v5")
    with pytest.raises(ValueError, match="no known termination function"):
        known_termination("CartPole-v1")
