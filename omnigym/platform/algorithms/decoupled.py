"""Decoupled PPO (AReaL, Fu et al., 2025) and A-3PO (Li, Wu, Shen, 2025).

Three policies take part in one update (§5.1):

* behaviour ``pi_behav``: whichever policy collected each step (``rollout.logprob``, with its version
  in ``rollout.policy_version [T, N]``); it may be several updates old;
* proximal ``pi_prox``: the policy at the start of this update, the trust-region anchor;
* ``pi_theta``: the policy being optimised.

The loss (§5.2) clips the trust-region ratio ``u = pi_theta / pi_prox`` and corrects the sampling
distribution with the constant weight ``w = pi_prox / pi_behav``::

    l = -w * min(u * A, clip(u, 1 - clip_coef, 1 + clip_coef_high) * A)

With fresh data (``pi_behav == pi_prox``) ``w = 1`` and this is PPO. :class:`DecoupledPPO` gets
``log pi_prox`` by re-scoring the rollout with the current weights in :meth:`process_rollout` (AReaL's
``prox_logp_method="recompute"``); :class:`A3PO` skips that forward pass and interpolates
``log pi_prox`` per step between the behaviour log-prob and the current one from the version numbers
(§5.4).

The per-step data the minibatch loss needs beyond PPO's travels in ``Rollout.aux`` /
``OnPolicyBatch.aux`` (:data:`PROXIMAL_LOGPROB_KEY`, :data:`BEHAVIOUR_VERSION_KEY`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from omnigym.core.types import TOKEN_VERSION_KEY, OnPolicyBatch, Rollout
from omnigym.platform.algorithms.base import AlgorithmConfig, rollout_logprob
from omnigym.platform.algorithms.losses import a3po_alpha, approximate_proximal_logprob, decoupled_ppo_loss
from omnigym.platform.algorithms.ppo import PPO, PPOConfig, masked_mean

log = logging.getLogger(__name__)
PROXIMAL_LOGPROB_KEY = "proximal_logprob"
"""``aux`` key of the proximal log-probabilities. Shape: [T, N, L] (rollout), [B, L] (batch)."""
BEHAVIOUR_VERSION_KEY = "behaviour_version"
"""``aux`` key of the behaviour policy's version. Shape: [T, N] in a rollout, [B] in a batch."""


def clipped_value_loss(
    new_values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None, half: bool = True
) -> Tensor:
    """CleanRL's value loss: ``max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)``, batch mean.

    Args:
        new_values: V(s) under the current critic. Shape: [B].
        old_values: V(s) when the rollout was processed. Shape: [B].
        returns: value targets. Shape: [B].
        clip: the clip range ``eps``; None means no clipping, ``mean((V - R)^2)``.
        half: multiply by 0.5 (CleanRL and omnigym's PPO; VL-DAC has no 0.5).

    Returns:
        the scalar loss.
    """
    squared = (new_values - returns) ** 2
    if clip is not None:
        clipped = old_values + (new_values - old_values).clamp(-clip, clip)
        squared = torch.max(squared, (clipped - returns) ** 2)
    loss = squared.mean()
    return 0.5 * loss if half else loss


def masked_max(x: Tensor, mask: Tensor | None) -> Tensor:
    """Largest entry of ``x`` where ``mask`` is set (``-inf`` when nothing is)."""
    if mask is None:
        return x.max()
    return torch.where(mask, x, torch.full_like(x, -torch.inf)).max()


def normalized_ess(log_weights: Tensor, mask: Tensor | None) -> Tensor:
    """Effective sample size of importance weights over the counted entries, as a fraction of them.

    ``(sum w)^2 / (n * sum w^2)``: 1 when every weight is equal (fresh data), towards ``1 / n`` when
    one sample carries all the weight (data the learner's policy would rarely produce).
    """
    if mask is None:
        mask = torch.ones_like(log_weights, dtype=torch.bool)
    masked = torch.where(mask, log_weights, torch.full_like(log_weights, -torch.inf))
    count = mask.sum()
    if not bool(count):
        return torch.ones((), dtype=log_weights.dtype)
    weights = (masked - masked.max()).exp()  # scaled by a constant: the ratio is unchanged
    return weights.sum() ** 2 / (count * (weights**2).sum())


def behaviour_kl(log_weights: Tensor, mask: Tensor | None) -> Tensor:
    """``KL(pi_behav || pi_prox)`` from samples of the behaviour policy (Schulman's k3 estimator).

    ``log_weights = log pi_prox - log pi_behav``; the estimate ``mean(w - 1 - log w)`` is never
    negative and 0 only when the two policies agree on every sample.
    """
    return masked_mean(log_weights.exp() - 1.0 - log_weights, mask)


@dataclass
class DecoupledPPOConfig(PPOConfig):
    """Decoupled PPO: PPO's fields (CleanRL defaults) plus AReaL's decoupled-loss options."""

    type: str = "decoupled_ppo"
    clip_coef_high: float | None = None
    """Upper clip range of the trust-region ratio (``1 + clip_coef_high``); None uses clip_coef."""
    dual_clip: float | None = None
    """Dual clip ``c`` (> 1): for A < 0 the loss is capped at ``-A * c`` (AReaL ``c_clip``; default off)."""
    weight_cap: float | None = None
    """Upper bound on the importance weight w = pi_prox / pi_behav (None: no cap)."""
    cap_mode: Literal["mask", "clamp"] = "mask"
    """Above ``weight_cap``: drop the part from the loss (mask) or clamp w to the cap (clamp)."""
    max_staleness: int | None = None
    """Steps whose behaviour policy is more than this many updates older than the current one are
    left out of the loss (AReaL's bound on staleness, eta; None: no bound). Logged as
    ``train/stale_dropped``."""
    simulated_staleness: int = 0
    """Read by the synchronous trainer: collect each rollout with the policy from this many updates ago,
    so staleness can be studied without the asynchronous runtime (0: collect with the current policy)."""
    ess_warning: float | None = 0.5
    """Warn when an update's effective sample size (``train/ess``, a fraction) falls below this:
    the data is too far off-policy for the importance weights to carry it (lower
    ``runtime.max_staleness``, or set ``weight_cap``). None: never warn."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        super().__post_init__()
        if self.simulated_staleness < 0:
            raise ValueError("algo.simulated_staleness must be >= 0")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError("algo.max_staleness must be >= 0 or null")
        if self.clip_coef_high is not None and self.clip_coef_high < 0:
            raise ValueError("algo.clip_coef_high must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError("algo.dual_clip must be > 1")
        if self.weight_cap is not None and self.weight_cap <= 0:
            raise ValueError("algo.weight_cap must be > 0")
        if self.cap_mode not in ("mask", "clamp"):
            raise ValueError(f"algo.cap_mode must be 'mask' or 'clamp', got {self.cap_mode!r}")
        if self.ess_warning is not None and not 0 < self.ess_warning <= 1:
            raise ValueError(f"algo.ess_warning must be in (0, 1] or null, got {self.ess_warning}")


class DecoupledPPO(PPO):
    """PPO with the decoupled objective; ``log pi_prox`` recomputed once per rollout.

    ``self.version`` counts completed :meth:`update` calls: the version of the weights being
    trained, comparable to ``rollout.policy_version`` (the trainer's collector counts the same way).
    """

    name: ClassVar[str] = "decoupled_ppo"
    config_class: ClassVar[type[AlgorithmConfig]] = DecoupledPPOConfig
    config: DecoupledPPOConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = 0
        self._stale_dropped = 0.0
        self._last_ess_warning: int | None = None

    # --- per-rollout data ---------------------------------------------------------------------
    @torch.no_grad()
    def process_rollout(self, rollout: Rollout) -> Rollout:
        """PPO's values, GAE advantages and returns, then the proximal log-probabilities."""
        rollout = super().process_rollout(rollout)
        rollout.aux = {**rollout.aux, BEHAVIOUR_VERSION_KEY: rollout.policy_version}
        self._stale_dropped = 0.0
        if self.config.max_staleness is not None:
            too_stale = (self.version - rollout.policy_version) > self.config.max_staleness
            self._stale_dropped = float((too_stale & rollout.valid).sum()) / max(1, int(rollout.valid.sum()))
            rollout.valid = rollout.valid & ~too_stale
        self._add_proximal(rollout)
        return rollout

    def _add_proximal(self, rollout: Rollout) -> None:
        """Store ``log pi_prox``: the current weights re-score every stored action (no gradient).

        When every step comes from the current version, the behaviour policy *is* the proximal
        one: its recorded log-probs are used as they are (no forward pass), which makes decoupled
        PPO on fresh data exactly PPO rather than PPO up to float rounding.
        """
        if bool((rollout.policy_version == self.version).all()):
            rollout.aux[PROXIMAL_LOGPROB_KEY] = rollout.logprob.clone()
        else:
            rollout.aux[PROXIMAL_LOGPROB_KEY] = rollout_logprob(self.policy, rollout)

    def proximal_logprob(self, batch: OnPolicyBatch, logprob: Tensor) -> Tensor:
        """``log pi_prox`` of a minibatch: the recomputed values. Shape: [B, L].

        Args:
            batch: a minibatch of a processed rollout.
            logprob: ``log pi_theta`` of the minibatch (unused here; A-3PO interpolates towards it).
        """
        return batch.aux[PROXIMAL_LOGPROB_KEY]

    # --- loss --------------------------------------------------------------------------------
    def compute_loss(self, batch: OnPolicyBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Decoupled clipped surrogate + PPO's clipped value loss - entropy bonus (§5.2)."""
        cfg = self.config
        evaluation, features = self.policy.evaluate_with_features(batch.obs, batch.actions, batch.extras)
        mask = None if bool(batch.mask.all()) else batch.mask
        logprob = evaluation.logprob  # [B, L]
        prox_logprob = self.proximal_logprob(batch, logprob)

        advantages = batch.advantages
        if cfg.norm_adv and len(batch) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(-1)  # every part of an action shares its advantage
        advantages = advantages.expand_as(logprob)
        eps_high = cfg.clip_coef if cfg.clip_coef_high is None else cfg.clip_coef_high
        per_part, weights = decoupled_ppo_loss(
            logprob,
            prox_logprob,
            batch.logprob,
            advantages,
            cfg.clip_coef,
            eps_high,
            dual_clip=cfg.dual_clip,
            weight_cap=cfg.weight_cap,
            cap_mode=cfg.cap_mode,
        )
        # The denominator is the originally valid part count: capped (masked) parts do not re-inflate it.
        pg_loss = masked_mean(per_part, mask)

        new_values = self.value_from_features(features)
        eps_v = cfg.clip_coef if cfg.vf_clip_coef is None else cfg.vf_clip_coef
        v_loss = clipped_value_loss(
            new_values, batch.values, batch.returns, eps_v if cfg.clip_vloss else None
        )

        entropy = masked_mean(evaluation.entropy, mask)
        loss = pg_loss + cfg.vf_coef * v_loss
        if cfg.ent_coef:
            loss = loss - cfg.ent_coef * entropy

        with torch.no_grad():
            logratio = logprob - prox_logprob  # the trust-region ratio u = pi_theta / pi_prox
            ratio = logratio.exp()
            approx_kl = masked_mean((ratio - 1.0) - logratio, mask)
            clipped = (ratio < 1.0 - cfg.clip_coef) | (ratio > 1.0 + eps_high)
            clipfrac = masked_mean(clipped.float(), mask)
            log_weights = prox_logprob - batch.logprob  # log w = log pi_prox - log pi_behav
        metrics = {
            "train/loss_policy": pg_loss.detach(),
            "train/loss_value": v_loss.detach(),
            "train/entropy": entropy.detach(),
            "train/approx_kl": approx_kl,
            "train/clipfrac": clipfrac,
            "train/importance_weight": masked_mean(weights.detach(), mask),
            "train/importance_weight_max": masked_max(weights.detach(), mask),
            "train/ess": normalized_ess(log_weights, mask),
            "train/behaviour_kl": behaviour_kl(log_weights, mask),
        }
        return loss, metrics

    def update(self, data: Rollout) -> dict[str, float]:
        """PPO's epochs of minibatch steps, plus staleness metrics; then the version advances."""
        staleness = (self.version - data.policy_version)[data.valid].float()
        if not staleness.numel():  # every step was too stale: nothing to learn from
            self.version += 1
            return {"train/num_updates": 0.0, "train/stale_dropped": self._stale_dropped}
        out = super().update(data)
        if self.config.max_staleness is not None:
            out["train/stale_dropped"] = self._stale_dropped
        out["train/staleness"] = float(staleness.mean())
        out["train/staleness_max"] = float(staleness.max())
        shares = torch.bincount(staleness.long()).float() / staleness.numel()  # steps k versions old
        out.update({f"train/staleness_frac_{k}": float(share) for k, share in enumerate(shares)})
        self._warn_on_low_ess(out.get("train/ess"))
        self.version += 1
        return out

    def _warn_on_low_ess(self, ess: float | None) -> None:
        """Say (at most every 50 updates) that the importance weights carry too little of the data."""
        threshold = self.config.ess_warning
        if ess is None or threshold is None or ess >= threshold:
            return
        if self._last_ess_warning is not None and self.version - self._last_ess_warning < 50:
            return
        self._last_ess_warning = self.version
        log.warning(
            "update %d: the importance weights' effective sample size is %.2f of the batch (below "
            "algo.ess_warning %.2f): the data is far off-policy; lower runtime.max_staleness or set "
            "algo.weight_cap",
            self.version,
            ess,
            threshold,
        )

    # --- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """PPO's state plus the version counter."""
        return {**super().state_dict(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        super().load_state_dict(state)
        self.version = int(state["version"])


@dataclass
class A3POConfig(DecoupledPPOConfig):
    """A-3PO: decoupled PPO with the proximal log-prob interpolated from version numbers."""

    type: str = "a3po"
    prox_method: Literal["loglinear", "linear"] = "loglinear"
    """Interpolation between behaviour and current probabilities: in log space (recommended) or linear."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        super().__post_init__()
        if self.prox_method not in ("loglinear", "linear"):
            raise ValueError(f"algo.prox_method must be 'loglinear' or 'linear', got {self.prox_method!r}")


class A3PO(DecoupledPPO):
    """Decoupled PPO without the proximal forward pass (§5.4).

    Per step, with ``v_theta = self.version`` and ``v_prox = v_theta - 1``::

        alpha   = clip((v_prox - v_behav) / (v_theta - v_behav), 0, 1)     (0 when v_theta == v_behav)
        lp_prox = lp_behav + alpha * (sg(lp_theta) - lp_behav)             (loglinear)

    computed inside :meth:`compute_loss` from the minibatch's current (detached) log-probabilities.
    Fresh data (``v_behav == v_theta``) and data one version old give ``alpha = 0``, i.e. PPO against the
    behaviour policy.
    """

    name: ClassVar[str] = "a3po"
    config_class: ClassVar[type[AlgorithmConfig]] = A3POConfig
    config: A3POConfig

    def _add_proximal(self, rollout: Rollout) -> None:
        """Nothing to recompute: the behaviour versions already travel with the batch."""

    def proximal_logprob(self, batch: OnPolicyBatch, logprob: Tensor) -> Tensor:
        """Interpolated ``log pi_prox`` of a minibatch (no gradient). Shape: [B, L]."""
        alpha = self.alpha(batch)
        if alpha.dim() < logprob.dim():
            alpha = alpha.unsqueeze(-1)  # one version per step: every part shares it
        return approximate_proximal_logprob(batch.logprob, logprob, alpha, method=self.config.prox_method)

    def alpha(self, batch: OnPolicyBatch) -> Tensor:
        """The interpolation weight of each row from its behaviour version. Shape: [B].

        Replies generated across a weight update (partial rollouts) carry each token's version in
        ``extras["token_version"]``; then each token gets its own weight. Shape: [B, L].
        """
        versions = batch.extras.get(TOKEN_VERSION_KEY)
        if versions is None:
            versions = batch.aux[BEHAVIOUR_VERSION_KEY]
        return a3po_alpha(self.version, versions).to(batch.logprob.dtype)

    def compute_loss(self, batch: OnPolicyBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """The decoupled loss with the interpolated proximal policy; also reports the mean alpha."""
        loss, metrics = super().compute_loss(batch)
        metrics["train/prox_alpha"] = self.alpha(batch).mean()
        return loss, metrics
