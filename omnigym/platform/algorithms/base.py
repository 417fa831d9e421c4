"""The Algorithm interface: the thing that learns.

An algorithm owns everything training needs besides the deployable policy: critics, Q-networks,
target networks, optimisers, reward normalisers. It sees only ``Rollout`` batches and the
``Policy`` interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import Rollout


@torch.no_grad()
def rollout_logprob(policy: Policy, rollout: Rollout) -> Tensor:
    """``policy``'s log-probability of every stored action part (0 on invalid steps). Shape: [T, N, L].

    How a proximal, reference or target policy re-scores a rollout (no gradient). Only valid
    steps are scored: padding steps (after a group's episodes all ended) are not transitions and
    may hold nothing a policy can read (a VLM's empty prompt).
    """
    keep = rollout.valid.reshape(-1)

    def flat(t: Tensor) -> Tensor:
        return t.reshape(keep.shape[0], *t.shape[2:])[keep]

    obs = {k: flat(v) for k, v in rollout.obs.items()}
    extras = {k: flat(v) for k, v in rollout.extras.items()}
    logprob = rollout.logprob.new_zeros(rollout.logprob.shape).reshape(keep.shape[0], -1)
    if not keep.any():
        return logprob.reshape(rollout.logprob.shape)
    logprob[keep] = policy.evaluate(obs, flat(rollout.actions), extras).logprob.reshape(int(keep.sum()), -1)
    return logprob.reshape(rollout.logprob.shape)


def anneal_learning_rate(optimizer: torch.optim.Optimizer, initial: float, fraction: float) -> None:
    """Set every group's learning rate to ``initial * (1 - fraction)`` (linear decay to 0).

    A group that carries its own ``"initial_lr"`` (e.g. a critic's) decays from that instead.
    """
    for group in optimizer.param_groups:
        group["lr"] = group.get("initial_lr", initial) * max(0.0, 1.0 - fraction)


@dataclass
class AlgorithmConfig:
    """Base of every algorithm config; ``type`` is the registered algorithm name."""

    type: str = ""


class Algorithm:
    """Learns a policy from data.

    Subclasses set ``name``, ``config_class`` and ``requires`` (the policy capabilities they
    need, checked when the algorithm is built so a mismatch fails at start, not mid-run).
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    requires: ClassVar[tuple[str, ...]] = ("act",)

    def __init__(
        self,
        config: AlgorithmConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        missing = [cap for cap in self.requires if cap not in policy.capabilities]
        if missing:
            switchable = policy.capability_switches
            switches = sorted({switchable[cap] for cap in missing if cap in switchable})
            fix = f"; set policy.{' policy.'.join(switches)}" if switches else ""
            raise ValueError(
                f"algorithm {self.name!r} needs policy capabilities {missing}, which policy "
                f"{policy.name!r} lacks (it has {sorted(policy.capabilities)}){fix}"
            )
        self.config = config
        self.policy = policy
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)

    def process_rollout(self, rollout: Rollout) -> Rollout:
        """Add what the loss needs (values, advantages, returns); the identity by default."""
        return rollout

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """The scalar loss on one minibatch and its diagnostics; pure, no optimiser step."""
        raise NotImplementedError(f"{type(self).__name__} does not implement compute_loss")

    def update(self, data: Any) -> dict[str, float]:
        """Learn from ``data`` (a processed rollout, or a batch); returns metrics."""
        raise NotImplementedError(f"{type(self).__name__} does not implement update")

    def set_progress(self, fraction: float) -> None:
        """Tell the algorithm how far training is (0 -> 1), for schedules such as LR annealing."""

    def state_dict(self) -> dict[str, Any]:
        """Everything besides the policy weights needed to resume exactly."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
