"""What the actor-critic algorithms share, written once.

A critic on the policy's features, one optimiser over actor and critic, linear learning-rate
annealing, and the minibatch update loop (which the critic-free GRPO family uses too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import OnPolicyBatch
from omnigym.platform.algorithms.base import Algorithm, AlgorithmConfig, anneal_learning_rate
from omnigym.platform.algorithms.optim import FlatParameterGroups, FlatParameters
from omnigym.policies.layers import MLP, orthogonal_init

Metrics = dict[str, Tensor]


@dataclass
class ActorCriticConfig(AlgorithmConfig):
    """What every actor-critic algorithm's config has (defaults: CleanRL's PPO)."""

    num_steps: int = 2048
    """Steps per env per rollout (T)."""
    num_epochs: int = 10
    """Passes over each rollout."""
    num_minibatches: int = 32
    """Minibatches per epoch (minibatch size = T * N / num_minibatches)."""
    learning_rate: float = 3e-4
    """Adam learning rate (policy, and critic unless ``critic_learning_rate`` is set)."""
    critic_learning_rate: float | None = None
    """The critic's own Adam learning rate (annealed alike); None: ``learning_rate``. Fine-tuning a
    pre-trained actor wants a small actor rate while a fresh critic needs a large one (DPPO:
    1e-5 to 1e-4 for the actor, 1e-3 for the critic)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    gamma: float = 0.99
    """Discount."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    bootstrap_truncated: bool = True
    """Bootstrap time-limit truncations from V(final observation); False treats them as terminal."""
    critic_hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden widths of the critic MLP (built on the policy's features)."""
    critic_activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    """Critic activation (tanh, relu, elu, gelu)."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.critic_learning_rate is not None and self.critic_learning_rate <= 0:
            raise ValueError("algo.critic_learning_rate must be > 0 (or null for algo.learning_rate)")
        if self.num_steps < 1 or self.num_epochs < 1 or self.num_minibatches < 1:
            raise ValueError("algo.num_steps, algo.num_epochs and algo.num_minibatches must be >= 1")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("algo.gamma must lie in [0, 1]")


def minibatch_steps(
    batch: OnPolicyBatch,
    num_epochs: int,
    num_minibatches: int,
    compute_loss: Callable[[OnPolicyBatch], tuple[Tensor, Metrics]],
    flat: FlatParameters | FlatParameterGroups,
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float,
    stop: Callable[[Metrics], bool] | None = None,
) -> list[Metrics]:
    """``num_epochs`` passes of shuffled minibatch gradient steps; each step's metrics, in order.

    Every step clips the global gradient norm (reported as ``train/grad_norm``); ``stop`` ends
    the update early (PPO's ``target_kl``).
    """
    history: list[Metrics] = []
    for _ in range(num_epochs):
        for minibatch in batch.minibatches(min(num_minibatches, len(batch))):
            loss, metrics = compute_loss(minibatch)
            flat.zero_grad()
            loss.backward()
            flat.collect_grads()
            metrics["train/grad_norm"] = flat.clip_grad_norm_(max_grad_norm)
            optimizer.step()
            history.append(metrics)
            if stop is not None and stop(metrics):
                return history
    return history


def mean_metrics(history: list[Metrics]) -> dict[str, float]:
    """The mean of each metric over the steps of an update."""
    return {k: float(torch.stack([m[k] for m in history]).mean()) for k in history[0]}


class ActorCritic(Algorithm):
    """An algorithm with a value critic built on ``policy.features`` (PPO, V-trace, ...).

    The config is an :class:`ActorCriticConfig`. Actor and critic share one flat buffer and one fused Adam
    kernel: per-tensor optimiser calls dominate small networks.
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        assert isinstance(config, ActorCriticConfig)
        cfg = config
        sizes = (*cfg.critic_hidden_sizes, 1)
        self.critic = MLP(policy.feature_dim, sizes, cfg.critic_activation, activate_last=False)
        orthogonal_init(self.critic, 2**0.5)
        orthogonal_init(self.critic.layers[-1], 1.0)
        self.critic.to(self.device)
        self.flat: FlatParameters | FlatParameterGroups
        if cfg.critic_learning_rate is None:
            self.flat = FlatParameters([*policy.parameters(), *self.critic.parameters()])
            self.optimizer = torch.optim.Adam(
                [self.flat.param], lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True
            )
        else:
            self.flat = FlatParameterGroups([policy.parameters(), self.critic.parameters()])
            actor, critic = self.flat.flat_params
            lr = cfg.critic_learning_rate
            groups: list[dict[str, Any]] = [
                {"params": [actor]}, {"params": [critic], "lr": lr, "initial_lr": lr}
            ]  # fmt: skip
            self.optimizer = torch.optim.Adam(
                groups,
                lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True,
            )  # fmt: skip

    def value(self, obs: dict[str, Tensor]) -> Tensor:
        """V(s) for a batch. Shape: [B]."""
        return self.value_from_features(self.policy.features(obs))

    def value_from_features(self, features: Tensor) -> Tensor:
        """V(s) from the policy's features of a batch. Shape: [B, feature_dim] -> [B]."""
        return self.critic(features).squeeze(-1)

    def set_progress(self, fraction: float) -> None:
        """Anneal the learning rate linearly: lr = lr0 * (1 - fraction)."""
        cfg = self.config
        assert isinstance(cfg, ActorCriticConfig)
        if cfg.anneal_lr:
            anneal_learning_rate(self.optimizer, cfg.learning_rate, fraction)

    def state_dict(self) -> dict[str, Any]:
        """Critic and optimiser state."""
        return {"critic": self.critic.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
