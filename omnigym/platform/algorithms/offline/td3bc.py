"""TD3+BC (Fujimoto & Gu, 2021): TD3 whose actor also regresses onto the dataset's actions.

The actor maximises ``lambda * Q1(s, pi(s)) - (pi(s) - a)^2`` with ``lambda = alpha / mean|Q1(s, pi(s))|``,
so the Q term's scale never swamps the behaviour-cloning term. States are normalised with the
dataset's statistics (``normalize_obs``, the policy's ``normalize_obs: true``). See
docs/algorithms/offline.md; CORL's ``td3_bc.py`` is the reference implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.critics import polyak_update
from omnigym.platform.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from omnigym.platform.algorithms.optim import adam
from omnigym.platform.buffers import ReplayBuffer


@dataclass
class TD3BCConfig(OffPolicyConfig):
    """TD3+BC settings (paper / CORL defaults)."""

    type: str = "td3bc"
    alpha: float = 2.5
    """Weight of the Q term relative to behaviour cloning (``lambda = alpha / mean|Q|``)."""
    policy_noise: float = 0.2
    """Target policy smoothing noise, as a fraction of the action half-range."""
    noise_clip: float = 0.5
    """Clip of the smoothing noise, as a fraction of the action half-range."""
    policy_delay: int = 2
    """Critic steps per actor (and target) step."""


def td3bc_lambda(alpha: float, q_policy: Tensor) -> Tensor:
    """``alpha / mean|Q(s, pi(s))|``, detached: the weight that keeps the Q term's scale fixed."""
    return alpha / q_policy.abs().mean().detach()


class TD3BC(OffPolicyAlgorithm):
    """TD3+BC over a deterministic policy (``action_head: deterministic``) and twin critics."""

    name: ClassVar[str] = "td3bc"
    policy_defaults: ClassVar[dict[str, Any]] = {"type": "mlp", "action_head": "deterministic"}
    config_class: ClassVar[type[TD3BCConfig]] = TD3BCConfig
    config: TD3BCConfig

    def __init__(
        self,
        config: TD3BCConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.q, self.q_target = self.make_critics()
        self.policy_target = self.make_target(policy)
        self.networks = {"q": self.q, "q_target": self.q_target, "policy_target": self.policy_target}
        self.optimizers = {
            "critic": adam(self.q.parameters(), config.critic_lr),
            "actor": adam(policy.parameters(), config.actor_lr),
        }
        self.half_range = (self.action_high - self.action_low) / 2

    def prepare_dataset(self, buffer: ReplayBuffer) -> dict[str, float]:
        """As the base, then the target policy takes the policy's new observation statistics."""
        info = super().prepare_dataset(buffer)
        self.policy_target.load_state_dict(self.policy.state_dict())
        return info

    def critic_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """TD3's clipped double-Q regression onto the smoothed target policy's value."""
        cfg = self.config
        with torch.no_grad():
            next_action, _ = self.policy_target.rsample(batch.next_obs, deterministic=True)
            noise = (torch.randn_like(next_action) * cfg.policy_noise * self.half_range).clamp(
                -cfg.noise_clip * self.half_range, cfg.noise_clip * self.half_range
            )
            next_action = torch.maximum(torch.minimum(next_action + noise, self.action_high), self.action_low)
            next_q = self.q_target(self.critic_input(batch.next_obs), next_action).min(0).values
            target = self.transformed_rewards(batch.rewards) + cfg.gamma * (1 - batch.terminated) * next_q
        q = self.q(self.critic_input(batch.obs), batch.actions)
        loss = (q - target).square().mean(1).sum()
        return loss, {"train/critic_loss": loss.detach(), "train/q_mean": q.detach().mean()}

    def actor_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``-lambda * mean Q1(s, pi(s)) + mean (pi(s) - a)^2``."""
        action, _ = self.policy.rsample(batch.obs, deterministic=True)
        q = self.q.member(0, self.critic_input(batch.obs), action)
        lam = td3bc_lambda(self.config.alpha, q)
        bc = (action - batch.actions).square().mean()
        loss = -lam * q.mean() + bc
        return loss, {"train/actor_loss": loss.detach(), "train/bc_mse": bc.detach(), "train/lambda": lam}

    def update(self, data: TransitionBatch) -> dict[str, float]:
        """One critic step; every ``policy_delay``-th call also an actor step and target updates."""
        loss, metrics = self.critic_loss(data)
        self.step(self.optimizers["critic"], loss)
        self.updates += 1
        if self.updates % self.config.policy_delay == 0:
            actor, actor_metrics = self.actor_loss(data)
            self.step(self.optimizers["actor"], actor)
            metrics.update(actor_metrics)
            polyak_update(self.q_target, self.q, self.config.tau)
            polyak_update(self.policy_target, self.policy, self.config.tau)
        return {k: float(v) for k, v in metrics.items()}
