"""``bench pusht_bc --out DIR`` keeps every stage and resumes a killed run from it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omnigym.platform.cli import BENCH_DIR

QUICK = ["--quick", "--envs", "gym_pusht", "--test-episodes", "2"]


def run_bench(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(BENCH_DIR / "pusht_bc.py"), *QUICK, "--out", str(out), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_a_folder_of_other_settings_or_other_files_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "settings.json").write_text(json.dumps({"envs": ["pusht"]}))
    refused = run_bench(tmp_path / "run")
    assert refused.returncode == 1
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(f"pusht_bc: {tmp_path / 'run'} holds a run with other")
    )
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    refused = run_bench(tmp_path / "mine")
    assert refused.returncode == 1 and "is not a pusht_bc run folder" in refused.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.slow
def test_a_run_killed_while_training_resumes_and_reuses_what_was_finished(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, str(BENCH_DIR / "pusht_bc.py"), *QUICK, "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / "gym_pusht-diffusion-training.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    process.kill()  # diffusion trained; meanflow training (or nothing after it) cut short
    process.wait()
    diffusion = json.loads((out / "gym_pusht-diffusion-training.json").read_text())
    assert not (out / "gym_pusht-meanflow-scores.json").exists()
    resumed = run_bench(out)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming the run in" in resumed.stdout
    figures = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert figures["figures"]["gym_pusht"]["diffusion"]["train_s"] == diffusion["train_s"]  # not retrained
    assert figures["out"] == str(out)
    again = json.loads(run_bench(out).stdout.strip().splitlines()[-1])
    for name in ("diffusion", "meanflow"):  # a finished run reads back the same scores
        assert again["figures"]["gym_pusht"][name]["final"] == figures["figures"]["gym_pusht"][name]["final"]
