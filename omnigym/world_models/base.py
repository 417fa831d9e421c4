"""The WorldModel interface: a learned simulator that can stand in for a real env.

A world model is trained from recorded transitions and then stepped like an env: ``reset`` takes
a batch of real observations (the contexts to start from) and returns the model's internal state;
``step`` advances every batch row under an action. ``WorldModelEnv`` wraps any implementation as
a Gymnasium vector env with the real env's spaces.

Training goes through four hooks that :func:`omnigym.world_models.training.fit_world_model`
calls in order: :meth:`WorldModel.set_data_statistics` once, :meth:`WorldModel.train_step` per
minibatch, :meth:`WorldModel.member_losses` on held-out data after each epoch (early stopping),
and :meth:`WorldModel.select_elites` at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.config import build_dataclass
from omnigym.core.pretrained import load_weights, read_meta, save_folder
from omnigym.core.types import Obs, TransitionBatch

StepResult = tuple[Any, Obs, Tensor, Tensor, dict[str, Tensor]]
"""``(state, next_obs key -> [B, ...], reward [B] float32, terminated [B] bool, info key -> [B])``."""


@dataclass
class WorldModelConfig:
    """Base of every world-model config; ``type`` is the registered world-model name."""

    type: str = ""


class WorldModel(nn.Module):
    """Learns ``p(next obs, reward, termination | state, action)`` and samples from it.

    Subclasses set ``name`` and ``config_class``, and are registered in ``WORLD_MODELS``.

    Observations are batches of the observation ``Dict``'s ``Box`` keys, ``key -> [B, ...]``
    (typically just ``"state"``); actions are flat ``[B, A]``.
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

    # --- training -----------------------------------------------------------------------
    @property
    def sequence_length(self) -> int | None:
        """Transitions per training chunk; None for models trained on single transitions.

        Recurrent models set it: :func:`~omnigym.world_models.training.fit_world_model` then cuts
        chunks of that many consecutive transitions from the buffer's episodes.
        """
        return None

    def set_data_statistics(self, batch: TransitionBatch) -> None:
        """Fit input/target normalisation to the training data, once, before the first step.

        A no-op for models that normalise nothing.
        """

    def train_step(self, batch: TransitionBatch) -> dict[str, float]:
        """One optimisation step on a batch of real transitions; returns ``train/...`` metrics."""
        raise NotImplementedError(f"{type(self).__name__} does not implement train_step")

    def evaluate(self, batch: TransitionBatch) -> dict[str, float]:
        """Held-out metrics without gradients: ``eval/loss`` and e.g. ``eval/obs_mse``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement evaluate")

    def member_losses(self, batch: TransitionBatch) -> Tensor:
        """Held-out loss of each independently trained member (one for a single model). Shape: [M].

        Early stopping watches every entry; the default is ``evaluate``'s ``eval/loss``.
        """
        return torch.tensor([self.evaluate(batch)["eval/loss"]])

    def select_elites(self, holdout: TransitionBatch) -> None:
        """Choose the members ``step`` samples from by their held-out error (ensembles only)."""

    # --- simulating ---------------------------------------------------------------------
    def reset(self, obs: Obs) -> Any:
        """The model state for starting from real observations ``key -> [B, ...]``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement reset")

    def step(
        self,
        state: Any,
        action: Tensor,
        *,
        generator: torch.Generator | None = None,
        with_uncertainty: bool = True,
    ) -> StepResult:
        """Advance every row under ``action [B, A]``.

        Returns ``(state, next_obs key -> [B, ...], reward [B] float32, terminated [B] bool,
        info)``. Every random draw comes from ``generator``, so equal generator seeds give
        bit-identical rollouts. ``info`` may hold ``"uncertainty"``: ``[B]`` float >= 0, larger
        where the model trusts its prediction less (MOPO's penalty, early termination).

        With ``with_uncertainty=False`` the caller does not need ``info["uncertainty"]`` and the
        model may skip computing it, which lets an ensemble run only the members its rows use.
        The random draws, and so the sampled rollout, must not depend on this flag.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement step")

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters or buffers (CPU when it has none)."""
        for tensor in (*self.parameters(), *self.buffers()):
            return tensor.device
        return torch.device("cpu")

    # --- saving -------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` (type, config, spaces) and ``model.safetensors`` to ``path``."""
        return save_folder(path, self, self.name, self.config, self.observation_space, self.action_space)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> WorldModel:
        """Load a world model saved by :meth:`save_pretrained` (any registered type).

        Raises:
            FileNotFoundError: ``path`` is not a saved world model.
            ValueError: its config or weights are corrupt or do not match each other.
            TypeError: called on a subclass that is not the saved type.
        """
        from omnigym.core.registry import WORLD_MODELS

        meta = read_meta(path, "world model")
        try:
            model_cls = WORLD_MODELS.get(meta["type"])
            config = build_dataclass(model_cls.config_class, meta["config"], path="world_model")
        except (KeyError, ValueError) as exc:
            raise ValueError(f"corrupt world model config in {path}: {exc}") from exc
        model = model_cls(config, meta["observation_space"], meta["action_space"])
        if not isinstance(model, cls):
            raise TypeError(f"{path} holds a {type(model).__name__}, not a {cls.__name__}")
        load_weights(path, model, "world model")
        return model.to(device)
