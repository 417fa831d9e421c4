"""Conformance of every omnigym env and every env a config uses.

Each env must pass Gymnasium's ``check_env`` (raw and under omnigym's Dict-observation wrapper),
use the well-known observation keys, be deterministic given ``reset(seed=...)`` (groups of
copies reset with one seed start identical), never emit NaN, take clipped out-of-range actions,
reject invalid ones loudly (one test, checking what the env's action space admits: a Text action
space has no NaN or out-of-range action, so it skips), and render ``rgb_array`` frames when it
says it can. Tests marked ``env_class`` check an env class's own code and run on two of the 26
Atari games (``ROM_FAMILY_SAMPLE`` in conftest), the rest on every env. The ``env_variant`` tests
check each env in its other action spaces (``omnigym.envs.ACTION_SPACE_VARIANTS``: text actions of
the games and driving, structured GUI actions).
"""

from __future__ import annotations

import copy
import re
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT, WELL_KNOWN_OBS_KEYS
from omnigym.platform.collect import group_seeds
from omnigym.platform.vec_env import EnvConfig, make_env, make_vec_env, to_env_action

NUM_DETERMINISM_STEPS = 50
NUM_NAN_STEPS = 200


@pytest.fixture
def env(env_id: str) -> Iterator[gym.Env]:
    """The env as omnigym makes it (Dict observations)."""
    env = make_env(env_id)
    yield env
    env.close()


def assert_obs_equal(a: Any, b: Any, where: str) -> None:
    """Observations (dicts of arrays or text) are exactly equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_obs_equal(a[key], b[key], f"{where}[{key!r}]")
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)


def obs_differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether any key of two observations differs."""
    return any(not np.array_equal(np.asarray(a[key]), np.asarray(b[key])) for key in a)


def rollout(env: gym.Env, seed: int, actions: list[Any]) -> list[tuple[Any, ...]]:
    """``(obs, reward, terminated, truncated)`` per step from ``reset(seed)``; resets (unseeded,
    so still determined by the seed) whenever an episode ends."""
    obs, _ = env.reset(seed=seed)
    steps: list[tuple[Any, ...]] = [(obs, 0.0, False, False)]
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        steps.append((obs, float(reward), bool(terminated), bool(truncated)))
        if terminated or truncated:
            obs, _ = env.reset()
            steps.append((obs, 0.0, False, False))
    return steps


def seeded_actions(space: spaces.Space, n: int, seed: int = 123) -> list[Any]:
    """``n`` actions sampled from a copy of ``space`` seeded on its own."""
    space = copy.deepcopy(space)
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def numeric_values(obs: dict[str, Any]) -> dict[str, np.ndarray]:
    """The numeric arrays of an observation, by key."""
    out = {}
    for key, value in obs.items():
        array = np.asarray(value)
        if array.dtype.kind in "biuf":
            out[key] = array
    return out


def uses_mujoco(env: gym.Env) -> bool:
    """Whether the env is built on MuJoCo (its rendering then needs an OpenGL backend)."""
    return any("mujoco" in cls.__module__ for cls in type(env.unwrapped).__mro__)


def is_opengl_error(exc: BaseException) -> bool:
    """An error from creating an OpenGL context (MuJoCo FatalError or inside PyOpenGL/mujoco GL)."""
    if type(exc).__name__ == "FatalError" or isinstance(exc, ImportError):
        return True
    files = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    return any("OpenGL" in f or "mujoco_rendering" in f or "gl_context" in f for f in files)


# --- API ------------------------------------------------------------------------------------------
@pytest.mark.env_class
def test_check_env_unwrapped(env: gym.Env) -> None:
    # Rendering is checked by test_render_rgb_array, which can tell a missing OpenGL from a bug.
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.env_class
def test_check_env_wrapped(env: gym.Env) -> None:
    # check_env's close check recreates the env from its spec: covered by the next test.
    check_env(env, skip_render_check=True, skip_close_check=True)


def test_wrapped_env_can_be_recreated_from_spec(env: gym.Env) -> None:
    assert env.spec is not None
    again = gym.make(env.spec)
    try:
        assert again.observation_space == env.observation_space
        assert again.action_space == env.action_space
    finally:
        again.close()


def test_observation_space_uses_well_known_keys(env: gym.Env) -> None:
    space = env.observation_space
    assert isinstance(space, spaces.Dict), f"observation space is {type(space).__name__}, not Dict"
    assert set(space.spaces) & set(WELL_KNOWN_OBS_KEYS), (
        f"observation keys {sorted(space.spaces)} include none of {WELL_KNOWN_OBS_KEYS}"
    )
    if OBS_IMAGE in space.spaces:
        image = space[OBS_IMAGE]
        assert isinstance(image, spaces.Box) and image.dtype == np.uint8, f"'image' must be uint8, is {image}"
        assert len(image.shape) == 3 and image.shape[-1] == 3, f"'image' must be HxWx3, is {image.shape}"
    if OBS_STATE in space.spaces:
        state = space[OBS_STATE]
        assert isinstance(state, spaces.Box) and state.dtype == np.float32, (
            f"'state' must be float32, is {state}"
        )
        assert len(state.shape) == 1, f"'state' must be a vector, has shape {state.shape}"
    if OBS_TEXT in space.spaces:
        assert isinstance(space[OBS_TEXT], spaces.Text), f"'text' must be a Text space, is {space[OBS_TEXT]}"


# --- determinism ----------------------------------------------------------------------------------
@pytest.mark.env_class
def test_same_seed_same_trajectory(env_id: str) -> None:
    first, second = make_env(env_id), make_env(env_id)
    actions = seeded_actions(first.action_space, NUM_DETERMINISM_STEPS)
    runs = [rollout(first, 5, actions), rollout(second, 5, actions), rollout(first, 5, actions)]
    first.close()
    second.close()
    reference = runs[0]
    for run_index, run in enumerate(runs[1:], start=1):
        assert len(run) == len(reference), f"run {run_index}: episode ends differ"
        for t, (step, ref) in enumerate(zip(run, reference, strict=True)):
            assert_obs_equal(step[0], ref[0], f"run {run_index}, step {t}, obs")
            assert step[1:] == ref[1:], f"run {run_index}, step {t}: (reward, terminated, truncated) differ"


def test_different_seed_different_first_obs(env: gym.Env) -> None:
    first = env.reset(seed=0)[0]
    # Lazily: stops at the first seed that differs (a seeded reset can cost a ROM reload, ~0.2 s).
    others = (env.reset(seed=seed)[0] for seed in range(1, 5))
    assert any(obs_differ(first, obs) for obs in others), "reset(seed=0..4) gave identical obs"


def test_no_nan_over_random_rollout(env: gym.Env) -> None:
    actions = seeded_actions(env.action_space, NUM_NAN_STEPS)
    for t, (obs, reward, *_) in enumerate(rollout(env, 0, actions)):
        assert env.observation_space.contains(obs), f"step {t}: observation outside the space"
        for key, value in numeric_values(obs).items():
            assert not np.isnan(value).any(), f"step {t}: NaN in observation {key!r}"
        assert np.isfinite(reward), f"step {t}: reward {reward}"


@pytest.mark.env_class
def test_group_reset_starts_groups_identically(env_id: str) -> None:
    envs = make_vec_env(EnvConfig(id=env_id, num_envs=4))
    try:
        obs, _ = envs.reset(seed=group_seeds(7, 4, 2))
        rows = [{k: v[i] for k, v in obs.items()} for i in range(4)]
        assert_obs_equal(rows[0], rows[1], "group 0 (envs 0, 1)")
        assert_obs_equal(rows[2], rows[3], "group 1 (envs 2, 3)")
        assert obs_differ(rows[0], rows[2]), "groups 0 and 1 (seeds 7, 8) start from the same observation"
        # Same actions within a group keep the copies in lockstep (what GRPO-style groups rely on).
        for t, (a, b) in enumerate(
            zip(*(seeded_actions(envs.single_action_space, 10, s) for s in (1, 2)), strict=True)
        ):
            obs, *_ = envs.step(np.stack([a, a, b, b]))
            rows = [{k: v[i] for k, v in obs.items()} for i in range(4)]
            assert_obs_equal(rows[0], rows[1], f"group 0 after step {t}")
            assert_obs_equal(rows[2], rows[3], f"group 1 after step {t}")
    finally:
        envs.close()


# --- actions --------------------------------------------------------------------------------------
NUMERIC_ACTIONS = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


@pytest.mark.timeout(60)
def test_invalid_actions_are_clipped_or_rejected(env: gym.Env) -> None:
    """Each check the action space admits: a NaN action is rejected, an out-of-range action of a
    bounded Box is clipped (and the env steps on it), an out-of-range Discrete action raises."""
    space = env.action_space
    if not isinstance(space, NUMERIC_ACTIONS):
        pytest.skip(f"a {type(space).__name__} action space has no NaN or out-of-range actions")
    assert_nan_action_rejected(space)
    if isinstance(space, spaces.Box) and space.is_bounded("both"):
        assert_out_of_range_box_action_clipped(env, space)
    if isinstance(space, spaces.Discrete):
        assert_out_of_range_discrete_action_raises(env, space)


def assert_nan_action_rejected(space: spaces.Space) -> None:
    raw = np.full(space.shape or (), np.nan)
    with pytest.raises(ValueError, match=re.compile(r"non-finite|nan", re.IGNORECASE)):
        to_env_action(space, raw)


def assert_out_of_range_box_action_clipped(env: gym.Env, space: spaces.Box) -> None:
    index = np.arange(space.low.size).reshape(space.shape)
    raw = np.where(index % 2 == 0, space.high + 5.0, space.low - 5.0).astype(np.float64)
    assert not space.contains(raw.astype(space.dtype))
    action = to_env_action(space, raw)
    assert space.contains(action), f"to_env_action left {action} outside {space}"
    np.testing.assert_array_equal(action, np.clip(raw, space.low, space.high).astype(space.dtype))
    env.reset(seed=0)
    obs, reward, *_ = env.step(action)
    for key, value in numeric_values(obs).items():
        assert np.isfinite(value).all(), f"non-finite observation {key!r} after a clipped action"
    assert np.isfinite(reward)


def assert_out_of_range_discrete_action_raises(env: gym.Env, space: spaces.Discrete) -> None:
    for bad in (int(space.start + space.n), int(space.start - 1)):
        env.reset(seed=0)
        with pytest.raises(Exception):  # noqa: B017  any error is fine; silence or NaN is not
            env.step(bad)


# --- rendering ------------------------------------------------------------------------------------
def test_render_rgb_array(
    env_id: str,
    request: pytest.FixtureRequest,
    mujoco_gl_works: Callable[[str], bool],
    restore_mujoco_gl: None,
) -> None:
    probe = make_env(env_id)  # imports the env's modules before MUJOCO_GL is touched
    modes = probe.metadata.get("render_modes") or []
    mujoco = uses_mujoco(probe)
    probe.close()
    if "rgb_array" not in modes:
        pytest.skip(f"{env_id} does not list rgb_array in render_modes {modes}")
    try:
        env = make_env(env_id, render_mode="rgb_array")
        env.reset(seed=0)
        frame = env.render()
        env.close()
    except Exception as exc:
        if mujoco and is_opengl_error(exc) and not any(mujoco_gl_works(b) for b in ("egl", "osmesa")):
            pytest.skip(f"no offscreen OpenGL (EGL or OSMesa) for MuJoCo here: {exc!r}")
        raise
    assert isinstance(frame, np.ndarray), f"render() returned {type(frame).__name__}"
    assert frame.dtype == np.uint8, f"frame dtype {frame.dtype}"
    assert frame.ndim == 3 and frame.shape[-1] == 3 and min(frame.shape[:2]) > 0, f"frame shape {frame.shape}"
    assert frame.std() > 0, "render() returned a blank frame"


# --- other action spaces --------------------------------------------------------------------------
def make_variant(env_variant: str) -> gym.Env:
    """The env of ``"<id> action_space=<mode>"``."""
    env_id, setting = env_variant.split(" ")
    key, value = setting.split("=")
    return make_env(env_id, **{key: value})


def test_variant_passes_check_env(env_variant: str) -> None:
    env = make_variant(env_variant)
    try:
        check_env(env, skip_render_check=True, skip_close_check=True)
    finally:
        env.close()


def test_variant_is_deterministic_and_answers_random_actions(env_variant: str) -> None:
    """Random actions of a Text space are mostly replies that do not parse: each gets a defined
    outcome (``info["action_valid"]`` False, a finite reward), the same one for the same seed."""
    first, second = make_variant(env_variant), make_variant(env_variant)
    actions = seeded_actions(first.action_space, NUM_DETERMINISM_STEPS)
    try:
        runs = [rollout(first, 5, actions), rollout(second, 5, actions)]
        for t, (step, ref) in enumerate(zip(*runs, strict=True)):
            assert_obs_equal(step[0], ref[0], f"step {t}, obs")
            assert step[1:] == ref[1:], f"step {t}: (reward, terminated, truncated) differ"
            assert first.observation_space.contains(step[0]) and np.isfinite(step[1]), f"step {t}"
        if isinstance(first.action_space, spaces.Text):
            first.reset(seed=0)
            info = first.step(actions[0])[-1]
            assert info["action_valid"] in (True, False) and isinstance(info["action_error"], str)
    finally:
        first.close()
        second.close()
