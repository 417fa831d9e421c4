"""Snapshots of in-process vector envs, so a resumed run continues the same episodes exactly."""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np


def _physics(env: gym.Env) -> tuple[Any, Any] | None:
    """``(model, data)`` of a MuJoCo env, whose pickle does not carry the simulator state."""
    unwrapped = env.unwrapped
    model, data = getattr(unwrapped, "model", None), getattr(unwrapped, "data", None)
    if model is None or data is None or type(data).__module__.split(".")[0] != "mujoco":
        return None
    return model, data


def snapshot_envs(envs: gym.vector.VectorEnv) -> bytes | None:
    """The sub-envs of a ``SyncVectorEnv``: wrappers, RNGs, time limits, MuJoCo physics.

    None when the envs live in other processes or cannot be pickled.
    """
    envs = envs.unwrapped  # past vector wrappers such as VectorObservationDict
    if not isinstance(envs, gym.vector.SyncVectorEnv):
        return None
    physics: list[np.ndarray | None] = []
    for env in envs.envs:
        found = _physics(env)
        if found is None:
            physics.append(None)
            continue
        import mujoco

        model, data = found
        state = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(model, data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        physics.append(state)
    try:
        autoreset = getattr(envs, "_autoreset_envs", None)
        # EzPickle envs (MuJoCo) are rebuilt from constructor arguments, losing their RNG too.
        rngs = [env.unwrapped._np_random for env in envs.envs]
        return pickle.dumps({"envs": envs.envs, "autoreset": autoreset, "physics": physics, "rngs": rngs})
    except Exception:  # an env holding unpicklable handles: resume resets it instead
        return None


def restore_envs(envs: gym.vector.VectorEnv, blob: bytes) -> None:
    """Put a :func:`snapshot_envs` snapshot back into ``envs`` (built from the same config)."""
    envs = envs.unwrapped
    if not isinstance(envs, gym.vector.SyncVectorEnv):
        raise TypeError(f"env snapshots restore into a SyncVectorEnv, not a {type(envs).__name__}")
    state = pickle.loads(blob)  # our own checkpoint file, verified by its manifest
    envs.envs = state["envs"]
    if state["autoreset"] is not None:
        envs._autoreset_envs = state["autoreset"]  # type: ignore[attr-defined]
    for env, rng in zip(envs.envs, state["rngs"], strict=True):
        env.unwrapped._np_random = rng
    for env, physics in zip(envs.envs, state["physics"], strict=True):
        if physics is None:
            continue
        import mujoco

        found = _physics(env)
        if found is None:
            raise ValueError("checkpoint holds MuJoCo physics for an env that has none: a different env?")
        model, data = found
        mujoco.mj_setState(model, data, physics, mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(model, data)
