"""CQL (Kumar et al., 2020): SAC whose critics push down Q off the data and up on it.

Each critic's loss adds ``alpha_cql * gap_j``, where ``gap_j`` is the batch mean of a soft maximum
of ``Q_j`` over sampled actions (uniform, next-state and current policy samples, importance-
weighted by their densities: CQL(H)) minus ``Q_j`` of the dataset action. The Lagrange variant
tunes the weight so the gap settles at ``cql_target_action_gap``. See docs/algorithms/offline.md;
CORL's ``cql.py`` is the reference implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy
from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.optim import adam
from omnigym.platform.algorithms.sac import SAC, SACConfig, repeat_obs


@dataclass
class CQLConfig(SACConfig):
    """CQL settings (CORL's MuJoCo configs)."""

    type: str = "cql"
    actor_lr: float = 3e-5
    """Adam learning rate of the policy (CORL MuJoCo: 3e-5)."""
    hidden_sizes: tuple[int, ...] = (256, 256, 256)
    """Critic widths (CORL MuJoCo: 3 hidden layers of 256)."""
    backup_entropy: bool = False
    """CQL's critic target has no entropy term by default."""
    normalize_obs: bool = True
    """Observations normalised with the dataset's statistics (CORL; needs the policy's ``normalize_obs``)."""
    normalize_reward: bool = True
    """Rewards scaled by 1000 / (max - min episode return) (CORL MuJoCo)."""
    cql_alpha: float = 10.0
    """Weight ``alpha_cql`` of the conservative gap."""
    cql_n_actions: int = 10
    """``N``: uniform, next-policy and current-policy samples per state (each)."""
    cql_temperature: float = 1.0
    """``T`` of the soft maximum ``T * logsumexp(X / T)``."""
    cql_lagrange: bool = False
    """Tune the gap's weight ``alpha' = exp(log_alpha')`` towards ``cql_target_action_gap``."""
    cql_target_action_gap: float = 0.8
    """``tau_gap`` of the Lagrange variant (AntMaze: 0.8)."""
    cql_clip_diff_min: float = -math.inf
    """Per-sample clip of ``lse - Q(s, a_data)`` from below (AntMaze: -200)."""
    cql_clip_diff_max: float = math.inf
    """Per-sample clip of ``lse - Q(s, a_data)`` from above."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        super().__post_init__()
        if self.cql_n_actions < 1 or self.cql_temperature <= 0:
            raise ValueError("cql_n_actions must be >= 1 and cql_temperature > 0")
        if self.cql_clip_diff_min > self.cql_clip_diff_max:
            raise ValueError("cql_clip_diff_min must be <= cql_clip_diff_max")


def cql_logsumexp_gap(
    q_data: Tensor,
    q_random: Tensor,
    q_next: Tensor,
    q_current: Tensor,
    log_density_random: Tensor | float,
    logp_next: Tensor,
    logp_current: Tensor,
    temperature: float = 1.0,
    clip: tuple[float, float] = (-math.inf, math.inf),
) -> tuple[Tensor, Tensor]:
    """CQL(H)'s importance-sampled soft maximum and gap, per critic.

    Args:
        q_data: ``Q_j(s, a_data)``. Shape: [n, B].
        q_random: ``Q_j(s, u_n)`` of the uniform samples. Shape: [n, B, N].
        q_next: ``Q_j(s, a'_n)`` of the next-state policy samples, scored at ``s``. Shape: [n, B, N].
        q_current: ``Q_j(s, a_n)`` of the current-state policy samples. Shape: [n, B, N].
        log_density_random: log-density of the uniform samples (``d * log 0.5`` on ``[-1, 1]^d``).
        logp_next: ``log pi(a'_n | s')``. Shape: [B, N].
        logp_current: ``log pi(a_n | s)``. Shape: [B, N].
        temperature: ``T``.
        clip: bounds of each ``lse - Q(s, a_data)`` before the batch mean.

    Returns:
        ``lse`` [n, B] = ``T * logsumexp(X / T)`` over the 3N importance-weighted values ``X``, and
        ``gap`` [n] = ``mean_B clip(lse - q_data)``.
    """
    x = torch.cat([q_random - log_density_random, q_next - logp_next, q_current - logp_current], dim=-1)
    lse = temperature * torch.logsumexp(x / temperature, dim=-1)
    gap = (lse - q_data).clamp(*clip).mean(-1)
    return lse, gap


class CQL(SAC):
    """CQL(H) with importance sampling over SAC; optionally with the Lagrange-tuned gap weight."""

    name: ClassVar[str] = "cql"
    config_class: ClassVar[type[CQLConfig]] = CQLConfig
    config: CQLConfig

    def __init__(
        self,
        config: CQLConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.log_density_uniform = float(-torch.log(self.action_high - self.action_low).sum())
        """log-density of uniform actions in the action box (``d * log 0.5`` on ``[-1, 1]^d``)."""
        if config.cql_lagrange:
            self.alpha_prime = LagrangeMultiplier().to(self.device)
            self.networks["log_alpha_prime"] = self.alpha_prime
            self.optimizers["alpha_prime"] = adam(self.alpha_prime.parameters(), config.critic_lr)
            self.critic_optimizers = ("critic", "alpha_prime")

    def lagrange_loss(self, gap: Tensor) -> Tensor:
        """``-mean_j alpha' * alpha_cql * (gap_j - tau_gap)``, the gaps detached.

        Descent raises ``alpha'`` while the gap exceeds ``tau_gap`` (the spec's ``-0.5 * sum_j`` for
        twin critics).
        """
        cfg = self.config
        return -(self.alpha_prime.value() * cfg.cql_alpha * (gap.detach() - cfg.cql_target_action_gap)).mean()

    def critic_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``sum_j [MSE(Q_j(s, a), y) + w * gap_j]``; ``w = alpha_cql`` (Lagrange: ``alpha' * alpha_cql``).

        With Lagrange the term is ``alpha' * alpha_cql * (gap_j - tau_gap)``, ``alpha'`` detached.

        One policy call samples ``N`` actions at every ``s`` and ``s'``; the first next-state sample
        of each state (all ``N`` with ``max_target_backup``) also serves the TD target. One
        ensemble call scores the data actions and all ``3N`` samples per state.
        """
        cfg = self.config
        b, n = len(batch), cfg.cql_n_actions
        features = self.critic_input(batch.obs)
        with torch.no_grad():
            both = {k: torch.cat([batch.obs[k], batch.next_obs[k]]) for k in batch.obs}
            actions, logp = self.policy.rsample(repeat_obs(both, n))
            current_actions, next_actions = actions.split(b * n)
            logp_current, logp_next = logp.view(2, b, n)
            if cfg.max_target_backup:
                target = self.td_target(batch, next_actions, logp_next.reshape(-1))
            else:
                target = self.td_target(batch, next_actions.view(b, n, -1)[:, 0], logp_next[:, 0])
            uniform = (
                torch.rand_like(current_actions) * (self.action_high - self.action_low) + self.action_low
            )
        repeated = features.repeat_interleave(n, dim=0)
        q_all = self.q(
            torch.cat([features, repeated, repeated, repeated]),
            torch.cat([batch.actions, uniform, next_actions, current_actions]),
        )
        q_data = q_all[:, :b]
        q_random, q_next, q_current = q_all[:, b:].view(-1, 3, b, n).unbind(1)
        _, gap = cql_logsumexp_gap(
            q_data,
            q_random,
            q_next,
            q_current,
            self.log_density_uniform,
            logp_next,
            logp_current,
            cfg.cql_temperature,
            (cfg.cql_clip_diff_min, cfg.cql_clip_diff_max),
        )
        mse = (q_data - target).square().mean(1)
        metrics = {"train/critic_loss": mse.detach().sum(), "train/q_mean": q_data.detach().mean()}
        metrics["train/cql_gap"] = gap.detach().mean()
        if cfg.cql_lagrange:
            alpha_prime = self.alpha_prime.value()
            conservative = alpha_prime.detach() * cfg.cql_alpha * (gap - cfg.cql_target_action_gap)
            lagrange = self.lagrange_loss(gap)
            metrics["train/alpha_prime"] = alpha_prime.detach()
            metrics["train/alpha_prime_loss"] = lagrange.detach()
            loss = (mse + conservative).sum() + lagrange  # separate parameters: one backward serves both
        else:
            loss = (mse + cfg.cql_alpha * gap).sum()
        return loss, metrics


class LagrangeMultiplier(nn.Module):
    """CQL's ``alpha' = clip(exp(log_alpha'), 0, 1e6)``, starting at 1."""

    def __init__(self) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.zeros(()))

    def value(self) -> Tensor:
        """``alpha'``, with gradient to ``log_alpha'``."""
        return self.log_alpha.exp().clamp(0.0, 1e6)
