"""The flat state layout that state-observation world models (``ensemble``, ``rssm``) share.

Such a model works on one flat vector: the float ``Box`` keys of the observation ``Dict``,
flattened and concatenated in the space's order.
"""

from __future__ import annotations

from typing import cast

import torch
from gymnasium import spaces
from torch import Tensor


def state_layout(observation_space: spaces.Dict) -> dict[str, tuple[int, ...]]:
    """The modelled observation keys and their shapes: every float ``Box`` key, in order."""
    if not isinstance(observation_space, spaces.Dict):
        raise TypeError(f"world models take Dict observation spaces, got {type(observation_space).__name__}")
    layout = {}
    for key, space in observation_space.spaces.items():
        if not isinstance(space, spaces.Box):
            continue  # text and discrete keys are not stored in replay buffers either
        if space.dtype is None or space.dtype.kind != "f":
            raise TypeError(
                f"state world models model float observations; key {key!r} is {space.dtype} "
                "(images need a pixel world model)"
            )
        layout[key] = tuple(space.shape)
    if not layout:
        raise ValueError(f"no float Box observation keys to model in {observation_space}")
    return layout


def state_bounds(observation_space: spaces.Dict, layout: dict[str, tuple[int, ...]]) -> tuple[Tensor, Tensor]:
    """The flat observation's lower and upper bounds (``-inf``/``inf`` where the space has none)."""
    boxes = [cast(spaces.Box, observation_space[key]) for key in layout]
    low = torch.cat([torch.as_tensor(box.low, dtype=torch.float32).flatten() for box in boxes])
    high = torch.cat([torch.as_tensor(box.high, dtype=torch.float32).flatten() for box in boxes])
    return low, high
