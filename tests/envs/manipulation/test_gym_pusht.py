"""LeRobot's gym-pusht under omnigym's conventions: spaces, scaling, coverage, geometry, the expert."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from omnigym.core.registry import POLICIES
from omnigym.envs.manipulation import tblock
from omnigym.envs.manipulation.gym_pusht import (
    EXPERT_STATE,
    GymPushTEnv,
    action_to_reach,
    planner_state,
)
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.vec_env import make_env

pytest.importorskip("gym_pusht", reason="gym-pusht (the pusht extra; scripts/setup.sh installs it)")


def pose_and_goal(expert_state: np.ndarray) -> tuple[tblock.Pose, tblock.Pose]:
    state = planner_state(expert_state)
    pose = (state[4], state[5], math.atan2(state[7], state[6]))
    goal = (state[11], state[12], math.atan2(state[14], state[13]))
    return pose, goal


def test_state_and_pixel_spaces() -> None:
    env = make_env("omnigym/GymPushT-v0")
    obs, info = env.reset(seed=0)
    assert obs["state"].shape == (5,) and obs["state"].dtype == np.float32
    assert info["is_success"] is False and 0 <= info["coverage"] <= 1 and info["max_coverage"] == 0.0
    pixels = make_env("omnigym/GymPushTPixels-v0")
    obs, _ = pixels.reset(seed=0)
    assert obs["image"].shape == (96, 96, 3) and obs["image"].dtype == np.uint8
    assert obs["state"].shape == (2,)  # the agent's position only, as LeRobot's pixels_agent_pos
    assert env.spec.max_episode_steps == pixels.spec.max_episode_steps == 300  # type: ignore[union-attr]


def test_keypoints_are_the_ts_corners_and_the_agent() -> None:
    """``keypoints``: 8 corners of the T where the block is, then the agent (the 5-value state's)."""
    keypoints = make_env("omnigym/GymPushTKeypoints-v0", privileged=[EXPERT_STATE])
    state = make_env("omnigym/GymPushT-v0")
    rng = np.random.default_rng(0)
    obs, _ = keypoints.reset(seed=3)
    reference, _ = state.reset(seed=3)
    for _ in range(20):
        corners = obs["state"][:16].reshape(8, 2).astype(np.float64)
        np.testing.assert_allclose(obs["state"][16:], reference["state"][:2])
        block_x, block_y, angle = obs[EXPERT_STATE][4:7]
        # the bar's outer edge (corners 0, 1) is 120 px wide; the stem (corners 4 to 7) 30 by 90
        assert np.linalg.norm(corners[0] - corners[1]) == pytest.approx(120, abs=1e-3)
        assert np.linalg.norm(corners[4] - corners[5]) == pytest.approx(30, abs=1e-3)
        assert np.linalg.norm(corners[5] - corners[6]) == pytest.approx(90, abs=1e-3)
        # both rectangles turn with the block about its frame's origin
        bar_centre = corners[:4].mean(axis=0) - (block_x, block_y)
        np.testing.assert_allclose(bar_centre, [-15 * math.sin(angle), 15 * math.cos(angle)], atol=1e-2)
        action = rng.uniform(-0.5, 0.5, 2).astype(np.float32)
        obs, *_ = keypoints.step(action)
        reference, *_ = state.step(action)
    assert keypoints.observation_space["state"].shape == (18,)


def test_action_scales_to_the_agent_target_and_bad_actions_are_refused() -> None:
    env = GymPushTEnv(privileged=[EXPERT_STATE])
    env.reset(seed=3)
    inner = env._env
    env.step(np.array([0.5, -0.25]))
    np.testing.assert_allclose(inner._last_action, [384.0, 192.0])  # 256 + 256 a
    env.step(np.array([3.0, -9.0]))
    np.testing.assert_allclose(inner._last_action, [512.0, 0.0])  # clipped to [-1, 1] first
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="privileged"):
        GymPushTEnv(privileged=["block_pose"])
    with pytest.raises(ValueError, match="obs_type"):
        GymPushTEnv(obs_type="environment_state")


def test_max_coverage_is_the_running_maximum_of_the_steps_coverage() -> None:
    env = GymPushTEnv(privileged=[EXPERT_STATE])
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    seen = []
    for _ in range(40):
        _, reward, _, _, info = env.step(rng.uniform(-1, 1, 2))
        seen.append(info["coverage"])
        assert info["max_coverage"] == max(seen)
        assert reward == pytest.approx(min(info["coverage"] / 0.95, 1.0))  # gym-pusht's reward


def test_planner_frame_gives_gym_pushts_own_coverage() -> None:
    """The conversion to the MuJoCo port's frame is exact: tblock's coverage equals gym-pusht's."""
    env = GymPushTEnv(privileged=[EXPERT_STATE])
    rng = np.random.default_rng(1)
    checked = 0
    for seed in range(12):
        # starts near the goal too, so that the overlaps are not all zero
        start = [100.0, 100.0, *rng.uniform(200, 300, 2), rng.uniform(-math.pi, math.pi)]
        obs, _ = env.reset(seed=seed, options={"reset_to_state": start} if seed % 2 else None)
        for _ in range(3):
            obs, _, _, _, info = env.step(rng.uniform(-1, 1, 2))
        pose, goal = pose_and_goal(obs[EXPERT_STATE])
        assert tblock.coverage(pose, goal) == pytest.approx(info["coverage"], abs=1e-5)
        checked += info["coverage"] > 0
    assert checked >= 3


def test_action_to_reach_puts_the_agent_on_the_target_in_one_step() -> None:
    env = GymPushTEnv(privileged=[EXPERT_STATE])
    obs, _ = env.reset(seed=5)
    for offset in ([20.0, -15.0], [-10.0, 25.0], [5.0, 5.0]):  # moving, so with velocity after the first
        state = obs[EXPERT_STATE]
        target = state[0:2] + np.array(offset)
        action = action_to_reach(target, state[0:2], state[2:4])
        assert np.abs(action).max() < 1  # not clipped: the command is exact
        obs, *_ = env.step(action)
        np.testing.assert_allclose(obs[EXPERT_STATE][0:2], target, atol=1e-3)


@pytest.mark.parametrize(
    "env_id", ["omnigym/GymPushT-v0", "omnigym/GymPushTPixels-v0", "omnigym/GymPushTKeypoints-v0"]
)
def test_expert_solves_gym_pusht(env_id: str) -> None:
    cls = POLICIES.get("gym_pusht_expert")
    env = make_env(env_id, privileged=[EXPERT_STATE])
    expert = cls(cls.config_class(), env.observation_space, env.action_space)
    episodes = 40 if env_id.endswith("T-v0") else 8  # the state env's dynamics, fewer episodes
    summary = evaluate_policy(
        expert, env_id, episodes=episodes, seed=0, num_envs=4, env_kwargs={"privileged": [EXPERT_STATE]}
    ).summary()
    assert summary["success_rate"] >= 0.95, summary  # 100 % over seeds 0-99 (docs)
    assert summary["max_coverage_mean"] >= 0.95 and summary["length_mean"] < 150, summary


def test_expert_without_its_privileged_key_says_how_to_make_the_env() -> None:
    cls = POLICIES.get("gym_pusht_expert")
    env = make_env("omnigym/GymPushT-v0")
    with pytest.raises(ValueError, match=r"privileged=\['expert_state'\]"):
        cls(cls.config_class(), env.observation_space, env.action_space)


def test_missing_gym_pusht_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gym_pusht.envs.pusht", None)  # import fails
    with pytest.raises(ImportError, match="--no-deps gym-pusht"):
        GymPushTEnv()
