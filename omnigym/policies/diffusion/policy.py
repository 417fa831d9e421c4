"""Diffusion Policy (Chi et al., 2023): a DDPM over normalised action chunks.

Training (ALGORITHMS.md §9.1): ``k ~ U{0..K-1}``, ``A_k = sqrt(ᾱ_k) A_0 + sqrt(1 - ᾱ_k) ε``,
loss ``mean((ε_θ(A_k, k, obs) - ε)^2)`` with diffusers' ``DDPMScheduler`` (K = 100,
``squaredcos_cap_v2``). Sampling runs ``num_inference_steps`` steps of ``DDIMScheduler``
(deterministic, η = 0) or ``DPMSolverMultistepScheduler`` on the same schedule, with x̂_0
clipped to [-1, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from diffusers import DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler
from gymnasium import spaces
from torch import Tensor

from omnigym.policies.base import PolicyConfig
from omnigym.policies.chunking.policy import ChunkPolicy, ChunkPolicyConfig
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

    def __post_init__(self) -> None:
        """Check the step counts besides the shared fields."""
        super().__post_init__()
        if not 1 <= self.num_inference_steps <= self.num_train_timesteps:
            raise ValueError(
                f"policy.num_inference_steps must be in [1, num_train_timesteps={self.num_train_timesteps}]"
            )


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
