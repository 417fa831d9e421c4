"""A rectified-flow / conditional flow-matching action-chunk policy (π0's convention).

ALGORITHMS.md §9.2, noise at t = 1 (π0 / SD3, the convention Flow-GRPO's SDE sampler uses):
``x_t = t ε + (1 - t) a``, target velocity ``u = ε - a``, loss ``mean((v_θ(x_t, t, obs) - u)^2)``
with ``t = 0.999 Beta(1.5, 1) + 0.001`` (or uniform). Sampling starts at ``x = ε`` (t = 1) and
integrates ``dx = v dt`` to t = 0 with ``num_inference_steps`` Euler or Heun steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor

from omnigym.policies.base import PolicyConfig
from omnigym.policies.chunking.policy import ChunkPolicy, ChunkPolicyConfig
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

    def __post_init__(self) -> None:
        """Check the step count besides the shared fields."""
        super().__post_init__()
        if self.num_inference_steps < 1:
            raise ValueError(f"policy.num_inference_steps must be >= 1, got {self.num_inference_steps}")


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
