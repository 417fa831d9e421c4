"""Baseline controllers that need nothing of an env but its spaces."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import Obs, PolicyStep


@dataclass
class RandomPolicyConfig(PolicyConfig):
    """Uniformly random actions: the floor every learned policy must beat."""

    type: str = "random"


class RandomPolicy(Policy):
    """Uniform over a bounded Box or a Discrete space.

    ``deterministic`` acts with the box centre or action 0, so a deterministic evaluation is
    still reproducible.
    """

    name: ClassVar[str] = "random"
    config_class: ClassVar[type[PolicyConfig]] = RandomPolicyConfig
    capabilities: ClassVar[frozenset[str]] = frozenset({"act"})
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box, spaces.Discrete)
    low: Tensor
    high: Tensor

    def __init__(
        self, config: RandomPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if isinstance(action_space, spaces.Box):
            if not action_space.is_bounded("both"):
                raise ValueError("RandomPolicy needs a bounded Box action space")
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))
            self._logp = -float(torch.log(self.high - self.low).sum())
        elif isinstance(action_space, spaces.Discrete):
            self._logp = -math.log(int(action_space.n))
        else:
            raise TypeError(
                f"RandomPolicy supports Box and Discrete actions, not {type(action_space).__name__}"
            )

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """One uniformly random action per observation."""
        batch = len(next(iter(obs.values())))  # any key: tensors, arrays and lists of texts alike
        if isinstance(self.action_space, spaces.Box):
            u = torch.full_like(self.low.expand(batch, *self.low.shape), 0.5)
            if not deterministic:
                u = torch.rand_like(u)
            action = self.low + u * (self.high - self.low)
        else:
            assert isinstance(self.action_space, spaces.Discrete)
            n = int(self.action_space.n)
            action = torch.zeros(batch, dtype=torch.long) if deterministic else torch.randint(n, (batch,))
        logprob = torch.full((batch, 1), self._logp)
        return PolicyStep(action=action, logprob=logprob, mask=torch.ones(batch, 1, dtype=torch.bool))
