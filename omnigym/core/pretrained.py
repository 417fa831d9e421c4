"""Saved-model folders: ``config.json`` (type, config, spaces) beside ``model.safetensors``.

The on-disk layout of ``save_pretrained`` / ``from_pretrained`` for modules that are rebuilt from
a registered type, a config dataclass and their spaces (world models; policies keep the same
layout). Errors name the file at fault: a missing folder or file is a ``FileNotFoundError``, an
unreadable config or weights file a ``ValueError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from omnigym.core.config import config_to_dict
from omnigym.core.spaces import space_from_json, space_to_json

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def save_folder(
    path: str | Path,
    module: nn.Module,
    type_name: str,
    config: Any,
    observation_space: spaces.Space,
    action_space: spaces.Space,
) -> Path:
    """Write ``module``'s weights and a ``config.json`` describing how to rebuild it into ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    meta = {
        "type": type_name,
        "config": config_to_dict(config),
        "observation_space": space_to_json(observation_space),
        "action_space": space_to_json(action_space),
    }
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}  # no shared storage
    save_file(state, str(path / WEIGHTS_FILE))
    (path / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
    return path


def read_meta(path: str | Path, kind: str) -> dict[str, Any]:
    """The parsed ``config.json`` of a saved ``kind`` ("world model", ...), with its spaces rebuilt.

    Returns:
        ``{"type": str, "config": dict, "observation_space": Space, "action_space": Space}``.

    Raises:
        FileNotFoundError: ``path`` lacks ``config.json`` or ``model.safetensors``.
        ValueError: ``config.json`` is not valid JSON or lacks a field.
    """
    path = Path(path)
    config_path = path / CONFIG_FILE
    for needed in (config_path, path / WEIGHTS_FILE):
        if not needed.is_file():
            raise FileNotFoundError(f"not a saved {kind}: {needed} is missing")
    try:
        meta = json.loads(config_path.read_text())
        return {
            "type": str(meta["type"]),
            "config": dict(meta["config"]),
            "observation_space": space_from_json(meta["observation_space"]),
            "action_space": space_from_json(meta["action_space"]),
        }
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"corrupt {kind} config {config_path}: {exc!r}") from exc


def load_weights(path: str | Path, module: nn.Module, kind: str) -> None:
    """Load ``model.safetensors`` from ``path`` into ``module`` (strictly: every tensor must match).

    Raises:
        ValueError: the file is unreadable, or its tensors do not fit ``module``.
    """
    weights_path = Path(path) / WEIGHTS_FILE
    try:
        state = load_file(str(weights_path))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"corrupt {kind} weights {weights_path}: {exc}") from exc
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(
            f"{kind} weights {weights_path} do not match {Path(path) / CONFIG_FILE}: {exc}"
        ) from exc
