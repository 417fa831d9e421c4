"""FQL, Flow Q-Learning (Park, Li, Levine, 2025): a one-step policy distilled from a BC flow, steered by Q.

Three networks: a behaviour-cloning flow ``v_psi(s, x_t, t)`` (a velocity field, noise at t = 0)
trained by flow matching on the dataset's actions; the deployable one-step policy ``mu_omega(s, z)``
(the ``one_step_flow`` policy), which regresses onto the flow's 10-step Euler solution for the same
noise ``z`` while maximising Q; and an ensemble of layer-normed critics. The one-step policy never
back-propagates through the ODE, and acting needs no iterative sampling. See docs/algorithms/offline.md;
the reference is seohongpark/fql ``agents/fql.py``.

Like the reference, one gradient step updates critic and actor together from the same batch (the
actor's Q term sees the critic before its step); the critic's weights get no gradient from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.critics import polyak_update
from omnigym.platform.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from omnigym.platform.algorithms.optim import adam
from omnigym.policies.flow.one_step import xavier_init
from omnigym.policies.layers import MLP

VelocityFn = Callable[[Tensor, Tensor], Tensor]
"""``v(x [B, A], t [B, 1]) -> [B, A]``."""
NOISE_METHODS = ("action_from_noise", "noise_to_action", "clip")
"""What FQL calls on its policy beyond the capabilities (``OneStepFlowPolicy`` has them)."""


@dataclass
class FQLConfig(OffPolicyConfig):
    """FQL settings (defaults of the reference ``agents/fql.py``; alpha must be tuned per task)."""

    type: str = "fql"
    hidden_sizes: tuple[int, ...] = (512, 512, 512, 512)
    """Hidden widths of the critics."""
    flow_hidden_sizes: tuple[int, ...] = (512, 512, 512, 512)
    """Hidden widths of the BC flow's velocity field (GELU)."""
    critic_layer_norm: bool = True
    """Layer norm after each hidden layer of the critics (the actor networks have none)."""
    alpha: float = 10.0
    """Weight of the distillation loss (README: cube/scene 300, puzzle 1000, antmaze 10, adroit 3000+)."""
    flow_steps: int = 10
    """Euler steps of the BC flow's solve (the distillation target)."""
    q_agg: Literal["mean", "min"] = "mean"
    """How the target critics' values are combined in the TD target."""
    normalize_q_loss: bool = False
    """Divide the Q term by ``sg(mean |Q|)`` (recommended for new environments, alpha in 0.03..10)."""
    clip_flow_target: bool = True
    """Clip the flow's Euler solution to the action bounds before distilling it (as the reference's
    ``compute_flow_actions`` does)."""
    normalize_obs: bool = False
    """FQL uses raw observations (set the policy's ``normalize_obs`` too to normalise them)."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        super().__post_init__()
        if self.q_agg not in ("mean", "min"):
            raise ValueError(f"q_agg must be 'mean' or 'min', got {self.q_agg!r}")
        if self.flow_steps < 1:
            raise ValueError(f"flow_steps must be >= 1, got {self.flow_steps}")
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")


def euler_solve(velocity: VelocityFn, noise: Tensor, steps: int) -> Tensor:
    """Integrate ``dx/dt = v(x, t)`` from ``x_0 = noise`` at t = 0 to t = 1 in ``steps`` Euler steps.

    ``x <- x + v(x, i / steps) / steps`` (FQL's convention, noise at t = 0). Shape: [B, A].
    """
    x = noise
    for i in range(steps):
        t = torch.full((noise.shape[0], 1), i / steps, dtype=noise.dtype, device=noise.device)
        x = x + velocity(x, t) / steps
    return x


def flow_matching_loss(velocity: VelocityFn, actions: Tensor, noise: Tensor, t: Tensor) -> Tensor:
    """``mean (v(x_t, t) - (a - x_0))^2`` with ``x_t = (1 - t) x_0 + t a`` (``t`` ``[B, 1]``)."""
    x_t = (1 - t) * noise + t * actions
    return (velocity(x_t, t) - (actions - noise)).square().mean()


class FQL(OffPolicyAlgorithm):
    """Flow Q-Learning over a ``one_step_flow`` policy, a BC flow and a critic ensemble."""

    name: ClassVar[str] = "fql"
    policy_defaults: ClassVar[dict[str, Any]] = {"type": "one_step_flow"}
    config_class: ClassVar[type[FQLConfig]] = FQLConfig
    config: FQLConfig

    def __init__(
        self,
        config: FQLConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        missing = [m for m in NOISE_METHODS if not callable(getattr(policy, m, None))]
        if missing:
            raise ValueError(
                f"fql needs a one-step policy mapping noise to actions (e.g. one_step_flow); policy "
                f"{policy.name!r} has capabilities {sorted(policy.capabilities)} but lacks {missing}"
            )
        self.mu: Any = policy  # a OneStepFlowPolicy (or any policy with its noise methods)
        features, actions = policy.feature_dim, self.action_dim
        self.flow = MLP(features + actions + 1, (*config.flow_hidden_sizes, actions), "gelu", False).to(
            self.device
        )
        xavier_init(self.flow)
        self.q, self.q_target = self.make_critics("gelu", config.critic_layer_norm)
        self.networks = {"q": self.q, "q_target": self.q_target, "flow": self.flow}
        self.optimizers = {
            "critic": adam(self.q.parameters(), config.critic_lr),
            "actor": adam([*policy.parameters(), *self.flow.parameters()], config.actor_lr),
        }

    def velocity(self, features: Tensor, x: Tensor, t: Tensor) -> Tensor:
        """The BC flow's velocity ``v_psi(s, x_t, t)``. Shapes: [B, F], [B, A], [B, 1] -> [B, A]."""
        return self.flow(torch.cat([features, x, t], dim=-1))

    def flow_actions(self, features: Tensor, noise: Tensor) -> Tensor:
        """The BC flow's action for ``noise``: its Euler solve, clipped if ``clip_flow_target``."""
        actions = euler_solve(lambda x, t: self.velocity(features, x, t), noise, self.config.flow_steps)
        return self.mu.clip(actions) if self.config.clip_flow_target else actions

    def critic_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``mean_j (Q_j(s, a) - y)^2``, ``y = r + gamma (1 - done) agg_j Q'_j(s', clip(mu(s', z')))``."""
        cfg = self.config
        with torch.no_grad():
            next_features = self.critic_input(batch.next_obs)
            noise = torch.randn(next_features.shape[0], self.action_dim, device=next_features.device)
            next_action = self.mu.clip(self.mu.noise_to_action(next_features, noise))
            next_qs = self.q_target(next_features, next_action)
            next_q = next_qs.mean(0) if cfg.q_agg == "mean" else next_qs.min(0).values
            target = self.transformed_rewards(batch.rewards) + cfg.gamma * (1 - batch.terminated) * next_q
        q = self.q(self.critic_input(batch.obs), batch.actions)
        loss = (q - target).square().mean()
        return loss, {"train/critic_loss": loss.detach(), "train/q_mean": q.detach().mean()}

    def actor_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """``L_flow + alpha * L_distill + L_q``; the critics' weights get no gradient from ``L_q``."""
        cfg = self.config
        features = self.critic_input(batch.obs)
        actions = batch.actions
        batch_size = actions.shape[0]

        def velocity(x: Tensor, t: Tensor) -> Tensor:
            return self.velocity(features, x, t)

        # BC flow, noise at t = 0
        x0 = torch.randn_like(actions)
        t = torch.rand(batch_size, 1, device=actions.device)
        flow = flow_matching_loss(velocity, actions, x0, t)
        # distillation of the flow's solution for the same noise (a constant target)
        noise = torch.randn_like(actions)
        with torch.no_grad():
            target = self.flow_actions(features, noise)
        raw = self.mu.noise_to_action(self.mu.features(batch.obs), noise)
        distill = (raw - target).square().mean()
        # Q term on the clipped action, through frozen critics
        policy_action = self.mu.clip(raw)
        self.q.requires_grad_(False)
        try:
            q = self.q(features, policy_action).mean(0)
        finally:
            self.q.requires_grad_(True)
        q_loss = -q.mean()
        if cfg.normalize_q_loss:
            q_loss = q_loss / q.abs().mean().detach()
        loss = flow + cfg.alpha * distill + q_loss
        return loss, {
            "train/actor_loss": loss.detach(),
            "train/flow_loss": flow.detach(),
            "train/distill_loss": distill.detach(),
            "train/q_loss": q_loss.detach(),
            "train/q_policy": q.detach().mean(),
            "train/bc_mse": (policy_action.detach() - actions).square().mean(),
        }

    def update(self, data: TransitionBatch) -> dict[str, float]:
        """One joint step of critics, flow and one-step policy, then the target critics' Polyak update."""
        loss, metrics = self.compute_loss(data)
        critic_opt, actor_opt = self.optimizers["critic"], self.optimizers["actor"]
        critic_opt.zero_grad(set_to_none=True)
        actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        critic_opt.step()
        actor_opt.step()
        polyak_update(self.q_target, self.q, self.config.tau)
        self.updates += 1
        values = torch.stack(list(metrics.values())).tolist()  # one conversion for all metrics
        return dict(zip(metrics, values, strict=True))
