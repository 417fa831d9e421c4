"""Minari export: a policy's episodes become a loadable dataset, privileged keys stripped."""

import minari
import numpy as np
import pytest

from omnigym.envs.driving.experts import LogReplayConfig, LogReplayPolicy
from omnigym.platform.datasets import collect_dataset
from omnigym.platform.vec_env import make_env


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def test_collect_dataset_round_trip(minari_root, tmp_path):
    kwargs = {
        "split": "test",
        "num_scenes": 2,
        "cache_dir": str(tmp_path / "scenes"),
        "scene": {"episode_seconds": 4.0},
    }
    env = make_env("omnigym/DrivingPlan-v0", **LogReplayPolicy.env_kwargs, **kwargs)
    policy = LogReplayPolicy(LogReplayConfig(), env.observation_space, env.action_space)
    env.close()
    summary = collect_dataset(
        policy, "omnigym/DrivingPlan-v0", "omnigym/test-log-replay-v0", episodes=2, env_kwargs=kwargs
    )
    assert summary.episodes == 2 and summary.steps == 16  # 4 s episodes of 0.5 s plan steps
    dataset = minari.load_dataset("omnigym/test-log-replay-v0")
    assert dataset.total_episodes == 2 and dataset.total_steps == 16
    assert "log_replay" not in dataset.observation_space.spaces  # the expert's key is not stored
    assert "privileged" not in dataset.spec.env_spec.kwargs
    episode = next(iter(dataset.iterate_episodes()))
    assert episode.actions.shape == (8, 8, 3)
    assert episode.observations["state"].shape == (9, 12)
    assert np.isclose(episode.rewards.sum(), summary.mean_return, atol=5.0)
    assert episode.truncations[-1] and not episode.terminations.any()  # the human drives the whole scene
    with pytest.raises(ValueError, match="exists already"):
        collect_dataset(
            policy, "omnigym/DrivingPlan-v0", "omnigym/test-log-replay-v0", episodes=1, env_kwargs=kwargs
        )
