"""DPPO fine-tuning log-probabilities of the diffusion policy (``rl_chain``, docs/algorithms)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from diffusers import DDIMScheduler

from omnigym.policies.chunking.policy import EXTRA_CHAIN, EXTRA_HISTORY, EXTRA_SAMPLED
from omnigym.policies.diffusion.policy import DiffusionPolicy, DiffusionPolicyConfig


@pytest.fixture
def make(chunk_policy: Callable[..., Any]) -> Callable[..., Any]:
    """A tiny ``DiffusionPolicy`` with these overrides (see tests/policies/conftest.py)."""
    return functools.partial(chunk_policy, DiffusionPolicy, num_inference_steps=5)


def test_switch_off_keeps_behaviour_cloning_acting(make: Callable[..., Any]) -> None:
    """rl_chain off: one part of log-prob 0, no extras, no 'evaluate'; the RL fields change nothing."""
    plain = make()
    tuned = make(ft_denoising_steps=2, ddim_eta=0.5, min_sampling_denoising_std=0.3, randn_clip_value=1.0)
    assert "evaluate" not in plain.capabilities and plain.capabilities == DiffusionPolicy.capabilities
    for _ in range(3):
        obs = {"state": torch.randn(4, 3)}
        torch.manual_seed(1)
        a = plain.act(obs)
        torch.manual_seed(1)
        b = tuned.act(obs)
        assert torch.equal(a.action, b.action) and a.extras == {} == b.extras
        assert a.logprob.shape == (4, 1) and not a.logprob.any() and a.mask.all()
    with pytest.raises(NotImplementedError):
        plain.evaluate(obs, a.action, a.extras)


def test_chain_logprob_is_the_per_step_gaussian_by_hand(make: Callable[..., Any]) -> None:
    """Each part: log N(x_{k-1}; μ_k, max(σ_k, 0.1)^2) per element, clamped to [-5, 2], averaged over
    the executed slice; μ_k is diffusers' DDIM step (η = 1, clipped x̂_0, re-derived ε)."""
    policy = make(rl_chain=True, ft_denoising_steps=3)
    assert "evaluate" in policy.capabilities and "evaluate" not in DiffusionPolicy.capabilities
    obs = {"state": torch.randn(3, 3)}
    step = policy.act(obs)
    assert step.logprob.shape == step.mask.shape == (3, 3) and step.mask.all()
    chain = step.extras[EXTRA_CHAIN]
    assert chain.shape == (3, 4, 8, 2)
    ddim = DDIMScheduler(
        num_train_timesteps=100, beta_schedule="squaredcos_cap_v2", clip_sample=True,
        set_alpha_to_one=True, steps_offset=0,
    )  # fmt: skip
    ddim.set_timesteps(5)
    timesteps = ddim.timesteps[-3:]  # the fine-tuned (last) steps
    with torch.no_grad():
        cond = policy.encode({"state": step.extras[EXTRA_HISTORY + "state"]}, policy.model)
        for k, t in enumerate(timesteps):
            x = chain[:, k]
            eps = policy.model.unet(x, t.float().expand(3), cond)
            mean = ddim.step(
                eps, t, x, eta=1.0, use_clipped_model_output=True, variance_noise=torch.zeros_like(x)
            )
            prev = int(t) - 20
            a_t = ddim.alphas_cumprod[int(t)]
            a_prev = ddim.alphas_cumprod[prev] if prev >= 0 else torch.tensor(1.0)
            sigma = math.sqrt((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev))
            normal = torch.distributions.Normal(mean.prev_sample, max(sigma, 0.1))
            by_hand = (
                normal.log_prob(chain[:, k + 1]).clamp(-5, 2)[:, 1:5].mean(dim=(1, 2))
            )  # To - 1 = 1, Ta = 4
            torch.testing.assert_close(step.logprob[:, k], by_hand, rtol=0, atol=1e-5)
    # the chain ends at the executed chunk
    expected = policy.action_normalizer.unnormalize(chain[:, -1].clamp(-1, 1))[:, 1]
    torch.testing.assert_close(step.action, expected.clamp(-1, 1))


def test_evaluate_matches_act_and_masks_popping_steps(make: Callable[..., Any]) -> None:
    policy = make(rl_chain=True, ft_denoising_steps=2, n_action_steps=2)
    obs = {"state": torch.randn(4, 3)}
    policy.act(obs)  # rows 0..3 sample; then row 2 finishes and re-samples alone
    policy.reset(torch.tensor([False, False, True, False]))
    step = policy.act({"state": torch.randn(4, 3)})
    assert step.mask[:, 0].tolist() == [False, False, True, False]
    assert step.extras[EXTRA_SAMPLED].tolist() == [False, False, True, False]
    assert not step.logprob[~step.mask].any()
    evaluation = policy.evaluate(obs, step.action, step.extras)
    torch.testing.assert_close(evaluation.logprob, step.logprob, rtol=0, atol=1e-5)
    assert evaluation.entropy.shape == (4, 2) and not evaluation.entropy[~step.mask].any()
    evaluation.logprob.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())
    # deterministic acting is the η = 0 sampler: no part counts, and evaluate agrees
    policy.reset()
    step = policy.act(obs, deterministic=True)
    assert not step.mask.any() and not policy.evaluate(obs, step.action, step.extras).logprob.any()


def test_rejects_rl_chain_with_dpmsolver() -> None:
    with pytest.raises(ValueError, match="ddim"):
        DiffusionPolicyConfig(rl_chain=True, sampler="dpmsolver")
    with pytest.raises(ValueError, match="ft_denoising_steps"):
        DiffusionPolicyConfig(rl_chain=True, num_inference_steps=5, ft_denoising_steps=6)


def test_ppo_on_the_denoising_chain_raises_a_bandit_reward(
    make: Callable[..., Any], chain_bandit: Callable[..., tuple[float, float]]
) -> None:
    before, after = chain_bandit(make(rl_chain=True, use_ema=False, n_action_steps=1))
    print(f"diffusion bandit: before {before:.3f} after {after:.3f}")
    # measured: before -1.58, after -0.41
    assert after > before + 0.5, (before, after)
