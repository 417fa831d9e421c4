"""``omnigym collect`` on the manipulation tasks: expert, noisy-expert and mixed Minari datasets,
read back with ``minari.load_dataset``, with each episode's return, success flag and policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest

from omnigym.envs.manipulation.reach import ReachEnv
from omnigym.platform.cli import main

REACH = "omnigym/Reach-v0"


@pytest.fixture(autouse=True)
def minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def collect(dataset_id: str, policy: str, *args: str, env: str = REACH, episodes: int = 4) -> Any:
    argv = ["collect", "--policy", policy, "--env", env, "--dataset-id", dataset_id]
    assert main([*argv, "--episodes", str(episodes), *args]) == 0
    return minari.load_dataset(dataset_id)


def episodes_and_metadata(dataset: Any) -> list[tuple[Any, dict[str, Any]]]:
    metadata = dataset.storage.get_episode_metadata(dataset.episode_indices)
    return list(zip(dataset.iterate_episodes(), metadata, strict=True))


def check_episode(episode: Any, meta: dict[str, Any], seed: int) -> None:
    """One stored episode is consistent: shapes, return, length and success flags."""
    steps = len(episode.rewards)
    assert meta["seed"] == seed and meta["length"] == steps
    assert episode.observations["state"].shape == (steps + 1, 10)
    assert episode.actions.shape == (steps, 4) and np.abs(episode.actions).max() <= 1
    assert meta["return"] == pytest.approx(float(episode.rewards.sum()))
    flags = episode.infos["is_success"]
    assert flags.shape == (steps + 1,) and not flags[0]  # no episode starts solved
    # success ends a Reach episode, so the flag of the last step is the termination
    assert bool(meta["is_success"]) == bool(flags[-1]) == bool(episode.terminations[-1])


def test_expert_dataset(capsys: pytest.CaptureFixture[str]) -> None:
    dataset = collect("omnigym/reach-expert-v0", "reach_expert", "--seed", "10")
    assert "success rate 1.000" in capsys.readouterr().out
    assert dataset.total_episodes == 4
    pairs = episodes_and_metadata(dataset)
    for i, (episode, meta) in enumerate(pairs):
        check_episode(episode, meta, seed=10 + i)
        assert meta["policy"] == "reach_expert" and meta["is_success"]
    assert dataset.total_steps == sum(meta["length"] for _, meta in pairs)


def test_noisy_expert_dataset_is_noisy_and_reproducible() -> None:
    expert = collect("omnigym/reach-expert-v0", "reach_expert", episodes=3)
    noisy = collect("omnigym/reach-noisy-v0", "reach_expert", "--stochastic", episodes=3)
    again = collect("omnigym/reach-noisy-again-v0", "reach_expert:stochastic", episodes=3)
    for (e, _), (n, meta), (a, _) in zip(*map(episodes_and_metadata, (expert, noisy, again)), strict=True):
        check_episode(n, meta, seed=meta["seed"])
        assert meta["policy"] == "reach_expert:stochastic" and meta["is_success"]
        # the same start (seed), other actions; episode i samples with seed i, so it repeats
        np.testing.assert_array_equal(n.observations["state"][0], e.observations["state"][0])
        assert not np.array_equal(n.actions[0], e.actions[0])
        np.testing.assert_array_equal(n.actions, a.actions)


def test_mixed_dataset_with_random(capsys: pytest.CaptureFixture[str]) -> None:
    dataset = collect("omnigym/reach-mixed-v0", "reach_expert:0.6,random:0.4", episodes=5)
    assert "episodes per policy: reach_expert 3, random:stochastic 2" in capsys.readouterr().out
    pairs = episodes_and_metadata(dataset)
    policies = [meta["policy"] for _, meta in pairs]
    expert, random = "reach_expert", "random:stochastic"
    assert policies == [expert, random, expert, random, expert]  # interleaved by episode index
    for i, (episode, meta) in enumerate(pairs):
        check_episode(episode, meta, seed=i)
        if meta["policy"] == expert:
            assert meta["is_success"]
        else:  # random samples uniformly (its mode would be the zero action)
            assert episode.actions.std(axis=0).min() > 0.3
    random_returns = [meta["return"] for _, meta in pairs if meta["policy"] == random]
    expert_returns = [meta["return"] for _, meta in pairs if meta["policy"] == expert]
    assert max(random_returns) < min(expert_returns)


def test_bad_mix_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collect", "--env", REACH, "--dataset-id", "omnigym/bad-v0", "--policy"]
    assert main([*argv, "reach_expert:0.6,random:0.6"]) == 2
    assert "sum to 1.2" in capsys.readouterr().err
    assert not minari.list_local_datasets()


def test_pixels_dataset_stores_images_and_text(minari_root: Path) -> None:
    dataset = collect("omnigym/reach-pixels-v0", "reach_expert", env="omnigym/ReachPixels-v0", episodes=2)
    assert set(dataset.observation_space.spaces) == {"image", "state", "text"}
    for i, (episode, meta) in enumerate(episodes_and_metadata(dataset)):
        check_episode(episode, meta, seed=i)
        steps = len(episode.rewards)
        assert episode.observations["image"].shape == (steps + 1, 96, 96, 3)
        assert episode.observations["image"].dtype == np.uint8 and episode.observations["image"].std() > 10
        assert episode.observations["text"] == [ReachEnv.instruction] * (steps + 1)
