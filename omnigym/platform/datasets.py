"""Datasets of policy rollouts, stored as Minari datasets for imitation and offline RL.

Any registered policy (a scripted expert, a baseline, a trained policy) can be rolled out on any
env and recorded. Privileged observation keys that an expert reads (``Policy.env_kwargs``) are
stripped from what is stored, so a dataset holds what a learner may see.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from omnigym.platform.vec_env import make_env, to_env_action
from omnigym.policies.base import Policy, obs_to_torch


class HidePrivileged(gym.ObservationWrapper):
    """Removes ``keys`` from Dict observations; the last removed values stay in ``privileged``."""

    def __init__(self, env: gym.Env, keys: list[str]) -> None:
        super().__init__(env)
        assert isinstance(env.observation_space, spaces.Dict)
        self.keys = [key for key in keys if key in env.observation_space.spaces]
        self.observation_space = spaces.Dict(
            {k: s for k, s in env.observation_space.spaces.items() if k not in self.keys}
        )
        self.privileged: dict[str, Any] = {}

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The observation without the privileged keys."""
        self.privileged = {key: observation[key] for key in self.keys}
        return {key: value for key, value in observation.items() if key not in self.keys}


def _record_episode(policy: Policy, env: HidePrivileged, seed: int, deterministic: bool) -> Any:
    """One episode as a Minari ``EpisodeBuffer`` (observations T+1, actions/rewards/ends T)."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    obs, _ = env.reset(seed=seed)
    observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
    done = False
    while not done:
        full = {**obs, **env.privileged}
        batch = {k: ((v,) if isinstance(v, str) else np.asarray(v)[None]) for k, v in full.items()}
        with torch.no_grad():
            step = policy.act(obs_to_torch(batch), deterministic=deterministic)
        raw = (
            step.action.detach().cpu().numpy()
            if isinstance(step.action, torch.Tensor)
            else np.asarray(step.action)
        )
        action = to_env_action(env.action_space, raw[0])
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(float(reward))
        terminations.append(bool(terminated))
        truncations.append(bool(truncated))
        done = terminated or truncated
    stacked = {key: np.stack([o[key] for o in observations]) for key in observations[0]}
    return EpisodeBuffer(
        seed=seed,
        observations=stacked,
        actions=np.stack(actions),
        rewards=rewards,
        terminations=terminations,
        truncations=truncations,
        infos={},
    )


@dataclass
class DatasetSummary:
    """What :func:`collect_dataset` recorded."""

    dataset_id: str
    path: str
    episodes: int
    steps: int
    mean_return: float


def collect_dataset(
    policy: Policy,
    env_id: str,
    dataset_id: str,
    *,
    episodes: int = 10,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    deterministic: bool = True,
    description: str | None = None,
) -> DatasetSummary:
    """Roll ``policy`` out and save the episodes as the Minari dataset ``dataset_id``.

    Episode ``i`` is seeded ``seed + i``; datasets live under ``$MINARI_DATASETS_PATH`` (default
    ``~/.minari/datasets``).

    Raises:
        ImportError: minari is not installed (``pip install omnigym[offline]``).
        ValueError: a bad count, or a dataset with this id exists already.
    """
    try:
        import minari
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("collecting datasets needs minari: pip install 'omnigym[offline]'") from exc
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if dataset_id in minari.list_local_datasets():
        raise ValueError(f"Minari dataset {dataset_id!r} exists already; delete it or pick another id")
    kwargs = {**policy.env_kwargs, **(env_kwargs or {})}
    privileged = list(kwargs.get("privileged", []))
    env = HidePrivileged(make_env(env_id, **kwargs), privileged)
    buffers, steps, returns = [], 0, []
    try:
        for episode in range(episodes):
            policy.reset()
            buffer = _record_episode(policy, env, seed + episode, deterministic)
            buffers.append(buffer)
            steps += len(buffer.rewards)
            returns.append(float(np.sum(buffer.rewards)))
        spec = env.env.spec  # the made env's, without this wrapper
        if spec is not None:  # a user re-making the env from the dataset gets no privileged keys
            spec = dataclasses.replace(
                spec, kwargs={k: v for k, v in spec.kwargs.items() if k != "privileged"}
            )
        minari.create_dataset_from_buffers(
            dataset_id=dataset_id,
            buffer=buffers,
            env=spec,
            eval_env=spec,
            observation_space=env.observation_space,
            action_space=env.action_space,
            algorithm_name=policy.name or type(policy).__name__,
            author="omnigym",
            code_permalink="https://github.com/omnigym/omnigym",
            description=description or f"{episodes} episodes of {policy.name} on {env_id}",
        )
    finally:
        env.close()
    root = Path(os.environ.get("MINARI_DATASETS_PATH", Path.home() / ".minari" / "datasets"))
    return DatasetSummary(dataset_id, str(root / dataset_id), episodes, steps, float(np.mean(returns)))
