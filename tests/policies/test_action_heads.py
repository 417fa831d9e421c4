"""The MLP policy's Box action heads: Gaussian, tanh-squashed Gaussian, deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import OnPolicyBatch
from omnigym.policies.distributions import SquashedGaussianHead
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

OBS = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACT = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def policy(head: str, **config) -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(MLPPolicyConfig(action_head=head, hidden_sizes=(16,), **config), OBS, ACT)


def obs(n: int = 64) -> dict[str, torch.Tensor]:
    return {"state": torch.randn(n, 3, generator=torch.Generator().manual_seed(1))}


def test_squashed_log_prob_is_the_change_of_variables_by_hand() -> None:
    head = SquashedGaussianHead(1, torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]))
    mean, log_std = torch.tensor([[0.3, -0.5]]), torch.tensor([[-0.2, 0.1]])
    u = torch.tensor([[0.7, -1.2]])
    action = head.bias + head.scale * torch.tanh(u)
    std = log_std.exp()
    gaussian = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    jacobian = torch.log(head.scale * (1 - torch.tanh(u) ** 2))
    expected = (gaussian - jacobian).sum(-1)
    torch.testing.assert_close(head.log_prob((mean, log_std), action), expected, rtol=1e-5, atol=1e-5)


def test_squashed_actions_stay_inside_the_bounds_and_rescore_exactly() -> None:
    p = policy("squashed_gaussian")
    step = p.act(obs())
    low, high = torch.as_tensor(ACT.low), torch.as_tensor(ACT.high)
    assert ((step.action >= low) & (step.action <= high)).all()
    torch.testing.assert_close(p.evaluate(obs(), step.action).logprob, step.logprob, rtol=1e-4, atol=1e-4)
    action, logprob = p.rsample(obs())
    (action.sum() + logprob.sum()).backward()
    assert p.head.layer.weight.grad is not None  # reparameterised: gradients reach the head


def test_deterministic_head_explores_inside_bounds_and_clones_by_squared_error() -> None:
    p = policy("deterministic", exploration_std=0.5)
    mode, noisy = p.act(obs(), deterministic=True).action, p.act(obs()).action
    assert not torch.equal(mode, noisy)
    assert ((noisy >= torch.as_tensor(ACT.low)) & (noisy <= torch.as_tensor(ACT.high))).all()
    assert "evaluate" not in p.capabilities and "rsample" in p.capabilities
    target = torch.zeros(64, 2)
    batch = OnPolicyBatch(obs(), target, *(torch.zeros(64, 1),) * 2, *(torch.zeros(64),) * 3)
    loss, metrics = p.compute_loss(batch)
    torch.testing.assert_close(loss, (mode - target).square().sum(-1).mean())
    assert metrics["train/bc_mse"] == pytest.approx(float(loss.detach()))


def test_gaussian_log_std_clamp_is_optional() -> None:
    p = policy("gaussian", log_std_bounds=(-1.0, 0.5), log_std_init=3.0)
    assert float(p.distribution(obs())[1].max()) == pytest.approx(0.5)
    assert float(policy("gaussian", log_std_init=3.0).distribution(obs())[1].max()) == pytest.approx(3.0)


def test_bounded_heads_need_finite_bounds_and_box_actions() -> None:
    unbounded = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ValueError, match="finite action bounds"):
        MLPPolicy(MLPPolicyConfig(action_head="squashed_gaussian"), OBS, unbounded)
    with pytest.raises(ValueError, match="needs Box actions"):
        MLPPolicy(MLPPolicyConfig(action_head="deterministic"), OBS, spaces.Discrete(3))


def test_bounded_gaussian_mean_stays_inside_the_box_and_samples_do_not() -> None:
    p = policy("gaussian", bounded_mean=True, log_std_init=1.0)
    far = {"state": torch.full((256, 3), 100.0)}
    mean, log_std = p.distribution(far)
    assert ((mean >= torch.as_tensor(ACT.low)) & (mean <= torch.as_tensor(ACT.high))).all()
    samples = p.rsample(far)[0]
    assert ((samples < torch.as_tensor(ACT.low)) | (samples > torch.as_tensor(ACT.high))).any()
    torch.testing.assert_close(
        p.evaluate(far, samples).logprob.squeeze(-1), p.head.log_prob((mean, log_std), samples)
    )


def test_squashed_log_std_init_offsets_the_state_dependent_log_std() -> None:
    # orthogonal init leaves the head's outputs near zero: the offset sets the starting log-std
    plain, offset = policy("squashed_gaussian"), policy("squashed_gaussian", log_std_init=-1.0)
    _, log_std = plain.distribution(obs())
    _, shifted = offset.distribution(obs())
    torch.testing.assert_close(shifted, log_std - 1.0)  # same seed, same weights, shifted by -1
    assert shifted.mean().item() == pytest.approx(-1.0, abs=0.05)
    # a narrower start: the sampled actions spread less around the squashed mean
    spread = [
        (p.act(obs(512)).action - p.act(obs(512), deterministic=True).action).std() for p in (plain, offset)
    ]
    assert spread[1] < 0.6 * spread[0]
