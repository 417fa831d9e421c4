"""A world model against the real env on the same actions, as two recordings to watch side by side.

A policy runs its episodes in the real env (recorded step by step); each episode's actions are
then replayed open loop in the world model, started from the same real start state (the real
env reset with the episode's seed). The model's recording holds, at every step, the distance of
its prediction from what the real env showed (``info/obs_error``), so ``omnigym view`` shows where
a model drifts and ``omnigym view REAL MODEL`` steps both with one slider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from omnigym.platform.episodes.format import Episode, EpisodeSteps, Recording, RecordingWriter
from omnigym.platform.evaluate import PolicyLike, evaluate_policy
from omnigym.world_models.base import WorldModel
from omnigym.world_models.env import WorldModelEnv

REAL_DIR, MODEL_DIR = "real", "model"
"""The two recordings' directories under the output directory."""


@dataclass
class ReplaySummary:
    """What a replay found: the model's mean per-step observation error and return per episode."""

    real: Path
    model: Path
    obs_error: list[float]
    """Per episode: the mean over steps of ``|model obs - real obs|`` (L2 over the observed keys)."""
    real_returns: list[float]
    model_returns: list[float]


def replay_in_world_model(
    model: WorldModel | str | Path, env_id: str, policy: PolicyLike, out: str | Path, *, episodes: int = 3,
    seed: int = 0, env_kwargs: Mapping[str, Any] | None = None, agent_name: str = "",
    model_env_kwargs: Mapping[str, Any] | None = None, max_episode_steps: int | None = None,
) -> ReplaySummary:  # fmt: skip
    """Record ``policy`` in ``env_id``, then its actions in ``model`` from the same start states.

    Args:
        model: a world model trained on ``env_id``'s spaces, or the folder of a saved one.
        env_id: the real env.
        policy: who acts in the real env (its actions are replayed in the model).
        out: a new directory; the recordings go to ``out/real`` and ``out/model``.
        episodes: episodes, with seeds ``seed ... seed + episodes - 1``.
        seed: the first episode's seed.
        env_kwargs: the real env's options.
        agent_name: who acts, as the recordings name it.
        model_env_kwargs: :class:`~omnigym.world_models.env.WorldModelEnv` options (``reward``,
            ``termination``, ``horizon``...).
        max_episode_steps: overrides the real env's time limit.

    Returns:
        Where the recordings are, and the model's error and returns per episode.
    """
    out = Path(out)
    evaluate_policy(
        policy, env_id, episodes=episodes, seed=seed, num_envs=1, env_kwargs=dict(env_kwargs or {}),
        record_dir=out / REAL_DIR, agent_name=agent_name, max_episode_steps=max_episode_steps,
    )  # fmt: skip
    real = Recording(out / REAL_DIR)
    writer = RecordingWriter(
        out / MODEL_DIR, env_id=env_id, env_kwargs=dict(env_kwargs or {}), agent=agent_name,
        source=f"world-model replay in {model if isinstance(model, (str, Path)) else type(model).__name__}",
    )  # fmt: skip
    env = WorldModelEnv(model, env_id=env_id, env_kwargs=env_kwargs, **dict(model_env_kwargs or {}))
    errors, model_returns = [], []
    try:
        for episode in real:
            steps = _replay(env, episode)
            error = [v for v in steps.infos["obs_error"] if v is not None]
            errors.append(float(np.mean(error)) if error else float("nan"))
            model_returns.append(float(np.sum(steps.rewards)))
            metrics = {"obs_error_mean": errors[-1], "replayed_steps": float(steps.length)}
            writer.write(steps, seed=episode.summary.seed, metrics=metrics, index=episode.summary.index)
    finally:
        env.close()
    return ReplaySummary(
        out / REAL_DIR, out / MODEL_DIR, errors, [e.episode_return for e in real.episodes], model_returns
    )


def _replay(env: WorldModelEnv, episode: Episode) -> EpisodeSteps:
    """``episode``'s actions in the model from its start state, until they run out or the model ends."""
    steps = EpisodeSteps()
    obs, _ = env.reset(seed=episode.summary.seed)
    steps.add_observation(obs)
    for t, action in enumerate(episode.actions):
        obs, reward, terminated, truncated, info = env.step(action)
        real_next = {key: values[t + 1] for key, values in episode.observations.items()}
        steps.add_step(
            action, reward, terminated, truncated, {**info, "obs_error": _distance(obs, real_next)}
        )
        steps.add_observation(obs)
        if terminated or truncated:
            break
    return steps


def _distance(model_obs: Mapping[str, np.ndarray], real_obs: Mapping[str, Any]) -> float:
    """L2 distance over the numeric keys both observations hold (a plain array is ``state``)."""
    shared = [key for key in model_obs if key in real_obs and not isinstance(real_obs[key], str)]
    if not shared:
        return float("nan")
    squares = [
        np.sum((np.asarray(model_obs[k], np.float64) - np.asarray(real_obs[k], np.float64)) ** 2)
        for k in shared
    ]
    return float(np.sqrt(np.sum(squares)))
