"""Recordings to Minari datasets and back, so recorded episodes train offline and datasets replay.

Minari holds what learning needs (observations, actions, rewards, ends); a recording also holds
what a person looks at (frames, replies, per-step info, reward components). Converting a
recording to Minari keeps the former and the episode figures (as episode metadata); converting
a Minari dataset to a recording keeps everything Minari has, with its stored success flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from omnigym.platform.datasets import DatasetSummary, write_episodes_dataset
from omnigym.platform.episodes.format import (
    PLAIN_OBS_KEY,
    EpisodeSteps,
    Recording,
    RecordingError,
    RecordingWriter,
)


def recording_to_minari(directory: str | Path, dataset_id: str, *, description: str = "") -> DatasetSummary:
    """Write the recording in ``directory`` as Minari dataset ``dataset_id``.

    The env is re-made from the recording's id and options for its spaces, so the env must be
    registered here. Episode metadata holds the agent as ``policy``, ``return`` and ``length``.

    Raises:
        RecordingError: not a recording, or it holds no episodes.
        ValueError: the dataset exists already.
    """
    recording = Recording(directory)
    if not len(recording):
        raise RecordingError(f"{recording.directory} holds no episodes to convert")
    episodes = []
    for episode in recording:
        observations = {
            key: [str(v) for v in values] if isinstance(values[0], str) else np.stack(values)
            for key, values in episode.observations.items()
        }
        actions = episode.actions
        episodes.append(
            {
                "observations": observations if recording.dict_observations else observations[PLAIN_OBS_KEY],
                "actions": [str(a) for a in actions] if isinstance(actions[0], str) else np.stack(actions),
                "rewards": episode.rewards,
                "terminations": episode.terminated,
                "truncations": episode.truncated,
                "seed": episode.summary.seed,
            }
        )
    return write_episodes_dataset(
        episodes, recording.env_id, dataset_id,
        label=str(recording.manifest.get("agent") or "recording"),
        description=description or f"converted from the omnigym recording {recording.directory.name}",
        env_kwargs=recording.manifest.get("env_kwargs") or {},
    )  # fmt: skip


def minari_to_recording(dataset_id: str, directory: str | Path) -> Path:
    """Write Minari dataset ``dataset_id`` as a recording in ``directory`` (which must not hold one).

    Each episode's seed, metadata figures (``return``, ``is_success``, ...) and per-step infos
    are kept; the agent is the episode's ``policy`` metadata when the dataset was collected by
    omnigym.

    Raises:
        FileNotFoundError: no such dataset.
        RecordingError: ``directory`` already holds a recording.
    """
    import minari
    from minari.storage import get_dataset_path

    if not get_dataset_path(dataset_id).exists():
        raise FileNotFoundError(
            f"no Minari dataset {dataset_id!r} under {get_dataset_path(dataset_id).parent} "
            "(MINARI_DATASETS_PATH sets where datasets live)"
        )
    dataset = minari.load_dataset(dataset_id)
    env_spec = dataset.spec.env_spec
    writer = RecordingWriter(
        directory,
        env_id=env_spec.id if env_spec is not None else dataset_id,
        env_kwargs=env_spec.kwargs if env_spec is not None else {},
        agent=str(dataset.storage.metadata.get("algorithm_name") or ""),
        source=f"minari:{dataset_id}",
    )
    text_action = isinstance(dataset.action_space, spaces.Text)
    metadata = dataset.storage.get_episode_metadata(dataset.episode_indices)
    for meta, episode in zip(metadata, dataset.iterate_episodes(), strict=True):
        writer.write(
            _episode_steps(episode, text_action),
            seed=None if meta.get("seed") is None else int(meta["seed"]),
            metrics={k: float(v) for k, v in meta.items() if _is_number(v) and k not in ("seed", "id")},
            agent=str(meta.get("policy", "")),
        )
    return Path(directory)


def _episode_steps(episode: Any, text_action: bool) -> EpisodeSteps:
    """A Minari ``EpisodeData`` in the writer's layout."""
    steps = EpisodeSteps()
    length = len(episode.rewards)
    observations = episode.observations
    for t in range(length + 1):
        if isinstance(observations, dict):
            steps.add_observation({key: _row(values, t) for key, values in observations.items()})
        else:
            steps.add_observation(np.asarray(observations[t]))
    infos = episode.infos if isinstance(episode.infos, dict) else {}
    for t in range(length):
        info = {key: _row(values, t + 1) for key, values in infos.items() if len(values) > t + 1}
        action = str(episode.actions[t]) if text_action else np.asarray(episode.actions[t])
        steps.add_step(
            action,
            float(episode.rewards[t]),
            bool(episode.terminations[t]),
            bool(episode.truncations[t]),
            info,
        )
    return steps


def _row(values: Any, t: int) -> Any:
    value = values[t]
    return value if isinstance(value, str) else np.asarray(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf"
    )
