"""``aloha_transfer_expert`` and ``aloha_insertion_expert``: ACT's scripted ALOHA tasks, by IK."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

pytest.importorskip("gym_aloha", reason="gym-aloha not installed (docs/envs/peer-adapters.md)")
pytest.importorskip("dm_control", reason="dm_control not installed (docs/envs/peer-adapters.md)")

from omnigym.core.registry import POLICIES
from omnigym.envs.ext.aloha import AlohaEnv
from omnigym.envs.ext.aloha_expert import (
    PICK,
    AlohaInsertionExpert,
    AlohaInsertionExpertConfig,
    AlohaTransferCubeExpert,
    AlohaTransferExpertConfig,
    ArmIK,
)
from omnigym.platform.evaluate import evaluate_policy

ENV_ID = "omnigym/ext-aloha-TransferCube-v0"
INSERTION_ID = "omnigym/ext-aloha-Insertion-v0"


def expert_for(env: AlohaEnv) -> AlohaTransferCubeExpert:
    """The expert with its default config, on ``env``'s spaces."""
    assert isinstance(env.observation_space, spaces.Dict)
    return AlohaTransferCubeExpert(AlohaTransferExpertConfig(), env.observation_space, env.action_space)


def test_ik_reaches_the_pick_pose() -> None:
    """From the start pose, the solve puts the right end effector 5 cm above a cube, pitched down."""
    ik = ArmIK()
    start = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])
    target = np.array([0.1, 0.5, 0.1])
    q = start
    for _ in range(5):  # as the expert does: each step's solve starts from the last one
        q = ik.solve("right", target, PICK, q)
    xyz, quat = ik.pose("right", q)
    np.testing.assert_allclose(xyz, target, atol=1e-3)
    assert abs(abs(float(np.dot(quat, PICK))) - 1.0) < 1e-5


def test_registered_expert_solves_two_seeds() -> None:
    """By name through ``evaluate_policy``, as ``omnigym eval`` runs it: seeds 0 and 1 succeed."""
    assert POLICIES.get("aloha_transfer_expert") is AlohaTransferCubeExpert
    env = AlohaEnv("transfer_cube")
    try:
        expert = expert_for(env)
    finally:
        env.close()
    summary = evaluate_policy(expert, ENV_ID, episodes=2, seed=0, num_envs=2).summary()
    assert summary["success_rate"] == 1.0, summary
    assert summary["length_mean"] < 250, summary  # measured: 214 steps (success at step 213)


def test_left_gripper_ends_holding_the_cube_alone() -> None:
    """Run on past success to step 400: the right gripper has let go and the left holds the cube
    up in the air, moved 10 cm to the left of the meeting point (the whole hand-over, not only the
    reward's first left touch)."""
    env = AlohaEnv("transfer_cube")
    try:
        expert = expert_for(env)
        obs, _ = env.reset(seed=3)
        stages = []
        for _ in range(400):
            state = torch.from_numpy(obs["state"][None])
            action = expert.act({"state": state}, deterministic=True).action[0].numpy()
            obs, _, _, truncated, info = env.step(action)
            assert not truncated, info
            stages.append(info["stage"])
        cube = obs["state"][28:31]
        assert max(stages) == 4 and stages[-1] == 4, stages[-50:]
        assert cube[2] > 0.15 and cube[0] < -0.05, cube  # measured (-0.093, 0.500, 0.227)
        assert obs["state"][13] > 0.8  # the right gripper open
    finally:
        env.close()


@pytest.mark.slow
def test_success_rate_over_twenty_seeds() -> None:
    """``omnigym eval --episodes 20``'s measurement: 20/20 (100/100 on seeds 0-99)."""
    env = AlohaEnv("transfer_cube")
    try:
        expert = expert_for(env)
    finally:
        env.close()
    summary = evaluate_policy(expert, ENV_ID, episodes=20, seed=0, num_envs=4).summary()
    assert summary["success_rate"] >= 0.95, summary


def insertion_expert() -> AlohaInsertionExpert:
    """The insertion expert with its default config, on the Insertion env's spaces."""
    env = AlohaEnv("insertion")
    try:
        assert isinstance(env.observation_space, spaces.Dict)
        return AlohaInsertionExpert(AlohaInsertionExpertConfig(), env.observation_space, env.action_space)
    finally:
        env.close()


def test_registered_insertion_expert_inserts_the_peg() -> None:
    """By name through ``evaluate_policy``: seed 0 reaches stage 4 (the peg touches the pin)."""
    assert POLICIES.get("aloha_insertion_expert") is AlohaInsertionExpert
    summary = evaluate_policy(insertion_expert(), INSERTION_ID, episodes=1, seed=0).summary()
    assert summary["success_rate"] == 1.0, summary
    assert summary["length_mean"] < 360, summary  # measured: 334 steps (pin touched at step 333)


@pytest.mark.slow
def test_insertion_success_rate_over_twenty_seeds() -> None:
    """``omnigym eval --episodes 20``'s measurement: 20/20 (100/100 on seeds 0-99)."""
    summary = evaluate_policy(insertion_expert(), INSERTION_ID, episodes=20, seed=0, num_envs=4).summary()
    assert summary["success_rate"] >= 0.95, summary
