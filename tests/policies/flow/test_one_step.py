"""The one-step flow policy (FQL's deployable actor): noise in, clipped action out."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.policies.flow.one_step import OneStepFlowPolicy, OneStepFlowPolicyConfig

OBS_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (2,), np.float32)


def make_policy(action_space: spaces.Space = ACTION_SPACE, **config: object) -> OneStepFlowPolicy:
    torch.manual_seed(0)
    return OneStepFlowPolicy(
        OneStepFlowPolicyConfig(hidden_sizes=(16, 16), **config), OBS_SPACE, action_space
    )  # type: ignore[arg-type]


def set_output(policy: OneStepFlowPolicy, bias: list[float], noise_gain: float = 0.0) -> None:
    """Make ``mu(s, z) = bias + noise_gain * z``: last layer zero, plus a direct path from z."""
    with torch.no_grad():
        last = policy.net.layers[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor(bias))
    if noise_gain:
        original = policy.net.forward
        dim = policy.feature_dim
        policy.net.forward = lambda x: original(x) + noise_gain * x[:, dim:]  # type: ignore[method-assign]


def test_defaults_follow_fql() -> None:
    config = OneStepFlowPolicyConfig()
    assert config.hidden_sizes == (512, 512, 512, 512) and config.activation == "gelu"
    policy = OneStepFlowPolicy(config, OBS_SPACE, ACTION_SPACE)
    assert policy.net.layers[0].in_features == 3 + 2  # features and noise
    assert policy.net.layers[-1].out_features == 2


def test_deterministic_action_is_mu_at_zero_noise_clipped() -> None:
    """act(deterministic) = clip(mu(s, 0)); the raw output may leave the bounds, the action may not."""
    policy = make_policy()
    set_output(policy, [0.5, 3.0], noise_gain=1.0)
    obs = {"state": torch.randn(4, 3)}
    step = policy.act(obs, deterministic=True)
    torch.testing.assert_close(step.action, torch.tensor([[0.5, 1.0]]).expand(4, 2))
    assert step.logprob.shape == (4, 1) and not step.logprob.any() and step.mask.all()
    z = torch.full((4, 2), -0.25)
    raw = policy.action_from_noise(obs, z, clip=False)
    torch.testing.assert_close(raw, torch.tensor([[0.25, 2.75]]).expand(4, 2))
    torch.testing.assert_close(policy.action_from_noise(obs, z), torch.tensor([[0.25, 1.0]]).expand(4, 2))


def test_stochastic_actions_vary_with_noise_and_stay_in_bounds() -> None:
    policy = make_policy()
    set_output(policy, [0.0, 0.0], noise_gain=1.0)  # mu(s, z) = z: the action is the clipped noise
    obs = {"state": torch.zeros(512, 3)}
    action = policy.act(obs).action
    assert action.std(0).min() > 0.3
    assert (action.abs() <= 1).all() and (action.abs() == 1).any()


def test_rsample_is_differentiable_with_zero_logprob() -> None:
    policy = make_policy()
    action, logprob = policy.rsample({"state": torch.randn(5, 3)})
    assert action.shape == (5, 2) and logprob.shape == (5,) and not logprob.any()
    action.sum().backward()
    assert policy.net.layers[0].weight.grad is not None and policy.net.layers[0].weight.grad.abs().sum() > 0


def test_matrix_actions_are_reshaped() -> None:
    policy = make_policy(spaces.Box(-2.0, 2.0, (4, 3), np.float32))
    step = policy.act({"state": torch.randn(2, 3)})
    assert step.action.shape == (2, 4, 3)
    assert policy.rsample({"state": torch.randn(2, 3)})[0].shape == (2, 12)


def test_compute_loss_is_mse_of_mu_to_the_actions() -> None:
    """With mu(s, z) = c, the BC loss is mean (c - a)^2 whatever the noise."""
    policy = make_policy()
    set_output(policy, [0.5, -0.5])
    actions = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    loss, metrics = policy.compute_loss(SimpleNamespace(obs={"state": torch.randn(2, 3)}, actions=actions))
    assert loss.item() == pytest.approx((0.25 + 0.25 + 0.25 + 0.25) / 4)
    assert metrics["train/bc_mse"] == pytest.approx(0.25)


def test_obs_normalisation_statistics() -> None:
    policy = make_policy(normalize_obs=True)
    data = torch.randn(100, 1, 3) * 4 + 2
    policy.update_obs_stats({"state": data})
    features = policy.features({"state": data[:, 0]})
    torch.testing.assert_close(features.mean(0), torch.zeros(3), atol=1e-3, rtol=0)


@pytest.mark.parametrize("space", [spaces.Discrete(3), spaces.MultiBinary(2)])
def test_non_box_actions_are_rejected(space: spaces.Space) -> None:
    with pytest.raises(TypeError, match="Box"):
        OneStepFlowPolicy(OneStepFlowPolicyConfig(hidden_sizes=(8,)), OBS_SPACE, space)


def test_has_no_density() -> None:
    policy = make_policy()
    assert "evaluate" not in policy.capabilities
    with pytest.raises(NotImplementedError, match="density"):
        policy.evaluate({"state": torch.zeros(1, 3)}, torch.zeros(1, 2))
