"""Minari export: a policy's episodes become a loadable dataset, privileged keys stripped."""

import minari
import numpy as np
import pytest

from omnigym.envs.driving.experts import LogReplayConfig, LogReplayPolicy
from omnigym.platform.datasets import PolicySpec, assign_episodes, collect_dataset, parse_policy_mix
from omnigym.platform.vec_env import make_env
from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig


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


def test_parse_policy_mix():
    assert parse_policy_mix("reach_expert") == [PolicySpec("reach_expert", None, 1.0)]
    assert parse_policy_mix("random:stochastic") == [PolicySpec("random", "stochastic", 1.0)]
    assert parse_policy_mix("pusht_expert:0.7, random:0.3") == [
        PolicySpec("pusht_expert", None, 0.7),
        PolicySpec("random", None, 0.3),
    ]
    mix = parse_policy_mix("reach_expert:0.5,reach_expert:stochastic:0.25,runs/a:b:deterministic:0.25")
    assert mix[1] == PolicySpec("reach_expert", "stochastic", 0.25)
    assert mix[2] == PolicySpec("runs/a:b", "deterministic", 0.25)  # a path may hold a colon
    for bad, message in [
        ("a:0.5,b:0.6", "sum to 1.1"),
        ("a:0.5,b", "give every policy"),
        ("a:0,b:1", r"\(0, 1\]"),
        (":0.5,b:0.5", "names no policy"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_policy_mix(bad)


def test_assign_episodes_interleaves_by_fraction():
    assert assign_episodes([1.0], 3) == [0, 0, 0]
    assert assign_episodes([0.7, 0.3], 10) == [0, 1, 0, 0, 0, 1, 0, 0, 1, 0]  # 5th: a tie, to 0
    sources = assign_episodes([0.5, 0.3, 0.2], 100)
    assert [sources.count(k) for k in range(3)] == [50, 30, 20]
    for n in range(1, 101):  # every prefix holds each source within one episode of its share
        for k, fraction in enumerate([0.5, 0.3, 0.2]):
            assert abs(sources[:n].count(k) - fraction * n) <= 1


def test_failed_write_leaves_no_dataset_behind(minari_root, monkeypatch):
    """A dataset half-written when Minari failed (e.g. h5py on text arrays) blocked its id."""

    def fail_after_making_the_dir(dataset_id, **kwargs):
        (minari_root / dataset_id / "data").mkdir(parents=True)
        raise TypeError("No conversion path for dtype")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", fail_after_making_the_dir)
    env = make_env("omnigym/Reach-v0")
    policy = RandomPolicy(RandomPolicyConfig(), env.observation_space, env.action_space)
    env.close()
    with pytest.raises(TypeError, match="No conversion"):
        collect_dataset(policy, "omnigym/Reach-v0", "omnigym/test-broken-v0", episodes=1)
    assert not (minari_root / "omnigym" / "test-broken-v0").exists()


def test_load_dataset_steps_text_actions(minari_root):
    from omnigym.envs.games.experts import GameSolver
    from omnigym.platform.datasets import load_dataset_steps

    kwargs = {"action_space": "text", **GameSolver.env_kwargs}
    env = make_env("omnigym/NumberLine-v0", **kwargs)
    solver = GameSolver(GameSolver.config_class(), env.observation_space, env.action_space)
    summary = collect_dataset(solver, "omnigym/NumberLine-v0", "omnigym/test-numberline-v0", episodes=3,
                              env_kwargs={"action_space": "text"})  # fmt: skip
    steps = load_dataset_steps("omnigym/test-numberline-v0")
    assert len(steps) == summary.steps and summary.success_rate == 1.0
    assert steps.obs["image"].shape == (summary.steps, *env.observation_space["image"].shape)
    assert set(steps.actions) <= {"-", "+"} and len(steps.actions) == summary.steps
    first, _ = env.reset(seed=0)  # episode 0 is seeded 0: its first observation is the first row
    assert steps.obs["text"][0] == first["text"]
    assert np.array_equal(steps.obs["image"][0], first["image"])
    assert np.array_equal(np.unique(steps.episode_index), [0, 1, 2])
    # Each step's action moves the current number towards the target the text shows.
    for text, action in zip(steps.obs["text"], steps.actions, strict=True):
        lines = dict(line.split(": ", 1) for line in text.splitlines() if line[:6] in ("target", "curren"))
        assert action == ("+" if int(lines["target"]) > int(lines["current"]) else "-")
    with pytest.raises(FileNotFoundError, match="no Minari dataset"):
        load_dataset_steps("omnigym/missing-v0")
