"""The actor shared by the small policies: encode observations, an MLP trunk, an action head.

MLP and CNN policies differ only in how they turn observations into a feature vector; acting,
re-evaluating stored actions and the behaviour-cloning loss are the same, and live here once.
The head is a Gaussian (PPO), a tanh-squashed Gaussian (SAC, CQL) or a deterministic tanh
action (TD3+BC), so one policy class serves on-policy, off-policy and offline algorithms.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import Evaluation, Obs, PolicyStep
from omnigym.policies.distributions import (
    ActionHead,
    CategoricalHead,
    DeterministicHead,
    make_action_head,
)
from omnigym.policies.layers import MLP, orthogonal_init


class FeedForwardPolicy(Policy):
    """``features(obs)`` -> MLP trunk -> Gaussian (Box) or categorical (Discrete) head; one part.

    Subclasses define :meth:`features` and :attr:`feature_dim`, then call :meth:`build_actor`.
    Box-action policies also have ``rsample``: differentiable actions and log-probabilities for
    the actor losses of off-policy algorithms. A deterministic head has no ``evaluate``.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"act", "evaluate", "compute_loss", "features", "trainable"}
    )
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Discrete)

    @classmethod
    def capabilities_for(cls, config: Any, action_space: spaces.Space) -> frozenset[str]:
        """The capabilities of this type built with ``config`` on ``action_space``, before building.

        ``rsample`` on Box actions; no ``evaluate`` with a deterministic head (``config.action_head``,
        Gaussian when the config has none). The conformance tests read it to know which capability
        tests apply.
        """
        return _capabilities(cls.capabilities, action_space, getattr(config, "action_head", "gaussian"))

    def build_actor(
        self,
        hidden_sizes: tuple[int, ...],
        activation: str,
        log_std_init: float,
        ortho_init: bool,
        *,
        head: str = "gaussian",
        log_std_bounds: tuple[float, float] | None = None,
        exploration_std: float = 0.1,
        bounded_mean: bool = False,
    ) -> None:
        """Create the trunk over ``feature_dim`` inputs and the head for the action space.

        With ``ortho_init``: orthogonal weights, gain sqrt(2) in the trunk and 0.01 on the head
        (CleanRL / SB3), so initial actions are near-uniform.
        """
        self.trunk = MLP(self.feature_dim, tuple(hidden_sizes), activation)
        self.head: ActionHead = make_action_head(
            self.action_space,
            self.trunk.out_dim,
            log_std_init,
            head,
            log_std_bounds=log_std_bounds,
            exploration_std=exploration_std,
            bounded_mean=bounded_mean,
        )
        gaussian = not isinstance(self.head, CategoricalHead)
        capabilities = _capabilities(type(self).capabilities, self.action_space, head)
        setattr(self, "capabilities", capabilities)  # noqa: B010  (per instance: depends on the head)
        # Box actions of any shape (e.g. a [8, 3] plan): the head works on the flat vector
        self._action_shape: tuple[int, ...] = tuple(self.action_space.shape or ()) if gaussian else ()
        if ortho_init:
            orthogonal_init(self.trunk, math.sqrt(2))
            orthogonal_init(self.head, 0.01)

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

    def rsample(self, obs: Obs, *, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Actions ``[B, A]`` (flat) and log-probabilities ``[B]`` with gradients (reparameterised).

        A deterministic head returns its action (with exploration noise unless ``deterministic``)
        and zero log-probabilities.
        """
        if isinstance(self.head, CategoricalHead):
            raise TypeError("rsample needs Box actions; this policy's actions are discrete")
        return self.head.sample_with_log_prob(self.distribution(obs), deterministic)

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Log-probability and entropy of ``actions``. Shapes: [B, 1]."""
        return self._evaluate_features(self.features(obs), actions)

    def evaluate_with_features(
        self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None
    ) -> tuple[Evaluation, Tensor]:
        """:meth:`evaluate` and :meth:`features` from one pass of the encoder."""
        features = self.features(obs)
        return self._evaluate_features(features, actions), features

    def _evaluate_features(self, features: Tensor, actions: Tensor) -> Evaluation:
        params = self.head(self.trunk(features))
        if len(self._action_shape) > 1:
            actions = actions.reshape(actions.shape[0], -1)
        logprob = self.head.log_prob(params, actions)
        return Evaluation(logprob=logprob.unsqueeze(-1), entropy=self.head.entropy(params).unsqueeze(-1))

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """Behaviour cloning: negative log-likelihood of ``batch.actions``.

        A deterministic head has no likelihood: its loss is the squared error instead.
        """
        if isinstance(self.head, DeterministicHead):
            actions = batch.actions.reshape(batch.actions.shape[0], -1)
            mse = (self.head(self.trunk(self.features(batch.obs))) - actions).square().sum(-1).mean()
            return mse, {"train/bc_mse": float(mse.detach())}
        evaluation = self.evaluate(batch.obs, batch.actions)
        loss = -evaluation.logprob.mean()
        return loss, {"train/bc_nll": float(loss.detach())}


def _capabilities(base: frozenset[str], action_space: spaces.Space, head: str) -> frozenset[str]:
    """``base`` plus ``rsample`` on Box actions, less ``evaluate`` under a deterministic head."""
    capabilities = set(base)
    if isinstance(action_space, spaces.Box):
        capabilities.add("rsample")
        if head == "deterministic":
            capabilities.discard("evaluate")
    return frozenset(capabilities)
