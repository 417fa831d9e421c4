"""Wrappers that put any Gymnasium env under omnigym's observation conventions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.platform.types import OBS_IMAGE, OBS_STATE


def _is_image_space(space: spaces.Space) -> bool:
    return (
        isinstance(space, spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[-1] in (1, 3, 4)
    )


class ObservationDict(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Turns a plain ``Box`` observation into omnigym's ``Dict`` form.

    A uint8 ``HxWxC`` box becomes ``{"image": ...}``; any other box becomes a flat float32
    ``{"state": ...}``. Envs that already return a ``Dict`` should use the well-known keys
    themselves and do not need this wrapper.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"ObservationDict wraps Box observation spaces, got {type(space).__name__}")
        if _is_image_space(space):
            self._key = OBS_IMAGE
            inner: spaces.Box = space
        else:
            self._key = OBS_STATE
            low = np.asarray(space.low, dtype=np.float32).reshape(-1)
            high = np.asarray(space.high, dtype=np.float32).reshape(-1)
            inner = spaces.Box(low, high, dtype=np.float32)
        self.observation_space = spaces.Dict({self._key: inner})

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        """Wrap one observation under its well-known key."""
        if self._key == OBS_STATE:
            return {OBS_STATE: np.asarray(observation, dtype=np.float32).reshape(-1)}
        return {OBS_IMAGE: observation}


def as_omnigym_env(env: gym.Env) -> gym.Env:
    """``env`` with a ``Dict`` observation space (wrapping plain boxes); other spaces pass."""
    if isinstance(env.observation_space, spaces.Dict):
        return env
    if isinstance(env.observation_space, spaces.Box):
        return ObservationDict(env)
    raise TypeError(
        f"omnigym needs Dict or Box observations; {env.spec.id if env.spec else env} has "
        f"{type(env.observation_space).__name__}"
    )
