"""What a chunk policy is made of and trained by: its network, normalisation, EMA and chunk sampling.

:class:`ChunkPolicyBase` holds the generative model of normalised action chunks
``[B, horizon, action_dim]`` (the observation encoder and the conditional U-Net, see
:class:`ChunkDenoiser`) and everything around it that does not depend on how the policy acts;
:class:`~omnigym.policies.chunking.policy.ChunkPolicy` adds the acting (receding horizon, temporal
ensembling) and the stochastic chains of RL fine-tuning.

* **Normalisation**: actions (and vector observations) are min-max scaled to [-1, 1]; the
  statistics are buffers (saved with the weights) set by :meth:`ChunkPolicyBase.fit_normalizers`.
  Until then the action range is the action space's bounds (or [-1, 1] where unbounded).
* **EMA**: a copy of the network follows the trained one with Diffusion Policy's decay
  ``min(max_decay, 1 - (1 + step)^-power)`` (0 at the first update); acting uses the copy, which
  is saved too. The imitation loop calls :meth:`ChunkPolicyBase.update_ema` after each optimiser
  step.
* **Determinism**: with ``deterministic=True`` every row starts from the same fixed noise
  (seeded by ``noise_seed``), so an action depends only on the observation history, not on the
  call count or the batch layout.
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy
from omnigym.core.types import OBS_IMAGE, OBS_STATE, Obs
from omnigym.policies.chunking.config import ChunkPolicyConfig
from omnigym.policies.chunking.encoders import MinMaxNormalizer, ObservationEncoder
from omnigym.policies.chunking.unet import ConditionalUnet1D


class ChunkDenoiser(nn.Module):
    """The trained network: the observation encoder and the conditional U-Net."""

    def __init__(self, encoder: ObservationEncoder, unet: ConditionalUnet1D) -> None:
        super().__init__()
        self.encoder = encoder
        self.unet = unet


class ChunkPolicyBase(Policy):
    """A generative model of action chunks as a policy's network (see the module doc); no acting."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"act", "compute_loss", "trainable"})
    capability_switches: ClassVar[dict[str, str]] = {"evaluate": "rl_chain=true", "features": "rl_chain=true"}
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    num_times: ClassVar[int] = 1
    """Scalar times the U-Net is conditioned on (MeanFlow: r and t)."""
    config: ChunkPolicyConfig
    action_low: Tensor
    action_high: Tensor
    ema_step: Tensor
    fixed_noise: Tensor

    def __init__(
        self, config: ChunkPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(action_space, spaces.Box):
            raise TypeError(
                f"{type(self).__name__} generates continuous (Box) actions, not {type(action_space).__name__}"
            )
        self.action_shape: tuple[int, ...] = tuple(action_space.shape)
        self.action_dim = math.prod(self.action_shape)
        self.state_keys, self.image_keys = self._resolve_keys(observation_space, config.obs_keys)
        shapes = {k: tuple(observation_space[k].shape or ()) for k in (*self.state_keys, *self.image_keys)}
        state_dims = [math.prod(shapes[k]) for k in self.state_keys]
        image_channels = [shapes[k][2] for k in self.image_keys]
        low, high = (
            torch.as_tensor(b, dtype=torch.float32).flatten() for b in (action_space.low, action_space.high)
        )
        self.register_buffer("action_low", low, persistent=False)  # the space's bounds clamp actions
        self.register_buffer("action_high", high, persistent=False)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        self.action_normalizer = MinMaxNormalizer(
            torch.where(bounded, low, -1.0), torch.where(bounded, high, 1.0)
        )
        self.state_normalizer = MinMaxNormalizer(-torch.ones(sum(state_dims)), torch.ones(sum(state_dims)))
        encoder = ObservationEncoder(
            state_dims, image_channels, config.n_obs_steps, tuple(config.state_hidden_sizes),
            tuple(config.image_widths), config.num_keypoints, config.image_feature_dim, config.crop_ratio,
        )  # fmt: skip
        unet = ConditionalUnet1D(
            self.action_dim, encoder.out_dim, config.down_dims, config.kernel_size,
            config.n_groups, config.time_embed_dim, self.num_times,
        )  # fmt: skip
        self.model = ChunkDenoiser(encoder, unet)
        self.ema_model: ChunkDenoiser | None = None
        if config.use_ema:
            self.ema_model = copy.deepcopy(self.model).requires_grad_(False)
        self.register_buffer("ema_step", torch.zeros((), dtype=torch.long))
        self.frozen_model: ChunkDenoiser | None = None
        """Weights of the chain's deterministic first steps under ``rl_chain`` (see
        :meth:`~omnigym.policies.chunking.policy.ChunkPolicy.freeze_chain_prefix`); None: the
        trained weights run every step."""
        if config.frozen_chain_prefix:  # a saved fine-tuned policy: its weights load into the copy
            self.frozen_model = copy.deepcopy(self.model).requires_grad_(False)
        noise = torch.randn(
            config.horizon, self.action_dim, generator=torch.Generator().manual_seed(config.noise_seed)
        )
        self.register_buffer("fixed_noise", noise, persistent=False)

    @staticmethod
    def _resolve_keys(observation_space: spaces.Dict, keys: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """Split the observation keys read into vector keys and ``[H, W, C]`` image keys."""
        chosen = keys or tuple(k for k in (OBS_IMAGE, OBS_STATE) if k in observation_space.spaces)
        if not keys:
            unread = [k for k, s in observation_space.spaces.items() if not isinstance(s, spaces.Box)]
            if unread:
                raise TypeError(
                    f"chunk policies read Box observations only; set policy.obs_keys to skip {unread}"
                )
        if not chosen:
            raise TypeError(f"no image or state key to read in {sorted(observation_space.spaces)}")
        state_keys: list[str] = []
        image_keys: list[str] = []
        for key in chosen:
            space = observation_space.spaces.get(key)
            if space is None:
                raise ValueError(
                    f"policy.obs_keys names {key!r}, but the env observes {sorted(observation_space.spaces)}"
                )
            if not isinstance(space, spaces.Box):
                raise TypeError(f"chunk policies read Box observations; {key!r} is {type(space).__name__}")
            is_image = len(space.shape or ()) == 3 and space.dtype == np.uint8
            (image_keys if is_image else state_keys).append(key)
        sizes = {tuple(observation_space[k].shape or ())[:2] for k in image_keys}
        if len(sizes) > 1:
            raise ValueError(f"image keys {image_keys} have different sizes {sorted(sizes)}")
        return state_keys, image_keys

    # --- the generative model (subclasses) ------------------------------------------------------
    def objective(self, actions: Tensor, cond: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Training loss on normalised chunks ``actions [B, Tp, Da]`` given features ``cond [B, C]``."""
        raise NotImplementedError

    def sample(self, noise: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, list[Tensor]]:
        """Generate normalised chunks from ``noise [B, Tp, Da]``.

        Returns:
            The chunks and the chain of intermediate chunks (noise first, the result last),
            each ``[B, Tp, Da]``.
        """
        raise NotImplementedError

    # --- data -----------------------------------------------------------------------------------
    @torch.no_grad()
    def fit_normalizers(self, obs: dict[str, Any], actions: Any) -> None:
        """Set the min-max statistics from demonstrations.

        Args:
            obs: key -> ``[N, ...]`` (vector keys are read).
            actions: Shape: [N, *action_shape].
        """
        self.action_normalizer.fit(torch.as_tensor(np.asarray(actions)).reshape(-1, self.action_dim))
        if self.state_keys:
            flat = [
                torch.as_tensor(np.asarray(obs[k])).reshape(len(obs[k]), -1).float() for k in self.state_keys
            ]
            self.state_normalizer.fit(torch.cat(flat, dim=-1))

    def encode(self, history: Obs, model: ChunkDenoiser, random_crop: bool = False) -> Tensor:
        """Features of observation histories key -> ``[B, To, ...]``. Shape: [B, cond_dim]."""
        device = self.fixed_noise.device
        states = images = None
        if self.state_keys:
            parts = [history[k].to(device).flatten(2).float() for k in self.state_keys]
            states = self.state_normalizer.normalize(torch.cat(parts, dim=-1))
        if self.image_keys:
            pixels = [history[k].to(device).permute(0, 1, 4, 2, 3).float() / 255 for k in self.image_keys]
            images = torch.cat(pixels, dim=2)
        return model.encoder(states, images, random_crop)

    def _windows(self, batch: Any) -> tuple[Obs, Tensor]:
        """``(obs history [B, To, ...], action chunks [B, Tp, Da])`` of a :class:`ChunkBatch`.

        A batch of single steps (``obs [B, ...]``, ``actions [B, *action_shape]``, e.g. an
        ``OnPolicyBatch``) is read as windows padded by repeating that step.
        """
        cfg = self.config
        history = {}
        for key in (*self.state_keys, *self.image_keys):
            value = batch.obs[key]
            if value.dim() == len(self.observation_space[key].shape or ()) + 1:
                value = value.unsqueeze(1).expand(-1, cfg.n_obs_steps, *value.shape[1:])
            history[key] = value
        actions = batch.actions.to(self.fixed_noise.device).float()
        if actions.dim() == len(self.action_shape) + 1:
            actions = actions.unsqueeze(1).expand(-1, cfg.horizon, *actions.shape[1:])
        return history, actions.reshape(actions.shape[0], cfg.horizon, self.action_dim)

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """The generative model's loss on demonstration windows (a :class:`ChunkBatch`)."""
        history, actions = self._windows(batch)
        cond = self.encode(history, self.model, random_crop=True)
        return self.objective(self.action_normalizer.normalize(actions), cond)

    @torch.no_grad()
    def update_ema(self) -> None:
        """Move the EMA weights towards the trained ones; call after each optimiser step."""
        if self.ema_model is None:
            return
        step = int(self.ema_step)
        decay = 0.0 if step == 0 else min(self.config.ema_max_decay, 1 - (1 + step) ** -self.config.ema_power)
        for ema, param in zip(self.ema_model.parameters(), self.model.parameters(), strict=True):
            ema.lerp_(param.detach(), 1 - decay)
        self.ema_step.add_(1)

    def use_ema_weights(self) -> None:
        """Copy the EMA weights into the trained network (before RL fine-tuning acts with it)."""
        if self.ema_model is not None:
            self.model.load_state_dict(self.ema_model.state_dict())

    # --- sampling -------------------------------------------------------------------------------
    @property
    def rl_chain(self) -> bool:
        """Whether ``act`` samples stochastic chains and returns their steps as parts."""
        return bool(getattr(self.config, "rl_chain", False))

    @property
    def acting_model(self) -> ChunkDenoiser:
        """The weights ``act`` uses: the EMA copy when enabled, the trained ones under ``rl_chain``.

        RL fine-tuning must act with the weights :meth:`evaluate` differentiates; call
        :meth:`use_ema_weights` first to start it from the EMA copy of an imitation run.
        """
        if self.ema_model is None or self.rl_chain:
            return self.model
        return self.ema_model

    @torch.no_grad()
    def sample_chunks(
        self, history: Obs, deterministic: bool = False, noise: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """Sample whole chunks for observation histories key -> ``[B, To, ...]``.

        ``noise [B, horizon, action_dim]``: the sampler's initial noise (normalised units); None
        draws it (the fixed noise when ``deterministic``).

        Returns:
            The chunks in the env's units, ``[B, Tp, *action_shape]``, and the normalised chain
            of :meth:`sample` (each ``[B, Tp, Da]``).
        """
        model = self.acting_model
        cond = self.encode(history, model)
        batch = cond.shape[0]
        if noise is not None:
            noise = noise.to(cond.device).reshape(batch, *self.fixed_noise.shape)
        elif deterministic:
            noise = self.fixed_noise.expand(batch, -1, -1)
        else:
            noise = torch.randn(batch, *self.fixed_noise.shape, device=cond.device)
        normalized, chain = self.sample(noise, cond, model.unet)
        chunk = self.action_normalizer.unnormalize(normalized.clamp(-1, 1))
        chunk = chunk.clamp(self.action_low, self.action_high)  # infinite bounds clamp nothing
        return chunk.reshape(batch, self.config.horizon, *self.action_shape), chain
