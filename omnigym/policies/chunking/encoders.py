"""Min-max normalisers and observation encoders for the action-chunk policies.

Diffusion Policy (Chi et al., 2023, §III-B) conditions its denoiser on the features of the last
``n_obs_steps`` observations, concatenated: vector keys are min-max normalised to [-1, 1] and
passed through an MLP here; images go through a small ResNet-style CNN with GroupNorm (no
BatchNorm, which fights EMA weights) and a spatial-softmax keypoint head, with a random crop at
training and the centre crop when acting.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from omnigym.policies.layers import MLP

MIN_RANGE = 1e-4
"""Dimensions whose data range is below this are centred but not scaled (a constant dimension)."""


class MinMaxNormalizer(nn.Module):
    """Maps each dimension from its data range ``[low, high]`` to [-1, 1] and back.

    ``low`` and ``high`` are buffers, so they are saved and loaded with the weights. They start
    at ``low``/``high`` given (an action space's bounds, or -1 and 1) until :meth:`fit`.

    Args:
        low: per-dimension lower bound. Shape: [D].
        high: per-dimension upper bound. Shape: [D].
    """

    low: Tensor
    high: Tensor

    def __init__(self, low: Tensor, high: Tensor) -> None:
        super().__init__()
        self.register_buffer("low", low.float().clone())
        self.register_buffer("high", high.float().clone())

    @torch.no_grad()
    def fit(self, data: Tensor) -> None:
        """Set the range to the per-dimension min and max of ``data [N, D]``."""
        data = data.reshape(-1, self.low.shape[0]).float()
        self.low.copy_(data.min(dim=0).values)
        self.high.copy_(data.max(dim=0).values)

    def _scale_center(self) -> tuple[Tensor, Tensor]:
        span = self.high - self.low
        half = torch.where(span < MIN_RANGE, torch.ones_like(span), span / 2)
        return half, (self.high + self.low) / 2

    def normalize(self, x: Tensor) -> Tensor:
        """``[..., D]`` in data units -> [-1, 1] over the data range."""
        half, center = self._scale_center()
        return (x.float() - center) / half

    def unnormalize(self, x: Tensor) -> Tensor:
        """``[..., D]`` in [-1, 1] -> data units."""
        half, center = self._scale_center()
        return x * half + center


class SpatialSoftmax(nn.Module):
    """Expected image coordinates of ``num_keypoints`` softmax attention maps (Levine et al., 2016).

    Shape: [B, C, H, W] -> [B, 2 * num_keypoints], coordinates in [-1, 1].
    """

    def __init__(self, in_channels: int, num_keypoints: int) -> None:
        super().__init__()
        self.keypoints = nn.Conv2d(in_channels, num_keypoints, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        """Shape: [B, C, H, W] -> [B, 2 * num_keypoints]."""
        maps = self.keypoints(x)
        batch, k, height, width = maps.shape
        attention = maps.flatten(2).softmax(dim=-1).view(batch, k, height, width)
        ys = torch.linspace(-1, 1, height, device=x.device, dtype=x.dtype)
        xs = torch.linspace(-1, 1, width, device=x.device, dtype=x.dtype)
        expected_x = (attention.sum(dim=2) * xs).sum(dim=-1)
        expected_y = (attention.sum(dim=3) * ys).sum(dim=-1)
        return torch.cat([expected_x, expected_y], dim=-1)


class ResidualBlock2d(nn.Module):
    """Two 3x3 convs with GroupNorm and ReLU, and a (strided 1x1) shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(math.gcd(groups, out_channels), out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(math.gcd(groups, out_channels), out_channels)
        self.shortcut = (
            nn.Identity()
            if stride == 1 and in_channels == out_channels
            else nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)
        )

    def forward(self, x: Tensor) -> Tensor:
        """Shape: [B, C_in, H, W] -> [B, C_out, H / stride, W / stride]."""
        out = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


class ImageEncoder(nn.Module):
    """A small ResNet with GroupNorm, spatial-softmax keypoints and a linear layer.

    A stride-2 stem, then one stride-2 residual block per further width.

    Args:
        in_channels: image channels (3 per RGB key).
        channels: width of the stem, then of each residual block (each halves the resolution).
        num_keypoints: spatial-softmax keypoints.
        out_dim: width of the encoding.
        crop_ratio: side of the crop relative to the image (1 disables cropping).
    """

    def __init__(
        self, in_channels: int, channels: tuple[int, ...], num_keypoints: int, out_dim: int, crop_ratio: float
    ) -> None:
        super().__init__()
        stem = channels[0]
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, stem, 3, 2, 1, bias=False),
            nn.GroupNorm(math.gcd(8, stem), stem),
            nn.ReLU(),
        )
        self.blocks = nn.Sequential(*(ResidualBlock2d(a, b, 2, 8) for a, b in itertools.pairwise(channels)))
        self.pool = SpatialSoftmax(channels[-1], num_keypoints)
        self.out = nn.Linear(2 * num_keypoints, out_dim)
        self.crop_ratio = crop_ratio
        self.out_dim = out_dim

    def crop(self, x: Tensor, random: bool) -> Tensor:
        """A random (training) or centre (acting) crop per image. Shape: [B, C, H, W] -> [B, C, h, w]."""
        if self.crop_ratio >= 1:
            return x
        batch, _, height, width = x.shape
        h, w = max(1, round(height * self.crop_ratio)), max(1, round(width * self.crop_ratio))
        if not random:
            top, left = (height - h) // 2, (width - w) // 2
            return x[:, :, top : top + h, left : left + w]
        tops = torch.randint(0, height - h + 1, (batch, 1, 1), device=x.device)
        lefts = torch.randint(0, width - w + 1, (batch, 1, 1), device=x.device)
        rows = tops + torch.arange(h, device=x.device).view(1, h, 1)
        cols = lefts + torch.arange(w, device=x.device).view(1, 1, w)
        index = torch.arange(batch, device=x.device).view(batch, 1, 1)
        return x[index, :, rows, cols].permute(0, 3, 1, 2)  # advanced indexing puts channels last

    def forward(self, x: Tensor, random_crop: bool = False) -> Tensor:
        """Shape: [B, C, H, W] (floats in [0, 1]) -> [B, out_dim]."""
        x = self.crop(x, random_crop) * 2 - 1
        return self.out(self.pool(self.blocks(self.stem(x))))


class ObservationEncoder(nn.Module):
    """Encodes an observation history into one conditioning vector.

    Vector keys (already min-max normalised by the policy) are concatenated and passed through
    an MLP; image keys are stacked on channels and encoded by
    :class:`ImageEncoder`. Each step is encoded alone and the ``n_obs_steps`` encodings are
    concatenated (Diffusion Policy's global conditioning).

    Args:
        state_dims: flat width of each vector key, in order.
        image_channels: channels of each image key, in order (all of one height and width).
        n_obs_steps: observation history length.
        state_hidden_sizes: MLP widths over the normalised vector keys (``()``: no MLP).
        image_widths, num_keypoints, image_feature_dim, crop_ratio: the image encoder.
    """

    def __init__(
        self,
        state_dims: list[int],
        image_channels: list[int],
        n_obs_steps: int,
        state_hidden_sizes: tuple[int, ...],
        image_widths: tuple[int, ...],
        num_keypoints: int,
        image_feature_dim: int,
        crop_ratio: float,
    ) -> None:
        super().__init__()
        state_dim = sum(state_dims)
        self.state_mlp = (
            MLP(state_dim, state_hidden_sizes, "relu") if state_dim and state_hidden_sizes else None
        )
        self.image_encoder = (
            ImageEncoder(sum(image_channels), image_widths, num_keypoints, image_feature_dim, crop_ratio)
            if image_channels
            else None
        )
        step_dim = (self.state_mlp.out_dim if self.state_mlp is not None else state_dim) + (
            image_feature_dim if self.image_encoder is not None else 0
        )
        self.state_dim = state_dim
        self.out_dim = n_obs_steps * step_dim

    def forward(self, states: Tensor | None, images: Tensor | None, random_crop: bool = False) -> Tensor:
        """Encode a history.

        Args:
            states: concatenated vector keys, normalised. Shape: [B, To, D] (None without).
            images: stacked image keys, floats in [0, 1]. Shape: [B, To, C, H, W] (None without).
            random_crop: crop images at random (training) instead of at the centre.

        Returns:
            The conditioning vector. Shape: [B, out_dim].
        """
        parts = []
        if states is not None:
            parts.append(self.state_mlp(states) if self.state_mlp is not None else states)
        if images is not None and self.image_encoder is not None:
            batch, steps = images.shape[:2]
            encoded = self.image_encoder(images.flatten(0, 1), random_crop)
            parts.append(encoded.view(batch, steps, -1))
        features = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        return features.flatten(1)
