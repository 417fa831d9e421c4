"""Reward and termination functions known in closed form, keyed by Gymnasium env id.

A world model need not learn what the env's documentation already states exactly: MBPO-style
setups learn only the dynamics and compute the reward or the episode end from the predicted
observation. Every function here is batched in torch over the flat ``"state"`` observation
omnigym presents (``make_env`` wraps the env's ``Box`` as ``{"state": ...}``) and is exact for the
env's *default* constructor arguments; ``tests/world_models/test_known.py`` steps each real env
with random actions and compares.

Signatures (all tensors on one device)::

    reward(obs [B, D], action [B, A], next_obs [B, D]) -> [B] float32
    terminated(obs [B, D], action [B, A], next_obs [B, D]) -> [B] bool

``obs`` is the observation the action was taken in, ``next_obs`` the one it led to. Gymnasium
computes some rewards from the state before the step (Pendulum) and others from the state after
it (InvertedPendulum); each function reads the one its env uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

KnownFn = Callable[[Tensor, Tensor, Tensor], Tensor]
"""``fn(obs [B, D], action [B, A], next_obs [B, D])``: a reward ``[B]`` or a termination ``[B]``."""


def pendulum_reward(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
    """Pendulum-v1: ``-(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2)`` before the step.

    ``obs = [cos th, sin th, thdot]``; ``th = atan2(sin, cos)`` already lies in ``[-pi, pi]``,
    where Gymnasium's ``angle_normalize`` is the identity (up to the sign at ``pi``, which the
    square removes). The torque is clipped to ``[-2, 2]`` first, as the env does.
    """
    theta = torch.atan2(obs[:, 1], obs[:, 0])
    theta_dot = obs[:, 2]
    torque = action[:, 0].clamp(-2.0, 2.0)
    cost = theta.square() + 0.1 * theta_dot.square() + 0.001 * torque.square()
    return (-cost).float()


def _within(values: Tensor, low: float, high: float) -> Tensor:
    """``low < values < high`` elementwise: Gymnasium's health checks are strict."""
    return (values > low) & (values < high)


def hopper_terminated(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
    """Hopper-v5 (``terminate_when_unhealthy=True``): the hopper is unhealthy after the step.

    Healthy (``Hopper.is_healthy``, default ranges, x position excluded from the observation):
    height ``next_obs[0]`` in ``(0.7, inf)``, torso angle ``next_obs[1]`` in ``(-0.2, 0.2)``, and
    ``next_obs[1:]`` in ``(-100, 100)``. Gymnasium checks the *unclipped* joint velocities where
    the observation holds them clipped to ``[-10, 10]``; a velocity beyond 100 (which the clipped
    observation cannot show) is the one case this function misses.
    """
    healthy = (
        _within(next_obs[:, 1:], -100.0, 100.0).all(dim=1)
        & _within(next_obs[:, 0], 0.7, math.inf)
        & _within(next_obs[:, 1], -0.2, 0.2)
    )
    return ~healthy


def walker2d_terminated(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
    """Walker2d-v5: the walker is unhealthy after the step.

    Height ``next_obs[0]`` outside ``(0.8, 2.0)`` or torso angle ``next_obs[1]`` outside
    ``(-1, 1)`` (default ranges, x position excluded from the observation).
    """
    healthy = _within(next_obs[:, 0], 0.8, 2.0) & _within(next_obs[:, 1], -1.0, 1.0)
    return ~healthy


def never_terminated(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
    """Envs that end only by their time limit (HalfCheetah-v5, Pendulum-v1)."""
    return torch.zeros(next_obs.shape[0], dtype=torch.bool, device=next_obs.device)


def inverted_pendulum_terminated(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
    """InvertedPendulum-v5: a non-finite observation or a pole angle ``|next_obs[1]| > 0.2``."""
    return ~torch.isfinite(next_obs).all(dim=1) | (next_obs[:, 1].abs() > 0.2)


def inverted_pendulum_reward(obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
    """InvertedPendulum-v5: 1 for every step that does not end the episode, else 0."""
    return (~inverted_pendulum_terminated(obs, action, next_obs)).float()


KNOWN_REWARDS: dict[str, KnownFn] = {
    "Pendulum-v1": pendulum_reward,
    "InvertedPendulum-v5": inverted_pendulum_reward,
}
"""Env id -> its exact reward function."""

KNOWN_TERMINATIONS: dict[str, KnownFn] = {
    "Pendulum-v1": never_terminated,
    "Hopper-v5": hopper_terminated,
    "Walker2d-v5": walker2d_terminated,
    "HalfCheetah-v5": never_terminated,
    "InvertedPendulum-v5": inverted_pendulum_terminated,
}
"""Env id -> its exact termination function."""


def known_reward(env_id: str) -> KnownFn:
    """The reward function of ``env_id``.

    Raises:
        ValueError: none is known for ``env_id``.
    """
    return _lookup(KNOWN_REWARDS, env_id, "reward")


def known_termination(env_id: str) -> KnownFn:
    """The termination function of ``env_id``.

    Raises:
        ValueError: none is known for ``env_id``.
    """
    return _lookup(KNOWN_TERMINATIONS, env_id, "termination")


def _lookup(table: dict[str, KnownFn], env_id: str, what: str) -> KnownFn:
    if env_id not in table:
        raise ValueError(
            f"no known {what} function for {env_id!r} (known: {', '.join(sorted(table))}); "
            f"use {what}: learned"
        )
    return table[env_id]
