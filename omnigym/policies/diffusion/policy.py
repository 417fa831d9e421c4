"""Diffusion Policy (Chi et al., 2023): a DDPM over normalised action chunks.

Training: ``k ~ U{0..K-1}``, ``A_k = sqrt(ᾱ_k) A_0 + sqrt(1 - ᾱ_k) ε``,
loss ``mean((ε_θ(A_k, k, obs) - ε)^2)`` with diffusers' ``DDPMScheduler`` (K = 100,
``squaredcos_cap_v2``). Sampling runs ``num_inference_steps`` steps of ``DDIMScheduler``
(deterministic, η = 0) or ``DPMSolverMultistepScheduler`` on the same schedule, with x̂_0
clipped to [-1, 1].

RL fine-tuning (DPPO.2), with ``rl_chain``: the chunk is sampled by the DDIM
step with noise, ``x_{k-1} ~ N(μ_k, σ_k^2)`` with ``μ_k = sqrt(ᾱ_prev) x̂_0 + sqrt(1 - ᾱ_prev - σ_k^2) ε̂``
(x̂_0 clipped, ε̂ re-derived from it) and ``σ_k = η sqrt((1 - ᾱ_prev) / (1 - ᾱ_k) (1 - ᾱ_k / ᾱ_prev))``
(η = 1: the DDPM posterior on the strided schedule), the std floored at
``min_sampling_denoising_std`` to sample and at ``min_logprob_denoising_std`` to score, the noise
clipped to ±``randn_clip_value``; only the last ``ft_denoising_steps`` steps are stochastic parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import PolicyConfig
from omnigym.policies.chunking.config import ChunkPolicyConfig
from omnigym.policies.chunking.policy import ChunkPolicy
from omnigym.policies.chunking.unet import ConditionalUnet1D


@dataclass
class DiffusionPolicyConfig(ChunkPolicyConfig):
    """Diffusion Policy: DDPM training, DDIM (default) or DPM-Solver++ sampling."""

    type: str = "diffusion"
    num_train_timesteps: int = 100
    """Diffusion steps K of the training schedule."""
    beta_schedule: str = "squaredcos_cap_v2"
    """diffusers beta schedule (cosine, Nichol & Dhariwal 2021)."""
    sampler: Literal["ddim", "dpmsolver"] = "ddim"
    """Sampler: DDIM (η = 0) or DPM-Solver++ (2nd order multistep)."""
    num_inference_steps: int = 10
    """Denoiser calls per chunk."""
    clip_sample: bool = True
    """Clip the predicted clean chunk x̂_0 to [-1, 1] at each step."""
    rl_chain: bool = False
    """DPPO fine-tuning: ``act`` samples a stochastic DDIM chain and returns its last
    ``ft_denoising_steps`` steps as the action's parts, with Gaussian log-probabilities, and the
    policy gains ``evaluate`` (needs sampler ddim). Off: behaviour cloning's one part of log-prob 0."""
    ft_denoising_steps: int = 0
    """Stochastic (fine-tuned) denoising steps K', the last ones of the chain; 0: all of them."""
    ddim_eta: float = 1.0
    """η of the stochastic DDIM step (1: the DDPM posterior variance on the strided schedule)."""
    min_sampling_denoising_std: float = 0.1
    """Floor of the std the chain samples with (DPPO)."""
    min_logprob_denoising_std: float = 0.1
    """Floor of the std the log-probability uses (DPPO; keeps the last steps' likelihood finite)."""
    randn_clip_value: float = 3.0
    """Clip the chain's standard normal noise to ±this (DPPO; 0: no clipping)."""
    logprob_min: float = -5.0
    """Clamp of each element's log-probability from below (DPPO)."""
    logprob_max: float = 2.0
    """Clamp of each element's log-probability from above (DPPO)."""
    logprob_slice: Literal["executed", "chunk"] = "executed"
    """Score the executed slice of the chunk (DPPO) or the whole chunk."""
    logprob_reduce: Literal["mean", "sum"] = "mean"
    """Reduce the per-element log-probabilities of a step by their mean (DPPO) or sum."""

    def __post_init__(self) -> None:
        """Check the step counts besides the shared fields."""
        super().__post_init__()
        if not 1 <= self.num_inference_steps <= self.num_train_timesteps:
            raise ValueError(
                f"policy.num_inference_steps must be in [1, num_train_timesteps={self.num_train_timesteps}]"
            )
        if not 0 <= self.ft_denoising_steps <= self.num_inference_steps:
            raise ValueError(
                f"policy.ft_denoising_steps must be in [0, num_inference_steps={self.num_inference_steps}]"
            )
        if self.rl_chain and self.sampler != "ddim":
            raise ValueError("policy.rl_chain samples with stochastic DDIM steps: set sampler to ddim")
        if self.min_sampling_denoising_std <= 0 or self.min_logprob_denoising_std <= 0:
            raise ValueError("policy.min_sampling_denoising_std and min_logprob_denoising_std must be > 0")


class DiffusionPolicy(ChunkPolicy):
    """ε-prediction DDPM over action chunks (Chi et al., 2023); see the module docstring."""

    name: ClassVar[str] = "diffusion"
    config_class: ClassVar[type[PolicyConfig]] = DiffusionPolicyConfig
    config: DiffusionPolicyConfig

    def __init__(
        self, config: DiffusionPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        schedule: dict[str, Any] = {
            "num_train_timesteps": config.num_train_timesteps,
            "beta_schedule": config.beta_schedule,
            "prediction_type": "epsilon",
        }
        # diffusers' schedulers are typed loosely (lazy imports), hence Any
        self.noise_scheduler: Any = DDPMScheduler(
            **schedule, clip_sample=config.clip_sample, variance_type="fixed_small"
        )
        if config.sampler == "ddim":
            self.sampler: Any = DDIMScheduler(
                **schedule, clip_sample=config.clip_sample, set_alpha_to_one=True, steps_offset=0
            )
        else:
            self.sampler = DPMSolverMultistepScheduler(
                **schedule, algorithm_type="dpmsolver++", solver_order=2, thresholding=False
            )

    def objective(self, actions: Tensor, cond: Tensor) -> tuple[Tensor, dict[str, float]]:
        """ε-prediction loss ``mean((ε_θ(A_k, k, obs) - ε)^2)``. Shapes: [B, Tp, Da], [B, C]."""
        noise = torch.randn_like(actions)
        steps = torch.randint(0, self.config.num_train_timesteps, (actions.shape[0],), device=actions.device)
        noisy = self.noise_scheduler.add_noise(actions, noise, steps)  # sqrt(ᾱ_k) A_0 + sqrt(1 - ᾱ_k) ε
        loss = F.mse_loss(self.model.unet(noisy, steps.float(), cond), noise)
        return loss, {"train/loss_denoise": float(loss.detach())}

    def sample(self, noise: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, list[Tensor]]:
        """Reverse the diffusion from ``noise [B, Tp, Da]`` in ``num_inference_steps`` steps."""
        self.sampler.set_timesteps(self.config.num_inference_steps, device=noise.device)
        x, chain = noise, [noise]
        for k in self.sampler.timesteps:
            epsilon = unet(x, k.float().expand(x.shape[0]), cond)
            x = self.sampler.step(epsilon, k, x).prev_sample
            chain.append(x)
        if self.config.sampler == "dpmsolver" and self.config.clip_sample:
            x = x.clamp(-1, 1)
        return x, chain

    # --- RL fine-tuning (DPPO) ------------------------------------------------------------------
    @property
    def num_chain_steps(self) -> int:
        """DDIM steps per chunk."""
        return self.config.num_inference_steps

    @property
    def num_chain_parts(self) -> int:
        """The fine-tuned (stochastic) last steps K'."""
        return self.config.ft_denoising_steps or self.config.num_inference_steps

    def _chain_alphas(self, step: int, device: torch.device) -> tuple[int, Tensor, Tensor]:
        """DDIM step ``step``'s timestep k, ᾱ_k and ᾱ_prev (1 after the last step)."""
        cfg = self.config
        ratio = cfg.num_train_timesteps // cfg.num_inference_steps  # diffusers' "leading" spacing
        timestep = (cfg.num_inference_steps - 1 - step) * ratio
        alphas = self.sampler.alphas_cumprod.to(device)
        prev = timestep - ratio
        alpha_prev = alphas[prev] if prev >= 0 else torch.ones((), device=device)
        return timestep, alphas[timestep], alpha_prev

    def chain_transition(
        self, x: Tensor, step: int, cond: Tensor, unet: ConditionalUnet1D, stochastic: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The DDIM step with η = ``ddim_eta`` (stochastic) or 0; see the module docstring."""
        cfg = self.config
        timestep, alpha, alpha_prev = self._chain_alphas(step, x.device)
        epsilon = unet(x, torch.full((x.shape[0],), float(timestep), device=x.device), cond)
        x0 = (x - (1 - alpha).sqrt() * epsilon) / alpha.sqrt()
        if cfg.clip_sample:
            x0 = x0.clamp(-1, 1)
            epsilon = (x - alpha.sqrt() * x0) / (1 - alpha).sqrt()
        variance = (1 - alpha_prev) / (1 - alpha) * (1 - alpha / alpha_prev)
        sigma = cfg.ddim_eta * variance.clamp_min(0).sqrt() if stochastic else torch.zeros_like(alpha)
        mean = alpha_prev.sqrt() * x0 + (1 - alpha_prev - sigma**2).clamp_min(0).sqrt() * epsilon
        return (
            mean,
            sigma.clamp_min(cfg.min_sampling_denoising_std),
            sigma.clamp_min(cfg.min_logprob_denoising_std),
        )
