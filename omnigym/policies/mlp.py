"""A multilayer-perceptron policy over vector observations, with Gaussian or categorical actions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.normalization import RunningMeanStd
from omnigym.core.policy import PolicyConfig
from omnigym.core.types import OBS_STATE, Obs
from omnigym.policies.feedforward import FeedForwardPolicy


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
    """Initial log standard deviation of Gaussian actions; for ``squashed_gaussian``, an offset
    added to its state-dependent log-std (CORL's CQL actor: -1, with ``ortho_init``)."""
    action_head: Literal["gaussian", "squashed_gaussian", "deterministic"] = "gaussian"
    """Box actions: ``gaussian`` (state-independent std; PPO, IQL), ``squashed_gaussian``
    (tanh-squashed, state-dependent std; SAC, CQL, AWAC) or ``deterministic`` (tanh; TD3+BC)."""
    log_std_bounds: tuple[float, float] | None = None
    """Clamp of the log standard deviation (IQL's actor: [-20, 2]); None: unclamped for the plain
    Gaussian, [-20, 2] for the squashed one (SAC's)."""
    bounded_mean: bool = False
    """Gaussian head: squash the mean into the Box bounds with tanh (IQL's actor in CORL and d3rlpy);
    samples around it stay Gaussian."""
    exploration_std: float = 0.1
    """A deterministic head's exploration noise when acting stochastically (fraction of the range)."""
    ortho_init: bool = True
    """Orthogonal initialisation (gain sqrt(2); 0.01 on the action head)."""


class MLPPolicy(FeedForwardPolicy):
    """MLP actor over the concatenation of ``obs_keys``; Gaussian (Box) or categorical (Discrete).

    ``action_head`` picks the Box head: the plain Gaussian of PPO, the squashed Gaussian of SAC
    and CQL, or the deterministic action of TD3+BC.
    """

    name: ClassVar[str] = "mlp"
    config_class: ClassVar[type[PolicyConfig]] = MLPPolicyConfig
    config: MLPPolicyConfig

    def __init__(
        self, config: MLPPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self._in_dim = sum(self._key_dim(observation_space, key) for key in config.obs_keys)
        self.obs_rms = RunningMeanStd((self._in_dim,)) if config.normalize_obs else None
        self.build_actor(
            config.hidden_sizes,
            config.activation,
            config.log_std_init,
            config.ortho_init,
            head=config.action_head,
            log_std_bounds=config.log_std_bounds,
            exploration_std=config.exploration_std,
            bounded_mean=config.bounded_mean,
        )

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

    @torch.no_grad()
    def update_obs_stats(self, obs: Obs) -> None:
        """Fold collected observations ``[T, N, ...]`` into the normalisation statistics."""
        if self.obs_rms is not None:
            flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in obs.items() if k in self.config.obs_keys}
            self.obs_rms.update(self._flat_obs(flat))
