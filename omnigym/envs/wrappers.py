"""Wrappers that put any Gymnasium env under omnigym's observation conventions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.types import OBS_IMAGE, OBS_STATE


def is_image_space(space: spaces.Space) -> bool:
    """A uint8 ``[H, W, C]`` Box with 1, 3 or 4 channels: an image observation."""
    return (
        isinstance(space, spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[-1] in (1, 3, 4)
    )


def dict_space_for(space: spaces.Space) -> spaces.Dict:
    """The ``Dict`` space a plain ``Box`` becomes.

    A uint8 ``HxWxC`` box becomes ``{"image"}``, any other box a flat float32 ``{"state"}``.
    """
    if not isinstance(space, spaces.Box):
        raise TypeError(f"only Box observation spaces are wrapped into a Dict, got {type(space).__name__}")
    if is_image_space(space):
        return spaces.Dict({OBS_IMAGE: space})
    low = np.asarray(space.low, dtype=np.float32).reshape(-1)
    high = np.asarray(space.high, dtype=np.float32).reshape(-1)
    return spaces.Dict({OBS_STATE: spaces.Box(low, high, dtype=np.float32)})


def wrap_observation(key: str, observation: Any, batched: bool = False) -> dict[str, np.ndarray]:
    """One observation (or a batch ``[N, ...]``) under its well-known key."""
    if key != OBS_STATE:
        return {key: observation}
    array = np.asarray(observation, dtype=np.float32)
    return {OBS_STATE: array.reshape(array.shape[0], -1) if batched else array.reshape(-1)}


class ObservationDict(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Turns a plain ``Box`` observation into omnigym's ``Dict`` form.

    A uint8 ``HxWxC`` box becomes ``{"image": ...}``; any other box becomes a flat float32
    ``{"state": ...}``. Envs that already return a ``Dict`` should use the well-known keys
    themselves and do not need this wrapper.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        self.observation_space = dict_space_for(env.observation_space)
        (self._key,) = self.observation_space.spaces

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        """Wrap one observation under its well-known key."""
        return wrap_observation(self._key, observation)


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


class VectorObservationDict(gym.vector.VectorWrapper):
    """:class:`ObservationDict` for a whole vector env of ``Box`` observations.

    One wrap of the batched array per step instead of one dict per sub-env, which the vector env
    would then have to merge key by key. The true final observations that same-step autoreset
    puts in ``info["final_obs"]`` are wrapped too (which is why this is not a Gymnasium
    ``VectorObservationWrapper``: those refuse same-step autoreset).
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.single_observation_space = dict_space_for(env.single_observation_space)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)
        (self._key,) = self.single_observation_space.spaces

    def observations(self, observations: Any) -> dict[str, np.ndarray]:
        """Wrap a batch ``[N, ...]`` under its well-known key."""
        return wrap_observation(self._key, observations, batched=True)

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset the vector env; observations come back wrapped."""
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        return self.observations(obs), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step the vector env; observations (and final observations) come back wrapped."""
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        if "final_obs" in info:
            finals = np.empty(len(info["final_obs"]), dtype=object)
            for i, final in enumerate(info["final_obs"]):
                finals[i] = None if final is None else wrap_observation(self._key, final)
            info = {**info, "final_obs": finals}
        return self.observations(obs), rewards, terminated, truncated, info
