"""A run's life: never overwritten, Ctrl-C checkpoints, resume says what it does, a report at the end."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from omnigym.platform.checkpoint import CheckpointSchedule, latest_checkpoint
from omnigym.platform.cli import main
from omnigym.platform.interrupts import GracefulStop
from omnigym.platform.trainers.on_policy import OnPolicyTrainer

# 8 envs x 32 steps = 256 steps an iteration; 4 iterations, evaluated at 512 and at the end.
SHORT = [
    "total_steps=1024", "eval.every_steps=512", "eval.episodes=2", "log.progress=false",
    "log.tensorboard=false", "checkpoint.every_minutes=0",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def metric_rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock figures, which differ between any two runs."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/") and k != "wall_time"} for row in rows]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("lifecycle") / "run"
    assert main(["train", "ppo_cartpole", *SHORT, f"run_dir={run_dir}"]) == 0
    return run_dir


def interrupt_after(monkeypatch: pytest.MonkeyPatch, iterations: int, signum: int = signal.SIGINT) -> None:
    """Send ``signum`` to this process right after the given number of training iterations."""
    original = OnPolicyTrainer.train_iteration

    def train_iteration(self: OnPolicyTrainer) -> dict[str, float]:
        metrics = original(self)
        if self.iteration == iterations:
            os.kill(os.getpid(), signum)
        return metrics

    monkeypatch.setattr(OnPolicyTrainer, "train_iteration", train_iteration)


# --- never overwritten ------------------------------------------------------------------------------
def test_training_into_a_finished_run_is_refused_and_changes_nothing(
    finished_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_hashes(finished_run)
    assert main(["train", "ppo_cartpole", "total_steps=256", f"run_dir={finished_run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("omnigym train: error:"), err
    for hint in ("a finished run", "--resume", "run_dir=", "--overwrite"):
        assert hint in err[0]
    assert tree_hashes(finished_run) == before


def test_overwrite_moves_the_old_run_aside_intact(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "copy"
    assert main(["train", "ppo_cartpole", *SHORT, "total_steps=256", f"run_dir={run_dir}"]) == 0
    before = tree_hashes(run_dir)
    assert (
        main(["train", "ppo_cartpole", *SHORT, "total_steps=512", f"run_dir={run_dir}", "--overwrite"]) == 0
    )
    (moved,) = tmp_path.glob("copy.old-*")
    assert tree_hashes(moved) == before
    assert json.loads((run_dir / "results.json").read_text())["total_steps"] == 512
    assert f"aside to {moved}" in capsys.readouterr().err


def test_a_start_that_fails_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(self: OnPolicyTrainer) -> dict[str, float]:
        raise RuntimeError("boom")

    monkeypatch.setattr(OnPolicyTrainer, "train_iteration", broken)
    run_dir = tmp_path / "failed"
    assert main(["train", "ppo_cartpole", *SHORT, f"run_dir={run_dir}"]) == 1
    assert not run_dir.exists()
    err = capsys.readouterr().err
    assert "boom" in err and "Traceback" not in err


def test_an_invalid_config_leaves_no_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "invalid"
    assert main(["train", "ppo_cartpole", *SHORT, "env.num_envs=2000", f"run_dir={run_dir}"]) == 2
    assert not run_dir.exists()


def test_an_iteration_far_larger_than_the_budget_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "ppo_cartpole", "total_steps=512", "env.num_envs=2000"]) == 2
    err = capsys.readouterr().err
    assert "64,000" in err and "env.num_envs" in err and "total_steps" in err


# --- interrupts and resume --------------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_checkpoints_and_resume_reproduces_the_uninterrupted_run(
    finished_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signum: int,
) -> None:
    run_dir = tmp_path / "interrupted"
    interrupt_after(monkeypatch, 1, signum)
    assert main(["train", "ppo_cartpole", *SHORT, f"run_dir={run_dir}"]) == 130
    err = capsys.readouterr().err
    assert f"omnigym train --resume {run_dir}" in err and "step 256" in err
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and checkpoint.name == "step_0000000256"
    assert not (run_dir / "results.json").exists()

    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert "from step_0000000256 (step 256)" in capsys.readouterr().err
    resumed = json.loads((run_dir / "results.json").read_text())
    uninterrupted = json.loads((finished_run / "results.json").read_text())
    assert resumed == uninterrupted
    assert metric_rows(run_dir) == metric_rows(finished_run)


def test_second_ctrl_c_stops_at_once() -> None:
    # Python's own handler, as in a terminal: a background start (nohup, some test runners)
    # inherits SIG_IGN, and GracefulStop restores whatever it found.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with GracefulStop() as stop, pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_resume_of_a_finished_run_says_so_and_changes_nothing(
    finished_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_hashes(finished_run)
    assert main(["train", "--resume", str(finished_run)]) == 0
    err = capsys.readouterr().err
    assert "is finished" in err and "total_steps=N" in err
    assert tree_hashes(finished_run) == before


def test_resume_with_a_larger_budget_extends_a_finished_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "extend"
    assert main(["train", "ppo_cartpole", *SHORT, "total_steps=512", f"run_dir={run_dir}"]) == 0
    assert main(["train", "--resume", str(run_dir), "total_steps=1024"]) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["total_steps"] == 1024
    assert [row["step"] for row in metric_rows(run_dir)] == [256, 512, 768, 1024]
    assert "total_steps: 1024" in (run_dir / "config.yaml").read_text()


def test_resume_refuses_changes_to_the_run_itself(
    finished_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--resume", str(finished_run), "algo.learning_rate=1"]) == 2
    assert "algo.learning_rate=1" in capsys.readouterr().err


def test_resume_names_a_corrupt_checkpoint_it_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "corrupt"
    args = ["train", "ppo_cartpole", *SHORT, "checkpoint.every_steps=256", f"run_dir={run_dir}"]
    interrupt_after(monkeypatch, 2)
    assert main(args) == 130
    latest = latest_checkpoint(run_dir)
    assert latest is not None and latest.name == "step_0000000512"
    policy_file = next((latest / "policy").glob("*.safetensors"))
    policy_file.write_bytes(policy_file.read_bytes()[:100])  # truncated
    capsys.readouterr()
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--resume", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert f"skipped corrupt checkpoint {latest}" in err
    assert "from step_0000000256 (step 256)" in err


# --- checkpoints by time, report --------------------------------------------------------------------
def test_checkpoint_schedule_by_steps_and_by_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("omnigym.platform.checkpoint.time.monotonic", lambda: now[0])
    schedule = CheckpointSchedule(every_steps=0, every_minutes=10)
    assert not schedule.due(512, 256)
    now[0] += 599
    assert not schedule.due(768, 512)
    now[0] += 1
    assert schedule.due(1024, 768)
    schedule.saved()
    assert not schedule.due(1280, 1024)
    by_steps = CheckpointSchedule(every_steps=500, every_minutes=0)
    assert by_steps.due(512, 256) and not by_steps.due(768, 512)


def test_every_train_writes_a_report(finished_run: Path) -> None:
    report = (finished_run / "report.md").read_text()
    assert (finished_run / "learning_curve.png").stat().st_size > 0
    final = json.loads((finished_run / "results.json").read_text())["final_eval"]["return_mean"]
    assert "## Evaluation" in report and "## Config" in report
    value = str(int(final)) if float(final).is_integer() else f"{final:.4g}"
    assert f"| return_mean | {value} |" in report


def test_a_missing_dataset_leaves_no_stub_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    run_dir = tmp_path / "offline"
    argv = ["train", "td3bc_hopper_medium", "dataset=omnigym/no-such-dataset-v0", f"run_dir={run_dir}"]
    assert main(argv) == 2
    assert not run_dir.exists(), "the failed start left a stub run directory"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-dataset" in err[0], err


def test_ctrl_c_to_the_process_group_with_async_env_workers_checkpoints(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the env worker processes too; they leave it to the trainer."""
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "async"
    argv = [
        sys.executable, "-m", "omnigym", "train", "ppo_cartpole", "total_steps=10000000",
        "env.vectorization=async", "env.num_envs=2", "log.progress=false", "log.tensorboard=false",
        "eval.every_steps=0", f"run_dir={run_dir}",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").read_text():
            assert process.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert "Traceback" not in err and f"omnigym train --resume {run_dir}" in err
    assert latest_checkpoint(run_dir) is not None
