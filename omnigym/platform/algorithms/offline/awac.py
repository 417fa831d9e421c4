"""AWAC (Nair et al., 2020): an off-policy critic plus advantage-weighted regression onto the data.

The critic is an ordinary TD learner of the current policy (no entropy term); the actor
maximises the dataset (or replay) actions' log-likelihood weighted by ``exp(A / lambda)``, with
``A = Q(s, a) - Q(s, a~pi)``, which keeps the policy close to the data without an explicit
behaviour model. The same losses continue online with new data appended to the buffer.
CORL's ``awac.py`` is the reference implementation.
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


@dataclass
class AWACConfig(OffPolicyConfig):
    """AWAC settings (CORL defaults)."""

    type: str = "awac"
    awac_lambda: float = 1.0
    """Temperature ``lambda`` of the advantage weights ``exp(A / lambda)``."""
    max_weight: float = 100.0
    """Clip of the advantage weights."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        super().__post_init__()
        if self.awac_lambda <= 0 or self.max_weight <= 0:
            raise ValueError("awac_lambda and max_weight must be > 0")


def awac_weights(adv: Tensor, lam: float, max_weight: float) -> Tensor:
    """``min(exp(adv / lambda), max_weight)``."""
    return torch.exp(adv / lam).clamp(max=max_weight)


class AWAC(OffPolicyAlgorithm):
    """AWAC over a squashed-Gaussian policy and twin critics."""

    name: ClassVar[str] = "awac"
    policy_defaults: ClassVar[dict[str, Any]] = {"type": "mlp", "action_head": "squashed_gaussian"}
    requires: ClassVar[tuple[str, ...]] = ("act", "features", "rsample", "evaluate", "trainable")
    config_class: ClassVar[type[AWACConfig]] = AWACConfig
    config: AWACConfig

    def __init__(
        self,
        config: AWACConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.q, self.q_target = self.make_critics()
        self.networks = {"q": self.q, "q_target": self.q_target}
        self.optimizers = {
            "critic": adam(self.q.parameters(), config.critic_lr),
            "actor": adam(policy.parameters(), config.actor_lr),
        }

    def critic_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``sum_j MSE(Q_j(s, a), r + gamma (1 - terminal) min_j Q_targ_j(s', a'))``, ``a' ~ pi(s')``."""
        with torch.no_grad():
            next_action, _ = self.policy.rsample(batch.next_obs)
            next_q = self.q_target(self.critic_input(batch.next_obs), next_action).min(0).values
            target = (
                self.transformed_rewards(batch.rewards) + self.config.gamma * (1 - batch.terminated) * next_q
            )
        q = self.q(self.critic_input(batch.obs), batch.actions)
        loss = (q - target).square().mean(1).sum()
        return loss, {"train/critic_loss": loss.detach(), "train/q_mean": q.detach().mean()}

    def advantage(self, batch: TransitionBatch) -> Tensor:
        """``min_j Q_j(s, a) - min_j Q_j(s, a~pi)`` from one policy sample, without gradient. Shape: [B]."""
        with torch.no_grad():
            features = self.critic_input(batch.obs)
            sampled, _ = self.policy.rsample(batch.obs)
            n = batch.actions.shape[0]
            # dataset and sampled actions in one ensemble call
            q = self.q(features.repeat(2, 1), torch.cat([batch.actions, sampled])).min(0).values
            return q[:n] - q[n:]

    def actor_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``-mean(w * log pi(a|s))`` with ``w = min(exp(A / lambda), max_weight)``."""
        adv = self.advantage(batch)
        weights = awac_weights(adv, self.config.awac_lambda, self.config.max_weight)
        logprob = self.policy.evaluate(batch.obs, batch.actions).logprob.reshape(-1)
        loss = -(weights * logprob).mean()
        return loss, {
            "train/actor_loss": loss.detach(),
            "train/adv_mean": adv.mean(),
            "train/weight_mean": weights.mean(),
            "train/logprob": logprob.detach().mean(),
        }

    def update(self, data: TransitionBatch) -> dict[str, float]:
        """A critic step, then an actor step with the updated critic, then the Polyak target update."""
        critic, metrics = self.critic_loss(data)
        self.step(self.optimizers["critic"], critic)
        actor, actor_metrics = self.actor_loss(data)
        self.step(self.optimizers["actor"], actor)
        polyak_update(self.q_target, self.q, self.config.tau)
        self.updates += 1
        metrics.update(actor_metrics)
        values = torch.stack(list(metrics.values())).tolist()  # one sync for all metrics
        return dict(zip(metrics, values, strict=True))
