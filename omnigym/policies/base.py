"""The Policy interface: the deployable actor, nothing that only training needs.

Critics, Q-networks and optimisers belong to algorithms, so one policy can be trained by
behaviour cloning today and by PPO tomorrow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from omnigym.platform.config import build_dataclass, config_to_dict
from omnigym.platform.spaces import space_from_json, space_to_json
from omnigym.platform.types import Evaluation, Obs, PolicyStep

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


@dataclass
class PolicyConfig:
    """Base of every policy config; ``type`` is the registered policy name."""

    type: str = ""


CAPABILITIES = frozenset({"act", "evaluate", "compute_loss", "features", "trainable", "rsample"})
"""Every capability a policy may declare (see :class:`Policy`)."""


class Policy(nn.Module):
    """Maps a batch of dict observations to actions, with the log-probability of each part.

    Subclasses set ``name``, ``config_class`` and ``capabilities`` (what algorithms may rely on:
    ``act`` always; ``evaluate`` to re-score stored actions; ``compute_loss`` for supervised
    training; ``features`` for critics that share the policy's encoder; ``trainable`` when the
    policy has parameters to learn).
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig
    capabilities: ClassVar[frozenset[str]] = frozenset({"act"})
    env_kwargs: ClassVar[dict[str, Any]] = {}
    """Keyword arguments the env must be made with for this policy (e.g. the privileged
    observations an expert reads); ``omnigym eval`` and ``evaluate_policy`` apply them."""

    def __init__(
        self, config: PolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(f"policies take Dict observation spaces, got {type(observation_space).__name__}")
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space

    # --- acting -------------------------------------------------------------------------
    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """Choose actions for a batch of observations ``key -> [B, ...]``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement act")

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Log-probability and entropy of stored ``actions`` under the current weights."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot re-evaluate actions (no 'evaluate' capability)"
        )

    def rsample(self, obs: Obs, *, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Box actions ``[B, A]`` and their log-probabilities ``[B]``, differentiable (reparameterised)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no differentiable actions (no 'rsample' capability)"
        )

    def evaluate_with_features(
        self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None
    ) -> tuple[Evaluation, Tensor]:
        """:meth:`evaluate` and :meth:`features` of one batch, for an actor-critic loss.

        Policies whose head is built on their features override this to encode the batch once
        (a CNN encoder shared by actor and critic would otherwise run twice per minibatch).
        """
        return self.evaluate(obs, actions, extras), self.features(obs)

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """Supervised (behaviour cloning) loss on a batch with ``obs`` and ``actions``."""
        raise NotImplementedError(
            f"{type(self).__name__} has no supervised loss (no 'compute_loss' capability)"
        )

    def features(self, obs: Obs) -> Tensor:
        """The encoded observation ``[B, feature_dim]`` a critic may build on."""
        raise NotImplementedError(f"{type(self).__name__} exposes no features (no 'features' capability)")

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features`."""
        raise NotImplementedError(f"{type(self).__name__} exposes no features")

    def reset(self, done_mask: Tensor | None = None) -> None:
        """Clear per-episode memory (action-chunk queues, recurrent state) where ``done_mask``."""

    def update_obs_stats(self, obs: Obs) -> None:
        """Update observation-normalisation statistics from collected ``obs [T, N, ...]``."""

    @property
    def device(self) -> torch.device:
        """The device of the policy's parameters or buffers (CPU when it has none)."""
        for tensor in (*self.parameters(), *self.buffers()):
            return tensor.device
        return torch.device("cpu")

    @torch.inference_mode()
    def predict(self, obs: dict[str, np.ndarray], *, deterministic: bool = True) -> Any:
        """Act on NumPy observations ``key -> [B, ...]``; returns the action as NumPy."""
        step = self.act(obs_to_torch(obs, self.device), deterministic=deterministic)
        return step.action.cpu().numpy() if isinstance(step.action, Tensor) else step.action

    # --- saving -------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` (type, config, spaces) and ``model.safetensors`` to ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {
            "type": self.name,
            "config": config_to_dict(self.config),
            "observation_space": space_to_json(self.observation_space),
            "action_space": space_to_json(self.action_space),
        }
        state = {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}  # no shared storage
        save_file(state, str(path / WEIGHTS_FILE))
        (path / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        return path

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> Policy:
        """Load a policy saved by :meth:`save_pretrained` (any registered type)."""
        from omnigym.platform.registry import POLICIES

        path = Path(path)
        config_path, weights_path = path / CONFIG_FILE, path / WEIGHTS_FILE
        for needed in (config_path, weights_path):
            if not needed.is_file():
                raise FileNotFoundError(f"not a saved policy: {needed} is missing")
        try:
            meta = json.loads(config_path.read_text())
            policy_cls = POLICIES.get(meta["type"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"corrupt policy config {config_path}: {exc}") from exc
        if cls is Policy and _loads_itself(policy_cls):  # e.g. a VLM, which reloads its hf/ copy
            return policy_cls.from_pretrained(path, device)
        try:
            config = build_dataclass(policy_cls.config_class, meta["config"], path="policy")
            policy = policy_cls(
                config, space_from_json(meta["observation_space"]), space_from_json(meta["action_space"])
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"corrupt policy config {config_path}: {exc}") from exc
        if cls is not Policy and not isinstance(policy, cls):
            raise TypeError(f"{path} holds a {type(policy).__name__}, not a {cls.__name__}")
        try:
            state = load_file(str(weights_path))
        except (SafetensorError, OSError) as exc:
            raise ValueError(f"corrupt policy weights {weights_path}: {exc}") from exc
        try:
            policy.load_state_dict(state)
        except RuntimeError as exc:
            raise ValueError(f"policy weights {weights_path} do not match {config_path}: {exc}") from exc
        return policy.to(device)


def _loads_itself(policy_cls: type[Policy]) -> bool:
    """Whether a policy type overrides :meth:`Policy.from_pretrained`."""
    own = getattr(policy_cls.from_pretrained, "__func__", None)
    return own is not getattr(Policy.from_pretrained, "__func__", None)


def obs_to_torch(obs: dict[str, Any], device: torch.device | str = "cpu") -> Obs:
    """NumPy observations to tensors on ``device`` (no copy on CPU); text stays as it is."""
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            out[key] = torch.from_numpy(value).to(device)
        else:
            out[key] = value
    return out
