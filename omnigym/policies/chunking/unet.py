"""The conditional 1-D temporal U-Net of Diffusion Policy (Chi et al., 2023, §III-B, Fig. 2).

diffusers' ``UNet1DModel`` has no global conditioning input, so this module composes diffusers'
building blocks (``Conv1dBlock`` = Conv1d -> GroupNorm -> Mish, ``Downsample1D``,
``Upsample1D``, sinusoidal ``Timesteps`` + ``TimestepEmbedding``) into Diffusion Policy's
``ConditionalUnet1D``: every residual block is FiLM-modulated (per-channel scale and bias) by
the time embedding concatenated with the observation features.
"""

from __future__ import annotations

import itertools

import torch
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from diffusers.models.resnet import Conv1dBlock, Downsample1D, Upsample1D
from torch import Tensor, nn


class FiLMResidualBlock1D(nn.Module):
    """Conv block, FiLM ``scale * h + bias`` from the conditioning, conv block, residual.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        cond_dim: width of the conditioning vector.
        kernel_size: temporal kernel.
        n_groups: GroupNorm groups.
    """

    def __init__(
        self, in_channels: int, out_channels: int, cond_dim: int, kernel_size: int, n_groups: int
    ) -> None:
        super().__init__()
        self.conv_in = Conv1dBlock(in_channels, out_channels, kernel_size, n_groups)
        self.conv_out = Conv1dBlock(out_channels, out_channels, kernel_size, n_groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * out_channels))
        self.residual = (
            nn.Conv1d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()
        )

    def forward(self, x: Tensor, cond: Tensor) -> Tensor:
        """Shapes: x [B, C_in, T], cond [B, cond_dim] -> [B, C_out, T]."""
        scale, bias = self.film(cond).unsqueeze(-1).chunk(2, dim=1)
        h = self.conv_out(scale * self.conv_in(x) + bias)
        return h + self.residual(x)


class UNetLevel(nn.Module):
    """Two FiLM residual blocks at one resolution, then a down- or upsampling layer."""

    def __init__(self, first: FiLMResidualBlock1D, second: FiLMResidualBlock1D, resample: nn.Module) -> None:
        super().__init__()
        self.first = first
        self.second = second
        self.resample = resample

    def forward(self, x: Tensor, cond: Tensor) -> tuple[Tensor, Tensor]:
        """The blocks' output and its resampled version.

        Shapes: x [B, C_in, T], cond [B, cond_dim] -> [B, C_out, T] and [B, C_out, T'] (T' = T / 2
        down, 2 T up, T for the identity).
        """
        h = self.second(self.first(x, cond), cond)
        return h, self.resample(h)


class ConditionalUnet1D(nn.Module):
    """Predicts a tensor shaped like the action chunk from a noisy chunk, time(s) and features.

    Args:
        action_dim: channels of the chunk (the flat action width).
        global_cond_dim: width of the observation features.
        down_dims: channels of each resolution level (the chunk is halved between levels).
        kernel_size: temporal kernel.
        n_groups: GroupNorm groups.
        time_embed_dim: width of each time embedding.
        num_times: how many scalar times condition the net (MeanFlow: 2); their embeddings add.
    """

    def __init__(
        self,
        action_dim: int,
        global_cond_dim: int,
        down_dims: tuple[int, ...] = (64, 128, 256),
        kernel_size: int = 5,
        n_groups: int = 8,
        time_embed_dim: int = 128,
        num_times: int = 1,
    ) -> None:
        super().__init__()
        self.time_proj = Timesteps(time_embed_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embeds = nn.ModuleList(
            TimestepEmbedding(time_embed_dim, 4 * time_embed_dim, act_fn="mish", out_dim=time_embed_dim)
            for _ in range(num_times)
        )
        cond_dim = time_embed_dim + global_cond_dim

        def block(a: int, b: int) -> FiLMResidualBlock1D:
            return FiLMResidualBlock1D(a, b, cond_dim, kernel_size, n_groups)

        levels = list(itertools.pairwise((action_dim, *down_dims)))
        last = len(levels) - 1
        self.down = nn.ModuleList(
            UNetLevel(block(a, b), block(b, b), Downsample1D(b, use_conv=True) if i < last else nn.Identity())
            for i, (a, b) in enumerate(levels)
        )
        self.mid = nn.ModuleList([block(down_dims[-1], down_dims[-1]), block(down_dims[-1], down_dims[-1])])
        self.up = nn.ModuleList(
            UNetLevel(block(2 * b, a), block(a, a), Upsample1D(a, use_conv_transpose=True))
            for a, b in reversed(levels[1:])
        )
        start = down_dims[0]
        self.final = nn.Sequential(
            Conv1dBlock(start, start, kernel_size, n_groups), nn.Conv1d(start, action_dim, 1)
        )

    def forward(self, sample: Tensor, times: Tensor, global_cond: Tensor) -> Tensor:
        """Run the U-Net.

        Args:
            sample: the noisy chunk. Shape: [B, T, action_dim] (T divisible by 2^(levels - 1)).
            times: the time(s), any float scale (diffusion steps 0..K-1, flow time x 1000).
                Shape: [B, num_times] or [B] when ``num_times`` is 1.
            global_cond: observation features. Shape: [B, global_cond_dim].

        Returns:
            The prediction (noise, velocity, ...). Shape: [B, T, action_dim].
        """
        times = times.reshape(sample.shape[0], -1)
        embedding = sum(
            embed(self.time_proj(times[:, i]).to(sample.dtype)) for i, embed in enumerate(self.time_embeds)
        )
        cond = torch.cat([embedding, global_cond], dim=-1)  # type: ignore[list-item]
        x = sample.transpose(1, 2)
        skips = []
        for level in self.down:
            skip, x = level(x, cond)
            skips.append(skip)
        for mid in self.mid:
            x = mid(x, cond)
        for level in self.up:  # the finest level's skip is unused, as in Diffusion Policy
            _, x = level(torch.cat([x, skips.pop()], dim=1), cond)
        return self.final(x).transpose(1, 2)
