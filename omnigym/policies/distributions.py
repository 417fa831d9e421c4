"""Action heads: a network layer plus the distribution it parametrises (or a deterministic action).

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
        log_std_bounds: the range the log standard deviation is clamped to (IQL's actor); None:
            unclamped.
        mean_bounds: ``(low, high)``: the mean is ``tanh``-squashed into them (IQL's actor in
            CORL and d3rlpy); the samples around it are not. None: an unbounded linear mean.
    """

    mean_scale: Tensor | None
    mean_offset: Tensor | None

    def __init__(
        self,
        in_dim: int,
        action_dim: int,
        log_std_init: float = 0.0,
        log_std_bounds: tuple[float, float] | None = None,
        mean_bounds: tuple[Tensor, Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.mean = nn.Linear(in_dim, action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))
        self.log_std_bounds = (
            None if log_std_bounds is None else (float(log_std_bounds[0]), float(log_std_bounds[1]))
        )
        scale = offset = None
        if mean_bounds is not None:
            low, high = mean_bounds
            scale, offset = (high - low).float() / 2, (high + low).float() / 2
        self.register_buffer("mean_scale", scale)
        self.register_buffer("mean_offset", offset)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean ``[B, A]`` and log-std ``[A]``."""
        log_std = self.log_std if self.log_std_bounds is None else self.log_std.clamp(*self.log_std_bounds)
        mean = F.linear(x, self.mean.weight, self.mean.bias)
        if self.mean_scale is not None and self.mean_offset is not None:
            mean = self.mean_offset + self.mean_scale * torch.tanh(mean)
        return mean, log_std

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


class SquashedGaussianHead(nn.Module):
    """Tanh-squashed Gaussian with a state-dependent log standard deviation (SAC, CQL, AWAC).

    Actions lie inside the Box bounds: ``bias + scale * tanh(u)``, ``u ~ N(mean(x), std(x))``.
    Log-probabilities include the change of variables; sampling is reparameterised, so gradients
    flow from the action and its log-probability into the network.

    Args:
        in_dim: input feature width.
        low, high: the action bounds (finite), flat ``[A]``.
        log_std_bounds: the range the log standard deviation is clamped to.
        log_std_offset: added to the layer's log-std output before the clamp, so a head whose
            layer starts near zero (orthogonal init, gain 0.01) starts at this log-std (CORL's CQL
            actor: -1, a standard deviation of 0.37 before the squash).
    """

    scale: Tensor
    bias: Tensor

    def __init__(
        self,
        in_dim: int,
        low: Tensor,
        high: Tensor,
        log_std_bounds: tuple[float, float] = (-20.0, 2.0),
        log_std_offset: float = 0.0,
    ) -> None:
        super().__init__()
        self.action_dim = int(low.numel())
        self.layer = nn.Linear(in_dim, 2 * self.action_dim)
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("bias", (high + low).float() / 2)
        self.log_std_bounds = (float(log_std_bounds[0]), float(log_std_bounds[1]))
        self.log_std_offset = float(log_std_offset)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Pre-squash mean and clamped log-std, both ``[B, A]``."""
        mean, log_std = F.linear(x, self.layer.weight, self.layer.bias).chunk(2, dim=-1)
        if self.log_std_offset:
            log_std = log_std + self.log_std_offset
        return mean, log_std.clamp(*self.log_std_bounds)

    def _log_prob_of(self, mean: Tensor, log_std: Tensor, u: Tensor) -> Tensor:
        z = (u - mean) * torch.exp(-log_std)
        gaussian = -0.5 * z.square() - log_std - _LOG_SQRT_2PI
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|
        squash = 2 * (math.log(2) - u - F.softplus(-2 * u))
        return (gaussian - squash).sum(-1) - torch.log(self.scale).sum()

    def sample(self, params: tuple[Tensor, Tensor], deterministic: bool = False) -> Tensor:
        """An action ``[B, A]`` inside the bounds: the squashed mean when deterministic."""
        return self.sample_with_log_prob(params, deterministic)[0]

    def sample_with_log_prob(
        self, params: tuple[Tensor, Tensor], deterministic: bool = False
    ) -> tuple[Tensor, Tensor]:
        """A reparameterised action ``[B, A]`` and its log-density ``[B]``."""
        mean, log_std = params
        u = mean if deterministic else mean + log_std.exp() * torch.randn_like(mean)
        return self.bias + self.scale * torch.tanh(u), self._log_prob_of(mean, log_std, u)

    def log_prob(self, params: tuple[Tensor, Tensor], action: Tensor) -> Tensor:
        """Log-density of actions inside the bounds (clipped just inside them). Shape: [B]."""
        mean, log_std = params
        y = ((action - self.bias) / self.scale).clamp(-1 + 1e-6, 1 - 1e-6)
        return self._log_prob_of(mean, log_std, torch.atanh(y))

    @staticmethod
    def entropy(params: tuple[Tensor, Tensor]) -> Tensor:
        """Entropy of the pre-squash Gaussian (the squashed one has no closed form). Shape: [B]."""
        _, log_std = params
        return (log_std + 0.5 + _LOG_SQRT_2PI).sum(-1)


class DeterministicHead(nn.Module):
    """A deterministic action ``bias + scale * tanh(linear(x))`` (TD3, TD3+BC).

    Acting stochastically adds Gaussian exploration noise of ``exploration_std`` (a fraction of
    the half-range), clipped to the bounds. The head has no density: log-probabilities are 0.

    Args:
        in_dim: input feature width.
        low, high: the action bounds (finite), flat ``[A]``.
        exploration_std: exploration noise, as a fraction of the half-range.
    """

    scale: Tensor
    bias: Tensor

    def __init__(self, in_dim: int, low: Tensor, high: Tensor, exploration_std: float = 0.1) -> None:
        super().__init__()
        self.action_dim = int(low.numel())
        self.layer = nn.Linear(in_dim, self.action_dim)
        self.register_buffer("scale", (high - low).float() / 2)
        self.register_buffer("bias", (high + low).float() / 2)
        self.exploration_std = float(exploration_std)

    def forward(self, x: Tensor) -> Tensor:
        """The action ``[B, A]``."""
        return self.bias + self.scale * torch.tanh(F.linear(x, self.layer.weight, self.layer.bias))

    def sample(self, action: Tensor, deterministic: bool = False) -> Tensor:
        """The action, plus clipped exploration noise unless deterministic."""
        if deterministic or self.exploration_std == 0:
            return action
        noisy = action + self.exploration_std * self.scale * torch.randn_like(action)
        return torch.maximum(torch.minimum(noisy, self.bias + self.scale), self.bias - self.scale)

    def sample_with_log_prob(self, action: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """The (noisy) action ``[B, A]`` and a zero log-probability ``[B]``."""
        return self.sample(action, deterministic), action.new_zeros(action.shape[0])

    def log_prob(self, action: Tensor, actions: Tensor) -> Tensor:
        """Not defined: a deterministic actor has no action density."""
        raise NotImplementedError("a deterministic actor has no action density (use a Gaussian head)")

    @staticmethod
    def entropy(action: Tensor) -> Tensor:
        """Zero. Shape: [B]."""
        return action.new_zeros(action.shape[0])


ActionHead = GaussianHead | CategoricalHead | SquashedGaussianHead | DeterministicHead
HEAD_KINDS = ("gaussian", "squashed_gaussian", "deterministic")


def make_action_head(
    action_space: spaces.Space,
    in_dim: int,
    log_std_init: float = 0.0,
    kind: str = "gaussian",
    *,
    log_std_bounds: tuple[float, float] | None = None,
    exploration_std: float = 0.1,
    bounded_mean: bool = False,
) -> ActionHead:
    """The head for a Box (``kind`` of Gaussian) or Discrete (categorical) action space.

    Raises:
        ValueError: an unknown ``kind``, or a bounded head on a Box with infinite bounds.
        TypeError: any other action space.
    """
    if kind not in HEAD_KINDS:
        raise ValueError(f"action head must be one of {HEAD_KINDS}, got {kind!r}")
    if isinstance(action_space, spaces.Box):
        low = torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1)
        high = torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
        bounded = kind != "gaussian" or bounded_mean
        if bounded and not (torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(f"a {kind} head needs finite action bounds, got {action_space}")
        if kind == "gaussian":
            bounds = (low, high) if bounded_mean else None
            return GaussianHead(
                in_dim, int(math.prod(action_space.shape)), log_std_init, log_std_bounds, bounds
            )
        if kind == "squashed_gaussian":
            return SquashedGaussianHead(in_dim, low, high, log_std_bounds or (-20.0, 2.0), log_std_init)
        return DeterministicHead(in_dim, low, high, exploration_std)
    if isinstance(action_space, spaces.Discrete):
        if kind != "gaussian":
            raise ValueError(f"a {kind} head needs Box actions, got {action_space}")
        return CategoricalHead(in_dim, int(action_space.n))
    raise TypeError(f"no action head for {type(action_space).__name__} action spaces (Box or Discrete)")
