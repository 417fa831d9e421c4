"""A one-step flow policy ``mu(s, z)``: noise in, action out, in one network call (FQL's deployable actor).

Flow Q-Learning trains an iterative BC flow policy and distils it, together
with a Q-maximisation term, into this network: ``a = clip(mu(features(s), z), low, high)`` with
``z ~ N(0, I)`` of the action's size. Acting is one forward pass, with no ODE to integrate; the
clip (not a tanh) keeps the action inside the Box bounds, as FQL does. The flow itself belongs
to the algorithm (``omnigym.platform.algorithms.offline.fql``), so the saved policy is only
``mu`` and the observation statistics.

Observations are read as :class:`~omnigym.policies.mlp.MLPPolicy` reads them (the same
``obs_keys`` flattening and optional running normalisation); the class subclasses it for that
feature code only and replaces the trunk and head with the noise-conditioned network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.normalization import RunningMeanStd
from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_STATE, Evaluation, Obs, PolicyStep
from omnigym.policies.layers import MLP
from omnigym.policies.mlp import MLPPolicy


@dataclass
class OneStepFlowPolicyConfig(PolicyConfig):
    """The one-step policy of FQL (reference defaults: 4x512 MLP, GELU, no layer norm)."""

    type: str = "one_step_flow"
    hidden_sizes: tuple[int, ...] = (512, 512, 512, 512)
    """Width of each hidden layer of ``mu(s, z)``."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "gelu"
    """Hidden-layer activation."""
    obs_keys: tuple[str, ...] = (OBS_STATE,)
    """Observation keys (Box spaces) flattened and concatenated into the input."""
    normalize_obs: bool = False
    """Normalise inputs by running mean/std (statistics save with the weights)."""
    obs_clip: float = 10.0
    """Clip normalised inputs to [-obs_clip, obs_clip]."""


class OneStepFlowPolicy(MLPPolicy):
    """``a = clip(mu(features(obs), z))`` with ``z ~ N(0, I)`` (``z = 0`` when deterministic).

    Box actions only (any shape; the network works on the flat vector). The policy has no
    density: log-probabilities are zeros, as for a deterministic head, so it has no ``evaluate``.
    """

    name: ClassVar[str] = "one_step_flow"
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    config_class: ClassVar[type[PolicyConfig]] = OneStepFlowPolicyConfig
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"act", "features", "rsample", "trainable", "compute_loss"}
    )
    config: OneStepFlowPolicyConfig  # type: ignore[assignment]
    action_low: Tensor
    action_high: Tensor

    def __init__(
        self, config: OneStepFlowPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        if not isinstance(action_space, spaces.Box):
            raise TypeError(f"one_step_flow maps noise to continuous (Box) actions, got {action_space}")
        # Policy's constructor, not MLPPolicy's: the trunk and Gaussian head are replaced by ``mu``.
        Policy.__init__(self, config, observation_space, action_space)
        self._in_dim = sum(self._key_dim(observation_space, key) for key in config.obs_keys)
        self.obs_rms = RunningMeanStd((self._in_dim,)) if config.normalize_obs else None
        self._action_shape: tuple[int, ...] = tuple(action_space.shape)
        self.action_dim = int(math.prod(action_space.shape))
        self.register_buffer("action_low", torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1))
        self.register_buffer(
            "action_high", torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
        )
        self.net = MLP(
            self._in_dim + self.action_dim, (*config.hidden_sizes, self.action_dim), config.activation, False
        )
        xavier_init(self.net)

    # --- the network ----------------------------------------------------------------------------
    def noise_to_action(self, features: Tensor, noise: Tensor) -> Tensor:
        """The raw (unclipped) ``mu(features, z)``, what FQL's distillation regresses. Shape: [B, A]."""
        return self.net(torch.cat([features, noise], dim=-1))

    def clip(self, actions: Tensor) -> Tensor:
        """Flat actions ``[B, A]`` clipped to the Box bounds (gradient 0 outside them, as ``jnp.clip``)."""
        return torch.maximum(torch.minimum(actions, self.action_high), self.action_low)

    def action_from_noise(self, obs: Obs, noise: Tensor, *, clip: bool = True) -> Tensor:
        """``mu(s, z)`` for noise ``[B, A]``, clipped to the bounds unless ``clip=False``. Shape: [B, A].

        FQL's Q term and critic targets use the clipped action, its distillation the raw one.
        """
        action = self.noise_to_action(self.features(obs), noise)
        return self.clip(action) if clip else action

    def sample_noise(self, batch: int, deterministic: bool = False) -> Tensor:
        """``z ~ N(0, I)`` ``[batch, A]``, or zeros when deterministic."""
        shape = (batch, self.action_dim)
        if deterministic:
            return torch.zeros(shape, device=self.action_low.device)
        return torch.randn(shape, device=self.action_low.device)

    # --- the Policy interface ---------------------------------------------------------------------
    def rsample(self, obs: Obs, *, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Clipped actions ``[B, A]`` (flat) with gradients, and zero log-probabilities ``[B]``."""
        features = self.features(obs)
        action = self.clip(
            self.noise_to_action(features, self.sample_noise(features.shape[0], deterministic))
        )
        return action, action.new_zeros(action.shape[0])

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """One action per observation (noise ``z = 0`` when deterministic); log-probabilities 0, one part."""
        action, logprob = self.rsample(obs, deterministic=deterministic)
        if len(self._action_shape) != 1:
            action = action.reshape(action.shape[0], *self._action_shape)
        logprob = logprob.unsqueeze(-1)
        return PolicyStep(action=action, logprob=logprob, mask=torch.ones_like(logprob, dtype=torch.bool))

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Not defined: the policy is an implicit distribution with no density."""
        raise NotImplementedError("one_step_flow has no action density (no 'evaluate' capability)")

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """Behaviour cloning alone: mean squared error of the raw ``mu(s, z)``, z ~ N(0, I), to the actions.

        With random noise every z is regressed onto the data, so alone this learns the mean action
        (the noise carries no meaning); FQL's distillation of a BC flow is what makes z pick modes.
        """
        actions = batch.actions.reshape(batch.actions.shape[0], -1).float()
        features = self.features(batch.obs)
        pred = self.noise_to_action(features, self.sample_noise(features.shape[0]))
        mse = (pred - actions).square().mean()
        return mse, {"train/bc_mse": float(mse.detach())}


def xavier_init(module: nn.Module) -> None:
    """Glorot-uniform weights and zero biases on every Linear layer (FQL's ``default_init``)."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
