"""Returns and advantages: pure tensor functions, no gradient, time-major ``[T, N]``."""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    dones: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation (Schulman et al., 2016); docs/algorithms/ppo.md.

    Truncation is handled by passing the value of the true final observation in
    ``next_values`` at a truncated step: it is bootstrapped (``terminated`` is False there) while
    the recursion is still cut at the episode boundary (``dones`` is True).

    Args:
        rewards: r[t]. Shape: [T, N].
        values: V(s_t). Shape: [T, N].
        next_values: V(s_{t+1}) of the observation that followed step t in the same episode.
            Shape: [T, N].
        terminated: the MDP ended after step t (no bootstrap). Shape: [T, N].
        dones: terminated or truncated after step t (cut the recursion). Shape: [T, N].
        gamma: discount.
        gae_lambda: GAE lambda.

    Returns:
        advantages and returns (= advantages + values, the TD(lambda) target). Shape: [T, N].
    """
    not_terminated = 1.0 - terminated.to(values.dtype)
    not_done = 1.0 - dones.to(values.dtype)
    # delta[t] = r[t] + gamma * V(s_{t+1}) * nonterm[t] - V(s_t)
    deltas = rewards + gamma * next_values * not_terminated - values
    decay = gamma * gae_lambda * not_done
    advantages = torch.empty_like(values)
    running = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        # A[t] = delta[t] + gamma * lambda * (1 - done[t]) * A[t+1]
        running = deltas[t] + decay[t] * running
        advantages[t] = running
    return advantages, advantages + values


@torch.no_grad()
def discounted_returns(
    rewards: Tensor, dones: Tensor, gamma: float, bootstrap: Tensor | None = None
) -> Tensor:
    """Monte-Carlo discounted returns, cut at episode ends. Shape: [T, N] -> [T, N].

    Args:
        rewards: Shape: [T, N].
        dones: the episode ended after step t. Shape: [T, N].
        gamma: discount.
        bootstrap: value of the state after the last step, ``[N]`` (zero when None).
    """
    running = torch.zeros_like(rewards[0]) if bootstrap is None else bootstrap.to(rewards.dtype)
    not_done = 1.0 - dones.to(rewards.dtype)
    out = torch.empty_like(rewards)
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * not_done[t] * running
        out[t] = running
    return out
