"""Other packages' envs under omnigym's conventions: Fetch (with its joint-helper fix), Meta-World,
Gymnasium's MuJoCo suite with image and text keys, and the errors for bad input."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import cache

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from omnigym.core.text_obs import decode_texts
from omnigym.envs.manipulation import adapters
from omnigym.envs.manipulation.adapters import ObservationAdapter, Provider
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.vec_env import EnvConfig, make_env, make_vec_env, set_headless_rendering
from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig

# Checked without importing mujoco: importing it here, at collection, would fix its OpenGL backend
# before make_env chooses a headless one.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mujoco") is None,
    reason="the adapted envs are MuJoCo envs: pip install 'omnigym[mujoco]'",
)
needs_robotics = pytest.mark.skipif(
    importlib.util.find_spec("gymnasium_robotics") is None,
    reason="Gymnasium-Robotics is not installed: pip install 'omnigym[robotics]'",
)
needs_metaworld = pytest.mark.skipif(
    importlib.util.find_spec("metaworld") is None,
    reason="Meta-World is not installed (docs/envs/manipulation-adapters.md: it pins MuJoCo 3.3)",
)


@cache
def offscreen_gl() -> bool:
    """Whether MuJoCo can make an offscreen OpenGL context here (EGL or OSMesa), probed in a fresh
    interpreter because the backend is fixed at ``import mujoco``."""
    code = "import mujoco; ctx = mujoco.GLContext(8, 8); ctx.make_current(); ctx.free()"
    for backend in ("egl", "osmesa"):
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", backend)}
        try:
            if (
                subprocess.run(
                    [sys.executable, "-c", code], env=env, capture_output=True, timeout=60
                ).returncode
                == 0
            ):
                return True
        except subprocess.TimeoutExpired:
            pass
    return False


def needs_gl() -> None:
    if not offscreen_gl():
        pytest.skip("no offscreen OpenGL (EGL or OSMesa) for MuJoCo rendering here")


@pytest.fixture(autouse=True)
def _tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd


# --- Fetch (Gymnasium-Robotics) ---------------------------------------------------------------
@needs_robotics
def test_fetch_push_steps_with_state_obs_and_success():
    env = make_env("FetchPush-v4")
    try:
        assert isinstance(env.unwrapped.spec, gym.envs.registration.EnvSpec)
        obs, _ = env.reset(seed=0)
        assert set(obs) == {"state", "achieved_goal", "desired_goal"}
        assert obs["state"].dtype == np.float32 and obs["state"].shape == (28,)  # 25 + desired goal (3)
        np.testing.assert_array_equal(obs["state"][-3:], obs["desired_goal"])
        env.action_space.seed(0)
        for _ in range(20):
            obs, reward, _, _, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
            assert all(np.isfinite(value).all() for value in obs.values())
            assert info["is_success"] in (0.0, 1.0)
            assert np.isfinite(reward)
    finally:
        env.close()


@needs_robotics
def test_fetch_reach_controller_succeeds_through_patched_helpers():
    """A proportional controller on (desired - achieved goal) reaches the target: the patched
    joint helpers set the arm up right, not merely without the AssertionError."""
    env = make_env("FetchReach-v4")
    try:
        obs, _ = env.reset(seed=3)
        start_error = np.linalg.norm(obs["desired_goal"] - obs["achieved_goal"])
        for _ in range(50):
            delta = np.clip(10 * (obs["desired_goal"] - obs["achieved_goal"]), -1, 1)
            obs, _, _, truncated, info = env.step(np.append(delta, 0.0).astype(np.float32))
            if info["is_success"] or truncated:
                break
        assert start_error > 0.05
        assert info["is_success"] == 1.0
    finally:
        env.close()


@needs_robotics
def test_fetch_joint_helpers_are_replaced_only_where_broken():
    from gymnasium_robotics.utils import mujoco_utils

    from omnigym.envs.manipulation import fetch

    make_env("FetchReach-v4").close()
    assert (mujoco_utils.set_joint_qpos is fetch.set_joint_qpos) == fetch.joint_helpers_broken()


def test_joint_helpers_use_each_joint_types_width():
    """Free 7/6, ball 4/3, slide and hinge 1/1 values of qpos/qvel (upstream reads 4 for a ball's
    qvel)."""
    set_headless_rendering()  # before mujoco's first import fixes its OpenGL backend
    import mujoco

    from omnigym.envs.manipulation import fetch

    model = mujoco.MjModel.from_xml_string(
        """<mujoco><worldbody>
        <body name="free"><joint name="free" type="free"/><geom size=".1"/></body>
        <body name="ball" pos="1 0 0"><joint name="ball" type="ball"/><geom size=".1"/>
          <body name="slide"><joint name="slide" type="slide"/><geom size=".1"/>
            <body name="hinge"><joint name="hinge" type="hinge"/><geom size=".1"/></body></body></body>
        </worldbody></mujoco>"""
    )
    data = mujoco.MjData(model)
    data.qpos[:] = np.arange(model.nq)
    data.qvel[:] = np.arange(model.nv) + 100
    # (name, qpos start, qpos width, qvel start, qvel width)
    layout = [("free", 0, 7, 0, 6), ("ball", 7, 4, 6, 3), ("slide", 11, 1, 9, 1), ("hinge", 12, 1, 10, 1)]
    for name, qpos, qpos_width, qvel, qvel_width in layout:
        np.testing.assert_array_equal(
            fetch.get_joint_qpos(model, data, name), data.qpos[qpos : qpos + qpos_width]
        )
        np.testing.assert_array_equal(
            fetch.get_joint_qvel(model, data, name), data.qvel[qvel : qvel + qvel_width]
        )
    fetch.set_joint_qpos(model, data, "ball", [1.0, 0.0, 0.0, 0.0])
    fetch.set_joint_qvel(model, data, "hinge", 5.0)
    np.testing.assert_array_equal(data.qpos[7:11], [1, 0, 0, 0])
    assert data.qvel[10] == 5.0
    with pytest.raises(ValueError, match="takes 4 values"):
        fetch.set_joint_qpos(model, data, "ball", [1.0, 0.0])
    with pytest.raises(ValueError, match="not part of the model"):
        fetch.get_joint_qpos(model, data, "elbow")


@needs_robotics
def test_fetch_collects_with_success_metric_and_text():
    envs = make_vec_env(EnvConfig(id="FetchPush-v4", num_envs=2, kwargs={"obs_keys": ["state", "text"]}))
    try:
        obs, _ = envs.reset(seed=0)
        assert list(obs["text"]) == ["push the block to the red target"] * 2
        policy = RandomPolicy(RandomPolicyConfig(), envs.single_observation_space, envs.single_action_space)
        collector = RolloutCollector(envs, policy, num_steps=50)  # Fetch episodes are 50 steps
        collector.reset(seed=0)
        rollout, stats = collector.collect()
    finally:
        envs.close()
    assert rollout.obs["state"].shape == (50, 2, 28)
    # text is stored as fixed-width UTF-8 rows (core/text_obs.py) and decodes to the instruction
    assert decode_texts(rollout.obs["text"][0]) == ["push the block to the red target"] * 2
    assert len(stats) == 2  # one 50-step episode per env
    assert len(stats.metrics["is_success"]) == 2 and set(stats.metrics["is_success"]) <= {0.0, 1.0}
    assert int(rollout.truncated.sum()) == 2 and len(rollout.final_index) == 2


@needs_robotics
def test_fetch_image_observation():
    needs_gl()
    env = make_env("FetchReach-v4", obs_keys=["state", "image", "text"], image_size=[48, 64])
    try:
        obs, _ = env.reset(seed=0)
        assert obs["image"].shape == (48, 64, 3) and obs["image"].dtype == np.uint8
        assert obs["image"].std() > 0
        assert obs["text"] == "move the gripper to the red target"
        assert env.observation_space.contains(obs)
    finally:
        env.close()


# --- Gymnasium's MuJoCo suite -----------------------------------------------------------------
def test_gymnasium_mujoco_env_with_image_and_text_keys():
    needs_gl()
    env = make_env(
        "HalfCheetah-v5", obs_keys=["state", "image", "text"], image_size=32, instruction="run forward"
    )
    try:
        check_env(env, skip_render_check=True, skip_close_check=True)
        obs, _ = env.reset(seed=0)
        assert obs["state"].shape == (17,) and obs["image"].shape == (32, 32, 3)
        assert obs["text"] == "run forward"
        assert isinstance(env.observation_space["text"], spaces.Text)
        assert env.unwrapped.width == 32  # rendered at the asked size, not resized
        again = gym.make(env.spec)  # the adapter is part of the spec
        assert again.observation_space == env.observation_space
        again.close()
    finally:
        env.close()


def test_plain_box_env_is_not_adapted_without_options():
    env = make_env("HalfCheetah-v5")
    assert not isinstance(env, ObservationAdapter)
    assert set(env.observation_space.spaces) == {"state"}
    env.close()


def test_non_mujoco_env_frame_is_resized():
    pytest.importorskip(
        "pygame", reason="classic-control rendering needs pygame: pip install 'omnigym[classic]'"
    )
    env = make_env("CartPole-v1", obs_keys=["image"], image_size=[30, 40])
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (30, 40, 3) and obs["image"].std() > 0
    env.close()


# --- Meta-World -------------------------------------------------------------------------------
@needs_metaworld
def test_metaworld_reach_is_adapted_deterministic_and_solvable():
    from metaworld.policies import SawyerReachV3Policy

    env = make_env("Meta-World/MT1", env_name="reach-v3", obs_keys=["state", "text"])
    other = make_env("Meta-World/MT1", env_name="reach-v3", obs_keys=["state", "text"])
    try:
        check_env(env, skip_render_check=True, skip_close_check=True)
        obs, _ = env.reset(seed=0)
        assert obs["text"] == "reach"
        assert obs["state"].dtype == np.float32 and obs["state"].shape == (39,)
        # seeded resets do not depend on the env's history (Meta-World's reset ignores its seed)
        env.step(env.action_space.sample())
        np.testing.assert_array_equal(env.reset(seed=4)[0]["state"], other.reset(seed=4)[0]["state"])
        expert = SawyerReachV3Policy()
        obs, _ = env.reset(seed=0)
        for _ in range(150):
            obs, _, _, _, info = env.step(np.clip(expert.get_action(obs["state"]), -1, 1).astype(np.float32))
            if info["is_success"]:
                break
        assert info["is_success"] == 1.0 and info["success"] == 1.0
        assert env.observation_space.contains(obs)
    finally:
        env.close()
        other.close()


# --- bad input --------------------------------------------------------------------------------
def test_unknown_env_id_is_one_clear_error():
    with pytest.raises(ValueError, match=r"unknown env id 'NoSuchEnv-v0'.*omnigym list --all-envs"):
        make_env("NoSuchEnv-v0")


def test_missing_package_names_the_extra(monkeypatch):
    missing = Provider("Nowhere", "omnigym_no_such_package", "nowhere", ("Nowhere",), lambda: True)
    monkeypatch.setattr(adapters, "PROVIDERS", (missing,))
    with pytest.raises(ImportError, match=r"pip install 'omnigym\[nowhere\]'"):
        make_env("NowherePush-v0")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"obs_keys": ["state", "pixels"]}, "not among the well-known keys"),
        ({"obs_keys": ["state", "text"]}, "no default instruction"),
        ({"obs_keys": ["text"], "instruction": "run fast \u2192"}, "characters"),
        ({"obs_keys": ["image"], "image_size": [0, 3]}, "image_size"),
        ({"obs_keys": ["image"], "render_mode": "human"}, "rgb_array"),
    ],
)
def test_bad_adapter_options_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_env("HalfCheetah-v5", **kwargs)


def test_adapter_options_need_single_env_vectorization():
    config = EnvConfig(
        id="HalfCheetah-v5", num_envs=2, vectorization="vector", kwargs={"obs_keys": ["state"]}
    )
    with pytest.raises(ValueError, match="sync or async"):
        make_vec_env(config)


def test_omnigym_envs_keep_their_own_obs_keys():
    make_kwargs, options = adapters.split_adapter_kwargs("omnigym/Anything-v0", {"obs_keys": ["image"]})
    assert options is None and make_kwargs == {"obs_keys": ["image"]}
