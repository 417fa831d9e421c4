"""Where the pieces run. The device and thread count are chosen here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch


@dataclass
class RuntimeConfig:
    """Where collection and learning run."""

    type: Literal["local"] = "local"
    """``local``: vector envs and the learner in this process (async/ray come with their issue)."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    torch_threads: int = 1
    """Threads for torch's CPU kernels; 1 is fastest for the small networks of state-based RL."""


def resolve_device(name: str = "auto") -> torch.device:
    """The torch device for a config value; ``auto`` prefers CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"runtime.device={name!r} but CUDA is not available; use 'cpu' or 'auto'")
    return device


def setup_runtime(config: RuntimeConfig) -> torch.device:
    """Apply the thread count and return the device to use."""
    if config.torch_threads > 0:
        torch.set_num_threads(config.torch_threads)
    return resolve_device(config.device)
