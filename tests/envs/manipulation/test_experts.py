"""The scripted manipulation experts: success over 50 seeded episodes, noise, spaces, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy
from omnigym.core.registry import POLICIES
from omnigym.core.types import OBS_STATE
from omnigym.platform.cli import main
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.vec_env import make_env

EPISODES = 50
# (policy, env id, the success rate it must reach over EPISODES seeded episodes)
EXPERTS = [
    ("pusht_expert", "omnigym/PushT-v0", 0.8),
    ("reach_expert", "omnigym/Reach-v0", 0.9),
    ("pushcube_expert", "omnigym/PushCube-v0", 0.9),
    ("pickplace_expert", "omnigym/PickPlace-v0", 0.9),
    ("pushcube_two_stage_expert", "omnigym/PushCubeTwoStage-v0", 0.9),
]


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd


def build(name: str, env_id: str, **config) -> Policy:
    env = make_env(env_id)
    cls = POLICIES.get(name)
    policy = cls(cls.config_class(**config), env.observation_space, env.action_space)
    env.close()
    return policy


@pytest.mark.parametrize(("name", "env_id", "threshold"), EXPERTS, ids=[e[0] for e in EXPERTS])
def test_expert_success_rate(name: str, env_id: str, threshold: float) -> None:
    result = evaluate_policy(build(name, env_id), env_id, episodes=EPISODES, seed=0, num_envs=8)
    summary = result.summary()
    assert summary["episodes"] == EPISODES
    assert summary["success_rate"] >= threshold, summary
    limit = make_env(env_id).spec.max_episode_steps  # type: ignore[union-attr]
    assert summary["length_mean"] < limit, "successful episodes end before the time limit"


def test_batched_evaluation_matches_one_at_a_time() -> None:
    """The PushT expert keeps a planner per batch row; rows must not leak into each other."""
    policy = build("pusht_expert", "omnigym/PushT-v0")
    batched = evaluate_policy(policy, "omnigym/PushT-v0", episodes=6, seed=20, num_envs=3)
    single = evaluate_policy(policy, "omnigym/PushT-v0", episodes=6, seed=20, num_envs=1)
    assert batched.lengths == single.lengths
    np.testing.assert_allclose(batched.returns, single.returns)


@pytest.mark.parametrize(("name", "env_id"), [(e[0], e[1]) for e in EXPERTS], ids=[e[0] for e in EXPERTS])
def test_noise_only_when_stochastic(name: str, env_id: str) -> None:
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    batch = {OBS_STATE: torch.as_tensor(np.repeat(obs[OBS_STATE][None], 16, axis=0))}
    policy = build(name, env_id)
    clean = policy.act(batch, deterministic=True).action
    torch.manual_seed(0)
    noisy = policy.act(batch, deterministic=False).action
    assert torch.equal(clean, policy.act(batch, deterministic=True).action)
    assert clean.shape == (16, *env.action_space.shape) and torch.all(clean == clean[0])
    assert not torch.equal(noisy, clean) and noisy.abs().max() <= 1.0
    spread = (noisy - clean).std().item()
    assert 0.3 * policy.config.noise_std < spread < 2 * policy.config.noise_std
    quiet = build(name, env_id, noise_std=0.0)
    assert torch.equal(quiet.act(batch, deterministic=False).action, clean)
    with pytest.raises(ValueError, match="noise_std"):
        build(name, env_id, noise_std=-1.0)


def test_experts_noisy_demonstrations_still_succeed() -> None:
    torch.manual_seed(0)
    policy = build("pickplace_expert", "omnigym/PickPlace-v0")
    result = evaluate_policy(policy, "omnigym/PickPlace-v0", episodes=20, seed=100, deterministic=False)
    assert result.summary()["success_rate"] >= 0.8


@pytest.mark.parametrize(("name", "env_id"), [(e[0], e[1]) for e in EXPERTS], ids=[e[0] for e in EXPERTS])
def test_expert_rejects_other_spaces(name: str, env_id: str) -> None:
    cls = POLICIES.get(name)
    env = make_env(env_id)
    state_only = spaces.Dict({OBS_STATE: spaces.Box(-1, 1, (3,), np.float32)})
    with pytest.raises(ValueError, match="state"):
        cls(cls.config_class(), state_only, env.action_space)
    with pytest.raises(ValueError, match="Box"):
        cls(cls.config_class(), env.observation_space, spaces.Box(-1, 1, (7,), np.float32))


def test_expert_drives_the_pixel_variant() -> None:
    policy = build("pushcube_expert", "omnigym/PushCube-v0")
    result = evaluate_policy(policy, "omnigym/PushCubePixels-v0", episodes=3, seed=0)
    assert result.summary()["success_rate"] == 1.0


def test_cli_eval_reports_success_rate(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["eval", "--policy", "pusht_expert", "--env", "omnigym/PushT-v0", "--episodes", "4", "--json"]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and summary["success_rate"] == 1.0
    assert 0.95 <= summary["coverage_mean"] <= 1.0
