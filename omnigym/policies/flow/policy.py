"""A rectified-flow / conditional flow-matching action-chunk policy (π0's convention).

Flow matching (Lipman et al., 2023), noise at t = 1 (π0 / SD3, the convention Flow-GRPO's SDE sampler uses):
``x_t = t ε + (1 - t) a``, target velocity ``u = ε - a``, loss ``mean((v_θ(x_t, t, obs) - u)^2)``
with ``t = 0.999 Beta(1.5, 1) + 0.001`` (or uniform). Sampling starts at ``x = ε`` (t = 1) and
integrates ``dx = v dt`` to t = 0 with ``num_inference_steps`` Euler or Heun steps.

RL fine-tuning (Flow-GRPO.1), with ``rl_chain``: each Euler step becomes the
Euler–Maruyama step of the reverse SDE with the ODE's marginals (``sde_step_with_logprob``),
``σ_t = a sqrt(t / (1 - t))`` (``1 - t_1`` in the denominator at t = 1, as the reference code),
``μ = x (1 + σ_t^2 Δt / (2t)) + v (1 + σ_t^2 (1 - t) / (2t)) Δt``, ``x' = μ + σ_t sqrt(-Δt) z``;
every step is a part scored by its Gaussian log-density, or, with ``ft_denoising_steps`` K, only
the last K (DPPO: the earlier ones stay Euler ODE steps, which
:meth:`~omnigym.policies.chunking.policy.ChunkPolicy.freeze_chain_prefix` can pin to the
pre-trained weights). Since the SDE has the ODE's marginals at every t, switching from the ODE to
the SDE at t = K / N keeps the chunk's distribution (up to the discretisation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import PolicyConfig
from omnigym.policies.chunking.config import ChunkPolicyConfig
from omnigym.policies.chunking.policy import ChunkPolicy
from omnigym.policies.chunking.unet import ConditionalUnet1D

TIME_SCALE = 1000.0
"""Flow time t in [0, 1] is fed to the sinusoidal embedding as ``1000 t`` (as SD3 does)."""

VelocityFn = Callable[[Tensor, Tensor], Tensor]
"""``v(x [B, ...], t [B]) -> [B, ...]``."""


def flow_pair(actions: Tensor, noise: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """The interpolant ``x_t = t ε + (1 - t) a`` and target velocity ``u = ε - a``.

    Shapes: actions, noise [B, ...]; t [B].
    """
    t = t.view(-1, *([1] * (actions.dim() - 1)))
    return t * noise + (1 - t) * actions, noise - actions


def integrate(
    velocity: VelocityFn, noise: Tensor, num_steps: int, method: str = "euler"
) -> tuple[Tensor, list[Tensor]]:
    """Integrate ``dx = v(x, t) dt`` from t = 1 (``noise``) to t = 0 in ``num_steps`` equal steps.

    Euler: ``x <- x + Δt v(x, t)``, Δt = -1/N (N calls). Heun: average the velocity at both ends
    of the Euler step (2N calls).

    Returns:
        The end point ``[B, ...]`` and the chain of points (noise first), ``num_steps + 1`` long.
    """
    x, chain = noise, [noise]
    batch = noise.shape[0]
    dt = -1.0 / num_steps
    for i in range(num_steps):
        t = torch.full((batch,), 1.0 - i / num_steps, device=noise.device)
        v = velocity(x, t)
        if method == "heun":
            v = (v + velocity(x + dt * v, t + dt)) / 2
        x = x + dt * v
        chain.append(x)
    return x, chain


@dataclass
class FlowPolicyConfig(ChunkPolicyConfig):
    """Conditional flow matching over action chunks (noise at t = 1)."""

    type: str = "flow"
    num_inference_steps: int = 10
    """Integration steps per chunk."""
    integrator: Literal["euler", "heun"] = "euler"
    """ODE integrator (Heun calls the network twice per step)."""
    time_sampling: Literal["beta", "uniform"] = "beta"
    """Training time: π0's 0.999 Beta(1.5, 1) + 0.001 (more weight on noisy times) or U[0, 1]."""
    rl_chain: bool = False
    """Flow-GRPO fine-tuning: ``act`` samples with the SDE (Euler–Maruyama) and returns each of
    the ``num_inference_steps`` steps as a part with its Gaussian log-probability, and the policy
    gains ``evaluate`` (needs integrator euler). Off: behaviour cloning's one part of log-prob 0."""
    sde_noise_level: float = 0.7
    """Flow-GRPO's noise level a: ``σ_t = a sqrt(t / (1 - t))``."""
    ft_denoising_steps: int = 0
    """Stochastic (fine-tuned) SDE steps K, the last ones of the chain; 0: all of them (Flow-GRPO).
    The first ``num_inference_steps - K`` steps stay deterministic Euler steps and are not parts
    (DPPO's practice: only the low-noise steps that shape the executed action are trained)."""
    logprob_slice: Literal["executed", "chunk"] = "chunk"
    """Score the whole chunk (Flow-GRPO: the whole sample) or its executed slice."""
    logprob_reduce: Literal["mean", "sum"] = "mean"
    """Reduce the per-element log-probabilities of a step by their mean (Flow-GRPO) or sum."""
    ft_freeze_encoder: bool = False
    """Under ``rl_chain``, keep the observation encoder (state MLP, image encoder, a VLA's feature
    projection and LoRA adapters) fixed and fine-tune the action network only: an encoder update moves the
    conditioning of every state at once (docs/policies.md, "VLA on PushCube's pixels")."""

    def __post_init__(self) -> None:
        """Check the step count besides the shared fields."""
        super().__post_init__()
        if self.num_inference_steps < 1:
            raise ValueError(f"policy.num_inference_steps must be >= 1, got {self.num_inference_steps}")
        if self.rl_chain and self.integrator != "euler":
            raise ValueError("policy.rl_chain samples with Euler–Maruyama SDE steps: set integrator to euler")
        if not 0 <= self.ft_denoising_steps <= self.num_inference_steps:
            raise ValueError(
                f"policy.ft_denoising_steps must be in [0, num_inference_steps={self.num_inference_steps}]"
            )
        if self.rl_chain and self.sde_noise_level <= 0:
            raise ValueError("policy.sde_noise_level must be > 0 under rl_chain")


class FlowPolicy(ChunkPolicy):
    """Flow-matching action chunks (Lipman et al., 2023; Liu et al., 2023; π0); see the module doc."""

    name: ClassVar[str] = "flow"
    config_class: ClassVar[type[PolicyConfig]] = FlowPolicyConfig
    config: FlowPolicyConfig

    def __init__(
        self, config: FlowPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)

    def sample_time(self, batch: int, device: torch.device) -> Tensor:
        """Training times. Shape: [B]."""
        if self.config.time_sampling == "uniform":
            return torch.rand(batch, device=device)
        beta = torch.distributions.Beta(torch.tensor(1.5, device=device), torch.tensor(1.0, device=device))
        return 0.999 * beta.sample((batch,)) + 0.001

    def objective(self, actions: Tensor, cond: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Flow-matching loss ``mean((v_θ(x_t, t) - (ε - a))^2)``. Shapes: [B, Tp, Da], [B, C]."""
        t = self.sample_time(actions.shape[0], actions.device)
        x_t, target = flow_pair(actions, torch.randn_like(actions), t)
        loss = F.mse_loss(self.model.unet(x_t, t * TIME_SCALE, cond), target)
        return loss, {"train/loss_flow": float(loss.detach())}

    def sample(self, noise: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, list[Tensor]]:
        """Integrate the learned velocity from ``noise [B, Tp, Da]`` (t = 1) to t = 0."""
        return integrate(
            lambda x, t: unet(x, t * TIME_SCALE, cond),
            noise,
            self.config.num_inference_steps,
            self.config.integrator,
        )

    # --- RL fine-tuning (Flow-GRPO) -------------------------------------------------------------
    @property
    def num_chain_steps(self) -> int:
        """Euler steps per chunk."""
        return self.config.num_inference_steps

    @property
    def num_chain_parts(self) -> int:
        """The fine-tuned (stochastic) last steps K."""
        return self.config.ft_denoising_steps or self.config.num_inference_steps

    def chain_transition(
        self, x: Tensor, step: int, cond: Tensor, unet: ConditionalUnet1D, stochastic: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Flow-GRPO's ``sde_step_with_logprob`` mean and std; see the module docstring."""
        steps = self.config.num_inference_steps
        t, dt = 1.0 - step / steps, -1.0 / steps
        v = unet(x, torch.full((x.shape[0],), t * TIME_SCALE, device=x.device), cond)
        if not stochastic:
            return x + dt * v, torch.zeros(()), torch.zeros(())
        below_one = t if t < 1 else 1.0 - 1.0 / steps  # t_1, the first grid point under 1
        sigma = self.config.sde_noise_level * math.sqrt(t / (1 - below_one))
        mean = x * (1 + sigma**2 * dt / (2 * t)) + v * (1 + sigma**2 * (1 - t) / (2 * t)) * dt
        std = torch.tensor(sigma * math.sqrt(-dt), device=x.device)
        return mean, std, std
