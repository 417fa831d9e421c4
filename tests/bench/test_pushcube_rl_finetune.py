"""Smoke test of ``bench/pushcube_rl_finetune.py``'s quick path (slow: run with -m slow)."""

import json
import subprocess
import sys

import pytest

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
