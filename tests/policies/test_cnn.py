"""The CNN policy: the Nature encoder's shapes, input handling, and that it learns from pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import OnPolicyBatch
from omnigym.policies.cnn import CNNPolicy, CNNPolicyConfig


def image_space(height: int, width: int, channels: int) -> spaces.Box:
    return spaces.Box(0, 255, (height, width, channels), np.uint8)


def test_nature_encoder_on_atari_frames() -> None:
    obs_space = spaces.Dict({"frames": image_space(84, 84, 4)})
    policy = CNNPolicy(CNNPolicyConfig(obs_keys=("frames",)), obs_space, spaces.Discrete(6))
    # 84 -> 20 -> 9 -> 7: the Nature DQN's 64 x 7 x 7 = 3136 inputs to the 512-unit layer
    assert policy.encoder.linear.in_features == 3136
    assert policy.feature_dim == 512
    step = policy.act({"frames": torch.zeros(3, 84, 84, 4, dtype=torch.uint8)})
    assert step.action.shape == (3,) and step.logprob.shape == (3, 1)


def test_image_too_small_for_the_stack_is_a_clear_error() -> None:
    obs_space = spaces.Dict({"image": image_space(20, 20, 3)})
    with pytest.raises(ValueError, match="too small for the conv stack"):
        CNNPolicy(CNNPolicyConfig(), obs_space, spaces.Discrete(4))


def test_mismatched_layer_lists_are_rejected() -> None:
    with pytest.raises(ValueError, match="one entry per conv layer"):
        CNNPolicyConfig(channels=(16, 32), kernel_sizes=(3,), strides=(1,), paddings=(0,))


def test_images_stack_on_channels_and_state_joins_the_features() -> None:
    obs_space = spaces.Dict(
        {
            "image": image_space(36, 36, 3),
            "frames": image_space(36, 36, 2),
            "state": spaces.Box(-1, 1, (5,), np.float32),
        }
    )
    config = CNNPolicyConfig(obs_keys=("image", "frames"), state_keys=("state",), feature_size=32)
    policy = CNNPolicy(config, obs_space, spaces.Discrete(3))
    assert policy.encoder.convs[0].in_channels == 5
    assert policy.feature_dim == 32 + 5
    obs = {
        "image": torch.zeros(2, 36, 36, 3, dtype=torch.uint8),
        "frames": torch.zeros(2, 36, 36, 2, dtype=torch.uint8),
        "state": torch.tensor([[1.0, 2, 3, 4, 5], [6, 7, 8, 9, 10]]),
    }
    features = policy.features(obs)
    torch.testing.assert_close(features[:, 32:], obs["state"])


def test_uint8_pixels_are_scaled_like_float_images() -> None:
    config = CNNPolicyConfig(feature_size=16)
    uint8_policy = CNNPolicy(config, spaces.Dict({"image": image_space(36, 36, 3)}), spaces.Discrete(2))
    float_space = spaces.Dict({"image": spaces.Box(0.0, 1.0, (36, 36, 3), np.float32)})
    float_policy = CNNPolicy(config, float_space, spaces.Discrete(2))
    float_policy.load_state_dict(uint8_policy.state_dict())
    pixels = torch.randint(0, 256, (4, 36, 36, 3), dtype=torch.uint8)
    torch.testing.assert_close(
        uint8_policy.features({"image": pixels}), float_policy.features({"image": pixels.float() / 255})
    )


def test_learns_where_the_red_square_is_by_behaviour_cloning() -> None:
    """A label only the pixels carry: which half of the image holds the red square."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    n, size = 256, 24
    images = torch.zeros(n, size, size, 3, dtype=torch.uint8)
    labels = torch.randint(0, 2, (n,), generator=generator)
    rows = torch.randint(0, size - 4, (n,), generator=generator)
    cols = torch.randint(0, size // 2 - 4, (n,), generator=generator) + labels * (size // 2)
    for i in range(n):
        images[i, rows[i] : rows[i] + 4, cols[i] : cols[i] + 4, 0] = 255
    config = CNNPolicyConfig(
        channels=(8, 16), kernel_sizes=(3, 3), strides=(2, 2), paddings=(1, 1), feature_size=32
    )
    policy = CNNPolicy(config, spaces.Dict({"image": image_space(size, size, 3)}), spaces.Discrete(2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    train, test = slice(0, 192), slice(192, n)
    zeros = torch.zeros(192)
    for _ in range(150):
        batch = OnPolicyBatch(
            obs={"image": images[train]}, actions=labels[train], logprob=zeros[:, None],
            mask=zeros[:, None].bool(), values=zeros, advantages=zeros, returns=zeros,
        )  # fmt: skip
        loss, _ = policy.compute_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    predicted = policy.act({"image": images[test]}, deterministic=True).action
    accuracy = float((predicted == labels[test]).float().mean())
    assert accuracy >= 0.95, f"held-out accuracy {accuracy:.2f}"
