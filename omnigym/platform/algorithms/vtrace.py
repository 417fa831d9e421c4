"""IMPALA actor-critic with V-trace targets (Espeholt et al., 2018).

V-trace corrects for the gap between the behaviour policy ``mu`` that collected a rollout and the
target policy ``pi`` being learned with truncated importance weights ``rho = pi / mu``::

    delta_s      = min(rho_bar, rho_s) * (r_s + gamma_s * V(x_{s+1}) - V(x_s))
    v_s - V(x_s) = delta_s + gamma_s * min(c_bar, rho_s) * (v_{s+1} - V(x_{s+1}))
    A_s          = min(rho_pg_bar, rho_s) * (r_s + gamma_s * v_{s+1} - V(x_s))

    loss = mean(-A_s * log pi(a_s|x_s)) + vf_coef * mean(0.5 * (v_s - V(x_s))^2) - ent_coef * mean(H)

The targets ``v_s`` and advantages ``A_s`` are computed once per rollout in :meth:`VTrace.process_rollout`,
with the current policy as ``pi`` and the current critic as ``V``, and are constants in the loss. A
multi-part action's log-probability (and entropy) is the sum over its valid parts, so ``rho`` is the
importance weight of the whole action.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from omnigym.core.types import OnPolicyBatch, Rollout
from omnigym.platform.algorithms.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    mean_metrics,
    minibatch_steps,
)
from omnigym.platform.algorithms.advantages import vtrace
from omnigym.platform.algorithms.base import AlgorithmConfig
from omnigym.platform.algorithms.ppo import explained_variance


@dataclass
class VTraceConfig(ActorCriticConfig):
    """IMPALA / V-trace hyperparameters (loss coefficients: RLlib IMPALA; sizes: CleanRL's CartPole PPO)."""

    type: str = "vtrace"
    num_steps: int = 128
    """Steps per env per rollout (T, the length of each V-trace segment)."""
    num_epochs: int = 1
    """Passes over each rollout (IMPALA: 1)."""
    num_minibatches: int = 4
    learning_rate: float = 2.5e-4
    ent_coef: float = 0.01
    max_grad_norm: float = 40.0
    """Global gradient-norm clip (RLlib IMPALA ``grad_clip``)."""
    rho_bar: float = 1.0
    """Truncation of the importance weight in the value-target TD errors."""
    c_bar: float = 1.0
    """Truncation of the trace coefficients c_s."""
    rho_pg_bar: float = 1.0
    """Truncation of the importance weight in the policy-gradient advantage."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        super().__post_init__()
        if min(self.rho_bar, self.c_bar, self.rho_pg_bar) <= 0:
            raise ValueError("algo.rho_bar, algo.c_bar and algo.rho_pg_bar must be > 0")


def sum_parts(x: Tensor, mask: Tensor) -> Tensor:
    """Sum over the valid action parts (masked parts count 0, even if infinite). Shape: [..., L] -> [...]."""
    return torch.where(mask, x, torch.zeros_like(x)).sum(-1)


class VTrace(ActorCritic):
    """IMPALA's learner loss with V-trace targets and a critic on ``policy.features``."""

    name: ClassVar[str] = "vtrace"
    config_class: ClassVar[type[AlgorithmConfig]] = VTraceConfig
    requires: ClassVar[tuple[str, ...]] = ("act", "evaluate", "features", "trainable")
    config: VTraceConfig

    # --- targets -----------------------------------------------------------------------------
    @torch.no_grad()
    def process_rollout(self, rollout: Rollout) -> Rollout:
        """V-trace targets (``returns``) and policy-gradient advantages with the current policy as pi."""
        cfg = self.config
        rollout = rollout.to(self.device)
        T, N = rollout.num_steps, rollout.num_envs

        def flat(t: Tensor) -> Tensor:
            return t.reshape(T * N, *t.shape[2:])

        flat_obs = {k: flat(v) for k, v in rollout.obs.items()}
        evaluation, features = self.policy.evaluate_with_features(
            flat_obs, flat(rollout.actions), {k: flat(v) for k, v in rollout.extras.items()}
        )
        values = self.value_from_features(features).reshape(T, N)
        # V(x_{s+1}) within each episode, as PPO.process_rollout: the next stored observation, the
        # rollout's final observation, or the true final observation of a truncated episode.
        next_values = torch.empty_like(values)
        next_values[:-1] = values[1:]
        next_values[-1] = self.value(rollout.next_obs)
        if len(rollout.final_index):
            t, n = rollout.final_index.unbind(-1)
            next_values[t, n] = self.value(rollout.final_obs)
        current = sum_parts(evaluation.logprob.reshape(rollout.logprob.shape), rollout.mask)
        behaviour = sum_parts(rollout.logprob, rollout.mask)
        # Steps that are not transitions (next-step autoreset) never enter a loss: give them rho = 1.
        log_rhos = torch.where(rollout.valid, current - behaviour, torch.zeros_like(current))
        terminated = rollout.terminated if cfg.bootstrap_truncated else rollout.dones
        vs, pg_advantages = vtrace(
            log_rhos,
            rollout.rewards,
            values,
            next_values,
            terminated,
            rollout.dones,
            cfg.gamma,
            rho_bar=cfg.rho_bar,
            c_bar=cfg.c_bar,
            rho_pg_bar=cfg.rho_pg_bar,
        )
        rollout.values, rollout.advantages, rollout.returns = values, pg_advantages, vs
        return rollout

    # --- loss --------------------------------------------------------------------------------
    def compute_loss(self, batch: OnPolicyBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Policy gradient with constant V-trace advantages + value regression - entropy bonus."""
        cfg = self.config
        evaluation, features = self.policy.evaluate_with_features(batch.obs, batch.actions, batch.extras)
        logprob = sum_parts(evaluation.logprob, batch.mask)  # log pi(a|x) of the whole action, [B]
        pg_loss = -(batch.advantages.detach() * logprob).mean()
        new_values = self.value_from_features(features)
        v_loss = 0.5 * ((batch.returns - new_values) ** 2).mean()
        entropy = sum_parts(evaluation.entropy, batch.mask).mean()
        loss = pg_loss + cfg.vf_coef * v_loss
        if cfg.ent_coef:
            loss = loss - cfg.ent_coef * entropy
        with torch.no_grad():
            logratio = logprob - sum_parts(batch.logprob, batch.mask)  # current vs behaviour
            ratio = logratio.exp()
            metrics = {
                "train/loss_policy": pg_loss.detach(),
                "train/loss_value": v_loss.detach(),
                "train/entropy": entropy.detach(),
                "train/approx_kl": ((ratio - 1.0) - logratio).mean(),
                "train/rho": ratio.mean(),
                "train/rho_truncated_frac": (ratio > cfg.rho_bar).float().mean(),
            }
        return loss, metrics

    def update(self, data: Rollout) -> dict[str, float]:
        """``num_epochs`` passes of shuffled minibatch steps over a processed rollout."""
        cfg = self.config
        batch = data.flatten()
        history = minibatch_steps(
            batch, cfg.num_epochs, cfg.num_minibatches, self.compute_loss, self.flat, self.optimizer,
            cfg.max_grad_norm,
        )  # fmt: skip
        out = mean_metrics(history)
        out["train/explained_variance"] = explained_variance(batch.values, batch.returns)
        out["train/learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        out["train/num_updates"] = float(len(history))
        return out
