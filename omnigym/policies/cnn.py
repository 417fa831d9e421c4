"""A convolutional policy over image observations (DQN/PPO Atari "Nature CNN" by default).

Reads any uint8 ``[H, W, C]`` keys (``image``, an Atari frame stack ``frames``), stacks them on
the channel axis, scales pixels to [0, 1], and encodes them with a conv stack and one linear
layer; vector keys (``state``) join after the encoding. The encoding is the policy's
``features``, so an algorithm's critic shares the convolutional encoder (CleanRL's Atari PPO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import PolicyConfig
from omnigym.core.types import OBS_IMAGE, Obs
from omnigym.policies.feedforward import FeedForwardPolicy
from omnigym.policies.layers import ACTIVATIONS, orthogonal_init


@dataclass
class CNNPolicyConfig(PolicyConfig):
    """A CNN actor; the defaults are the Nature DQN encoder (Mnih et al. 2015) for 84x84 frames."""

    type: str = "cnn"
    obs_keys: tuple[str, ...] = (OBS_IMAGE,)
    """Image keys (``[H, W, C]`` Box spaces of one height and width), stacked on channels."""
    state_keys: tuple[str, ...] = ()
    """Vector keys concatenated to the image encoding."""
    channels: tuple[int, ...] = (32, 64, 64)
    """Output channels of each conv layer."""
    kernel_sizes: tuple[int, ...] = (8, 4, 3)
    """Kernel size of each conv layer."""
    strides: tuple[int, ...] = (4, 2, 1)
    """Stride of each conv layer."""
    paddings: tuple[int, ...] = (0, 0, 0)
    """Zero padding of each conv layer."""
    feature_size: int = 512
    """Width of the linear layer after the conv stack (the encoding's width)."""
    hidden_sizes: tuple[int, ...] = ()
    """MLP layers between the encoding and the action head (none in the Nature setup)."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "relu"
    """Activation of the encoder and the hidden layers."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian actions."""
    ortho_init: bool = True
    """Orthogonal initialisation (gain sqrt(2); 0.01 on the action head)."""

    def __post_init__(self) -> None:
        """Reject conv stacks whose per-layer lists disagree in length."""
        lengths = {len(self.channels), len(self.kernel_sizes), len(self.strides), len(self.paddings)}
        if len(lengths) != 1 or not self.channels:
            raise ValueError(
                "policy.channels, kernel_sizes, strides and paddings need one entry per conv layer, got "
                f"{len(self.channels)}, {len(self.kernel_sizes)}, {len(self.strides)}, {len(self.paddings)}"
            )
        if not self.obs_keys:
            raise ValueError("policy.obs_keys must name at least one image key")


class ConvEncoder(nn.Module):
    """Conv layers, flatten, one linear layer, each followed by the activation.

    Args:
        in_shape: ``(C, H, W)`` of the input.
        config: the conv stack and the encoding width.
    """

    def __init__(self, in_shape: tuple[int, int, int], config: CNNPolicyConfig) -> None:
        super().__init__()
        channels, height, width = in_shape
        layers: list[nn.Module] = []
        for out, kernel, stride, padding in zip(
            config.channels, config.kernel_sizes, config.strides, config.paddings, strict=True
        ):
            layers.append(nn.Conv2d(channels, out, kernel, stride, padding))
            channels = out
            height = (height + 2 * padding - kernel) // stride + 1
            width = (width + 2 * padding - kernel) // stride + 1
            if height < 1 or width < 1:
                raise ValueError(
                    f"a {in_shape[1]}x{in_shape[2]} image is too small for the conv stack (kernels "
                    f"{config.kernel_sizes}, strides {config.strides}); set policy.kernel_sizes/strides"
                )
        self.convs = nn.ModuleList(layers)
        self.linear = nn.Linear(channels * height * width, config.feature_size)
        self.activation = ACTIVATIONS[config.activation]
        self.out_dim = config.feature_size

    def forward(self, x: Tensor) -> Tensor:
        """Shape: [B, C, H, W] -> [B, out_dim]."""
        for conv in self.convs:
            x = self.activation(conv(x))
        return self.activation(self.linear(x.flatten(1)))


class CNNPolicy(FeedForwardPolicy):
    """CNN actor over image keys (+ optional vector keys); Gaussian (Box) or categorical (Discrete)."""

    name: ClassVar[str] = "cnn"
    config_class: ClassVar[type[PolicyConfig]] = CNNPolicyConfig
    config: CNNPolicyConfig

    def __init__(
        self, config: CNNPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        image_spaces = [self._space(observation_space, key, image=True) for key in config.obs_keys]
        sizes = {space.shape[:2] for space in image_spaces}
        if len(sizes) != 1:
            raise ValueError(f"policy.obs_keys {config.obs_keys} have different image sizes {sorted(sizes)}")
        (height, width), in_channels = sizes.pop(), sum(space.shape[2] for space in image_spaces)
        # uint8 pixels are scaled to [0, 1]; float images are taken as they are
        self._scale = [1 / 255 if space.dtype.kind == "u" else 1.0 for space in image_spaces]
        self._state_dim = sum(
            math.prod(self._space(observation_space, key, image=False).shape) for key in config.state_keys
        )
        self.encoder = ConvEncoder((in_channels, height, width), config)
        if config.ortho_init:
            orthogonal_init(self.encoder, math.sqrt(2))
        self.build_actor(config.hidden_sizes, config.activation, config.log_std_init, config.ortho_init)

    @staticmethod
    def _space(observation_space: spaces.Dict, key: str, image: bool) -> spaces.Box:
        if key not in observation_space.spaces:
            raise ValueError(
                f"policy names the key {key!r}, but the env observes {sorted(observation_space.spaces)}"
            )
        space = observation_space.spaces[key]
        if not isinstance(space, spaces.Box):
            raise TypeError(f"CNNPolicy reads Box observations; {key!r} is {type(space).__name__}")
        if image and len(space.shape) != 3:
            raise ValueError(f"policy.obs_keys needs [H, W, C] images; {key!r} has shape {space.shape}")
        return space

    def features(self, obs: Obs) -> Tensor:
        """The image encoding, then the vector keys. Shape: [B, feature_dim]."""
        images = [
            obs[key].permute(0, 3, 1, 2).float() * scale
            for key, scale in zip(self.config.obs_keys, self._scale, strict=True)
        ]
        x = self.encoder(images[0] if len(images) == 1 else torch.cat(images, dim=1))
        if not self.config.state_keys:
            return x
        vectors = [obs[key].reshape(obs[key].shape[0], -1).float() for key in self.config.state_keys]
        return torch.cat([x, *vectors], dim=-1)

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features`: the encoding plus the vector keys."""
        return self.config.feature_size + self._state_dim
