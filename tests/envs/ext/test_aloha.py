"""gym-aloha under omnigym's conventions (MuJoCo 4 with dm_control's size table patched)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gym_aloha", reason="gym-aloha not installed (docs/envs/peer-adapters.md)")
pytest.importorskip("dm_control", reason="dm_control not installed (docs/envs/peer-adapters.md)")

from omnigym.envs.ext.aloha import AlohaEnv, patch_dm_control_sizes
from omnigym.platform.vec_env import make_env


def test_patch_is_idempotent() -> None:
    patch_dm_control_sizes()
    assert patch_dm_control_sizes() == []


@pytest.mark.parametrize(("env_id", "state_dim"), [("TransferCube", 35), ("Insertion", 42)])
def test_state_ids(env_id: str, state_dim: int) -> None:
    env = make_env(f"omnigym/ext-aloha-{env_id}-v0")
    try:
        obs, info = env.reset(seed=0)
        assert set(obs) == {"state"} and obs["state"].shape == (state_dim,)
        assert obs["state"].dtype == np.float32 and info["is_success"] is False
        assert env.action_space.shape == (14,)
        start = obs["state"][:14]
        assert env.action_space.contains(start.astype(np.float32))  # gym-aloha's start pose is inside
        obs, reward, terminated, _truncated, info = env.step(start)
        assert reward == info["stage"] and not terminated
    finally:
        env.close()


def test_seeded_cube_pose_and_holding_still() -> None:
    """The cube's start is gym-aloha's ``sample_box_pose(seed)``; holding the start pose 50 steps
    keeps the arms within 20 mrad and the cube on the table (stage 0, no success)."""
    env = AlohaEnv("transfer_cube")
    try:
        first = env.reset(seed=1)[0]["state"]
        again = env.reset(seed=1)[0]["state"]
        np.testing.assert_array_equal(first, again)
        assert not np.array_equal(first, env.reset(seed=2)[0]["state"])
        obs, _ = env.reset(seed=1)
        hold = obs["state"][:14].copy()
        for _ in range(50):
            obs, reward, _terminated, _, info = env.step(hold)
        assert np.abs(obs["state"][:6] - hold[:6]).max() < 0.02  # measured 8.7 mrad (gravity sag)
        assert reward == 0.0 and not info["is_success"]
        np.testing.assert_allclose(obs["state"][28:30], first[28:30], atol=1e-3)  # cube x, y unmoved
    finally:
        env.close()


@pytest.mark.slow
def test_pixels_twin_renders_top_camera() -> None:
    env = make_env("omnigym/ext-aloha-TransferCubePixels-v0")
    try:
        obs, _ = env.reset(seed=0)
        assert obs["image"].shape == (240, 320, 3) and obs["image"].dtype == np.uint8
        assert obs["image"].std() > 5
    finally:
        env.close()
