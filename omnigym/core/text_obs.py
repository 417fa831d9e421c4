"""Text observations inside rollouts: fixed-width UTF-8 byte rows.

A rollout is a dict of tensors ``[T, N, ...]`` that algorithms reshape, index, stack and move to
devices. Text observations (an instruction, a game state, an accessibility tree) travel through
that machinery unchanged as ``uint8`` rows of a fixed width, zero-padded, so every algorithm that
needs them (a VLM critic's features, a world model on text) finds them in ``rollout.obs`` like any
other key. Policies turn them back into strings with :func:`decode_texts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor


def text_width(space: spaces.Text) -> int:
    """Bytes per stored text: ``max_length`` for an ASCII charset, 4x for any other (UTF-8)."""
    ascii_only = all(ord(char) < 128 for char in space.character_set)
    return space.max_length * (1 if ascii_only else 4)


def encode_texts(texts: Sequence[str] | np.ndarray, width: int) -> np.ndarray:
    """``B`` strings as UTF-8 bytes, zero-padded to ``width``. Shape: [B, width], uint8.

    Raises:
        ValueError: a text is longer than ``width`` bytes (its space's ``max_length`` was wrong).
    """
    out = np.zeros((len(texts), width), dtype=np.uint8)
    for row, text in enumerate(texts):
        data = str(text).encode("utf-8")
        if len(data) > width:
            raise ValueError(f"a text observation of {len(data)} bytes exceeds its space's {width}")
        out[row, : len(data)] = np.frombuffer(data, dtype=np.uint8)
    return out


def decode_texts(codes: Tensor | np.ndarray) -> list[str]:
    """The strings of rows written by :func:`encode_texts`. Shape: [B, width] -> ``B`` strings."""
    array = codes.detach().cpu().numpy() if isinstance(codes, Tensor) else np.asarray(codes)
    return [bytes(row).rstrip(b"\0").decode("utf-8") for row in array.reshape(-1, array.shape[-1])]


def is_encoded_text(value: Any) -> bool:
    """Whether ``value`` is a batch of encoded texts (a 2-D uint8 array or tensor) rather than strings."""
    dtype = value.dtype if isinstance(value, (Tensor, np.ndarray)) else None
    return dtype in (torch.uint8, np.uint8) and value.ndim == 2


def storable_obs(obs: dict[str, Any], space: spaces.Space) -> dict[str, np.ndarray]:
    """The part of a vector env's observation a rollout stores, as arrays ``[N, ...]``.

    Numeric keys as they are; ``Text`` keys of the (``Dict``) observation space, object arrays
    of strings, encoded to ``[N, text_width]`` bytes; anything else dropped.
    """
    subspaces = space.spaces if isinstance(space, spaces.Dict) else {}
    stored: dict[str, np.ndarray] = {}
    for key, value in obs.items():
        subspace = subspaces.get(key)
        if isinstance(subspace, spaces.Text):
            stored[key] = encode_texts(value, text_width(subspace))
        elif isinstance(value, np.ndarray) and value.dtype != object:
            stored[key] = value
    return stored
