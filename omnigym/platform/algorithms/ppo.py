"""Proximal Policy Optimization (Schulman et al., 2017) with GAE, value clipping and an entropy bonus.

Follows the paper with CleanRL's choices where the libraries differ (docs/algorithms/ppo.md): the
value loss is ``0.5 * max(unclipped, clipped)`` squared error with the policy's clip range, advantages are
normalised per minibatch, the learning rate anneals linearly to 0. Unlike CleanRL, truncated
episodes bootstrap from the value of their true final observation (SB3's rule).

The loss is written over action *parts* (``logprob [B, L]`` with a mask), so the same code
scores a one-part Gaussian action and an L-token text action (token-mean aggregation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.normalization import RunningMeanStd
from omnigym.core.policy import Policy
from omnigym.core.types import OnPolicyBatch, Rollout
from omnigym.platform.algorithms.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    mean_metrics,
    minibatch_steps,
)
from omnigym.platform.algorithms.base import AlgorithmConfig
from omnigym.platform.returns import gae


@dataclass
class PPOConfig(ActorCriticConfig):
    """PPO hyperparameters (defaults: CleanRL ``ppo_continuous_action.py``).

    The fields every actor-critic shares are :class:`ActorCriticConfig`'s.
    """

    type: str = "ppo"
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """Surrogate clip range epsilon."""
    clip_vloss: bool = True
    """Clip the value update to +-vf_clip_coef around the old value (CleanRL's max form)."""
    vf_clip_coef: float | None = None
    """Value clip range; None uses clip_coef."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (skipped for a minibatch of one)."""
    target_kl: float | None = None
    """Stop the update early once a minibatch's approx KL exceeds this."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return (CleanRL's NormalizeReward)."""
    reward_clip: float = 10.0
    """Clip scaled rewards to [-reward_clip, reward_clip]."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        super().__post_init__()
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError("algo.gamma and algo.gae_lambda must lie in [0, 1]")


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    """Mean of ``x`` over the entries where ``mask`` is set (token-mean aggregation).

    ``mask=None`` means every entry counts (the cheap path for one-part actions).
    """
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


class PPO(ActorCritic):
    """PPO with a critic owned by the algorithm, built on ``policy.features``."""

    name: ClassVar[str] = "ppo"
    config_class: ClassVar[type[AlgorithmConfig]] = PPOConfig
    requires: ClassVar[tuple[str, ...]] = ("act", "evaluate", "features", "trainable")
    config: PPOConfig

    def __init__(
        self,
        config: PPOConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.return_rms = RunningMeanStd(()) if config.normalize_reward else None
        self._discounted_return: Tensor | None = None  # per-env running return for reward scaling

    # --- advantages ------------------------------------------------------------------------
    @torch.no_grad()
    def process_rollout(self, rollout: Rollout) -> Rollout:
        """Values, GAE advantages and TD(lambda) returns, bootstrapping truncated episodes."""
        rollout = rollout.to(self.device)
        T, N = rollout.num_steps, rollout.num_envs
        flat_obs = {k: v.reshape(T * N, *v.shape[2:]) for k, v in rollout.obs.items()}
        values = self.value(flat_obs).reshape(T, N)
        # V(s_{t+1}) within each episode: the next stored observation, the rollout's final
        # observation, or (truncation under same_step/disabled autoreset) the true final one.
        next_values = torch.empty_like(values)
        next_values[:-1] = values[1:]
        next_values[-1] = self.value(rollout.next_obs)
        if len(rollout.final_index):
            t, n = rollout.final_index.unbind(-1)
            next_values[t, n] = self.value(rollout.final_obs)
        terminated = rollout.terminated if self.config.bootstrap_truncated else rollout.dones
        rewards = self._scale_rewards(rollout) if self.return_rms is not None else rollout.rewards
        advantages, returns = gae(
            rewards, values, next_values, terminated, rollout.dones, self.config.gamma, self.config.gae_lambda
        )
        rollout.values, rollout.advantages, rollout.returns = values, advantages, returns
        return rollout

    def _scale_rewards(self, rollout: Rollout) -> Tensor:
        """Rewards divided by the running std of the discounted return (updated step by step)."""
        assert self.return_rms is not None
        if self._discounted_return is None:
            self._discounted_return = torch.zeros(rollout.num_envs, dtype=torch.float64, device=self.device)
        scaled = torch.empty_like(rollout.rewards)
        ret = self._discounted_return
        for t in range(rollout.num_steps):
            valid = rollout.valid[t]
            ret = torch.where(valid, ret * self.config.gamma + rollout.rewards[t].double(), ret)
            self.return_rms.update(ret[valid])
            scaled[t] = (rollout.rewards[t] / torch.sqrt(self.return_rms.var + 1e-8)).float()
            ret = torch.where(rollout.dones[t], torch.zeros_like(ret), ret)
        self._discounted_return = ret
        return scaled.clamp(-self.config.reward_clip, self.config.reward_clip)

    # --- loss --------------------------------------------------------------------------------
    def compute_loss(self, batch: OnPolicyBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Clipped surrogate + clipped value loss - entropy bonus on one minibatch (§1.2)."""
        cfg = self.config
        evaluation, features = self.policy.evaluate_with_features(batch.obs, batch.actions, batch.extras)
        mask = None if bool(batch.mask.all()) else batch.mask
        logratio = evaluation.logprob - batch.logprob  # [B, L]
        ratio = logratio.exp()

        advantages = batch.advantages
        if cfg.norm_adv and len(batch) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(-1)  # every part of an action shares its advantage
        # L_clip = max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps))
        neg_advantages = -advantages
        pg_loss1 = neg_advantages * ratio
        pg_loss2 = neg_advantages * ratio.clamp(1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
        pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask)

        new_values = self.value_from_features(features)
        if cfg.clip_vloss:
            # CleanRL: 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)
            eps_v = cfg.clip_coef if cfg.vf_clip_coef is None else cfg.vf_clip_coef
            clipped = batch.values + (new_values - batch.values).clamp(-eps_v, eps_v)
            v_loss = 0.5 * torch.max((new_values - batch.returns) ** 2, (clipped - batch.returns) ** 2).mean()
        else:
            v_loss = 0.5 * ((new_values - batch.returns) ** 2).mean()

        entropy = masked_mean(evaluation.entropy, mask)
        loss = pg_loss + cfg.vf_coef * v_loss
        if cfg.ent_coef:  # no entropy term in the graph when it has no weight (a cheaper backward)
            loss = loss - cfg.ent_coef * entropy

        with torch.no_grad():
            ratio_minus_one = ratio - 1.0
            approx_kl = masked_mean(ratio_minus_one - logratio, mask)  # k3 estimator
            clipfrac = masked_mean((ratio_minus_one.abs() > cfg.clip_coef).float(), mask)
        metrics = {
            "train/loss_policy": pg_loss.detach(),
            "train/loss_value": v_loss.detach(),
            "train/entropy": entropy.detach(),
            "train/approx_kl": approx_kl,
            "train/clipfrac": clipfrac,
        }
        return loss, metrics

    def update(self, data: Rollout) -> dict[str, float]:
        """``num_epochs`` passes of shuffled minibatch steps over a processed rollout."""
        cfg = self.config
        batch = data.flatten()
        target_kl = cfg.target_kl

        def stop(metrics: dict[str, Tensor]) -> bool:
            return target_kl is not None and float(metrics["train/approx_kl"]) > target_kl

        history = minibatch_steps(
            batch, cfg.num_epochs, cfg.num_minibatches, self.compute_loss, self.flat, self.optimizer,
            cfg.max_grad_norm, stop,
        )  # fmt: skip
        out = mean_metrics(history)
        out["train/explained_variance"] = explained_variance(batch.values, batch.returns)
        out["train/learning_rate"] = float(self.optimizer.param_groups[0]["lr"])
        out["train/num_updates"] = float(len(history))
        return out

    # --- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Critic, optimiser and reward-normaliser state."""
        return {
            **super().state_dict(),
            "return_rms": self.return_rms.state_dict() if self.return_rms is not None else None,
            "discounted_return": self._discounted_return,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        if self.return_rms is not None and state.get("return_rms") is not None:
            self.return_rms.load_state_dict(state["return_rms"])
        discounted = state.get("discounted_return")
        self._discounted_return = discounted.to(self.device) if discounted is not None else None


def explained_variance(values: Tensor, returns: Tensor) -> float:
    """1 - Var(returns - values) / Var(returns); 1 is a perfect critic, <= 0 a useless one."""
    var = returns.var()
    return float("nan") if var == 0 else float(1.0 - (returns - values).var() / var)
