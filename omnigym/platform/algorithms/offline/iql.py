"""IQL (Kostrikov et al., 2021): in-sample Q-learning, then advantage-weighted policy extraction.

IQL never evaluates Q on actions outside the dataset. A state-value network ``V`` learns an upper
expectile of ``Q(s, a)`` over the dataset's actions (expectile regression with ``tau > 0.5``
approximates the max over in-support actions), Q regresses onto ``r + gamma * V(s')``, and the
policy maximises the dataset actions' log-likelihood weighted by ``exp(beta * (Q - V))``.
CORL's ``iql.py`` is the reference implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.critics import ValueNetwork, polyak_update
from omnigym.platform.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from omnigym.platform.algorithms.optim import adam


@dataclass
class IQLConfig(OffPolicyConfig):
    """IQL settings (paper / CORL MuJoCo-locomotion defaults)."""

    type: str = "iql"
    expectile: float = 0.7
    """Expectile ``tau`` of Q that V regresses to (0.5: the mean; towards 1: the max)."""
    beta: float = 3.0
    """Inverse temperature of the advantage weights ``exp(beta * A)``."""
    max_weight: float = 100.0
    """Clip of the advantage weights."""
    value_lr: float = 3e-4
    """Adam learning rate of V."""
    total_updates: int = 1_000_000
    """Gradient steps the actor's learning rate is cosine-decayed over (to 0)."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        super().__post_init__()
        if not 0 < self.expectile < 1:
            raise ValueError(f"expectile must be in (0, 1), got {self.expectile}")
        if self.value_lr <= 0 or self.total_updates < 1 or self.max_weight <= 0:
            raise ValueError("value_lr, total_updates and max_weight must be > 0")


def expectile_loss(u: Tensor, tau: float) -> Tensor:
    """``mean(|tau - 1(u < 0)| * u^2)``: asymmetric squared error of residuals ``u = target - prediction``.

    With ``tau > 0.5`` under-estimates (``u > 0``) cost more, so the prediction settles at an
    upper expectile of the targets; ``tau = 0.5`` is half the plain MSE.
    """
    weight = torch.where(u < 0, 1 - tau, tau)
    return (weight * u.square()).mean()


def awr_weights(adv: Tensor, beta: float, max_weight: float) -> Tensor:
    """``min(exp(beta * adv), max_weight)``: advantage-weighted regression's per-sample weights."""
    return torch.exp(beta * adv).clamp(max=max_weight)


def cosine_lr(initial: float, step: int, total: int) -> float:
    """``initial * (1 + cos(pi * step / total)) / 2``: cosine decay to 0 at ``total`` (then 0)."""
    return initial * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))


class IQL(OffPolicyAlgorithm):
    """IQL over a Gaussian policy (``action_head: gaussian``), twin critics and a value network."""

    name: ClassVar[str] = "iql"
    policy_defaults: ClassVar[dict[str, Any]] = {
        "type": "mlp",
        "action_head": "gaussian",
        "bounded_mean": True,
    }
    requires: ClassVar[tuple[str, ...]] = ("act", "features", "evaluate", "trainable")
    config_class: ClassVar[type[IQLConfig]] = IQLConfig
    config: IQLConfig

    def __init__(
        self,
        config: IQLConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.q, self.q_target = self.make_critics()
        self.value = ValueNetwork(policy.feature_dim, config.hidden_sizes).to(self.device)
        self.networks = {"q": self.q, "q_target": self.q_target, "value": self.value}
        self.optimizers = {
            "critic": adam(self.q.parameters(), config.critic_lr),
            "value": adam(self.value.parameters(), config.value_lr),
            "actor": adam(policy.parameters(), config.actor_lr),
        }

    # --- losses (pure) ----------------------------------------------------------------------------
    def value_loss(self, features: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """Expectile regression of ``V(s)`` onto ``min_j Q_targ_j(s, a)``; also returns the advantage.

        The advantage ``min_j Q_targ_j(s, a) - V(s)`` (detached) is what the actor weights by.
        """
        with torch.no_grad():
            target_q = self.q_target(features, actions).min(0).values
        v = self.value(features)
        adv = target_q - v
        loss = expectile_loss(adv, self.config.expectile)
        return loss, adv.detach(), {"train/value_loss": loss.detach(), "train/v_mean": v.detach().mean()}

    def q_target_value(self, rewards: Tensor, terminated: Tensor, next_v: Tensor) -> Tensor:
        """``r + gamma * (1 - terminal) * V(s')`` with the transformed rewards."""
        return self.transformed_rewards(rewards) + self.config.gamma * (1 - terminated) * next_v

    # IQL's critic and actor losses take the V step's shared inputs, so it overrides compute_loss too.
    def critic_loss(  # type: ignore[override]
        self, features: Tensor, batch: TransitionBatch, next_v: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``mean_j MSE(Q_j(s, a), r + gamma (1 - terminal) V(s'))``; ``next_v`` is detached."""
        target = self.q_target_value(batch.rewards, batch.terminated, next_v)
        q = self.q(features, batch.actions)
        loss = (q - target).square().mean()
        return loss, {"train/critic_loss": loss.detach(), "train/q_mean": q.detach().mean()}

    def actor_loss(self, batch: TransitionBatch, adv: Tensor) -> tuple[Tensor, dict[str, Tensor]]:  # type: ignore[override]
        """``-mean(w * log pi(a|s))`` with ``w = min(exp(beta * adv), max_weight)``."""
        weights = awr_weights(adv, self.config.beta, self.config.max_weight)
        logprob = self.policy.evaluate(batch.obs, batch.actions).logprob.reshape(-1)
        loss = -(weights * logprob).mean()
        return loss, {
            "train/actor_loss": loss.detach(),
            "train/adv_mean": adv.mean(),
            "train/weight_mean": weights.mean(),
            "train/logprob": logprob.detach().mean(),
        }

    def compute_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Value, critic and actor loss on one batch (before any step) and their parts."""
        features, next_v = self._inputs(batch)
        value, adv, metrics = self.value_loss(features, batch.actions)
        critic, critic_metrics = self.critic_loss(features, batch, next_v)
        actor, actor_metrics = self.actor_loss(batch, adv)
        return value + critic + actor, {**metrics, **critic_metrics, **actor_metrics}

    def _inputs(self, batch: TransitionBatch) -> tuple[Tensor, Tensor]:
        """The critics' features of ``s`` and ``V(s')`` under the current V (no gradient)."""
        features = self.critic_input(batch.obs)
        with torch.no_grad():
            next_v = self.value(self.critic_input(batch.next_obs))
        return features, next_v

    # --- training ---------------------------------------------------------------------------------
    def update(self, data: TransitionBatch) -> dict[str, float]:
        """One IQL step in CORL's order: V, then Q (with the pre-step ``V(s')``), then pi, then targets."""
        cfg = self.config
        features, next_v = self._inputs(data)
        value, adv, metrics = self.value_loss(features, data.actions)
        self.step(self.optimizers["value"], value)
        critic, critic_metrics = self.critic_loss(features, data, next_v)
        self.step(self.optimizers["critic"], critic)
        lr = cosine_lr(cfg.actor_lr, self.updates, cfg.total_updates)
        for group in self.optimizers["actor"].param_groups:
            group["lr"] = lr
        actor, actor_metrics = self.actor_loss(data, adv)
        self.step(self.optimizers["actor"], actor)
        polyak_update(self.q_target, self.q, cfg.tau)
        self.updates += 1
        metrics.update(critic_metrics)
        metrics.update(actor_metrics)
        values = torch.stack(list(metrics.values())).tolist()  # one sync for all metrics
        return {**dict(zip(metrics, values, strict=True)), "train/actor_lr": lr}
