"""Gymnasium spaces to JSON and back, so a saved policy knows the spaces it was built for."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """A JSON-safe description of ``space``."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": _strict_json_floats(space.low),
            "high": _strict_json_floats(space.high),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Text):
        return {
            "type": "Text",
            "max_length": space.max_length,
            "min_length": space.min_length,
            "charset": "".join(sorted(space.character_set)),
        }
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    raise TypeError(f"cannot serialise a {type(space).__name__} space")


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """The space :func:`space_to_json` described."""
    kind = data.get("type")
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        low = (
            np.asarray([float(v) for v in data["low"]], dtype=np.float64).astype(dtype).reshape(data["shape"])
        )
        high = (
            np.asarray([float(v) for v in data["high"]], dtype=np.float64)
            .astype(dtype)
            .reshape(data["shape"])
        )
        return spaces.Box(low, high, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(data["n"], start=data.get("start", 0))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(data["nvec"])
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Text":
        charset = data.get("charset")  # absent in files saved before charsets were kept
        if charset is None:
            return spaces.Text(max_length=data["max_length"], min_length=data.get("min_length", 1))
        return spaces.Text(
            max_length=data["max_length"], min_length=data.get("min_length", 1), charset=charset
        )
    if kind == "Dict":
        return spaces.Dict({k: space_from_json(v) for k, v in data["spaces"].items()})
    raise ValueError(f"unknown space type {kind!r} in saved config")


def _strict_json_floats(values: np.ndarray) -> list:
    """Box bounds as JSON numbers, with infinities as the strings "inf"/"-inf" (strict JSON)."""
    flat = [
        float(v) if np.isfinite(v) else ("inf" if v > 0 else "-inf") for v in np.asarray(values).reshape(-1)
    ]
    return flat
