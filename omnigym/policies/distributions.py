"""Action heads: a network layer plus the distribution it parametrises.

Written with plain tensor maths instead of ``torch.distributions`` to keep the per-step cost of
acting low; log-probabilities and entropies are summed over action dimensions (one part).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor, nn

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class GaussianHead(nn.Module):
    """Diagonal Gaussian with a state-independent log standard deviation (PPO's usual choice).

    Args:
        in_dim: input feature width.
        action_dim: number of action dimensions.
        log_std_init: initial log standard deviation.
    """

    def __init__(self, in_dim: int, action_dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.mean = nn.Linear(in_dim, action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``[B, A]`` and log-std ``[A]``."""
        return F.linear(x, self.mean.weight, self.mean.bias), self.log_std

    @staticmethod
    def sample(params: tuple[Tensor, Tensor], deterministic: bool = False) -> Tensor:
        """An action ``[B, A]``: the mean when deterministic."""
        mean, log_std = params
        if deterministic:
            return mean
        return mean + log_std.exp() * torch.randn_like(mean)

    @staticmethod
    def sample_with_log_prob(
        params: tuple[Tensor, Tensor], deterministic: bool = False
    ) -> tuple[Tensor, Tensor]:
        """An action ``[B, A]`` and its log-density ``[B]``, reusing the drawn noise."""
        mean, log_std = params
        noise = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
        action = mean + log_std.exp() * noise
        return action, -0.5 * noise.square().sum(-1) - (log_std.sum() + _LOG_SQRT_2PI * log_std.numel())

    @staticmethod
    def log_prob(params: tuple[Tensor, Tensor], action: Tensor) -> Tensor:
        """Log-density summed over action dims. Shape: [B]."""
        mean, log_std = params
        z = (action - mean) * torch.exp(-log_std)
        # Few ops on [B, A] tensors: the per-op cost dominates small policies' updates.
        return -0.5 * z.square().sum(-1) - (log_std.sum() + _LOG_SQRT_2PI * log_std.numel())

    @staticmethod
    def entropy(params: tuple[Tensor, Tensor]) -> Tensor:
        """Entropy summed over action dims. Shape: [B]."""
        mean, log_std = params
        return (log_std.sum() + (0.5 + _LOG_SQRT_2PI) * log_std.numel()).expand(mean.shape[0])


class CategoricalHead(nn.Module):
    """Categorical distribution over ``n`` discrete actions, from logits.

    Args:
        in_dim: input feature width.
        n: number of actions.
    """

    def __init__(self, in_dim: int, n: int) -> None:
        super().__init__()
        self.logits = nn.Linear(in_dim, n)

    def forward(self, x: Tensor) -> Tensor:
        """Normalised log-probabilities ``[B, n]``."""
        return torch.log_softmax(F.linear(x, self.logits.weight, self.logits.bias), dim=-1)

    @staticmethod
    def sample(log_probs: Tensor, deterministic: bool = False) -> Tensor:
        """Action indices ``[B]``: the mode when deterministic."""
        if deterministic:
            return log_probs.argmax(-1)
        # argmax(log p - log E), E ~ Exp(1), is an exact sample (Gumbel-max); cheaper than multinomial.
        return (log_probs - torch.empty_like(log_probs).exponential_().log()).argmax(-1)

    @classmethod
    def sample_with_log_prob(cls, log_probs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Action indices ``[B]`` and their log-probabilities ``[B]``."""
        action = cls.sample(log_probs, deterministic)
        return action, cls.log_prob(log_probs, action)

    @staticmethod
    def log_prob(log_probs: Tensor, action: Tensor) -> Tensor:
        """Log-probability of ``action [B]``. Shape: [B]."""
        return log_probs.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def entropy(log_probs: Tensor) -> Tensor:
        """Entropy. Shape: [B]."""
        return -(log_probs.exp() * log_probs).sum(-1)


def make_action_head(
    action_space: spaces.Space, in_dim: int, log_std_init: float = 0.0
) -> GaussianHead | CategoricalHead:
    """The head for a Box (Gaussian) or Discrete (categorical) action space."""
    if isinstance(action_space, spaces.Box):
        return GaussianHead(in_dim, int(math.prod(action_space.shape)), log_std_init)
    if isinstance(action_space, spaces.Discrete):
        return CategoricalHead(in_dim, int(action_space.n))
    raise TypeError(f"no action head for {type(action_space).__name__} action spaces (Box or Discrete)")
