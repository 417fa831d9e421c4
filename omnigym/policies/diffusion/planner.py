"""Trajectory diffusion planners for plan-action driving (``omnigym/DrivingPlan-v0``).

A plan action is ``W`` future poses ``[W, D]`` (the driving env: 8 ego-frame ``(x, y, heading)``
poses at 0.5 s .. 4 s). Both planners generate the **whole plan** as one sample and re-plan at
every env step; the plan's waypoints are the U-Net's temporal axis (``[B, W, D]``, D channels).

In terms of :class:`~omnigym.policies.chunking.policy.ChunkPolicy` a plan is one action, so the
receding horizon is trivial (``horizon``, ``n_obs_steps``, ``n_action_steps`` all 1: one
observation, one plan, executed once); the chunk ``[B, 1, W * D]`` the base class normalises
(min-max per waypoint and coordinate, so late waypoints are not squashed by early ones) is
reshaped to ``[B, W, D]`` for the denoiser, and back.

``diffusion_planner`` (flat): Diffusion Policy's ε-prediction DDPM (``num_train_timesteps`` K,
cosine schedule) over the normalised plan, conditioned on the vector observation keys; DDIM
sampling in ``num_inference_steps`` steps (deterministic acting: from fixed noise).

``hierarchical_diffusion_planner`` (coarse-to-fine, after HAD / Nexus):

1. **Coarse**: a second, smaller U-Net diffuses only the anchor poses ``anchor_indices`` (default
   waypoints 2, 4, 6, 8, i.e. every second pose: 1 s, 2 s, 3 s, 4 s) in ``num_inference_steps``
   DDIM steps.
2. **Expand** (:func:`expand_anchors`, in metres and radians): a cubic Hermite spline in time
   through the current pose (the origin, heading 0) and the anchors; each knot's tangent points
   along its heading with the mean speed of its adjacent chords, so the curve leaves and enters
   each anchor along the anchor's heading (heading-consistent), and every in-between pose takes
   the heading of the spline's velocity (or interpolates the knot headings where the car barely
   moves). The anchors are copied into the expansion exactly.
3. **Refine** (partial diffusion, SDEdit-style): the normalised expansion is noised to timestep
   ``k_r = round(refine_strength * (K - 1))`` and denoised by the full-plan U-Net in
   ``refine_steps`` DDIM steps, so the refinement starts from, and stays close to, the expansion.
   The full-plan U-Net is trained only on timesteps ``0 .. k_r`` (all it ever sees).

Training minimises the sum of the coarse (anchors) and fine (full plan) ε-losses. Neither
planner has a stochastic RL chain (``rl_chain`` must stay off) or temporal ensembling.
"""

from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import PolicyConfig
from omnigym.policies.chunking.base import ChunkDenoiser
from omnigym.policies.chunking.encoders import ObservationEncoder
from omnigym.policies.chunking.unet import ConditionalUnet1D
from omnigym.policies.diffusion.policy import DiffusionPolicy, DiffusionPolicyConfig

SLOW_SPEED = 0.05
"""Spline speed (metres per waypoint interval) below which a pose's heading is interpolated
between the knots' headings instead of taken from the spline's velocity."""


def _wrap(angle: Tensor) -> Tensor:
    """Angles wrapped to [-pi, pi)."""
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def expand_anchors(anchors: Tensor, anchor_indices: tuple[int, ...], num_waypoints: int) -> Tensor:
    """Poses ``[B, W, 3]`` through the ego origin and anchor poses ``[B, K, 3]`` (a Hermite spline).

    Waypoint ``i`` is at time ``i + 1`` (in waypoint intervals), the current pose ``(0, 0, 0)``
    at time 0. Knot ``j`` (the origin, then the anchors) gets the tangent
    ``s_j (cos h_j, sin h_j)`` with ``s_j`` the mean of its adjacent chords' speeds; each pose
    between two knots is the cubic Hermite interpolant of the segment, with the heading of the
    spline's derivative (the knots' headings interpolated where the speed is below
    :data:`SLOW_SPEED`). Anchor poses are copied exactly. Extra coordinates beyond
    ``(x, y, heading)`` are linearly interpolated.

    Args:
        anchors: the anchor poses in the ego frame (metres, radians). Shape: [B, K, D >= 3].
        anchor_indices: the waypoints the anchors are (sorted, unique, the last ``W - 1``).
        num_waypoints: W.
    """
    batch, _, dim = anchors.shape
    times = torch.tensor([0.0, *(i + 1.0 for i in anchor_indices)], device=anchors.device)
    origin = anchors.new_zeros(batch, 1, dim)
    knots = torch.cat([origin, anchors], dim=1)  # [B, K + 1, D]
    positions, headings = knots[..., :2], knots[..., 2]
    gaps = times[1:] - times[:-1]  # [K]
    chord_speed = (positions[:, 1:] - positions[:, :-1]).norm(dim=-1) / gaps  # [B, K]
    speed = torch.cat([chord_speed[:, :1], chord_speed], dim=1)
    speed = (speed + torch.cat([chord_speed, chord_speed[:, -1:]], dim=1)) / 2  # [B, K + 1]
    tangents = speed.unsqueeze(-1) * torch.stack([headings.cos(), headings.sin()], dim=-1)

    t = torch.arange(1, num_waypoints + 1, dtype=torch.float32, device=anchors.device)
    segment = (torch.searchsorted(times, t, right=False) - 1).clamp(0, len(gaps) - 1)  # [W]
    gap = gaps[segment]
    u = ((t - times[segment]) / gap).view(1, -1, 1)
    h00, h10, h01, h11 = 2 * u**3 - 3 * u**2 + 1, u**3 - 2 * u**2 + u, -2 * u**3 + 3 * u**2, u**3 - u**2
    d00, d10, d01, d11 = 6 * u**2 - 6 * u, 3 * u**2 - 4 * u + 1, -6 * u**2 + 6 * u, 3 * u**2 - 2 * u
    g = gap.view(1, -1, 1)
    p0, p1 = positions[:, segment], positions[:, segment + 1]
    m0, m1 = tangents[:, segment] * g, tangents[:, segment + 1] * g
    xy = h00 * p0 + h10 * m0 + h01 * p1 + h11 * m1
    velocity = (d00 * p0 + d10 * m0 + d01 * p1 + d11 * m1) / g
    h0, h1 = headings[:, segment], headings[:, segment + 1]
    lerp_heading = _wrap(h0 + u.squeeze(-1) * _wrap(h1 - h0))
    spline_heading = torch.atan2(velocity[..., 1], velocity[..., 0])
    heading = torch.where(velocity.norm(dim=-1) > SLOW_SPEED, spline_heading, lerp_heading)
    parts = [xy, heading.unsqueeze(-1)]
    if dim > 3:
        extra0, extra1 = knots[:, segment, 3:], knots[:, segment + 1, 3:]
        parts.append(extra0 + u * (extra1 - extra0))
    plan = torch.cat(parts, dim=-1)
    plan[:, list(anchor_indices)] = anchors  # exact at the anchors (the spline is too, up to rounding)
    return plan


@dataclass
class DiffusionPlannerConfig(DiffusionPolicyConfig):
    """The flat trajectory diffusion planner: one DDPM sample is one whole plan ``[W, D]``.

    ``horizon``, ``n_obs_steps`` and ``n_action_steps`` are fixed at 1 (one plan per step; the
    plan's waypoints are the U-Net's axis, so ``W`` must be divisible by
    ``2^(len(down_dims) - 1)``); ``rl_chain`` and ``temporal_ensemble`` are not supported.
    """

    type: str = "diffusion_planner"
    horizon: int = 1
    n_obs_steps: int = 1
    n_action_steps: int = 1
    num_inference_steps: int = 10

    def __post_init__(self) -> None:
        """The chunk fields are fixed; the U-Net length check waits for the action space."""
        self.obs_keys = tuple(self.obs_keys)
        self.down_dims = tuple(self.down_dims)
        if (self.horizon, self.n_obs_steps, self.n_action_steps) != (1, 1, 1):
            raise ValueError(
                f"policy.{self.type} generates one whole plan per step: horizon, n_obs_steps and "
                "n_action_steps must be 1"
            )
        if not self.down_dims:
            raise ValueError("policy.down_dims must not be empty")
        if any(d % self.n_groups for d in self.down_dims):
            raise ValueError(f"policy.n_groups {self.n_groups} must divide every down_dims {self.down_dims}")
        if not 0 < self.crop_ratio <= 1:
            raise ValueError(f"policy.crop_ratio must be in (0, 1], got {self.crop_ratio}")
        if self.rl_chain or self.temporal_ensemble:
            raise ValueError(f"policy.{self.type} supports neither rl_chain nor temporal_ensemble")
        if not 1 <= self.num_inference_steps <= self.num_train_timesteps:
            raise ValueError(
                f"policy.num_inference_steps must be in [1, num_train_timesteps={self.num_train_timesteps}]"
            )


class DiffusionPlanner(DiffusionPolicy):
    """ε-prediction DDPM over whole plans ``[W, D]``, DDIM sampling (see the module docstring)."""

    name: ClassVar[str] = "diffusion_planner"
    config_class: ClassVar[type[PolicyConfig]] = DiffusionPlannerConfig
    config: DiffusionPlannerConfig

    def __init__(
        self, config: DiffusionPlannerConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        if not isinstance(action_space, spaces.Box) or len(action_space.shape or ()) != 2:
            raise ValueError(
                f"{type(self).__name__} plans [waypoints, coordinates] Box actions, not {action_space}"
            )
        self.num_waypoints, self.pose_dim = (int(n) for n in action_space.shape)
        levels = 2 ** (len(config.down_dims) - 1)
        if self.num_waypoints % levels:
            raise ValueError(
                f"{self.num_waypoints} waypoints are not divisible by 2^(len(down_dims) - 1) = {levels} "
                f"for down_dims {tuple(config.down_dims)}"
            )
        super().__init__(config, observation_space, action_space)
        # the base sized the U-Net for one [1, W * D] chunk; the planner's runs along the waypoints
        encoder = self.model.encoder
        self.model = self._build_denoiser(encoder)
        self.ema_model = copy.deepcopy(self.model).requires_grad_(False) if config.use_ema else None

    def _unet(self, channels: int, cond_dim: int, down_dims: tuple[int, ...]) -> ConditionalUnet1D:
        cfg = self.config
        return ConditionalUnet1D(
            channels, cond_dim, down_dims, cfg.kernel_size, cfg.n_groups, cfg.time_embed_dim, self.num_times
        )

    def _build_denoiser(self, encoder: ObservationEncoder) -> ChunkDenoiser:
        return ChunkDenoiser(encoder, self._unet(self.pose_dim, encoder.out_dim, self.config.down_dims))

    def _plans(self, chunks: Tensor) -> Tensor:
        """Normalised chunks ``[B, 1, W * D]`` -> plans ``[B, W, D]``."""
        return chunks.reshape(chunks.shape[0], self.num_waypoints, self.pose_dim)

    def _chunks(self, plans: Tensor) -> Tensor:
        """Plans ``[B, W, D]`` -> chunks ``[B, 1, W * D]``."""
        return plans.reshape(plans.shape[0], 1, self.action_dim)

    def objective(self, actions: Tensor, cond: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The ε-prediction loss on the normalised plans. Shapes: [B, 1, W * D], [B, C]."""
        return super().objective(self._plans(actions), cond)

    def sample(self, noise: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, list[Tensor]]:
        """DDIM from ``noise [B, 1, W * D]`` over the plan axis; chunks back in the same shape."""
        plans, chain = super().sample(self._plans(noise), cond, unet)
        return self._chunks(plans), [self._chunks(x) for x in chain]

    # --- shared DDIM on the training schedule (the hierarchical planner's coarse and refine) ----
    def ddim(self, unet: ConditionalUnet1D, x: Tensor, cond: Tensor, start: int, steps: int) -> Tensor:
        """Deterministic DDIM (η = 0) from ``x`` at timestep ``start`` to 0 in ``steps`` steps.

        Timesteps ``round(linspace(start, 0, steps + 1))[:-1]``; x̂_0 clipped to [-1, 1] (with
        ``clip_sample``) and ε re-derived from it. Shape: [B, L, C] -> [B, L, C].
        """
        alphas = self.noise_scheduler.alphas_cumprod.to(x.device)
        timesteps = torch.linspace(start, 0, steps + 1).round().long().tolist()
        for k, prev in itertools.pairwise(timesteps):
            if prev == k:  # a timestep repeated by the rounding
                continue
            alpha = alphas[k]
            # the last step (to timestep 0) lands on the clean sample: ᾱ_prev = 1
            alpha_prev = alphas[prev] if prev > 0 else torch.ones((), device=x.device)
            epsilon = unet(x, torch.full((x.shape[0],), float(k), device=x.device), cond)
            x0 = (x - (1 - alpha).sqrt() * epsilon) / alpha.sqrt()
            if self.config.clip_sample:
                x0 = x0.clamp(-1, 1)
                epsilon = (x - alpha.sqrt() * x0) / (1 - alpha).sqrt()
            x = alpha_prev.sqrt() * x0 + (1 - alpha_prev).sqrt() * epsilon
        return x


@dataclass
class HierarchicalDiffusionPlannerConfig(DiffusionPlannerConfig):
    """Coarse anchors by diffusion, a heading-consistent spline expansion, a partial-diffusion refinement."""

    type: str = "hierarchical_diffusion_planner"
    anchor_indices: tuple[int, ...] = (1, 3, 5, 7)
    """Waypoints (0-based) the coarse stage generates; sorted, the last one the plan's last."""
    coarse_down_dims: tuple[int, ...] = (64, 128)
    """The anchor U-Net's channels (len(anchor_indices) divisible by 2^(len - 1))."""
    refine_strength: float = 0.3
    """Refinement start: the expansion is noised to timestep round(strength * (K - 1))."""
    refine_steps: int = 3
    """DDIM steps of the refinement."""

    def __post_init__(self) -> None:
        """Check the anchors and the refinement besides the flat planner's fields."""
        super().__post_init__()
        self.anchor_indices = tuple(int(i) for i in self.anchor_indices)
        self.coarse_down_dims = tuple(self.coarse_down_dims)
        if not self.anchor_indices or list(self.anchor_indices) != sorted(set(self.anchor_indices)):
            raise ValueError(f"policy.anchor_indices must be sorted and unique, got {self.anchor_indices}")
        if self.anchor_indices[0] < 0:
            raise ValueError(f"policy.anchor_indices must be >= 0, got {self.anchor_indices}")
        if not self.coarse_down_dims or any(d % self.n_groups for d in self.coarse_down_dims):
            raise ValueError(f"policy.n_groups {self.n_groups} must divide every coarse_down_dims")
        if len(self.anchor_indices) % 2 ** (len(self.coarse_down_dims) - 1):
            raise ValueError(
                f"{len(self.anchor_indices)} anchors are not divisible by 2^(len(coarse_down_dims) - 1)"
            )
        if not 0 < self.refine_strength <= 1:
            raise ValueError(f"policy.refine_strength must be in (0, 1], got {self.refine_strength}")
        if self.refine_steps < 1:
            raise ValueError("policy.refine_steps must be >= 1")


class HierarchicalDenoiser(ChunkDenoiser):
    """The observation encoder, the full-plan (refining) U-Net and the anchor U-Net."""

    def __init__(
        self, encoder: ObservationEncoder, unet: ConditionalUnet1D, coarse_unet: ConditionalUnet1D
    ) -> None:
        super().__init__(encoder, unet)
        self.coarse_unet = coarse_unet


class HierarchicalDiffusionPlanner(DiffusionPlanner):
    """HAD-style coarse-to-fine plan diffusion (see the module docstring)."""

    name: ClassVar[str] = "hierarchical_diffusion_planner"
    config_class: ClassVar[type[PolicyConfig]] = HierarchicalDiffusionPlannerConfig
    config: HierarchicalDiffusionPlannerConfig

    def __init__(
        self,
        config: HierarchicalDiffusionPlannerConfig,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
    ) -> None:
        if isinstance(action_space, spaces.Box) and len(action_space.shape or ()) == 2:
            waypoints, dim = action_space.shape
            if config.anchor_indices[-1] != waypoints - 1:
                raise ValueError(
                    f"policy.anchor_indices {config.anchor_indices} must end at the last waypoint "
                    f"{waypoints - 1}"
                )
            if dim < 3:
                raise ValueError(
                    f"{type(self).__name__} expands (x, y, heading) poses, not {dim} coordinates"
                )
        super().__init__(config, observation_space, action_space)
        self.anchor_indices = list(config.anchor_indices)

    def _build_denoiser(self, encoder: ObservationEncoder) -> ChunkDenoiser:
        cfg = self.config
        unet = self._unet(self.pose_dim, encoder.out_dim, cfg.down_dims)
        coarse = self._unet(self.pose_dim, encoder.out_dim, cfg.coarse_down_dims)
        return HierarchicalDenoiser(encoder, unet, coarse)

    @property
    def refine_start(self) -> int:
        """The refinement's first timestep k_r."""
        return round(self.config.refine_strength * (self.config.num_train_timesteps - 1))

    def _eps_loss(self, unet: ConditionalUnet1D, x0: Tensor, cond: Tensor, high: int) -> Tensor:
        noise = torch.randn_like(x0)
        steps = torch.randint(0, high, (x0.shape[0],), device=x0.device)
        noisy = self.noise_scheduler.add_noise(x0, noise, steps)
        return F.mse_loss(unet(noisy, steps.float(), cond), noise)

    def objective(self, actions: Tensor, cond: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Coarse ε-loss on the anchors (all K timesteps) + fine ε-loss on the plan (timesteps <= k_r)."""
        plans = self._plans(actions)
        model = self.model
        assert isinstance(model, HierarchicalDenoiser)
        coarse = self._eps_loss(
            model.coarse_unet, plans[:, self.anchor_indices], cond, self.config.num_train_timesteps
        )
        fine = self._eps_loss(model.unet, plans, cond, self.refine_start + 1)
        return coarse + fine, {
            "train/loss_coarse": float(coarse.detach()),
            "train/loss_fine": float(fine.detach()),
        }

    def expand(self, anchors: Tensor) -> Tensor:
        """Normalised anchors ``[B, K, D]`` -> the normalised expansion ``[B, W, D]`` (a metric spline)."""
        batch = anchors.shape[0]
        low = self.action_normalizer.low.view(self.num_waypoints, self.pose_dim)
        high = self.action_normalizer.high.view(self.num_waypoints, self.pose_dim)
        full = torch.zeros(batch, self.num_waypoints, self.pose_dim, device=anchors.device)
        full[:, self.anchor_indices] = anchors
        metric = self.action_normalizer.unnormalize(full.reshape(batch, -1)).view_as(full)
        expanded = expand_anchors(
            metric[:, self.anchor_indices], self.config.anchor_indices, self.num_waypoints
        )
        expanded = torch.maximum(torch.minimum(expanded, high), low)
        return self.action_normalizer.normalize(expanded.reshape(batch, -1)).view_as(full)

    def sample(self, noise: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, list[Tensor]]:
        """Anchors by DDIM, the spline expansion, then ``refine_steps`` DDIM steps from ``k_r``.

        The anchors start from ``noise``'s anchor rows; the refinement's noise is ``noise``
        reversed along the waypoints. Returns the plans as chunks ``[B, 1, W * D]`` and the
        chain ``[noise, expansion, plan]``.
        """
        cfg = self.config
        model = self.acting_model
        assert isinstance(model, HierarchicalDenoiser)
        noise_plan = self._plans(noise)
        anchors = self.ddim(
            model.coarse_unet, noise_plan[:, self.anchor_indices], cond, cfg.num_train_timesteps - 1,
            cfg.num_inference_steps,
        )  # fmt: skip
        expansion = self.expand(anchors.clamp(-1, 1))
        start = self.refine_start
        alpha = self.noise_scheduler.alphas_cumprod.to(noise.device)[start]
        x = alpha.sqrt() * expansion + (1 - alpha).sqrt() * noise_plan.flip(1)
        plans = self.ddim(unet, x, cond, start, cfg.refine_steps)
        return self._chunks(plans), [noise, self._chunks(expansion), self._chunks(plans)]
