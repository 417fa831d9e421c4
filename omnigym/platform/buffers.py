"""Transition storage for off-policy and offline learning: a replay buffer, filled online or from Minari.

One :class:`ReplayBuffer` serves both: online training appends vector-env steps to it; offline
training loads a whole Minari dataset into one (:meth:`ReplayBuffer.from_minari`). Samples come
back as :class:`~omnigym.core.types.TransitionBatch`. Observations keep the env's ``Dict``
layout (its ``Box`` keys), so any policy's ``features`` can read them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.types import TransitionBatch
from omnigym.platform.memory import check_fits

ArrayLike = np.ndarray | Tensor


def _as_tensor(value: Any, dtype: torch.dtype | None = None) -> Tensor:
    return torch.as_tensor(np.asarray(value) if not isinstance(value, Tensor) else value, dtype=dtype)


class ReplayBuffer:
    """A fixed-capacity ring buffer of transitions, sampled uniformly.

    Stores the ``Box`` keys of a ``Dict`` observation space (others, such as text, are not
    stored), the flat action, the reward, whether the transition ended the episode in a terminal
    state (``terminated``: no bootstrap) and whether it ended the episode at all (``ends``:
    terminal or time limit; Monte-Carlo quantities need the episode boundaries).

    Args:
        observation_space: the env's ``Dict`` observation space.
        action_space: the env's ``Box`` action space.
        capacity: transitions kept; the oldest are overwritten first.
        device: where the storage (and the sampled batches) live.
        capacity_key: what sets ``capacity`` (a config key, or ``dataset <id>``), named when the
            storage cannot fit in memory.

    Raises:
        InsufficientMemoryError: the preallocated storage would exceed the available memory.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        capacity: int,
        device: torch.device | str = "cpu",
        *,
        capacity_key: str = "algo.buffer_size",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(f"the replay buffer stores Dict observations, got {observation_space}")
        if not isinstance(action_space, spaces.Box):
            raise TypeError(f"the replay buffer stores Box actions, got {action_space}")
        self.observation_space = observation_space
        self.action_space = action_space
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs_keys = [k for k, s in observation_space.spaces.items() if isinstance(s, spaces.Box)]
        if not self.obs_keys:
            raise ValueError(f"no Box observation keys to store in {observation_space}")

        def storage(space: spaces.Box) -> Tensor:
            dtype = torch.uint8 if space.dtype == np.uint8 else torch.float32
            return torch.zeros((self.capacity, *space.shape), dtype=dtype, device=self.device)

        boxes = {k: cast(spaces.Box, observation_space.spaces[k]) for k in self.obs_keys}
        obs_bytes = sum(math.prod(b.shape) * (1 if b.dtype == np.uint8 else 4) for b in boxes.values())
        check_fits(  # obs and next_obs, float32 actions, reward, terminated, ends
            self.capacity * (2 * obs_bytes + 4 * math.prod(action_space.shape) + 9),
            what=f"a replay buffer of {self.capacity} transitions ({capacity_key})",
            fix="use a smaller dataset" if capacity_key.startswith("dataset ") else f"lower {capacity_key}",
            device=self.device,
        )
        self.obs = {k: storage(box) for k, box in boxes.items()}
        self.next_obs = {k: storage(box) for k, box in boxes.items()}
        self.action_dim = int(math.prod(action_space.shape))
        self.actions = torch.zeros((self.capacity, self.action_dim), device=self.device)
        self.rewards = torch.zeros(self.capacity, device=self.device)
        self.terminated = torch.zeros(self.capacity, device=self.device)
        self.ends = torch.zeros(self.capacity, dtype=torch.bool, device=self.device)
        self.position = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: Mapping[str, ArrayLike],
        actions: ArrayLike,
        rewards: ArrayLike,
        next_obs: Mapping[str, ArrayLike],
        terminated: ArrayLike,
        truncated: ArrayLike | None = None,
    ) -> None:
        """Append a batch of ``n`` transitions (leading dimension ``n`` everywhere).

        ``next_obs`` must be the true next observation (the final observation of an episode
        that ended, not the first one of the next). ``truncated`` marks time-limit ends.
        """
        rewards_t = _as_tensor(rewards, torch.float32).reshape(-1)
        n = int(rewards_t.shape[0])
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions to a buffer of capacity {self.capacity}")
        idx = (torch.arange(n) + self.position) % self.capacity
        idx = idx.to(self.device)
        for key in self.obs_keys:
            if key not in obs or key not in next_obs:
                raise KeyError(f"transitions lack observation key {key!r} (have {sorted(obs)})")
            self.obs[key][idx] = _as_tensor(obs[key]).to(self.device, self.obs[key].dtype)
            self.next_obs[key][idx] = _as_tensor(next_obs[key]).to(self.device, self.next_obs[key].dtype)
        actions_t = _as_tensor(actions, torch.float32).reshape(n, -1)
        if actions_t.shape[1] != self.action_dim:
            raise ValueError(f"actions have {actions_t.shape[1]} dims, the action space {self.action_dim}")
        if not torch.isfinite(actions_t).all() or not torch.isfinite(rewards_t).all():
            raise ValueError("transitions with non-finite actions or rewards cannot be stored")
        terminated_t = _as_tensor(terminated, torch.bool).reshape(-1)
        truncated_t = (
            torch.zeros(n, dtype=torch.bool)
            if truncated is None
            else _as_tensor(truncated, torch.bool).reshape(-1)
        )
        self.actions[idx] = actions_t.to(self.device)
        self.rewards[idx] = rewards_t.to(self.device)
        self.terminated[idx] = terminated_t.float().to(self.device)
        self.ends[idx] = (terminated_t | truncated_t).to(self.device)
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TransitionBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), generator=generator).to(self.device)
        return self.gather(idx)

    def gather(self, idx: Tensor) -> TransitionBatch:
        """The transitions at storage rows ``idx``."""
        return TransitionBatch(
            obs={k: v[idx] for k, v in self.obs.items()},
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_obs={k: v[idx] for k, v in self.next_obs.items()},
            terminated=self.terminated[idx],
        )

    def all(self) -> TransitionBatch:
        """Every stored transition, oldest first."""
        return self.gather(self._chronological())

    def _chronological(self) -> Tensor:
        """Storage rows, oldest first."""
        start = self.position if self.size == self.capacity else 0
        return (torch.arange(self.size, device=self.device) + start) % self.capacity

    def episodes(self) -> Iterator[dict[str, Any]]:
        """The stored transitions as episodes, oldest first, in Minari's layout (NumPy arrays).

        ``observations`` has one row more than the actions (the final observation). The last
        episode, if unfinished, ends truncated. Meaningful for a buffer filled by one env (the
        transitions of several envs interleave).
        """
        order = self._chronological()
        ends = self.ends[order].cpu()
        stops = (ends.nonzero().flatten() + 1).tolist()
        if not stops or stops[-1] != self.size:
            stops.append(self.size)
        start = 0
        for stop in stops:
            idx = order[start:stop]
            terminations = self.terminated[idx].bool().cpu().numpy()
            truncations = self.ends[idx].cpu().numpy() & ~terminations
            truncations[-1] = not terminations[-1]  # an unfinished last episode ends at the cut
            observations = {
                k: torch.cat([self.obs[k][idx], self.next_obs[k][idx[-1:]]]).cpu().numpy()
                for k in self.obs_keys
            }
            yield {
                "observations": observations,
                "actions": self.actions[idx].cpu().numpy().reshape(len(idx), *self.action_space.shape),
                "rewards": self.rewards[idx].cpu().numpy(),
                "terminations": terminations,
                "truncations": truncations,
            }
            start = stop

    def episode_returns(self) -> Tensor:
        """Undiscounted return of each complete episode stored (oldest first), for reward scaling."""
        order = self._chronological()
        rewards = self.rewards[order].cpu()
        ends = self.ends[order].cpu()
        cumulative = torch.cumsum(rewards.double(), 0)
        end_rows = ends.nonzero().flatten()
        if end_rows.numel() == 0:
            return torch.zeros(0, dtype=torch.float64)
        totals = cumulative[end_rows]
        return torch.diff(totals, prepend=totals.new_zeros(1))

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions and the write position (for resuming a run)."""
        return {
            "obs": {k: v[: self.size].clone() for k, v in self.obs.items()},
            "next_obs": {k: v[: self.size].clone() for k, v in self.next_obs.items()},
            "actions": self.actions[: self.size].clone(),
            "rewards": self.rewards[: self.size].clone(),
            "terminated": self.terminated[: self.size].clone(),
            "ends": self.ends[: self.size].clone(),
            "position": self.position,
            "size": self.size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"saved buffer holds {size} transitions, more than capacity {self.capacity}")
        for key in self.obs_keys:
            self.obs[key][:size] = state["obs"][key].to(self.device)
            self.next_obs[key][:size] = state["next_obs"][key].to(self.device)
        for name in ("actions", "rewards", "terminated", "ends"):
            getattr(self, name)[:size] = state[name].to(self.device)
        self.size, self.position = size, int(state["position"])

    @classmethod
    def from_minari(
        cls, dataset_id: str, device: torch.device | str = "cpu", capacity: int | None = None
    ) -> ReplayBuffer:
        """Every transition of Minari dataset ``dataset_id`` (from local storage, no network).

        Raises:
            FileNotFoundError: no such dataset under ``$MINARI_DATASETS_PATH``.
            TypeError: the dataset's observations are not a ``Dict`` or its actions not a ``Box``.
        """
        import minari
        from minari.storage import get_dataset_path

        path = get_dataset_path(dataset_id)
        if not path.exists():
            raise FileNotFoundError(f"no Minari dataset {dataset_id!r} under {path.parent}")
        dataset = minari.load_dataset(dataset_id)
        obs_space = dataset.observation_space
        if not isinstance(obs_space, spaces.Dict):
            raise TypeError(f"{dataset_id}: omnigym datasets have Dict observations, got {obs_space}")
        total = int(dataset.total_steps)
        key = "algo.buffer_size" if capacity else f"dataset {dataset_id}"
        buffer = cls(obs_space, dataset.action_space, capacity or total, device, capacity_key=key)
        for episode in dataset.iterate_episodes():
            steps = len(episode.rewards)
            if steps == 0:
                continue
            observations = {k: np.asarray(episode.observations[k]) for k in buffer.obs_keys}
            buffer.add(
                obs={k: v[:steps] for k, v in observations.items()},
                actions=np.asarray(episode.actions).reshape(steps, -1),
                rewards=episode.rewards,
                next_obs={k: v[1 : steps + 1] for k, v in observations.items()},
                terminated=episode.terminations,
                truncated=episode.truncations,
            )
        return buffer
