"""VL-DAC, Vision-Language Decoupled Actor-Critic (Bredis et al., 2025); docs/algorithms/vldac.md.

PPO made for policies whose action is many parts (the tokens a VLM generates at one environment
step), with the value learned per environment step and the policy updated per part:

* **step-level critic on detached features**: ``V(s) = critic(sg(policy.features(s)))``; the value
  loss trains the critic only, no value gradient reaches the policy;
* **step-level GAE** (gamma 0.9, lambda 0.95), normalised **once over the whole rollout**;
* **part-level clipped PPO**: every part of step t gets ``A_t``; per-part losses are averaged within
  the step, then over steps (``seq-mean-token-mean``, §0.5);
* **per-part k3 KL** to a frozen reference policy (a copy of the initial policy), weight ``kl_coef``;
* **value warm-up**: the first ``value_warmup_updates`` updates train only the critic.

Per step t with valid parts j (mask m)::

    ratio_j = exp(lp_new[t,j] - lp_old[t,j])
    pg_j    = max(-A_t * ratio_j, -A_t * clip(ratio_j, 1 - clip_coef, 1 + clip_coef))
              (-A_t * clip(ratio_j) only, for every part of a step where any ratio > ratio_guard)
    kl_j    = k3(lp_new[t,j], lp_ref[t,j])
    L_pol   = mean_t( sum_j m * (pg_j + kl_coef * kl_j) / sum_j m )
    L_val   = mean_t( max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, -eps, eps) - R_t)^2) )   (no 0.5)
    loss    = L_pol - ent_coef * entropy + vf_coef * L_val        (warm-up: vf_coef * L_val only)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import OnPolicyBatch, Rollout
from omnigym.platform.algorithms.base import AlgorithmConfig, rollout_logprob
from omnigym.platform.algorithms.decoupled import clipped_value_loss
from omnigym.platform.algorithms.losses import k3_kl
from omnigym.platform.algorithms.ppo import PPO, PPOConfig, masked_mean

REFERENCE_LOGPROB_KEY = "reference_logprob"
"""``aux`` key of the frozen reference policy's log-probabilities. Shape: [T, N, L] / [B, L]."""


@dataclass
class VLDACConfig(PPOConfig):
    """VL-DAC hyperparameters (the paper's MiniWorld settings; docs/algorithms/vldac.md)."""

    type: str = "vldac"
    num_steps: int = 256
    """Env steps per env per rollout (VL-DAC: 256 steps of 1 env)."""
    num_epochs: int = 2
    """Passes over each rollout."""
    num_minibatches: int = 16
    """Minibatches per epoch (VL-DAC: minibatch of 1 step with 16 accumulation steps = 16 per 256)."""
    learning_rate: float = 1e-6
    """Adam learning rate (VL-DAC's LoRA value; small policies want about 1e-3..2.5e-4)."""
    adam_eps: float = 1e-7
    """Adam epsilon."""
    gamma: float = 0.9
    """Discount (per environment step)."""
    gae_lambda: float = 0.95
    """GAE lambda (per environment step)."""
    clip_coef: float = 0.1
    """Clip range of the per-part ratio and (vf_clip_coef None) of the value update."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (VL-DAC's config has 0.01, but its loss does not use it)."""
    vf_coef: float = 0.5
    """Value loss coefficient (the value loss has no extra 0.5 factor)."""
    max_grad_norm: float = 0.01
    """Global gradient-norm clip (VL-DAC's LoRA value; small policies want about 0.5)."""
    norm_adv: bool = True
    """Normalise the advantages once over the whole rollout (not per minibatch)."""
    kl_coef: float = 0.04
    """Weight of the per-part k3 KL to the frozen initial policy; 0 disables it (no reference copy)."""
    value_warmup_updates: int = 2
    """The first this many updates train only the critic (the policy does not move)."""
    ratio_guard: float | None = 10.0
    """If any part of a step has ratio above this, use only the clipped term for the step (None: off)."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        super().__post_init__()
        if self.kl_coef < 0:
            raise ValueError("algo.kl_coef must be >= 0")
        if self.value_warmup_updates < 0:
            raise ValueError("algo.value_warmup_updates must be >= 0")
        if self.ratio_guard is not None and self.ratio_guard <= 1.0:
            raise ValueError("algo.ratio_guard must be > 1 (or null)")


def step_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean over each step's valid parts, then over the steps that have any (seq-mean-token-mean).

    Shape: [B, L] -> scalar.
    """
    m = mask.to(x.dtype)
    count = m.sum(-1)
    per_step = torch.where(mask, x, torch.zeros_like(x)).sum(-1) / count.clamp_min(1.0)
    has_parts = count > 0
    return (per_step * has_parts).sum() / has_parts.sum().clamp_min(1)


class VLDAC(PPO):
    """VL-DAC on PPO's machinery (critic on ``policy.features``, one flat Adam, reward scaling).

    ``self.version`` counts completed updates (it drives the value warm-up).
    """

    name: ClassVar[str] = "vldac"
    config_class: ClassVar[type[AlgorithmConfig]] = VLDACConfig
    config: VLDACConfig

    def __init__(
        self,
        config: VLDACConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        # Copy before PPO's optimiser takes over the policy's parameter storage.
        reference = copy.deepcopy(policy) if config.kl_coef > 0 else None
        super().__init__(config, policy, observation_space, action_space, device)
        self.reference: Policy | None = None
        if reference is not None:
            self.reference = reference.to(self.device).eval().requires_grad_(False)
        self.version = 0

    # --- per-rollout data ---------------------------------------------------------------------
    @torch.no_grad()
    def process_rollout(self, rollout: Rollout) -> Rollout:
        """Step-level GAE (PPO's), normalised once over the valid steps; reference log-probs."""
        rollout = super().process_rollout(rollout)
        assert rollout.advantages is not None
        if self.config.norm_adv:
            valid = rollout.advantages[rollout.valid]
            if valid.numel() > 1:
                rollout.advantages = (rollout.advantages - valid.mean()) / (valid.std() + 1e-8)
        if self.reference is not None:
            rollout.aux = {**rollout.aux, REFERENCE_LOGPROB_KEY: self._reference_logprob(rollout)}
        return rollout

    def _reference_logprob(self, rollout: Rollout) -> Tensor:
        """Log-probabilities of the stored actions under the frozen reference. Shape: [T, N, L]."""
        assert self.reference is not None
        # Same inputs as the policy: copy its buffers (observation-normalisation statistics), not weights.
        policy_buffers = dict(self.policy.named_buffers())
        for name, buffer in self.reference.named_buffers():
            buffer.copy_(policy_buffers[name])
        return rollout_logprob(self.reference, rollout)

    # --- loss --------------------------------------------------------------------------------
    def compute_loss(self, batch: OnPolicyBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Part-level clipped PPO + k3 KL, step-mean; step-level value loss on detached features."""
        cfg = self.config
        evaluation, features = self.policy.evaluate_with_features(batch.obs, batch.actions, batch.extras)
        mask = batch.mask
        logratio = evaluation.logprob - batch.logprob  # [B, L]
        ratio = logratio.exp()
        advantages = batch.advantages  # normalised once per rollout in process_rollout
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(-1)  # the step's advantage for every part
        neg_advantages = -advantages
        clipped_term = neg_advantages * ratio.clamp(1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
        per_part = torch.max(neg_advantages * ratio, clipped_term)
        guarded = torch.zeros(len(batch), 1, dtype=torch.bool, device=ratio.device)
        if cfg.ratio_guard is not None:
            # VL-DAC / RL4VLM reference code: an exploding ratio anywhere in the step -> clipped term only.
            guarded = (torch.where(mask, ratio, torch.zeros_like(ratio)) > cfg.ratio_guard).any(
                -1, keepdim=True
            )
            per_part = torch.where(guarded, clipped_term, per_part)
        pg_loss = step_mean(per_part, mask)

        kl = torch.zeros((), device=ratio.device)
        if self.reference is not None:
            kl = step_mean(k3_kl(evaluation.logprob, batch.aux[REFERENCE_LOGPROB_KEY]), mask)

        # Stop-gradient: the value loss trains the critic only, never the policy's encoder.
        new_values = self.value_from_features(features.detach())
        eps_v = cfg.clip_coef if cfg.vf_clip_coef is None else cfg.vf_clip_coef
        v_loss = clipped_value_loss(
            new_values, batch.values, batch.returns, eps_v if cfg.clip_vloss else None, half=False
        )
        entropy = masked_mean(evaluation.entropy, mask)

        warmup = self.version < cfg.value_warmup_updates
        loss = cfg.vf_coef * v_loss
        if not warmup:
            loss = loss + pg_loss + cfg.kl_coef * kl
            if cfg.ent_coef:
                loss = loss - cfg.ent_coef * entropy

        with torch.no_grad():
            approx_kl = masked_mean((ratio - 1.0) - logratio, mask)
            clipfrac = masked_mean(((ratio - 1.0).abs() > cfg.clip_coef).float(), mask)
        metrics = {
            "train/loss_policy": pg_loss.detach(),
            "train/loss_value": v_loss.detach(),
            "train/kl_ref": kl.detach(),
            "train/entropy": entropy.detach(),
            "train/approx_kl": approx_kl,
            "train/clipfrac": clipfrac,
            "train/ratio_guard_frac": guarded.float().mean(),
            "train/value_warmup": torch.tensor(float(warmup)),
        }
        return loss, metrics

    def update(self, data: Rollout) -> dict[str, float]:
        """PPO's epochs of minibatch steps; then the version (warm-up counter) advances."""
        out = super().update(data)
        self.version += 1
        return out

    # --- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """PPO's state, the version counter and the reference policy's weights."""
        state = {**super().state_dict(), "version": self.version}
        state["reference"] = self.reference.state_dict() if self.reference is not None else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.version = int(state["version"])
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])
