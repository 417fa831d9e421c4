"""Training windows of demonstrations for the action-chunk policies.

Diffusion Policy (Chi et al., 2023, §IV) trains on windows of ``n_obs_steps`` observations and
``horizon`` actions that start at the first of those observations; windows that run over an
episode's start or end repeat the boundary step (the paper's padding). Windows are kept as
index arrays into the flattened steps, so images are not copied per window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from omnigym.core.types import Obs


@dataclass
class ChunkBatch:
    """A batch of demonstration windows, what the chunk policies' ``compute_loss`` reads.

    Attributes:
        obs: the observation history, key -> ``[B, n_obs_steps, ...]`` (oldest first).
        actions: the action chunk starting at the oldest observation of the history.
            Shape: [B, horizon, *action_shape].
    """

    obs: Obs
    actions: Tensor


class DemoWindows:
    """Every (observation history, action chunk) window of a set of demonstration episodes.

    Window ``i`` has step ``i`` as its current (last) observation: observations ``i - To + 1 .. i``
    and actions ``i - To + 1 .. i - To + horizon``, indices clamped to step ``i``'s episode.

    Args:
        obs: key -> ``[N, ...]`` arrays, the flattened steps (as
            :class:`~omnigym.platform.datasets.DatasetSteps` holds them; no text keys).
        actions: ``[N, ...]`` array.
        episode_index: the episode of each step; an episode's steps are contiguous and in order.
            Shape: [N].
        n_obs_steps: observation history length ``To``.
        horizon: action chunk length ``Tp``.
    """

    def __init__(
        self, obs: dict[str, Any], actions: Any, episode_index: Any, n_obs_steps: int, horizon: int
    ) -> None:
        episode_index = np.asarray(episode_index)
        count = len(episode_index)
        if count == 0:
            raise ValueError("no demonstration steps to build windows from")
        boundary = np.flatnonzero(np.diff(episode_index) != 0) + 1
        starts = np.concatenate([[0], boundary])
        ends = np.concatenate([boundary, [count]]) - 1  # last step of each episode
        episode = np.repeat(np.arange(len(starts)), np.diff(np.concatenate([starts, [count]])))
        first, last = starts[episode][:, None], ends[episode][:, None]
        current = np.arange(count)[:, None]
        offsets = np.arange(horizon)[None, :] - (n_obs_steps - 1)
        self.obs_index = np.clip(current + offsets[:, :n_obs_steps], first, last)
        self.action_index = np.clip(current + offsets, first, last)
        self.obs = {key: np.asarray(value) for key, value in obs.items()}
        self.actions = np.asarray(actions, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.obs_index)

    def batch(self, rows: np.ndarray, device: torch.device | str = "cpu") -> ChunkBatch:
        """The windows ``rows`` as tensors on ``device``."""
        obs = {
            key: torch.as_tensor(value[self.obs_index[rows]], device=device)
            for key, value in self.obs.items()
        }
        return ChunkBatch(
            obs=obs, actions=torch.as_tensor(self.actions[self.action_index[rows]], device=device)
        )

    def sample(
        self, batch_size: int, rng: np.random.Generator, device: torch.device | str = "cpu"
    ) -> ChunkBatch:
        """``batch_size`` windows drawn uniformly with replacement."""
        return self.batch(rng.integers(0, len(self), batch_size), device)
