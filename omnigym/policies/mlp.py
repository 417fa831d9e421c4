"""A multilayer-perceptron policy over vector observations, with Gaussian or categorical actions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.platform.normalization import RunningMeanStd
from omnigym.platform.types import OBS_STATE, Evaluation, Obs, PolicyStep
from omnigym.policies.base import Policy, PolicyConfig
from omnigym.policies.distributions import CategoricalHead, GaussianHead, make_action_head

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "relu": F.relu,
    "elu": F.elu,
    "gelu": F.gelu,
}


@dataclass
class MLPPolicyConfig(PolicyConfig):
    """An MLP actor (CleanRL / SB3 defaults: 64-64 tanh, orthogonal init)."""

    type: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Width of each hidden layer."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    """Hidden-layer activation."""
    obs_keys: tuple[str, ...] = (OBS_STATE,)
    """Observation keys (Box spaces) flattened and concatenated into the input."""
    normalize_obs: bool = False
    """Normalise inputs by running mean/std (statistics save with the weights)."""
    obs_clip: float = 10.0
    """Clip normalised inputs to [-obs_clip, obs_clip]."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian actions."""
    ortho_init: bool = True
    """Orthogonal initialisation (gain sqrt(2); 0.01 on the action head)."""


class MLP(nn.Module):
    """Linear layers with an activation after each (none after the last unless ``activate_last``).

    The forward pass calls ``F.linear`` directly instead of chaining modules: for the small
    networks of state-based RL, per-call overhead is a large share of the cost.

    Args:
        in_dim: input width.
        sizes: width of each layer.
        activation: name in ``ACTIVATIONS``.
        activate_last: apply the activation after the last layer too.
    """

    def __init__(
        self, in_dim: int, sizes: tuple[int, ...], activation: str, activate_last: bool = True
    ) -> None:
        super().__init__()
        widths = (in_dim, *sizes)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.activation = ACTIVATIONS[activation]
        self.activate_last = activate_last
        self.out_dim = widths[-1]

    def forward(self, x: Tensor) -> Tensor:
        """Shape: [B, in_dim] -> [B, out_dim]."""
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            layer = cast(nn.Linear, layer)
            x = F.linear(x, layer.weight, layer.bias)
            if i < last or self.activate_last:
                x = self.activation(x)
        return x


def orthogonal_init(module: nn.Module, gain: float) -> None:
    """Orthogonal weights with ``gain`` and zero biases on every Linear layer of ``module``."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)


class MLPPolicy(Policy):
    """MLP actor over the concatenation of ``obs_keys``; Gaussian (Box) or categorical (Discrete)."""

    name: ClassVar[str] = "mlp"
    config_class: ClassVar[type[PolicyConfig]] = MLPPolicyConfig
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"act", "evaluate", "compute_loss", "features", "trainable"}
    )
    config: MLPPolicyConfig

    def __init__(
        self, config: MLPPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self._in_dim = sum(self._key_dim(observation_space, key) for key in config.obs_keys)
        self.obs_rms = RunningMeanStd((self._in_dim,)) if config.normalize_obs else None
        self.trunk = MLP(self._in_dim, tuple(config.hidden_sizes), config.activation)
        self.head: GaussianHead | CategoricalHead = make_action_head(
            action_space, self.trunk.out_dim, config.log_std_init
        )
        self._gaussian = isinstance(self.head, GaussianHead)
        # Box actions of any shape (e.g. a [8, 3] plan): the head works on the flat vector
        self._action_shape: tuple[int, ...] = tuple(action_space.shape or ()) if self._gaussian else ()
        if config.ortho_init:
            orthogonal_init(self.trunk, math.sqrt(2))
            orthogonal_init(self.head, 0.01)

    @staticmethod
    def _key_dim(observation_space: spaces.Dict, key: str) -> int:
        if key not in observation_space.spaces:
            raise ValueError(
                f"policy.obs_keys names {key!r}, but the env observes {sorted(observation_space.spaces)}"
            )
        space = observation_space.spaces[key]
        if not isinstance(space, spaces.Box):
            raise TypeError(f"MLPPolicy reads Box observations; {key!r} is {type(space).__name__}")
        return int(np.prod(space.shape))

    def _flat_obs(self, obs: Obs) -> Tensor:
        parts = [obs[key].reshape(obs[key].shape[0], -1).float() for key in self.config.obs_keys]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def features(self, obs: Obs) -> Tensor:
        """The flattened (and normalised) observation. Shape: [B, feature_dim]."""
        x = self._flat_obs(obs)
        if self.obs_rms is not None:
            x = self.obs_rms.normalize(x, self.config.obs_clip)
        return x

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features`."""
        return self._in_dim

    def distribution(self, obs: Obs) -> Any:
        """The action distribution's parameters for a batch."""
        return self.head(self.trunk(self.features(obs)))

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """Sample (or take the mode of) an action per observation; one action part."""
        action, logprob = self.head.sample_with_log_prob(self.distribution(obs), deterministic)
        if len(self._action_shape) > 1:
            action = action.reshape(action.shape[0], *self._action_shape)
        logprob = logprob.unsqueeze(-1)
        return PolicyStep(action=action, logprob=logprob, mask=torch.ones_like(logprob, dtype=torch.bool))

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Log-probability and entropy of ``actions``. Shapes: [B, 1]."""
        params = self.distribution(obs)
        if len(self._action_shape) > 1:
            actions = actions.reshape(actions.shape[0], -1)
        logprob = self.head.log_prob(params, actions)
        return Evaluation(logprob=logprob.unsqueeze(-1), entropy=self.head.entropy(params).unsqueeze(-1))

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """Behaviour cloning: negative log-likelihood of ``batch.actions``."""
        evaluation = self.evaluate(batch.obs, batch.actions)
        loss = -evaluation.logprob.mean()
        return loss, {"train/bc_nll": float(loss.detach())}

    @torch.no_grad()
    def update_obs_stats(self, obs: Obs) -> None:
        """Fold collected observations ``[T, N, ...]`` into the normalisation statistics."""
        if self.obs_rms is not None:
            flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in obs.items() if k in self.config.obs_keys}
            self.obs_rms.update(self._flat_obs(flat))
