"""Benchmarks run and end with one JSON line carrying a ratio (slow: run with -m slow)."""

import json
import subprocess
import sys

import pytest

from omnigym.platform.cli import BENCH_DIR, list_benchmarks


def test_every_benchmark_is_listed():
    expected = {
        "ppo_vs_sb3", "driving_throughput", "mujoco_overhead", "gui_throughput", "games_throughput",
        "grpo_driving", "vlm_rollout", "vlm_sft_grpo", "driving_diffusion", "pusht_bc", "offline_vs_d3rlpy",
        "offline_to_online", "sac_vs_sb3", "traffic_reactivity", "dream_vs_real", "async_vs_sync",
        "pixel_world_model", "vlm_driving", "vla_pushcube", "hierarchical_pickplace",
        "hierarchical_two_stage",
    }  # fmt: skip
    assert expected <= set(list_benchmarks())
    assert all((BENCH_DIR / f"{name}.py").is_file() for name in list_benchmarks())


@pytest.mark.slow
@pytest.mark.parametrize("name", list_benchmarks())
def test_quick_benchmark_prints_json_with_ratio(name):
    out = subprocess.run(
        [sys.executable, str(BENCH_DIR / f"{name}.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["ratio"] > 0
    threads = figures["torch_threads"]  # every bench applies and records its torch thread count
    assert isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1
