"""Smoke test of ``bench/pushcube_rl_finetune.py``'s quick path (slow: run with -m slow)."""

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from omnigym.platform.cli import BENCH_DIR


def test_pushcube_rl_finetune_is_listed():
    from omnigym.platform.cli import list_benchmarks

    assert "pushcube_rl_finetune" in list_benchmarks()


@pytest.mark.slow
def test_quick_pushcube_rl_finetune_reports_before_and_after():
    out = subprocess.run(
        [sys.executable, str(BENCH_DIR / "pushcube_rl_finetune.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "pushcube_rl_finetune" and figures["quick"]
    assert figures["ratio"] > 0 and len(figures["seeds"]) == 1
    row = figures["seeds"][0]
    for phase in ("before", "after"):
        for mode in ("deterministic", "sampled"):
            assert 0.0 <= row[phase][mode]["success"] <= 1.0
    assert row["updates"] == figures["rl_updates"] and row["env_steps"] > 0
    assert figures["expert_success"] > 0.9 and figures["random_success"] < 0.1


@pytest.fixture(scope="module")
def bench(bench_module):
    return bench_module("pushcube_rl_finetune")


def test_progress_shaping_telescopes_to_the_distance_gained_within_each_episode(bench):
    """Potential-based shaping: an episode's return grows by c (d_first - d_last) over its valid steps."""
    T, N = 4, 2
    state = torch.zeros(T, N, 23)
    state[..., 7:10] = torch.tensor([0.1, 0.0, 0.02])  # the goal
    cube_x = torch.tensor([[0.4, 0.4], [0.3, 0.5], [0.2, 0.45], [0.9, 0.9]])  # row 3: after episode 0 ended
    state[..., 10] = cube_x
    state[..., 12] = 0.02
    valid = torch.tensor([[True, True], [True, True], [True, True], [False, True]])
    rewards = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    rollout = SimpleNamespace(obs={"state": state}, valid=valid, rewards=rewards.clone())
    bench.add_progress_shaping(rollout, 5.0)
    returns = (rollout.rewards * valid).sum(0)
    distance = (cube_x - 0.1).abs()
    expected_0 = 1.0 + 5.0 * (distance[0, 0] - distance[2, 0])  # success, cube 20 cm closer
    expected_1 = 5.0 * (distance[0, 1] - distance[3, 1])  # failure, cube pushed 50 cm away
    torch.testing.assert_close(returns, torch.stack([expected_0, expected_1]))
    assert float(rollout.rewards[2, 0]) == 1.0 and float(rollout.rewards[3, 0]) == 0.0


def test_continuing_shaping_skips_episode_ends_and_uses_next_obs_after_the_last_step(bench):
    """Auto-reset rollouts: step t gains c (d_t - d_{t+1}) unless it ended an episode; the last step
    reads ``next_obs``."""
    T, N = 3, 1
    state = torch.zeros(T, N, 23)
    state[..., 7:10] = torch.tensor([0.0, 0.0, 0.02])  # the goal at the origin
    state[:, 0, 10] = torch.tensor([0.4, 0.3, 0.6])  # step 2 starts a new episode after step 1 ended
    state[..., 12] = 0.02
    next_state = state[-1].clone()
    next_state[0, 10] = 0.5
    dones = torch.tensor([[False], [True], [False]])
    rewards = torch.tensor([[0.0], [1.0], [0.0]])
    rollout = SimpleNamespace(
        obs={"state": state}, next_obs={"state": next_state}, valid=torch.ones(T, N, dtype=torch.bool),
        dones=dones, rewards=rewards.clone(),
    )  # fmt: skip
    bench.add_progress_shaping_continuing(rollout, 5.0)
    expected = torch.tensor([[5.0 * (0.4 - 0.3)], [1.0], [5.0 * (0.6 - 0.5)]])
    torch.testing.assert_close(rollout.rewards, expected)


def test_paired_gain_is_the_mean_per_seed_gain_with_its_standard_error(bench):

    def row(before: float, after: float) -> dict[str, Any]:
        return {
            "before": {"deterministic": {"success": before}},
            "after": {"deterministic": {"success": after}},
        }

    rows = [row(0.3, 0.5), row(0.2, 0.3), row(0.4, 0.4)]  # gains 0.2, 0.1, 0.0
    gain, se = bench.paired_gain(rows, "deterministic")
    assert gain == pytest.approx(0.1)
    assert se == pytest.approx(0.1 / 3**0.5, abs=1e-4)  # sample std 0.1 over 3 seeds
    assert bench.paired_gain(rows[:1], "deterministic") == (pytest.approx(0.2), 0.0)
