"""The batched MuJoCo tasks: equal to a SyncVectorEnv of single envs, autoreset, spaces, bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import omnigym.envs  # noqa: F401  (registers the ids)
from omnigym.envs.manipulation import tabletop
from omnigym.envs.manipulation.rendering import mujoco
from omnigym.envs.manipulation.vector import (
    BatchPhysics,
    ManipulationVectorEnv,
    PickPlaceVectorEnv,
    PushCubeVectorEnv,
    PushTVectorEnv,
    ReachVectorEnv,
)
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.vec_env import EnvConfig, make_vec_env
from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig

TASKS = {
    "PushT": PushTVectorEnv,
    "Reach": ReachVectorEnv,
    "PushCube": PushCubeVectorEnv,
    "PickPlace": PickPlaceVectorEnv,
}


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd


@pytest.fixture
def reach() -> Iterator[ManipulationVectorEnv]:
    envs = ReachVectorEnv(3, max_episode_steps=6, num_threads=2)
    yield envs
    envs.close()


def sync_envs(env_id: str, num_envs: int, mode: AutoresetMode, **kwargs: Any) -> gym.vector.VectorEnv:
    return gym.make_vec(
        env_id, num_envs, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}, **kwargs
    )


def batched_envs(env_id: str, num_envs: int, mode: AutoresetMode, **kwargs: Any) -> gym.vector.VectorEnv:
    return gym.make_vec(
        env_id, num_envs, vectorization_mode="vector_entry_point", autoreset_mode=mode, **kwargs
    )


def assert_same(a: Any, b: Any, where: str) -> None:
    """Exactly equal, key by key, with equal dtypes (obs, info, final_obs object arrays)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert a.shape == b.shape, where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert (x is None) == (y is None), f"{where}[{i}]"
            if x is not None:
                assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=where)


def goal_seeking(obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Reach actions toward the goal, some copies held still: a mix of successes and timeouts."""
    state = obs["state"]
    move = (state[:, tabletop.GOAL] - state[:, tabletop.TCP]) / tabletop.MAX_STEP
    move *= rng.random((len(state), 1)) < 0.5
    return np.concatenate([move, np.ones((len(state), 1))], axis=1).astype(np.float32)


# --- equal to Gymnasium's SyncVectorEnv -----------------------------------------------------------
@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_matches_sync_vector_env_of_single_envs(task: str, mode: AutoresetMode) -> None:
    kwargs: dict[str, Any] = {"max_episode_steps": 9}
    if task == "PushT":  # per-copy model changes (friction, the block's drag, colours) stay per copy
        kwargs.update(friction_range=(0.5, 1.5), randomize_colors=True)
    batched = batched_envs(f"omnigym/{task}-v0", 4, mode, num_threads=3, **kwargs)
    reference = sync_envs(f"omnigym/{task}-v0", 4, mode, **kwargs)
    assert isinstance(batched, TASKS[task])
    assert_same(batched.reset(seed=11), reference.reset(seed=11), "reset")
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(30):
        actions = rng.uniform(-1.3, 1.3, batched.action_space.shape).astype(np.float32)
        got, want = batched.step(actions), reference.step(actions)
        assert_same(got, want, f"step {t}")
        ends += int(np.sum(got[2] | got[3]))
    assert ends >= 8, "the time limit should have ended episodes (autoreset untested)"
    batched.close()
    reference.close()


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_matches_sync_with_successes_and_timeouts(mode: AutoresetMode) -> None:
    batched = batched_envs("omnigym/Reach-v0", 5, mode, max_episode_steps=4)
    reference = sync_envs("omnigym/Reach-v0", 5, mode, max_episode_steps=4)
    obs, _ = batched.reset(seed=[3, 1, 4, 1, 5])
    assert_same((obs, _), reference.reset(seed=[3, 1, 4, 1, 5]), "reset")
    rng = np.random.default_rng(1)
    successes = timeouts = 0
    for t in range(24):
        actions = goal_seeking(obs, rng)
        got = batched.step(actions)
        assert_same(got, reference.step(actions), f"step {t}")
        obs, _, terminated, truncated, _ = got
        successes, timeouts = successes + terminated.sum(), timeouts + (truncated & ~terminated).sum()
    assert successes >= 3 and timeouts >= 3, (successes, timeouts)
    batched.close()
    reference.close()


def test_pixel_observations_match_sync() -> None:
    try:
        batched = batched_envs("omnigym/PushCubePixels-v0", 2, AutoresetMode.SAME_STEP, image_size=32)
        reference = sync_envs("omnigym/PushCubePixels-v0", 2, AutoresetMode.SAME_STEP, image_size=32)
        first = batched.reset(seed=2)
    except mujoco.FatalError as exc:
        pytest.skip(f"no offscreen OpenGL for MuJoCo here: {exc}")
    assert_same(first, reference.reset(seed=2), "reset")
    assert first[0]["image"].shape == (2, 32, 32, 3) and first[0]["image"].any()
    rng = np.random.default_rng(0)
    for t in range(3):
        actions = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
        assert_same(batched.step(actions), reference.step(actions), f"step {t}")
    batched.close()
    reference.close()


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_collector_gets_the_same_rollout_as_from_sync(mode: str) -> None:
    def collect(vectorization: str) -> tuple[Any, Any]:
        config = EnvConfig(
            id="omnigym/Reach-v0",
            num_envs=3,
            vectorization=vectorization,
            autoreset_mode=mode,
            max_episode_steps=5,
        )
        envs = make_vec_env(config)
        torch.manual_seed(0)
        policy = RandomPolicy(RandomPolicyConfig(), envs.single_observation_space, envs.single_action_space)
        collector = RolloutCollector(envs, policy, 12)
        collector.reset(seed=3)
        rollout, stats = collector.collect()
        envs.close()
        return rollout, stats

    (rollout, stats), (reference, reference_stats) = collect("vector"), collect("sync")
    for name in ("rewards", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(rollout, name), getattr(reference, name), err_msg=name)
    np.testing.assert_array_equal(rollout.obs["state"], reference.obs["state"])
    assert stats == reference_stats and len(stats.lengths) == 6


# --- construction ---------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["omnigym/PushT-v0", "omnigym/PickPlacePixels-v0"])
def test_make_vec_env_builds_the_batched_env(env_id: str) -> None:
    envs = make_vec_env(EnvConfig(id=env_id, num_envs=3, vectorization="vector", max_episode_steps=17))
    single = gym.make(env_id)
    try:
        assert isinstance(envs, ManipulationVectorEnv) and envs.num_envs == 3
        assert envs.single_observation_space == single.observation_space
        assert envs.single_action_space == single.action_space
        assert envs.observation_space == batch_space(single.observation_space, 3)
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert envs.max_episode_steps == 17
    finally:
        envs.close()
        single.close()


def test_registered_time_limit_truncates() -> None:
    envs = gym.make_vec("omnigym/Reach-v0", 2, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    hold = np.tile(np.array([0.0, 0.0, 0.0, 1.0], np.float32), (2, 1))
    for _ in range(49):
        assert not envs.step(hold)[3].any()
    assert envs.step(hold)[3].all(), "Reach-v0 is registered with max_episode_steps=50"
    envs.close()


def test_shapes_and_dtypes() -> None:
    envs = PickPlaceVectorEnv(3, obs_keys=("state", "text"), max_episode_steps=5)
    obs, info = envs.reset(seed=0)
    assert obs["state"].shape == (3, 23) and obs["state"].dtype == np.float32
    assert obs["text"] == (PickPlaceVectorEnv.env_class.instruction,) * 3
    assert info["is_success"].dtype == bool and info["_is_success"].all()
    obs, reward, terminated, truncated, info = envs.step(np.zeros((3, 4), np.float32))
    assert reward.shape == (3,) and reward.dtype == np.float64
    assert terminated.dtype == bool and truncated.dtype == bool
    assert info["distance"].dtype == np.float64 and info["distance"].shape == (3,)
    assert envs.observation_space.contains(obs)
    envs.close()


# --- autoreset ------------------------------------------------------------------------------------
def run_until_an_end(envs: ManipulationVectorEnv) -> tuple[Any, ...]:
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(10):
        step = envs.step(goal_seeking(obs, rng))
        obs, _, terminated, truncated, _ = step
        if (terminated | truncated).any():
            return step
    raise AssertionError("no episode ended in 10 steps")


def test_same_step_autoreset_reports_the_final_obs_and_info(reach: ManipulationVectorEnv) -> None:
    obs, _, terminated, truncated, info = run_until_an_end(reach)
    ended = terminated | truncated
    np.testing.assert_array_equal(info["_final_obs"], ended)
    for i in np.flatnonzero(ended):
        final_state = info["final_obs"][i]["state"]
        assert not np.array_equal(final_state, obs["state"][i]), "the returned obs is the new episode's"
        assert info["final_info"]["is_success"][i] == terminated[i]
        assert not info["is_success"][i], "the top-level info is the reset's"
        assert reach._elapsed[i] == 0


def test_next_step_autoreset_resets_at_the_following_step() -> None:
    envs = ReachVectorEnv(3, max_episode_steps=6, autoreset_mode=AutoresetMode.NEXT_STEP)
    _, _, terminated, truncated, _ = run_until_an_end(envs)
    ended = terminated | truncated
    _, reward, terminated, truncated, _ = envs.step(np.ones((3, 4), np.float32))
    assert np.all(reward[ended] == 0) and not terminated[ended].any() and not truncated[ended].any()
    assert np.all(envs._elapsed[ended] == 0), "the ended copies were reset, not stepped"
    assert np.all(envs._elapsed[~ended] > 1)
    envs.close()


def test_disabled_autoreset_needs_a_masked_reset() -> None:
    envs = ReachVectorEnv(3, max_episode_steps=6, autoreset_mode=AutoresetMode.DISABLED)
    obs, _, terminated, truncated, _ = run_until_an_end(envs)
    ended = terminated | truncated
    with pytest.raises(gym.error.ResetNeeded, match="reset_mask"):
        envs.step(np.zeros((3, 4), np.float32))
    new_obs, info = envs.reset(options={"reset_mask": ended})
    np.testing.assert_array_equal(info["_is_success"], ended)
    np.testing.assert_array_equal(new_obs["state"][~ended], obs["state"][~ended])
    envs.step(np.zeros((3, 4), np.float32))
    envs.close()


# --- bad input ------------------------------------------------------------------------------------
def test_nan_action_raises_naming_the_env(reach: ManipulationVectorEnv) -> None:
    reach.reset(seed=0)
    actions = np.zeros((3, 4), np.float32)
    actions[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"ReachEnv actions of envs \[1\] contain NaN or inf"):
        reach.step(actions)
    actions[1, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        reach.step(actions)


def test_bad_shapes_and_order_raise(reach: ManipulationVectorEnv) -> None:
    with pytest.raises(gym.error.ResetNeeded):
        reach.step(np.zeros((3, 4), np.float32))
    reach.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3, 4\), got \(2, 4\)"):
        reach.step(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="3 envs"):
        reach.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="reset_mask"):
        reach.reset(options={"reset_mask": np.zeros(3, bool)})
    with pytest.raises(ValueError, match="num_threads"):
        BatchPhysics([], 1, 0)
