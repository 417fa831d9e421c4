"""The GRPO family: critic-free, group-relative policy optimisation over group rollouts.

One class, :class:`GRPO`, with the published variants as registered presets:

- ``grpo``: advantages ``(R - mean_g) / (std_g + eps)``; clipped ratio per action part;
  ``seq-mean-token-mean`` aggregation; optional KL to a frozen reference policy (k3).
- ``dr_grpo``: no std normalisation, per-episode part sums over a constant ``L_max``.
- ``dapo``: clip-higher (0.2 / 0.28), ``token-mean``, dynamic sampling (groups whose episodes all
  scored the same are dropped and the batch refilled), optional overlong shaping.
- ``gdpo``: each named reward component normalised within its group, weighted sum, then batch
  normalisation, so distinct reward combinations keep distinct advantages.
- ``mdpo``: metric-decoupled optimisation for driving (HAD's MDPO idea): GDPO over the driving
  env's per-step PDM sub-metric rewards, weighted like EPDMS (see :data:`DRIVING_METRIC_WEIGHTS`).

Data: the trainer collects with :class:`~omnigym.platform.groups.GroupCollector` (``collects =
"groups"``): each rollout column is one episode, ``G`` consecutive columns share a start state.
An episode's reward is its return (or its summed reward components), and its advantage is
broadcast to every valid step and action part; with ``supervision: process`` each step's advantage
is instead its group-normalised reward-to-go (DeepSeekMath's process supervision). Multi-step
episodes are sequences of steps, each of ``L`` parts, so aggregation over "tokens" means over all
valid parts of an episode.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import OnPolicyBatch, Rollout
from omnigym.platform.algorithms.actor_critic import mean_metrics, minibatch_steps
from omnigym.platform.algorithms.advantages import (
    ADVANTAGE_EPS,
    group_advantages,
    process_advantages,
    reward_decoupled_advantages,
)
from omnigym.platform.algorithms.base import Algorithm, AlgorithmConfig, anneal_learning_rate, rollout_logprob
from omnigym.platform.algorithms.losses import (
    AGGREGATIONS,
    aggregation_weights,
    clipped_surrogate,
    informative_groups,
    k3_kl,
    overlong_penalty,
)
from omnigym.platform.algorithms.optim import FlatParameters
from omnigym.platform.groups import episode_totals

AUX_WEIGHTS = "part_weights"
"""``Rollout.aux`` key: each action part's weight in the aggregated loss ``[T, N, L]``."""
AUX_REF_LOGPROB = "ref_logprob"
"""``Rollout.aux`` key: the reference policy's log-probability of each part ``[T, N, L]``."""
DRIVING_METRIC_WEIGHTS: dict[str, float] = {
    "ep": 5.0, "ttc": 5.0, "lk": 2.0, "c": 2.0, "ec": 2.0,
    "nc": 12.0, "dac": 12.0, "ddc": 12.0, "tlc": 12.0,
}  # fmt: skip
"""``mdpo``'s weights of the driving sub-metrics: EPDMS's weighted-average terms keep their weights
(EP, TTC 5; LK, HC, EC 2) and each multiplicative gate (NC, DAC, DDC, TLC) weighs 12, the sum of
those, because one failed gate zeroes the whole score."""


@dataclass
class GRPOConfig(AlgorithmConfig):
    """GRPO-family hyperparameters; the defaults are ``grpo``'s (MLP scale: lr 1e-3)."""

    type: str = "grpo"
    group_size: int = 8
    """G, episodes per start state (``env.num_envs`` must be a multiple)."""
    max_episode_steps: int | None = None
    """Longest episode collected (None: the env's time limit, which must then exist)."""
    num_epochs: int = 1
    """Passes over each batch (1: one update per exploration stage, as in DeepSeekMath)."""
    num_minibatches: int = 1
    """Optimiser steps per epoch; loss normalisers always cover the whole batch."""
    learning_rate: float = 1e-3
    """Adam learning rate (LLM recipes use 1e-6; this default suits small MLP/CNN policies)."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over ``total_steps`` (steadier final policy)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    clip_low: float = 0.2
    """Lower clip range: ratios below ``1 - clip_low`` stop the gradient (A < 0)."""
    clip_high: float = 0.2
    """Upper clip range: ratios above ``1 + clip_high`` stop the gradient (A > 0); DAPO 0.28."""
    dual_clip: float | None = None
    """Dual clip constant c > 1 bounding the loss of negative-advantage parts (None: off)."""
    kl_coef: float = 0.0
    """beta of the k3 KL to a frozen copy of the initial policy (DeepSeekMath 0.04; 0: no reference)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    supervision: Literal["outcome", "process"] = "outcome"
    """``outcome``: one advantage per episode, from its return, on every step (GRPO). ``process``:
    each step's reward normalised over the group's steps, summed from that step to the episode's
    end (DeepSeekMath's process supervision; for envs with per-step rewards, e.g. shaped progress)."""
    advantage_scale: Literal["group", "batch", "none"] = "group"
    """Divide by the group's std (GRPO), the batch's, or not at all (Dr. GRPO)."""
    advantage_eps: float = ADVANTAGE_EPS
    """epsilon added to the std (TRL's 1e-4)."""
    loss_aggregation: str = "seq-mean-token-mean"
    """How part losses become one scalar: ``seq-mean-token-mean`` (GRPO),
    ``token-mean`` (DAPO), ``seq-mean-token-sum``, ``seq-mean-token-sum-norm`` (Dr. GRPO)."""
    max_length: int | None = None
    """Dr. GRPO's constant ``L_max`` in parts per episode (None: ``max_episode_steps`` x parts)."""
    reward_source: Literal["return", "components"] = "return"
    """The episode reward: its return, or its summed named reward components decoupled (GDPO)."""
    component_weights: dict[str, float] | None = None
    """Weights of the reward components by name (components: those named; None: all, weight 1)."""
    dynamic_sampling: bool = False
    """Drop groups whose episode returns are all equal and collect more until the batch is full."""
    max_sampling_rounds: int = 10
    """Most collections for one batch under dynamic sampling (then train on what was kept)."""
    overlong_max_parts: int | None = None
    """DAPO's soft overlong penalty: hard cap in action parts per episode (None: off)."""
    overlong_cache_parts: int = 0
    """Length of the penalty ramp before ``overlong_max_parts``."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.group_size < 2:
            raise ValueError(
                f"algo.group_size must be >= 2 (a group of one has no baseline), got {self.group_size}"
            )
        if self.num_epochs < 1 or self.num_minibatches < 1 or self.max_sampling_rounds < 1:
            raise ValueError("algo.num_epochs, num_minibatches and max_sampling_rounds must be >= 1")
        if self.loss_aggregation not in AGGREGATIONS:
            raise ValueError(
                f"algo.loss_aggregation must be one of {AGGREGATIONS}, got {self.loss_aggregation!r}"
            )
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"algo.dual_clip must be > 1, got {self.dual_clip}")
        if (
            self.overlong_max_parts is not None
            and not 0 <= self.overlong_cache_parts < self.overlong_max_parts
        ):
            raise ValueError("algo.overlong_cache_parts must be in [0, overlong_max_parts)")
        if self.supervision not in ("outcome", "process"):
            raise ValueError(f"algo.supervision must be 'outcome' or 'process', got {self.supervision!r}")
        if self.supervision == "process" and (
            self.reward_source != "return" or self.overlong_max_parts is not None
        ):
            raise ValueError(
                "algo.supervision 'process' scores the env's step rewards: it needs reward_source: return "
                "and no overlong penalty (an episode-level term)"
            )


@dataclass
class DrGRPOConfig(GRPOConfig):
    """Dr. GRPO: no std normalisation, part sums over a constant (Liu et al., 2025)."""

    type: str = "dr_grpo"
    advantage_scale: Literal["group", "batch", "none"] = "none"
    loss_aggregation: str = "seq-mean-token-sum-norm"


@dataclass
class DAPOConfig(GRPOConfig):
    """DAPO: clip-higher, token-level loss, dynamic sampling (Yu et al., 2025)."""

    type: str = "dapo"
    clip_high: float = 0.28
    loss_aggregation: str = "token-mean"
    dynamic_sampling: bool = True


@dataclass
class GDPOConfig(GRPOConfig):
    """GDPO: reward components normalised separately within each group (Liu et al., 2026)."""

    type: str = "gdpo"
    reward_source: Literal["return", "components"] = "components"


@dataclass
class MDPOConfig(GDPOConfig):
    """Metric-decoupled optimisation for driving: GDPO over the PDM sub-metric rewards."""

    type: str = "mdpo"
    component_weights: dict[str, float] | None = field(default_factory=lambda: dict(DRIVING_METRIC_WEIGHTS))


class GRPO(Algorithm):
    """Group-relative policy optimisation; the variants differ only by config (module docstring)."""

    name: ClassVar[str] = "grpo"
    config_class: ClassVar[type[AlgorithmConfig]] = GRPOConfig
    requires: ClassVar[tuple[str, ...]] = ("act", "evaluate", "trainable")
    collects: ClassVar[str] = "groups"
    """The trainer feeds this algorithm group rollouts (:class:`~omnigym.platform.groups.GroupCollector`)."""
    config: GRPOConfig

    def __init__(
        self,
        config: GRPOConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.reference: Policy | None = None
        if config.kl_coef > 0:
            self.reference = copy.deepcopy(policy).eval()
            self.reference.requires_grad_(False)
        self.flat = FlatParameters(policy.parameters())
        self.optimizer = torch.optim.Adam([self.flat.param], lr=config.learning_rate, eps=config.adam_eps)
        self.version = 0

    # --- advantages ----------------------------------------------------------------------------
    def episode_rewards(self, rollout: Rollout) -> tuple[Tensor, Tensor | None, list[str]]:
        """Each episode's scalar reward and, for decoupled rewards, its components.

        Returns:
            the return plus overlong shaping ``[N]``; the component totals ``[N, K]`` (None
            unless ``reward_source`` is ``components``); the components' names.
        """
        cfg = self.config
        returns, components = episode_totals(rollout)
        if cfg.overlong_max_parts is not None:
            lengths = rollout.mask.sum(dim=(0, 2)).to(returns.dtype)
            returns = returns + overlong_penalty(lengths, cfg.overlong_max_parts, cfg.overlong_cache_parts)
        if cfg.reward_source == "return":
            return returns, None, []
        names = list(rollout.reward_component_names)
        if not names:
            raise ValueError(
                f"algo {cfg.type!r} decouples named reward components, but the env reports none "
                "(info['reward_components']); use reward_source: return"
            )
        if cfg.component_weights is not None:
            missing = sorted(set(cfg.component_weights) - set(names))
            if missing:
                raise ValueError(
                    f"algo.component_weights names {missing}, which the env does not report; it has {names}"
                )
            names = [n for n in names if n in cfg.component_weights]
        index = torch.tensor([rollout.reward_component_names.index(n) for n in names])
        return returns, components.index_select(1, index), names

    @torch.no_grad()
    def advantages(self, rollout: Rollout) -> Tensor:
        """Each episode's group-relative advantage. Shape: [N]."""
        cfg = self.config
        returns, components, names = self.episode_rewards(rollout)
        group_ids = torch.arange(rollout.num_envs, device=returns.device) // cfg.group_size
        if components is None:
            return group_advantages(returns, group_ids, cfg.advantage_scale, cfg.advantage_eps)
        weights = [cfg.component_weights[n] for n in names] if cfg.component_weights is not None else None
        return reward_decoupled_advantages(components, group_ids, weights, cfg.advantage_eps)

    def keep_groups(self, rollout: Rollout) -> Tensor:
        """Which episodes dynamic sampling keeps: those whose group's returns differ. Shape: [N]."""
        returns, _ = episode_totals(rollout)
        group_ids = torch.arange(rollout.num_envs) // self.config.group_size
        return informative_groups(returns, group_ids)

    @torch.no_grad()
    def process_rollout(self, rollout: Rollout) -> Rollout:
        """Advantages broadcast to every valid step, loss weights, reference log-probs."""
        cfg = self.config
        if rollout.num_envs % cfg.group_size:
            raise ValueError(
                f"a group rollout has a multiple of group_size={cfg.group_size} envs, got {rollout.num_envs}"
            )
        rollout = rollout.to(self.device)
        T, N = rollout.num_steps, rollout.num_envs
        if cfg.supervision == "process":
            group_ids = torch.arange(N, device=self.device) // cfg.group_size
            advantages = process_advantages(
                rollout.rewards, rollout.valid, group_ids, cfg.advantage_scale, cfg.advantage_eps
            )
        else:
            per_episode = self.advantages(rollout)
            advantages = per_episode.unsqueeze(0) * rollout.valid.to(per_episode.dtype)
        L = rollout.mask.shape[-1]
        max_length = cfg.max_length if cfg.max_length is not None else T * L
        sequence_ids = torch.arange(N, device=self.device).expand(T, N).reshape(-1)
        weights = aggregation_weights(
            rollout.mask.reshape(T * N, L), sequence_ids, cfg.loss_aggregation, max_length
        ).reshape(T, N, L)
        aux = {**rollout.aux, AUX_WEIGHTS: weights}
        if self.reference is not None:
            aux[AUX_REF_LOGPROB] = rollout_logprob(self.reference, rollout)
        zeros = torch.zeros_like(advantages)
        rollout.aux, rollout.advantages, rollout.values, rollout.returns = aux, advantages, zeros, zeros
        return rollout

    # --- loss ----------------------------------------------------------------------------------
    def compute_loss(self, batch: OnPolicyBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Clipped surrogate (+ k3 KL, - entropy) per part, aggregated by the batch's weights."""
        cfg = self.config
        evaluation = self.policy.evaluate(batch.obs, batch.actions, batch.extras)
        logratio = evaluation.logprob - batch.logprob
        ratio = logratio.exp()
        advantages = batch.advantages.unsqueeze(-1) if batch.advantages.dim() == 1 else batch.advantages
        per_part = clipped_surrogate(ratio, advantages, cfg.clip_low, cfg.clip_high, cfg.dual_clip)
        weights = batch.aux[AUX_WEIGHTS]
        metrics: dict[str, Tensor] = {"train/loss_policy": (weights * per_part).sum().detach()}
        if self.reference is not None:
            kl = k3_kl(evaluation.logprob, batch.aux[AUX_REF_LOGPROB])
            per_part = per_part + cfg.kl_coef * kl
            metrics["train/kl_ref"] = (weights * kl).sum().detach()
        entropy = (weights * evaluation.entropy).sum()
        if cfg.ent_coef:
            per_part = per_part - cfg.ent_coef * evaluation.entropy
        loss = (weights * per_part).sum()
        with torch.no_grad():
            mask = batch.mask.to(ratio.dtype)
            count = mask.sum().clamp_min(1.0)
            clipped = (ratio < 1.0 - cfg.clip_low) | (ratio > 1.0 + cfg.clip_high)
            metrics["train/entropy"] = entropy.detach()
            metrics["train/approx_kl"] = (((ratio - 1.0) - logratio) * mask).sum() / count
            metrics["train/clipfrac"] = (clipped.to(ratio.dtype) * mask).sum() / count
        return loss, metrics

    def update(self, data: Rollout) -> dict[str, float]:
        """``num_epochs`` passes of minibatch steps.

        Each minibatch's loss is its share of the batch loss times ``num_minibatches``, so the
        normalisers never depend on the split.
        """
        cfg = self.config
        batch = data.flatten()
        if len(batch) == 0:
            return {"train/num_updates": 0.0}
        num_minibatches = min(cfg.num_minibatches, len(batch))
        # each minibatch's loss is its share of the batch loss, scaled to the batch's magnitude
        batch.aux = {**batch.aux, AUX_WEIGHTS: batch.aux[AUX_WEIGHTS] * num_minibatches}
        history = minibatch_steps(
            batch, cfg.num_epochs, num_minibatches, self.compute_loss, self.flat, self.optimizer,
            cfg.max_grad_norm,
        )  # fmt: skip
        self.version += 1
        out = mean_metrics(history)
        advantages = data.advantages
        assert advantages is not None
        out["train/advantage_abs_mean"] = float(advantages[data.valid].abs().mean())
        out["train/num_updates"] = float(len(history))
        return out

    # --- state ---------------------------------------------------------------------------------
    def set_progress(self, fraction: float) -> None:
        """With ``anneal_lr``, decay the learning rate linearly to 0 at the end of training."""
        if self.config.anneal_lr:
            anneal_learning_rate(self.optimizer, self.config.learning_rate, fraction)

    def state_dict(self) -> dict[str, Any]:
        """Optimiser, update count and the reference policy's weights."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "reference": self.reference.state_dict() if self.reference is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])


class DrGRPO(GRPO):
    """``dr_grpo`` (:class:`DrGRPOConfig`)."""

    name: ClassVar[str] = "dr_grpo"
    config_class: ClassVar[type[AlgorithmConfig]] = DrGRPOConfig


class DAPO(GRPO):
    """``dapo`` (:class:`DAPOConfig`)."""

    name: ClassVar[str] = "dapo"
    config_class: ClassVar[type[AlgorithmConfig]] = DAPOConfig


class GDPO(GRPO):
    """``gdpo`` (:class:`GDPOConfig`)."""

    name: ClassVar[str] = "gdpo"
    config_class: ClassVar[type[AlgorithmConfig]] = GDPOConfig


class MDPO(GRPO):
    """``mdpo`` (:class:`MDPOConfig`)."""

    name: ClassVar[str] = "mdpo"
    config_class: ClassVar[type[AlgorithmConfig]] = MDPOConfig
