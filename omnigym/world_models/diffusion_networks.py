"""The diffusion world model's networks: the EDM denoiser ``F`` and the reward/termination head.

Both read the same conditioning (the past frames stacked on channels and the last ``L``
actions, see :class:`ActionEncoder`); the model in :mod:`omnigym.world_models.diffusion` wraps
``F`` in the EDM preconditioning and drives the sampler and the training steps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
from gymnasium import spaces
from torch import Tensor, nn

if TYPE_CHECKING:
    from omnigym.world_models.diffusion import DiffusionWorldModelConfig


class ActionEncoder(nn.Module):
    """Embeds an action history ``[B, L, A]`` as one vector ``[B, L * embed_dim]``.

    Discrete actions index an embedding with an extra "no action" row (``NO_ACTION``); Box
    actions go through a linear layer.
    """

    def __init__(self, action_space: spaces.Space, embed_dim: int) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.num_actions = int(action_space.n) if isinstance(action_space, spaces.Discrete) else 0
        if self.discrete:
            self.embed: nn.Module = nn.Embedding(self.num_actions + 1, embed_dim)  # the last row: no action
        else:
            self.embed = nn.Linear(int(math.prod(action_space.shape or (1,))), embed_dim)

    def forward(self, actions: Tensor) -> Tensor:
        """Shape: [B, L, A] -> [B, L * embed_dim]."""
        if self.discrete:
            index = actions[..., 0].long()
            embedded = self.embed(torch.where(index < 0, self.num_actions, index))
        else:
            embedded = self.embed(actions.float())
        return embedded.flatten(1)


class FourierFeatures(nn.Module):
    """``[cos(2 pi w c), sin(2 pi w c)]`` of a scalar with fixed random frequencies ``w ~ N(0, 1)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight: Tensor
        self.register_buffer("weight", torch.randn(1, dim // 2))

    def forward(self, value: Tensor) -> Tensor:
        """Shape: [B] -> [B, 2 * (dim // 2)]."""
        angle = 2 * math.pi * value[:, None] * self.weight
        return torch.cat([angle.cos(), angle.sin()], dim=-1)


class Denoiser(nn.Module):
    """``F_theta``: the diffusers U-Net, conditioned on noise level and actions via adaptive group norm."""

    def __init__(
        self, config: DiffusionWorldModelConfig, image_channels: int, action_space: spaces.Space
    ) -> None:
        super().__init__()
        try:
            from diffusers import UNet2DModel
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "the diffusion world model needs diffusers: install omnigym[diffusion]"
            ) from exc
        levels = len(config.channels)
        self.cond_dim = 4 * config.channels[0]  # diffusers' time-embedding width
        self.action_encoder = ActionEncoder(action_space, config.action_embed_dim)
        self.noise_embedding = FourierFeatures(self.cond_dim)
        self.cond = nn.Sequential(
            nn.Linear(self.cond_dim + config.num_context_frames * config.action_embed_dim, self.cond_dim),
            nn.SiLU(),
            nn.Linear(self.cond_dim, self.cond_dim),
        )
        self.unet = UNet2DModel(
            in_channels=image_channels * (config.num_context_frames + 1),
            out_channels=image_channels,
            block_out_channels=config.channels,
            layers_per_block=config.layers_per_block,
            down_block_types=("DownBlock2D",) * levels,
            up_block_types=("UpBlock2D",) * levels,
            norm_num_groups=config.norm_groups,
            class_embed_type="identity",  # our conditioning vector is added to the time embedding
            resnet_time_scale_shift="scale_shift",  # adaptive group norm
            add_attention=False,
        )

    def forward(self, noisy_in: Tensor, c_noise: Tensor, context: Tensor, actions: Tensor) -> Tensor:
        """``F(c_in * x~, c_noise, context, actions)``.

        Args:
            noisy_in: ``c_in * x~``. Shape: [B, C, H, W].
            c_noise: Shape: [B].
            context: past frames / sigma_data, stacked on channels. Shape: [B, L * C, H, W].
            actions: Shape: [B, L, A].

        Returns:
            Shape: [B, C, H, W].
        """
        cond = self.cond(torch.cat([self.noise_embedding(c_noise), self.action_encoder(actions)], dim=-1))
        timestep = torch.zeros(noisy_in.shape[0], device=noisy_in.device)
        unet = cast(Callable[..., Any], self.unet)  # diffusers' decorated forward confuses mypy
        return unet(torch.cat([noisy_in, context], dim=1), timestep, class_labels=cond).sample


class RewardEndHead(nn.Module):
    """A small CNN over (past frames, next frame) and the actions: reward-sign and termination logits."""

    def __init__(
        self, config: DiffusionWorldModelConfig, image_channels: int, action_space: spaces.Space
    ) -> None:
        super().__init__()
        widths = [image_channels * (config.num_context_frames + 1), *config.reward_end_channels]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.Conv2d(a, b, kernel_size=4, stride=2, padding=1), nn.SiLU()]
        self.cnn = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.action_encoder = ActionEncoder(action_space, config.action_embed_dim)
        features = 16 * widths[-1] + config.num_context_frames * config.action_embed_dim
        self.mlp = nn.Sequential(
            nn.Linear(features, config.reward_end_hidden), nn.SiLU(), nn.Linear(config.reward_end_hidden, 5)
        )

    def forward(self, context: Tensor, next_frame: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Shapes: context [B, L * C, H, W], next_frame [B, C, H, W], actions [B, L, A] -> [B, 3], [B, 2]."""
        features = self.cnn(torch.cat([context, next_frame], dim=1))
        logits = self.mlp(torch.cat([features, self.action_encoder(actions)], dim=-1))
        return logits[:, :3], logits[:, 3:]
