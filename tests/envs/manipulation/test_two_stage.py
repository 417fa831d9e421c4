"""PushCubeTwoStage: the marker then the target, a stage the state does not show, its reward by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omnigym.core.registry import POLICIES
from omnigym.envs.manipulation import cube
from omnigym.envs.manipulation.rendering import mujoco
from omnigym.envs.manipulation.two_stage import WAYPOINT, PushCubeTwoStageEnv


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd


def place(env: PushCubeTwoStageEnv, xy: tuple[float, float]) -> tuple[bool, float, dict]:
    """Put the cube at rest at ``xy`` and score the state (what a step ending there reports)."""
    env.data.qpos[5:12] = (*xy, cube.CUBE_HALF, 1.0, 0.0, 0.0, 0.0)
    env.data.qvel[:] = 0.0
    mujoco.mj_forward(env.model, env.data)
    return env._score(env._state())


def test_the_target_counts_only_after_the_marker() -> None:
    env = PushCubeTwoStageEnv()
    env.reset(seed=3)
    goal, marker = env.goal[:2].copy(), env.waypoint[:2].copy()
    assert np.linalg.norm(goal - marker) >= env.config.min_waypoint_distance
    success, _, info = place(env, tuple(goal))
    assert not success and not info["waypoint_reached"]  # at the target first: not yet
    state_before = env._state()
    success, _, info = place(env, tuple(marker + 0.035))  # 4.9 cm off diagonally: not there
    assert not info["waypoint_reached"]
    success, _, info = place(env, (marker[0] + 0.03, marker[1]))  # 3 cm off: reached
    assert info["waypoint_reached"] and not success
    success, _, info = place(env, tuple(goal))
    assert success and info["waypoint_reached"]
    # the same scene before and after the marker: the observation cannot tell them apart
    np.testing.assert_array_equal(env._state(), state_before)
    env.reset(seed=3)
    assert not env.waypoint_reached


def test_dense_reward_is_the_remaining_path_and_the_reach_term() -> None:
    env = PushCubeTwoStageEnv()
    env.reset(seed=5)
    tcp = env.data.qpos[0:3].copy()
    box = np.array([0.0, 0.0, cube.CUBE_HALF])
    _, reward, _ = place(env, (0.0, 0.0))
    to_marker = np.linalg.norm(box - env.waypoint)
    leg = np.linalg.norm(env.waypoint - env.goal)
    expected = -(to_marker + leg) - cube.REACH_WEIGHT * np.linalg.norm(tcp - box)
    assert to_marker > env.config.success_distance and reward == pytest.approx(expected)
    place(env, tuple(env.waypoint[:2]))
    _, reward, _ = place(env, (0.0, 0.0))  # back at the origin, the marker done: the last leg only
    expected = -np.linalg.norm(box - env.goal) - cube.REACH_WEIGHT * np.linalg.norm(tcp - box)
    assert reward == pytest.approx(expected)


def test_state_holds_the_marker_and_the_step_info_reports_the_stage() -> None:
    env = PushCubeTwoStageEnv(obs_keys=("state", "text"), reward_type="sparse")
    obs, info = env.reset(seed=0)
    np.testing.assert_allclose(obs["state"][WAYPOINT], env.waypoint, atol=1e-7)
    assert obs["state"].shape == (cube.STATE_DIM + 3,) and obs["text"] == env.instruction
    assert info["waypoint_reached"] is False and info["waypoint_distance"] > env.config.success_distance
    _, reward, _, _, info = env.step(np.zeros(4, np.float32))
    assert reward == 0.0 and set(info) >= {"distance", "waypoint_distance", "waypoint_reached", "is_success"}
    assert "Blue marker" in env.scene_text()


def test_bad_options_fail_with_one_clear_error() -> None:
    with pytest.raises(ValueError, match="min_waypoint_distance"):
        PushCubeTwoStageEnv(min_waypoint_distance=0.01)
    with pytest.raises(ValueError, match="waypoint_xy_range"):
        PushCubeTwoStageEnv(waypoint_xy_range=0.5)


def test_expert_remembers_the_marker_per_row_and_forgets_at_reset() -> None:
    env = PushCubeTwoStageEnv()
    env.reset(seed=2)
    cls = POLICIES.get("pushcube_two_stage_expert")
    expert = cls(cls.config_class(), env.observation_space, env.action_space)
    far = env._state()
    place(env, tuple(env.waypoint[:2]))
    at_marker = env._state()
    states = torch.as_tensor(np.stack([far, at_marker]))
    expert.act({"state": states}, deterministic=True)
    again = expert.act({"state": torch.as_tensor(np.stack([far, far]))}, deterministic=True).action
    # row 1 has been at the marker: from the far state it now heads for the target, row 0 not
    assert not torch.allclose(again[0], again[1])
    expert.reset(torch.tensor([False, True]))
    both = expert.act({"state": torch.as_tensor(np.stack([far, far]))}, deterministic=True).action
    torch.testing.assert_close(both[0], both[1])
