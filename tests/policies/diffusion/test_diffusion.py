"""Diffusion Policy: the noise schedule, the samplers, and seeded determinism."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from omnigym.policies.diffusion.policy import DiffusionPolicy


@pytest.fixture
def make(chunk_policy: Callable[..., Any]) -> Callable[..., Any]:
    """A tiny ``DiffusionPolicy`` with these overrides (see tests/policies/conftest.py)."""
    return functools.partial(chunk_policy, DiffusionPolicy)


def test_cosine_schedule_matches_the_reference_numbers(make: Callable[..., Any]) -> None:
    """docs/algorithms: ᾱ_0 = 0.999369, ᾱ_49 = 0.493844, ᾱ_99 = 2.4286e-7, last β clipped to 0.999."""
    alphas = make().noise_scheduler.alphas_cumprod
    assert alphas[0].item() == pytest.approx(0.999369, abs=1e-6)
    assert alphas[49].item() == pytest.approx(0.493844, abs=1e-6)
    assert alphas[99].item() == pytest.approx(2.4286e-7, rel=1e-3)
    assert make().noise_scheduler.betas[-1].item() == pytest.approx(0.999)


@pytest.mark.parametrize(("sampler", "steps"), [("ddim", 10), ("ddim", 3), ("dpmsolver", 5)])
def test_sampler_calls_the_denoiser_once_per_step(sampler: str, steps: int, make: Callable[..., Any]) -> None:
    policy = make(sampler=sampler, num_inference_steps=steps)
    calls = []
    policy.acting_model.unet.register_forward_hook(lambda *_: calls.append(1))
    history = {"state": torch.randn(3, 2, 3)}
    chunk, chain = policy.sample_chunks(history)
    assert len(calls) == steps
    assert chunk.shape == (3, 8, 2) and len(chain) == steps + 1
    assert ((chunk >= -1) & (chunk <= 1)).all()


def test_seeded_sampling_is_repeatable_and_deterministic_mode_ignores_the_batch_layout(
    make: Callable[..., Any],
) -> None:
    policy = make()
    history = {"state": torch.randn(4, 2, 3)}
    torch.manual_seed(1)
    first, _ = policy.sample_chunks(history)
    torch.manual_seed(1)
    again, _ = policy.sample_chunks(history)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert not torch.allclose(first[0], policy.sample_chunks(history)[0][0])  # fresh noise differs
    whole, _ = policy.sample_chunks(history, deterministic=True)
    part, _ = policy.sample_chunks({"state": history["state"][2:3]}, deterministic=True)
    torch.testing.assert_close(part[0], whole[2], rtol=0, atol=1e-5)  # batched kernels round differently


def test_training_step_targets_the_added_noise(make: Callable[..., Any]) -> None:
    """With the denoiser replaced by the true noise, the ε-prediction loss is 0."""
    policy = make()
    actions = torch.rand(4, 8, 2) * 2 - 1
    captured: dict[str, torch.Tensor] = {}
    real_randn_like = torch.randn_like

    def remember(x: torch.Tensor) -> torch.Tensor:
        captured["noise"] = real_randn_like(x)
        return captured["noise"]

    original = policy.model.unet.forward
    policy.model.unet.forward = lambda sample, times, cond: (
        captured["noise"] + 0 * original(sample, times, cond)
    )  # type: ignore[method-assign]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "randn_like", remember)
        loss, metrics = policy.objective(actions, torch.zeros(4, policy.model.encoder.out_dim))
    assert loss.item() == 0.0 and metrics["train/loss_denoise"] == 0.0
