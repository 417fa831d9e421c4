"""A DIAMOND-style pixel world model: next-frame diffusion conditioned on past frames and actions.

Follows Alonso et al. (2024), "Diffusion for World Modeling: Visual Details Matter in Atari"
(docs/world_models.md). An EDM denoiser ``D(x~, sigma | past frames, past actions)``
generates the next RGB frame in ``[-1, 1]``; a separate small CNN classifies the step's reward sign
and termination. Equations (Karras et al. 2022 preconditioning with DIAMOND's offset noise)::

    noising   x~      = x + sigma_off * n_c + sigma * n     n_c ~ N(0, I) per image channel
    sigma_eff         = sqrt(sigma^2 + sigma_off^2)
    c_in  = 1 / sqrt(sigma_eff^2 + sigma_data^2)     c_skip = sigma_data^2 / (sigma_eff^2 + sigma_data^2)
    c_out = sigma_eff * sigma_data / sqrt(sigma_eff^2 + sigma_data^2)     c_noise = ln(sigma_eff) / 4
    D(x~) = c_skip * x~ + c_out * F(c_in * x~, c_noise, past frames / sigma_data, past actions)
    loss  = MSE(F(...), (x - c_skip * x~) / c_out)     training sigma = exp(N(-0.4, 1.2^2)), clipped

Sampling is Euler over Karras sigmas (3 steps by default: ``[5, 0.283082, 0.002, 0]``), from
``x ~ N(0, I)`` as the reference code does, each denoised estimate quantised to 8 bits.

Design decisions, and why:

* ``F`` is diffusers' ``UNet2DModel`` (no attention, small widths for a CPU). The past frames are
  stacked on the input channels beside the noisy frame; the noise level and the actions condition
  every residual block through adaptive group norm: diffusers' ``scale_shift`` time conditioning
  driven by its ``identity`` class embedding, into which this module feeds its own embedding of
  ``c_noise`` (Fourier features, as DIAMOND) plus the actions'. The U-Net's own timestep input is
  held at 0 (its sinusoidal embedding cannot resolve ``c_noise`` values of order 1).
* Observations: only the ``image`` key (uint8 ``[H, W, C]``) is modelled, and the model's
  observation space must be exactly ``Dict(image=...)``: a model that cannot produce the text or
  state keys must not claim the real env's spaces. Make games with ``obs_keys=("image",)``.
* Actions: ``Discrete(n)`` (an embedding with one extra "no action" row, for the history before
  the first step) or ``Box`` (a linear layer; the missing history is zeros).
* The model state is the history: ``frames`` (uint8 ``[B, L, H, W, C]``, oldest first) and the
  ``actions`` before the current one (float ``[B, L - 1, A]``). ``reset`` replicates the start
  frame ``L`` times (or takes a real history given under ``image_history``/``action_history``).
* Training data: transitions carry their history in the observation dict (``image_history``,
  ``action_history``; :func:`~omnigym.world_models.diffusion_data.history_transitions` builds
  them from episodes with the same padding as ``reset``), so ``train_step`` keeps the
  ``TransitionBatch`` interface. omnigym's ``ReplayBuffer`` stores ``Box`` actions and single
  frames only, hence :func:`~omnigym.world_models.diffusion_data.fit_diffusion_world_model` over
  episodes instead of ``fit_world_model`` over a buffer.
* Rewards are classified into ``sign(r)`` (3 classes) and terminations into 2, and ``step``
  samples both from the predicted categoricals with the caller's generator, as DIAMOND does in
  imagination (``sample_reward_end: false`` takes the argmax). The model's reward is therefore a
  sign in ``{-1, 0, 1}``: exact for games whose rewards are signs (FrozenLake, Maze).
* No uncertainty is reported: ``WorldModelVectorEnv`` settings that need one raise.

This module holds the settings and the model (its inputs, sampler, training and simulation
steps); the equations live in :mod:`~omnigym.world_models.diffusion_edm`, the networks in
:mod:`~omnigym.world_models.diffusion_networks` and the history transitions and the fit in
:mod:`~omnigym.world_models.diffusion_data`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.types import OBS_IMAGE, Obs, TransitionBatch
from omnigym.world_models.base import StepResult, WorldModel, WorldModelConfig
from omnigym.world_models.diffusion_data import HISTORY_ACTIONS, HISTORY_FRAMES, NO_ACTION, action_dim
from omnigym.world_models.diffusion_edm import (
    edm_coefficients,
    frames_to_unit,
    karras_sigmas,
    quantize,
    reward_class,
    sample_training_sigma,
    unit_to_frames,
)
from omnigym.world_models.diffusion_networks import Denoiser, RewardEndHead

EVAL_SAMPLE_ROWS = 64
"""Rows of a held-out batch on which ``evaluate`` samples next frames (3 U-Net calls each)."""


@dataclass
class DiffusionWorldModelConfig(WorldModelConfig):
    """Settings of :class:`DiffusionWorldModel` (DIAMOND's values unless sized for a CPU)."""

    type: str = "diffusion"
    num_context_frames: int = 4
    """``L``: past frames (and actions) the next frame is conditioned on."""
    channels: tuple[int, ...] = (32, 64, 64)
    """U-Net widths per resolution level (DIAMOND: four levels of 64); the frame's sides must
    divide by ``2 ** (len(channels) - 1)``."""
    layers_per_block: int = 1
    """Residual blocks per U-Net level (DIAMOND: 2)."""
    norm_groups: int = 8
    """Group-norm groups; must divide every width."""
    action_embed_dim: int = 32
    """Embedding width of one action."""
    sigma_data: float = 0.5
    sigma_offset: float = 0.3
    """Standard deviation of the per-channel offset noise ``n_c``."""
    sigma_min: float = 2e-3
    """Smallest sampling sigma (before the final 0)."""
    sigma_max: float = 5.0
    rho: float = 7.0
    """Karras schedule curvature."""
    num_sampling_steps: int = 3
    """Euler denoising steps per generated frame."""
    train_sigma_loc: float = -0.4
    """Mean of ``ln sigma`` during training."""
    train_sigma_scale: float = 1.2
    """Standard deviation of ``ln sigma`` during training."""
    train_sigma_min: float = 2e-3
    train_sigma_max: float = 20.0
    learning_rate: float = 1e-4
    """AdamW learning rate of both networks."""
    weight_decay: float = 1e-2
    adam_eps: float = 1e-8
    warmup_steps: int = 100
    """Linear learning-rate warm-up, in optimiser steps."""
    denoiser_grad_clip: float = 1.0
    reward_end_grad_clip: float = 100.0
    reward_end_channels: tuple[int, ...] = (16, 32, 32)
    """Widths of the reward/termination CNN's stride-2 convolutions."""
    reward_end_hidden: int = 128
    """Width of the reward/termination MLP."""
    sample_reward_end: bool = True
    """``step`` samples reward sign and termination (DIAMOND); False: takes the most likely class."""

    def __post_init__(self) -> None:
        """Reject settings that cannot build or train."""
        self.channels = tuple(self.channels)
        self.reward_end_channels = tuple(self.reward_end_channels)
        if self.num_context_frames < 1 or self.num_sampling_steps < 1 or self.layers_per_block < 1:
            raise ValueError("num_context_frames, num_sampling_steps and layers_per_block must be >= 1")
        if not self.channels or not self.reward_end_channels:
            raise ValueError("channels and reward_end_channels need at least one width")
        if any(width % self.norm_groups for width in self.channels):
            raise ValueError(f"norm_groups {self.norm_groups} must divide every width of {self.channels}")
        if not 0 < self.sigma_min < self.sigma_max or not 0 < self.train_sigma_min < self.train_sigma_max:
            raise ValueError("sigma ranges must satisfy 0 < min < max")
        if self.sigma_data <= 0 or self.sigma_offset < 0 or self.train_sigma_scale <= 0:
            raise ValueError("sigma_data and train_sigma_scale must be > 0, sigma_offset >= 0")
        if self.learning_rate <= 0 or self.warmup_steps < 0:
            raise ValueError("learning_rate must be > 0 and warmup_steps >= 0")


def _image_shape(observation_space: spaces.Dict) -> tuple[int, int, int]:
    """``(H, W, C)`` of the ``image`` key, after checking it is the only key and uint8."""
    if not isinstance(observation_space, spaces.Dict) or set(observation_space.spaces) != {OBS_IMAGE}:
        raise ValueError(
            f"the diffusion world model reproduces only the {OBS_IMAGE!r} key: its observation space must "
            f"be Dict({OBS_IMAGE}=Box(uint8 [H, W, C])) (make games with obs_keys=('image',)), "
            f"got {observation_space}"
        )
    box = observation_space[OBS_IMAGE]
    if not isinstance(box, spaces.Box) or box.dtype != np.uint8 or len(box.shape) != 3:
        raise ValueError(f"the {OBS_IMAGE!r} key must be a uint8 Box [H, W, C], got {box}")
    height, width, channels = (int(s) for s in box.shape)
    return height, width, channels


class DiffusionWorldModel(WorldModel):
    """DIAMOND-style next-frame diffusion over image observations (module docstring).

    The state is ``{"frames": uint8 [B, L, H, W, C], "actions": float [B, L - 1, A]}``.

    Args:
        config: a :class:`DiffusionWorldModelConfig`.
        observation_space: ``Dict(image=Box(uint8, [H, W, C]))``.
        action_space: ``Discrete(n)`` or ``Box``.
    """

    name = "diffusion"
    config_class = DiffusionWorldModelConfig
    config: DiffusionWorldModelConfig

    def __init__(
        self, config: DiffusionWorldModelConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self.image_shape = _image_shape(observation_space)
        self.action_dim = action_dim(action_space)
        height, width, channels = self.image_shape
        stride = 2 ** (len(config.channels) - 1)
        if height % stride or width % stride:
            raise ValueError(
                f"frame sides {height}x{width} must divide by {stride} for {len(config.channels)} levels"
            )
        self.denoiser = Denoiser(config, channels, action_space)
        self.reward_end = RewardEndHead(config, channels, action_space)
        self.sigmas: Tensor
        self.register_buffer(
            "sigmas",
            karras_sigmas(config.num_sampling_steps, config.sigma_min, config.sigma_max, config.rho),
            persistent=False,
        )
        self.denoiser_optimizer = self._adamw(self.denoiser)
        self.reward_end_optimizer = self._adamw(self.reward_end)
        warmup = lambda step: min(1.0, (step + 1) / max(1, config.warmup_steps))  # noqa: E731
        self.schedulers = [
            torch.optim.lr_scheduler.LambdaLR(opt, warmup)
            for opt in (self.denoiser_optimizer, self.reward_end_optimizer)
        ]

    def _adamw(self, module: nn.Module) -> torch.optim.AdamW:
        cfg = self.config
        return torch.optim.AdamW(
            module.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps, weight_decay=cfg.weight_decay
        )

    @property
    def device(self) -> torch.device:
        """The device of the model's tensors."""
        return self.sigmas.device

    # --- inputs -----------------------------------------------------------------------------
    def checked_frames(self, frames: Tensor, what: str = "frames") -> Tensor:
        """``frames [..., H, W, C]`` (uint8, or numbers in 0..255) as uint8 on the model's device.

        Raises:
            ValueError: a shape other than the model's frame, or values outside 0..255.
        """
        if tuple(frames.shape[-3:]) != self.image_shape:
            raise ValueError(
                f"{what} must be images [..., {self.image_shape}], got shape {tuple(frames.shape)}"
            )
        if frames.dtype != torch.uint8:
            frames = frames.float()
            if not torch.isfinite(frames).all() or frames.min() < 0 or frames.max() > 255:
                raise ValueError(f"{what} must hold pixel values in 0..255")
            frames = frames.round().to(torch.uint8)
        return frames.to(self.device)

    def checked_actions(self, action: Tensor, batch: int) -> Tensor:
        """``action`` as float ``[B, A]`` on the model's device.

        Raises:
            ValueError: a wrong shape, NaN/inf, or (Discrete) a value that is not an action index.
        """
        action = torch.as_tensor(action)
        if isinstance(self.action_space, spaces.Discrete) and action.shape == (batch,):
            action = action[:, None]
        if tuple(action.shape) != (batch, self.action_dim):
            raise ValueError(
                f"actions must have shape ({batch}, {self.action_dim}), got {tuple(action.shape)}"
            )
        action = action.float()
        if not torch.isfinite(action).all():
            raise ValueError("actions must be finite; got NaN or inf")
        if isinstance(self.action_space, spaces.Discrete):
            n = int(self.action_space.n)
            if (action != action.round()).any() or action.min() < 0 or action.max() >= n:
                raise ValueError(
                    f"discrete actions must be integers in [0, {n}), got {action.flatten().tolist()}"
                )
        return action.to(self.device)

    def _padding(self, batch: int, length: int) -> Tensor:
        """The history of ``length`` actions before an episode's first step. Shape: [B, length, A]."""
        fill = NO_ACTION if isinstance(self.action_space, spaces.Discrete) else 0.0
        return torch.full((batch, length, self.action_dim), fill, device=self.device)

    def _context(self, frames: Tensor) -> Tensor:
        """uint8 history ``[B, L, H, W, C]`` as the stacked ``[B, L * C, H, W]`` in ``[-1, 1]``."""
        return frames_to_unit(frames).flatten(1, 2)

    # --- the denoiser -----------------------------------------------------------------------
    def denoise(self, noisy: Tensor, sigma: Tensor, context: Tensor, actions: Tensor) -> Tensor:
        """``D(x~, sigma)`` (module docstring). Shapes: noisy [B, C, H, W], sigma [B] -> [B, C, H, W]."""
        c = edm_coefficients(sigma, self.config.sigma_data, self.config.sigma_offset)
        c_in, c_skip, c_out = (v[:, None, None, None] for v in (c.c_in, c.c_skip, c.c_out))
        out = self.denoiser(c_in * noisy, c.c_noise, context / self.config.sigma_data, actions)
        return c_skip * noisy + c_out * out

    @torch.no_grad()
    def sample_next_frame(
        self, context: Tensor, actions: Tensor, generator: torch.Generator | None = None
    ) -> Tensor:
        """Euler sampling over the Karras sigmas, each denoised estimate quantised to 8 bits.

        Args:
            context: past frames in ``[-1, 1]``, stacked. Shape: [B, L * C, H, W].
            actions: the last ``L`` actions. Shape: [B, L, A].
            generator: source of the starting noise ``x ~ N(0, I)``.

        Returns:
            The next frame in ``[-1, 1]``, on the 8-bit grid. Shape: [B, C, H, W].
        """
        height, width, channels = self.image_shape
        shape = (context.shape[0], channels, height, width)
        x = self._draw(torch.randn, shape, generator=generator)
        for sigma, sigma_next in itertools.pairwise(self.sigmas):
            denoised = quantize(self.denoise(x, sigma.expand(shape[0]), context, actions))
            x = x + (x - denoised) / sigma * (sigma_next - sigma)  # Euler step of dx/dsigma = (x - D) / sigma
        return x

    # --- training ---------------------------------------------------------------------------
    def _training_inputs(self, batch: TransitionBatch) -> tuple[Tensor, Tensor, Tensor]:
        """``batch``'s context ``[B, L * C, H, W]``, actions ``[B, L, A]`` and target ``[B, C, H, W]``."""
        if HISTORY_FRAMES not in batch.obs or HISTORY_ACTIONS not in batch.obs:
            raise KeyError(
                f"diffusion world-model transitions carry their history in obs[{HISTORY_FRAMES!r}] and "
                f"obs[{HISTORY_ACTIONS!r}]: build them with history_transitions(episodes, ...)"
            )
        frames = self.checked_frames(batch.obs[HISTORY_FRAMES], HISTORY_FRAMES)
        if frames.shape[1] != self.config.num_context_frames:
            raise ValueError(f"{HISTORY_FRAMES} holds {frames.shape[1]} frames, the model conditions on "
                             f"{self.config.num_context_frames}")  # fmt: skip
        current = self.checked_actions(batch.actions, len(batch))
        actions = torch.cat([batch.obs[HISTORY_ACTIONS].float().to(self.device), current[:, None]], dim=1)
        target = frames_to_unit(self.checked_frames(batch.next_obs[OBS_IMAGE], "next_obs image"))
        return self._context(frames), actions, target

    def denoising_loss(
        self, context: Tensor, actions: Tensor, target: Tensor, generator: torch.Generator | None = None
    ) -> Tensor:
        """The EDM loss of the module docstring, one sigma per row drawn from ``generator``."""
        batch, channels = target.shape[:2]
        sigma = sample_training_sigma(batch, self.config, generator).to(self.device)
        offset = self._draw(torch.randn, (batch, channels, 1, 1), generator=generator)  # n_c
        noise = self._draw(torch.randn, tuple(target.shape), generator=generator)  # n
        noisy = target + self.config.sigma_offset * offset + sigma[:, None, None, None] * noise
        c = edm_coefficients(sigma, self.config.sigma_data, self.config.sigma_offset)
        c_in, c_skip, c_out = (v[:, None, None, None] for v in (c.c_in, c.c_skip, c.c_out))
        prediction = self.denoiser(c_in * noisy, c.c_noise, context / self.config.sigma_data, actions)
        return F.mse_loss(prediction, (target - c_skip * noisy) / c_out)

    def reward_end_losses(
        self, context: Tensor, actions: Tensor, target: Tensor, batch: TransitionBatch
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Cross-entropies of reward sign and termination, and their accuracies (teacher forced)."""
        reward_logits, end_logits = self.reward_end(context, target, actions)
        reward_labels = reward_class(batch.rewards.to(self.device))
        end_labels = batch.terminated.to(self.device).long()
        return (
            F.cross_entropy(reward_logits, reward_labels),
            F.cross_entropy(end_logits, end_labels),
            (reward_logits.argmax(-1) == reward_labels).float().mean(),
            (end_logits.argmax(-1) == end_labels).float().mean(),
        )

    def train_step(
        self, batch: TransitionBatch, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """One AdamW step of the denoiser and one of the reward/termination head on ``batch``.

        ``batch.obs`` must carry the history
        (:func:`~omnigym.world_models.diffusion_data.history_transitions`); ``generator`` draws
        the noise levels and the noise (the global generator when None).
        """
        self.train()
        context, actions, target = self._training_inputs(batch)
        denoising = self.denoising_loss(context, actions, target, generator)
        reward_ce, end_ce, _, _ = self.reward_end_losses(context, actions, target, batch)
        for loss, optimizer, module, clip in (
            (denoising, self.denoiser_optimizer, self.denoiser, self.config.denoiser_grad_clip),
            (
                reward_ce + end_ce,
                self.reward_end_optimizer,
                self.reward_end,
                self.config.reward_end_grad_clip,
            ),
        ):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(module.parameters(), clip)
            optimizer.step()
        for scheduler in self.schedulers:
            scheduler.step()
        values = torch.stack([denoising, reward_ce, end_ce]).tolist()
        names = ("loss_denoising", "loss_reward", "loss_termination")
        return {"train/loss": values[0] + values[1] + values[2]} | {
            f"train/{name}": value for name, value in zip(names, values, strict=True)
        }

    @torch.no_grad()
    def evaluate(self, batch: TransitionBatch) -> dict[str, float]:
        """Held-out metrics, seeded (equal calls give equal numbers).

        ``eval/loss`` (denoising + reward + termination losses, noise drawn from seed 0),
        ``eval/reward_accuracy``, ``eval/termination_accuracy`` and, on the first
        ``EVAL_SAMPLE_ROWS`` rows, ``eval/next_frame_mse`` of a sampled next frame against
        ``eval/copy_frame_mse``, the error of repeating the last frame (both in ``[-1, 1]`` units).
        """
        self.eval()
        generator = torch.Generator(device=self.device).manual_seed(0)
        context, actions, target = self._training_inputs(batch)
        denoising = self.denoising_loss(context, actions, target, generator)
        reward_ce, end_ce, reward_acc, end_acc = self.reward_end_losses(context, actions, target, batch)
        rows = slice(0, EVAL_SAMPLE_ROWS)
        sampled = self.sample_next_frame(context[rows], actions[rows], generator)
        channels = self.image_shape[2]
        last = context[rows, -channels:]
        values = torch.stack([
            denoising + reward_ce + end_ce, denoising, reward_acc, end_acc,
            (sampled - target[rows]).square().mean(), (last - target[rows]).square().mean(),
        ]).tolist()  # fmt: skip
        names = ("loss", "loss_denoising", "reward_accuracy", "termination_accuracy", "next_frame_mse",
                 "copy_frame_mse")  # fmt: skip
        return {f"eval/{name}": value for name, value in zip(names, values, strict=True)}

    # --- simulating -------------------------------------------------------------------------
    def reset(self, obs: Obs) -> dict[str, Tensor]:
        """The history to start from: ``obs["image"] [B, H, W, C]`` replicated ``L`` times, no actions.

        A real context can be given instead under ``image_history`` ``[B, L, H, W, C]`` and
        ``action_history`` ``[B, L - 1, A]`` (DIAMOND starts imagination from real 4-frame contexts).

        Raises:
            KeyError: no ``image`` key.
            ValueError: frames of another shape.
        """
        if OBS_IMAGE not in obs:
            raise KeyError(
                f"the diffusion world model starts from obs[{OBS_IMAGE!r}], got keys {sorted(obs)}"
            )
        frame = self.checked_frames(obs[OBS_IMAGE], "start frames")
        if frame.ndim != 4:
            raise ValueError(f"start frames must be [B, {self.image_shape}], got shape {tuple(frame.shape)}")
        length = self.config.num_context_frames
        if HISTORY_FRAMES in obs:
            frames = self.checked_frames(obs[HISTORY_FRAMES], HISTORY_FRAMES)
            actions = obs[HISTORY_ACTIONS].float().to(self.device)
            expected = (frame.shape[0], length - 1, self.action_dim)
            if frames.shape[:2] != (frame.shape[0], length) or tuple(actions.shape) != expected:
                raise ValueError(f"a start history needs {length} frames and {length - 1} actions per row")
            return {"frames": frames, "actions": actions}
        frames = frame[:, None].expand(-1, length, -1, -1, -1).clone()
        return {"frames": frames, "actions": self._padding(frame.shape[0], length - 1)}

    @torch.no_grad()
    def step(
        self,
        state: dict[str, Tensor],
        action: Tensor,
        *,
        generator: torch.Generator | None = None,
        with_uncertainty: bool = True,
    ) -> StepResult:
        """Generate every row's next frame, then its reward sign and termination.

        Draws, in order, from ``generator``: the starting noise of the sampler, then (with
        ``sample_reward_end``) one uniform per row for the reward class and one for termination.
        ``with_uncertainty`` is accepted and ignored: this model reports no uncertainty.

        Args:
            state: the history (class docstring).
            action: ``[B, A]`` (or ``[B]`` for ``Discrete``).
            generator: the source of every random draw.
            with_uncertainty: unused.

        Returns:
            ``(state, {"image": uint8 [B, H, W, C]}, reward sign [B] float32, terminated [B], {})``.

        Raises:
            ValueError: actions of the wrong shape, NaN/inf, or not an action index.
        """
        self.eval()
        frames, history = state["frames"], state["actions"]
        current = self.checked_actions(action, frames.shape[0])
        actions = torch.cat([history, current[:, None]], dim=1)
        context = self._context(frames)
        next_unit = self.sample_next_frame(context, actions, generator)
        reward_logits, end_logits = self.reward_end(context, next_unit, actions)
        reward = self._pick(reward_logits, generator).float() - 1  # class -> sign
        terminated = self._pick(end_logits, generator).bool()
        next_frame = unit_to_frames(next_unit)
        next_state = {
            "frames": torch.cat([frames[:, 1:], next_frame[:, None]], dim=1),
            "actions": actions[:, 1:],
        }
        return next_state, {OBS_IMAGE: next_frame}, reward, terminated, {}

    def _pick(self, logits: Tensor, generator: torch.Generator | None) -> Tensor:
        """A class per row: the CDF inverted at one uniform from ``generator``, or the argmax."""
        if not self.config.sample_reward_end:
            return logits.argmax(-1)
        uniform = self._draw(torch.rand, (logits.shape[0], 1), generator=generator)
        cdf = logits.softmax(-1).cumsum(-1)
        return (cdf < uniform).sum(-1).clamp_max(logits.shape[-1] - 1)

    def _draw(
        self, sampler: Callable[..., Tensor], *args: Any, generator: torch.Generator | None = None
    ) -> Tensor:
        """``sampler(*args)`` on the generator's device (where it must draw), moved to the model's."""
        device = generator.device if generator is not None else self.device
        return sampler(*args, generator=generator, device=device).to(self.device)
