"""Where a world-model env's episodes start: a set of observations, or resets of the real env.

:class:`~omnigym.world_models.env.WorldModelVectorEnv` draws each row's first observation from a
:class:`StartStates` (``start_states``: a Minari dataset's observations, ``"live"`` resets of the
real env, or observations given directly).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from torch import Tensor

from omnigym.platform.datasets import load_dataset_steps
from omnigym.platform.vec_env import LIVE

StartStatesArg = str | np.ndarray | Tensor | Mapping[str, Any]
"""A Minari dataset id, ``"live"``, or observations ``[M, ...]`` (an array under the single
observation key, or ``key -> [M, ...]``)."""


class StartStates(ABC):
    """Where episodes start: each row's first observation is a function of its own seed.

    Seed-per-row keeps ``reset(seed=s)`` reproducible and lets equal seeds give equal starts
    (GRPO's groups pass a list of seeds).
    """

    @abstractmethod
    def draw(self, seeds: Sequence[int]) -> dict[str, np.ndarray]:
        """One start observation per seed, ``key -> [len(seeds), ...]``."""

    def close(self) -> None:  # noqa: B027  (optional hook: only live start states hold anything)
        """Release what the source holds (a real env)."""


class StartStateSet(StartStates):
    """Start states sampled uniformly from a fixed set of observations ``key -> [M, ...]``."""

    def __init__(self, observations: Mapping[str, np.ndarray]) -> None:
        sizes = {len(v) for v in observations.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"start states need the same, nonzero number of rows per key, got {sizes}")
        self.observations = dict(observations)
        self.size = sizes.pop()

    def draw(self, seeds: Sequence[int]) -> dict[str, np.ndarray]:
        """Rows of the set, one uniform draw per seed."""
        rows = np.array([np.random.default_rng(seed).integers(self.size) for seed in seeds], dtype=np.int64)
        return {k: v[rows] for k, v in self.observations.items()}


class LiveStartStates(StartStates):
    """Start states from resets of a real env: row ``i`` is ``env.reset(seed=seeds[i])``'s observation."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env

    def draw(self, seeds: Sequence[int]) -> dict[str, np.ndarray]:
        """Reset the real env once per seed; its first observations, stacked."""
        firsts = [self.env.reset(seed=int(seed))[0] for seed in seeds]
        return {k: np.stack([obs[k] for obs in firsts]) for k in firsts[0]}

    def close(self) -> None:
        """Close the real env."""
        self.env.close()


def load_start_states(source: StartStatesArg, space: spaces.Dict, real_env: gym.Env | None) -> StartStates:
    """The :class:`StartStates` a ``start_states`` argument names, checked against ``space``.

    Raises:
        ValueError: ``live`` without a real env, or observations that do not fit ``space``.
    """
    if isinstance(source, str) and source == LIVE:
        if real_env is None:
            raise ValueError("start_states 'live' resets the real env: give the env id")
        return LiveStartStates(real_env)
    if isinstance(source, str):
        observations: Mapping[str, Any] = load_dataset_steps(source).obs
    elif isinstance(source, Mapping):
        observations = source
    elif len(space.spaces) == 1:
        observations = {next(iter(space.spaces)): source}
    else:
        raise ValueError(f"start states as one array need a single observation key; the space has {space}")
    return StartStateSet(_checked_observations(observations, space))


def _checked_observations(observations: Mapping[str, Any], space: spaces.Dict) -> dict[str, np.ndarray]:
    """``observations`` restricted to ``space``'s keys, as arrays of its dtypes, shapes checked."""
    missing = set(space.spaces) - set(observations)
    if missing:
        raise ValueError(f"start states lack observation keys {sorted(missing)} of {space}")
    out = {}
    for key, sub in space.spaces.items():
        value = observations[key]
        array = value.detach().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value)
        if array.shape[1:] != sub.shape:
            raise ValueError(
                f"start states {key!r} have rows of shape {array.shape[1:]}, the space {sub.shape}"
            )
        out[key] = array.astype(sub.dtype, copy=False)
    return out
