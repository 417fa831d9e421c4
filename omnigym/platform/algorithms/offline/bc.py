"""Behaviour cloning: fit the policy to a dataset's actions by supervised learning.

The loss is the policy's own ``compute_loss``: the negative log-likelihood of the dataset's
actions for Gaussian heads, their squared error for a deterministic head (and whatever a flow
or diffusion policy defines). No critics, no rewards: the baseline every offline method should beat
on expert data, and the one they should not lose to on mixed data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from omnigym.platform.algorithms.optim import adam


@dataclass
class BCConfig(OffPolicyConfig):
    """BC settings (CORL ``any_percent_bc`` defaults: batch 256, Adam 3e-4, normalised states)."""

    type: str = "bc"


class BC(OffPolicyAlgorithm):
    """Behaviour cloning of the dataset's actions; the actor optimiser is the whole learner state."""

    name: ClassVar[str] = "bc"
    policy_defaults: ClassVar[dict[str, Any]] = {"type": "mlp", "action_head": "gaussian"}
    requires: ClassVar[tuple[str, ...]] = ("act", "features", "compute_loss", "trainable")
    config_class: ClassVar[type[BCConfig]] = BCConfig
    config: BCConfig

    def __init__(
        self,
        config: BCConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.optimizers = {"actor": adam(policy.parameters(), config.actor_lr)}

    def compute_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy's supervised loss on the batch's observations and actions."""
        loss, _ = self.policy.compute_loss(batch)
        return loss, {"train/bc_loss": loss.detach()}

    def update(self, data: TransitionBatch) -> dict[str, float]:
        """One actor step on the behaviour-cloning loss."""
        loss, info = self.policy.compute_loss(data)
        self.step(self.optimizers["actor"], loss)
        self.updates += 1
        return {"train/bc_loss": float(loss.detach()), **info}
