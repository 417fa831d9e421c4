"""The torch vector-env protocol: what a batched simulator that keeps its data on a device gives.

It lives on the ground floor because both sides implement or read it: env backends (Isaac Lab,
the torch Reach env, world models) implement it, and the collector reads it.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode


class TorchVectorEnv(gym.vector.VectorEnv):
    """A batched env whose steps stay torch tensors on one device (Isaac Lab-style simulators).

    The collector keeps such an env's data on ``device``, with no NumPy round trip. The contract
    differs from a NumPy vector env in types, and in resetting finished sub-envs itself:

    * ``reset(seed=...)`` returns observations ``key -> Tensor [N, ...]`` on ``device`` under the
      well-known keys, and an info dict.
    * ``step(actions: Tensor [N, ...])`` returns observations, rewards (float32 ``[N]``),
      terminated and truncated (bool ``[N]``) and an info dict. A sub-env whose episode ended
      has already started its next one (same-step autoreset), so ``info`` carries
      ``"final_obs"``: ``key -> Tensor [N, ...]`` whose finished rows hold the observation to
      bootstrap truncated episodes from, and optionally ``"final_info"``: ``name -> Tensor [N]``,
      per-episode metrics such as ``is_success``, read on the finished rows.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}  # noqa: RUF012  (gymnasium's instance attribute)
    device: torch.device
