"""The WorldModel interface: a learned simulator that can stand in for a real env.

A world model is trained from recorded transitions and then stepped like an env: ``reset`` takes
a batch of real observations (the contexts to start from) and returns the model's internal state;
``step`` advances every batch row under an action. ``WorldModelEnv`` (planned with the world-model
work) wraps any implementation as a Gymnasium vector env with the real env's spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gymnasium import spaces
from torch import Tensor, nn

from omnigym.platform.types import Obs


@dataclass
class WorldModelConfig:
    """Base of every world-model config; ``type`` is the registered world-model name."""

    type: str = ""


class WorldModel(nn.Module):
    """Learns ``p(next obs, reward, termination | state, action)`` and samples from it.

    Subclasses set ``name`` and ``config_class``, and are registered in ``WORLD_MODELS``.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[WorldModelConfig]] = WorldModelConfig

    def __init__(
        self, config: WorldModelConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__()
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space

    def train_step(self, batch: Any) -> dict[str, float]:
        """One optimisation step on a batch of real transitions; returns ``train/...`` metrics."""
        raise NotImplementedError(f"{type(self).__name__} does not implement train_step")

    def reset(self, obs: Obs) -> Any:
        """The model state for starting from real observations ``key -> [B, ...]``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement reset")

    def step(self, state: Any, action: Tensor) -> tuple[Any, Obs, Tensor, Tensor, dict[str, Any]]:
        """Advance every row: ``(state, obs [B, ...], reward [B], terminated [B], info)``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step")
