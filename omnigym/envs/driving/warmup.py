"""Compile the driving simulator's numba kernels into numba's on-disk cache, ahead of use.

The kernels (``@njit(cache=True)``) compile on their first call, which takes tens of seconds on a
cold machine. Calling :func:`compile_kernels` once after installing moves that cost out of the
first training run, a container build's first job, or a test run (``scripts/test.sh`` runs it
beside the type check). Every later process loads the compiled code.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from omnigym.envs.driving.env import DrivingVectorEnv
from omnigym.envs.driving.observations import VECTOR_KEYS


def compile_kernels(steps: int = 3) -> float:
    """Step every traffic model and action mode once, so that every kernel compiles.

    Each runs with the vector and the VLM observations and the PDM-Closed planner's privileged
    plans.

    Returns the seconds it took (near zero when the cache is already warm).
    """
    start = time.perf_counter()
    observations = (VECTOR_KEYS, ("state", "image", "text"))
    setups = itertools.product(("log", "idm"), ("control", "plan"), observations)
    for traffic, action_mode, obs_keys in setups:
        env = DrivingVectorEnv(
            num_envs=2, action_mode=action_mode, traffic=traffic, obs_keys=obs_keys, privileged=["pdm_closed"]
        )
        env.reset(seed=0)
        for _ in range(steps):
            env.step(np.zeros(env.action_space.shape, dtype=env.action_space.dtype))
        env.close()
    return time.perf_counter() - start
