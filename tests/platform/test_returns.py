"""GAE and discounted returns against hand-computed numbers (docs/algorithms)."""

import pytest
import torch

from omnigym.platform.returns import discounted_returns, gae


def col(values):
    return torch.tensor(values, dtype=torch.float32).unsqueeze(-1)  # [T, 1]


def test_gae_terminal_episode_matches_hand_numbers():
    rewards, values = col([1, 1, 1]), col([0, 0, 0])
    terminated = col([0, 0, 1]).bool()
    adv, ret = gae(rewards, values, col([0, 0, 0]), terminated, terminated, gamma=0.99, gae_lambda=0.95)
    assert adv.squeeze(-1).tolist() == pytest.approx([2.82504, 1.9405, 1.0], abs=1e-4)
    assert torch.equal(ret, adv)  # values are zero


def test_gae_gamma_lambda_one_is_monte_carlo():
    terminated = col([0, 0, 1]).bool()
    adv, _ = gae(col([1, 1, 1]), col([0, 0, 0]), col([0, 0, 0]), terminated, terminated, 1.0, 1.0)
    assert adv.squeeze(-1).tolist() == pytest.approx([3, 2, 1])


def test_gae_bootstraps_from_next_value():
    none = col([0, 0, 0]).bool()
    adv, ret = gae(col([1, 1, 1]), col([0.5] * 3), col([0.5] * 3), none, none, 0.99, 0.95)
    assert adv.squeeze(-1).tolist() == pytest.approx([2.810915, 1.930798, 0.995], abs=1e-5)
    assert ret.squeeze(-1).tolist() == pytest.approx([3.310915, 2.430798, 1.495], abs=1e-5)


def test_gae_truncation_bootstraps_but_cuts_the_recursion():
    # Episode truncated after step 1 (final obs worth 10), a new one starts at step 2.
    rewards, values = col([1, 1, 1]), col([0, 0, 0])
    next_values = col([0, 10, 0])
    terminated = col([0, 0, 0]).bool()
    dones = col([0, 1, 0]).bool()
    adv, _ = gae(rewards, values, next_values, terminated, dones, gamma=0.5, gae_lambda=1.0)
    # step 2: 1; step 1: 1 + 0.5 * 10 = 6 (does not see step 2); step 0: 1 + 0.5 * 6 = 4
    assert adv.squeeze(-1).tolist() == pytest.approx([4.0, 6.0, 1.0])


def test_gae_termination_ignores_next_value():
    terminated = col([0, 1, 0]).bool()
    adv, _ = gae(col([1, 1, 1]), col([0, 0, 0]), col([0, 99, 0]), terminated, terminated, 0.5, 1.0)
    assert adv.squeeze(-1).tolist() == pytest.approx([1.5, 1.0, 1.0])


def test_gae_envs_are_independent_columns():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 2.0]])
    zeros = torch.zeros(3, 2)
    terminated = torch.tensor([[False, False], [False, False], [True, True]])
    adv, _ = gae(rewards, zeros, zeros, terminated, terminated, 1.0, 1.0)
    assert adv[:, 0].tolist() == [3, 2, 1] and adv[:, 1].tolist() == [2, 2, 2]


def test_discounted_returns_cut_at_episode_end_and_bootstrap():
    rewards = col([1, 1, 1, 1])
    dones = col([0, 1, 0, 0]).bool()
    out = discounted_returns(rewards, dones, gamma=0.5, bootstrap=torch.tensor([8.0]))
    assert out.squeeze(-1).tolist() == pytest.approx([1.5, 1.0, 1 + 0.5 * (1 + 4), 1 + 4])
