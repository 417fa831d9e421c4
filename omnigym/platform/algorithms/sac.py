"""SAC (Haarnoja et al., 2018): off-policy maximum-entropy actor-critic with automatic temperature.

The critics regress onto ``r + gamma (1 - terminated) (min_j Q_targ_j(s', a') - alpha log pi(a'|s'))``
with ``a' ~ pi(.|s')``; the tanh-squashed Gaussian actor minimises ``alpha log pi(a|s) - min_j Q_j(s, a)``
(reparameterised); ``alpha = exp(log_alpha)`` is tuned so the policy's entropy tracks a target
(``-|A|`` by default). Defaults follow Stable-Baselines3's SAC. REDQ's random-subset target
(``critic_subset``) and layer-normed critics make the same class the online learner of WSRL, and
CQL adds its conservative regulariser to the critic loss of this class.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy
from omnigym.core.types import Obs, TransitionBatch
from omnigym.platform.algorithms.critics import polyak_update
from omnigym.platform.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from omnigym.platform.algorithms.optim import adam


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC settings (Stable-Baselines3 defaults)."""

    type: str = "sac"
    learning_starts: int = 100
    """Online training: env steps of random actions before the first update (SB3's SAC: 100)."""
    normalize_obs: bool = False
    """Set the policy's observation normalisation from a dataset before offline training (SB3's
    SAC normalises nothing)."""
    ent_coef: float | str = "auto"
    """Entropy temperature ``alpha``: a fixed float, ``"auto"`` (tuned, starting at 1) or
    ``"auto_<init>"`` (tuned, starting at ``<init>``), as in SB3."""
    target_entropy: float | str = "auto"
    """Entropy the tuned temperature aims for; ``"auto"``: ``-|A|``."""
    alpha_lr: float = 3e-4
    """Adam learning rate of ``log_alpha``."""
    backup_entropy: bool = True
    """Subtract ``alpha log pi(a'|s')`` from the next-state value in the critic target (soft backup)."""
    critic_subset: int = 0
    """Members the target takes its min over: 0 = all; k = a random subset of k per update (REDQ)."""
    layer_norm: bool = False
    """Layer normalisation in the critics (WSRL)."""
    policy_delay: int = 1
    """Critic steps per actor and temperature step (1: every update)."""
    max_target_backup: bool = False
    """Target value = max over ``backup_samples`` next actions of the (subset-)min Q (CQL on AntMaze)."""
    backup_samples: int = 10
    """Next actions sampled per state for ``max_target_backup``."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        super().__post_init__()
        if isinstance(self.ent_coef, str):
            parse_ent_coef(self.ent_coef)
        elif self.ent_coef < 0:
            raise ValueError(f"ent_coef must be >= 0, got {self.ent_coef}")
        if isinstance(self.target_entropy, str) and self.target_entropy != "auto":
            raise ValueError(f"target_entropy must be a float or 'auto', got {self.target_entropy!r}")
        if self.alpha_lr <= 0:
            raise ValueError("alpha_lr must be > 0")
        if not 0 <= self.critic_subset <= self.num_critics:
            raise ValueError(
                f"critic_subset must be in [0, num_critics={self.num_critics}], got {self.critic_subset}"
            )
        if self.policy_delay < 1 or self.backup_samples < 1:
            raise ValueError("policy_delay and backup_samples must be >= 1")


def parse_ent_coef(value: str) -> float:
    """The initial temperature of ``"auto"`` (1.0) or ``"auto_<init>"``."""
    if value == "auto":
        return 1.0
    if value.startswith("auto_"):
        try:
            init = float(value[len("auto_") :])
        except ValueError:
            init = -1.0
        if init > 0:
            return init
    raise ValueError(f"ent_coef must be a float, 'auto' or 'auto_<positive float>', got {value!r}")


class Temperature(nn.Module):
    """The entropy temperature ``alpha = exp(log_alpha)``, a module so it saves with the networks."""

    def __init__(self, init: float, trainable: bool) -> None:
        super().__init__()
        # a fixed alpha of 0 (no entropy bonus) is log_alpha = -inf
        log_init = math.log(init) if init > 0 else -math.inf
        self.log_alpha = nn.Parameter(torch.tensor(log_init), requires_grad=trainable)

    def forward(self) -> Tensor:
        """``alpha``, detached (the actor and critic losses treat it as a constant)."""
        return self.log_alpha.detach().exp()


def temperature_loss(log_alpha: Tensor, entropy: Tensor, target_entropy: float) -> Tensor:
    """``log_alpha * (H - H_target)`` with the entropy estimate ``H = -mean log pi`` detached.

    Its gradient ``H - H_target`` lowers ``alpha`` while the entropy is above target and raises it
    while below (SB3's ``-(log_alpha * (log pi + H_target)).mean()``).
    """
    return log_alpha * (entropy.detach() - target_entropy)


def repeat_obs(obs: Obs, k: int) -> Obs:
    """Every observation repeated ``k`` times in a row: ``[B, ...]`` -> ``[B * k, ...]``."""
    return {key: value.repeat_interleave(k, dim=0) for key, value in obs.items()}


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """No parameter gradients for ``module`` inside the block (gradients still flow through it)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class SAC(OffPolicyAlgorithm):
    """SAC over a squashed-Gaussian policy and a Q-ensemble (twin critics by default)."""

    name: ClassVar[str] = "sac"
    policy_defaults: ClassVar[dict[str, Any]] = {"type": "mlp", "action_head": "squashed_gaussian"}
    config_class: ClassVar[type[SACConfig]] = SACConfig
    config: SACConfig

    def __init__(
        self,
        config: SACConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        self.q, self.q_target = self.make_critics(layer_norm=config.layer_norm)
        tuned = isinstance(config.ent_coef, str)
        init = parse_ent_coef(config.ent_coef) if isinstance(config.ent_coef, str) else float(config.ent_coef)
        self.temperature = Temperature(init, tuned).to(self.device)
        self.target_entropy = (
            -float(self.action_dim) if config.target_entropy == "auto" else float(config.target_entropy)
        )
        self.networks = {"q": self.q, "q_target": self.q_target, "log_alpha": self.temperature}
        self.optimizers = {
            "critic": adam(self.q.parameters(), config.critic_lr),
            "actor": adam(policy.parameters(), config.actor_lr),
        }
        if tuned:
            self.optimizers["alpha"] = adam(self.temperature.parameters(), config.alpha_lr)
        self.critic_optimizers: tuple[str, ...] = ("critic",)
        """Optimisers stepped on the critic loss (CQL's Lagrange multiplier joins them)."""

    @property
    def alpha(self) -> Tensor:
        """The current temperature, detached."""
        return self.temperature()

    def load_pretrained(self, state: dict[str, Any]) -> list[str]:
        """As the base, but a fixed temperature (a number for ``ent_coef``) stays the configured one.

        Only a tuned temperature continues from the pre-trained agent's.
        """
        if not self.temperature.log_alpha.requires_grad:
            networks = {k: v for k, v in state.get("networks", {}).items() if k != "log_alpha"}
            state = {**state, "networks": networks}
        return super().load_pretrained(state)

    # --- losses -----------------------------------------------------------------------------------
    def target_min(self, q: Tensor) -> Tensor:
        """Min over the members ``[n, ...]`` -> ``[...]``; over a random ``critic_subset`` if set (REDQ)."""
        k = self.config.critic_subset
        if 0 < k < q.shape[0]:
            q = q[torch.randperm(q.shape[0], device=q.device)[:k]]
        return q.min(0).values

    def td_target(self, batch: TransitionBatch, next_actions: Tensor, next_logp: Tensor) -> Tensor:
        """``r' + gamma (1 - terminated) V(s')`` from ``K`` next actions per state (no gradient).

        ``next_actions`` ``[B * K, A]`` and ``next_logp`` ``[B * K]`` hold ``K`` samples of
        ``pi(.|s')`` per state, in a row. ``V(s') = min_j Q_targ_j(s', a') - alpha log pi(a'|s')``
        (the entropy term with ``backup_entropy``), maxed over the ``K`` samples when ``K > 1``.
        """
        b = len(batch)
        k = next_actions.shape[0] // b
        with torch.no_grad():
            next_features = self.critic_input(batch.next_obs)
            if k > 1:
                next_features = next_features.repeat_interleave(k, dim=0)
            value = self.target_min(self.q_target(next_features, next_actions)).view(b, k)
            if self.config.backup_entropy:
                value = value - self.alpha * next_logp.view(b, k)
            value = value.max(1).values if k > 1 else value[:, 0]
            return (
                self.transformed_rewards(batch.rewards) + self.config.gamma * (1 - batch.terminated) * value
            )

    def next_actions(self, batch: TransitionBatch) -> tuple[Tensor, Tensor]:
        """Samples of ``pi(.|s')`` for the target: one per state, or ``backup_samples`` in a row."""
        obs = batch.next_obs
        if self.config.max_target_backup:
            obs = repeat_obs(obs, self.config.backup_samples)
        with torch.no_grad():
            return self.policy.rsample(obs)

    def critic_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``sum_j MSE(Q_j(s, a), y)`` with the soft TD target ``y``."""
        target = self.td_target(batch, *self.next_actions(batch))
        q = self.q(self.critic_input(batch.obs), batch.actions)
        loss = (q - target).square().mean(1).sum()
        return loss, {"train/critic_loss": loss.detach(), "train/q_mean": q.detach().mean()}

    def actor_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``mean(alpha log pi(a|s) - min_j Q_j(s, a))``, ``a ~ pi(.|s)`` reparameterised.

        Plus the temperature loss when ``alpha`` is tuned (separate parameters: one backward pass
        serves both).
        """
        actions, logp = self.policy.rsample(batch.obs)
        with frozen(self.q):  # gradients reach the actions, not the critics' weights
            q = self.q(self.critic_input(batch.obs), actions).min(0).values
        alpha = self.alpha
        loss = (alpha * logp - q).mean()
        entropy = -logp.detach().mean()
        metrics = {"train/actor_loss": loss.detach(), "train/entropy": entropy, "train/alpha": alpha}
        if self.temperature.log_alpha.requires_grad:
            alpha_loss = temperature_loss(self.temperature.log_alpha, entropy, self.target_entropy)
            metrics["train/alpha_loss"] = alpha_loss.detach()
            loss = loss + alpha_loss
        return loss, metrics

    # --- update -----------------------------------------------------------------------------------
    def step_all(self, names: tuple[str, ...], loss: Tensor) -> None:
        """One backward pass of ``loss`` and a step of each named optimiser."""
        optimizers = [self.optimizers[name] for name in names if name in self.optimizers]
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            opt.step()

    def update(self, data: TransitionBatch) -> dict[str, float]:
        """A critic step; every ``policy_delay``-th call an actor and temperature step; the target update."""
        loss, metrics = self.critic_loss(data)
        self.step_all(self.critic_optimizers, loss)
        self.updates += 1
        if self.updates % self.config.policy_delay == 0:
            actor, actor_metrics = self.actor_loss(data)
            self.step_all(("actor", "alpha"), actor)
            metrics.update(actor_metrics)
        polyak_update(self.q_target, self.q, self.config.tau)
        return {k: float(v) for k, v in metrics.items()}
