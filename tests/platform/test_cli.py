"""The ``omnigym`` command, run in-process through ``cli.main``."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import cv2
import pytest

from omnigym.core.config import list_options
from omnigym.platform.checkpoint import latest_checkpoint
from omnigym.platform.cli import build_parser, catalog, list_benchmarks, main
from omnigym.platform.experiment import config_dir


def subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def last_json_line(out: str) -> dict:
    lines = out.strip().splitlines()
    assert lines, "nothing printed"
    return json.loads(lines[-1])


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default outputs (runs/, videos/) land in a scratch directory, not the repository."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-iteration ppo_cartpole run."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    overrides = ["total_steps=512", "eval.episodes=2", "log.progress=false", "log.tensorboard=false"]
    assert main(["train", "ppo_cartpole", *overrides, f"run_dir={run_dir}"]) == 0
    return run_dir


# --- list and help --------------------------------------------------------------------------------
def test_list_names_policies_algorithms_experiments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("mlp", "random", "ppo", "ppo_cartpole", "demo"):
        assert re.search(rf"^\s+{name}$", out, re.MULTILINE), f"{name!r} not listed:\n{out}"


@pytest.mark.parametrize("command", [None, *subcommands()])
def test_help_exits_zero(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"] if command else ["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: omnigym {command or ''}".rstrip())


# --- config errors --------------------------------------------------------------------------------
def test_train_unknown_key_suggests_the_right_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "ppo_cartpole", "algo.gama=1"]) == 2
    err = capsys.readouterr().err
    assert "algo.gama" in err
    assert "gamma" in err.replace("algo.gama", "")
    assert not (tmp_path / "runs").exists(), "a run directory was created for an invalid config"


def test_train_unknown_group_option_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "ppo_cartpole", "env=nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "nonexistent" in err
    for option in list_options(config_dir(), "env"):
        assert option in err, f"env option {option!r} not listed in: {err}"


# --- eval -----------------------------------------------------------------------------------------
def test_eval_random_policy_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--policy", "random", "--env", "CartPole-v1", "--episodes", "3", "--json"]) == 0
    summary = last_json_line(capsys.readouterr().out)
    assert summary["episodes"] == 3
    for key in ("return_mean", "return_iqm"):
        assert math.isfinite(summary[key]) and summary[key] > 0, f"{key} = {summary[key]}"


def test_eval_missing_policy_dir_fails_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["eval", "--policy", "/nonexistent/dir", "--env", "CartPole-v1", "--episodes", "1"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "/nonexistent/dir" in err
    assert "no such file or directory" in err
    assert "Traceback" not in err


def test_eval_unknown_policy_name_lists_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["eval", "--policy", "nonexistent", "--env", "CartPole-v1", "--episodes", "1"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "unknown policy 'nonexistent'" in err
    assert "mlp" in err, "the error should list the known policies"


def test_eval_video_writes_mp4(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    video_dir = tmp_path / "videos"
    argv = ["eval", "--policy", "random", "--env", "CartPole-v1", "--episodes", "1", "--json"]
    assert main([*argv, "--video", "--video-dir", str(video_dir)]) == 0
    summary = last_json_line(capsys.readouterr().out)
    videos = list(video_dir.glob("*.mp4"))
    assert len(videos) == 1, f"expected one mp4 in {video_dir}, found {videos}"
    assert Path(summary["video"]) == videos[0]
    capture = cv2.VideoCapture(str(videos[0]))
    try:
        ok, frame = capture.read()
    finally:
        capture.release()
    assert ok and frame.ndim == 3, "the mp4 holds no readable frame"


# --- train, eval a run, resume --------------------------------------------------------------------
def test_train_writes_a_complete_run(trained_run: Path) -> None:
    for needed in ("config.yaml", "metrics.jsonl", "results.json", "policy/config.json"):
        assert (trained_run / needed).is_file(), f"{needed} missing"
    assert latest_checkpoint(trained_run) is not None
    assert json.loads((trained_run / "results.json").read_text())["total_steps"] == 512


def test_eval_run_dir_uses_the_trained_policy(trained_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final_eval = json.loads((trained_run / "results.json").read_text())["final_eval"]
    argv = ["eval", "--policy", str(trained_run), "--env", "CartPole-v1", "--episodes", "2", "--json"]
    # The training run's final evaluation used seeds 1_000_000 + i; the same seeds give the same returns.
    assert main([*argv, "--seed", "1000000"]) == 0
    summary = last_json_line(capsys.readouterr().out)
    assert summary["episodes"] == 2
    assert summary["return_mean"] == final_eval["return_mean"]


def test_resume_finished_run_does_nothing_more(trained_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics_before = (trained_run / "metrics.jsonl").read_text()
    checkpoint_before = latest_checkpoint(trained_run)
    assert main(["train", "--resume", str(trained_run)]) == 0
    assert (trained_run / "metrics.jsonl").read_text() == metrics_before, (
        "resuming a finished run trained more"
    )
    assert latest_checkpoint(trained_run) == checkpoint_before
    assert f"{trained_run} is finished" in capsys.readouterr().err


# --- bench ----------------------------------------------------------------------------------------
def test_bench_unknown_name_lists_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nonexistent"]) == 2
    message = capsys.readouterr().err
    assert message.startswith("omnigym bench: error:") and len(message.strip().splitlines()) == 1
    assert "nonexistent" in message and "known" in message
    for name in list_benchmarks():
        assert name in message, f"benchmark {name!r} not listed in: {message}"


def test_bench_passes_the_scripts_own_options_through(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "call", lambda command: calls.append(command) or 0)
    assert main(["bench", "dream_vs_real", "--quick", "--task", "driving"]) == 0
    assert main(["bench", "dream_vs_real"]) == 0
    (first, second) = calls
    assert first[1].endswith("bench/dream_vs_real.py") and first[2:] == ["--quick", "--task", "driving"]
    assert second[2:] == []


def test_bench_list_shows_every_bench_with_two_duration_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    header, *rows = capsys.readouterr().out.rstrip("\n").splitlines()
    assert header.split() == ["benchmark", "quick", "full"]
    quick_at, full_at = header.index("quick"), header.index("full")
    assert [row.split()[0] for row in rows] == list_benchmarks()
    for row in rows:  # aligned: each column starts where its header does, and none is empty
        name, quick, full = row[:quick_at].strip(), row[quick_at:full_at].strip(), row[full_at:].strip()
        assert name and quick and full and row[quick_at - 1] == row[full_at - 1] == " ", row
    assert any(" s" in row or "min" in row for row in rows), "no benchmark shows a recorded duration"


def test_bench_list_reads_durations_without_importing_and_tolerates_bad_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    scripts = {  # each imports a module that does not exist: listing must not import the scripts
        "recorded": 'DURATIONS = {"quick": "about 5 min", "full": "1 h 50 min (2 processes)"}',
        "annotated": 'DURATIONS: dict[str, str] = {"full": "466 s"}',
        "missing": 'DURATION = {"quick": "1 s", "full": "2 s"}',
        "a_call": 'DURATIONS = dict(quick="1 s", full="2 s")',
        "a_string": 'DURATIONS = "about 5 min"',
        "a_name": 'FIGURES = {"quick": "1 s"}\nDURATIONS = FIGURES',
        "broken": 'DURATIONS = {"quick": "1 s",',
    }
    for name, body in scripts.items():
        (bench_dir / f"{name}.py").write_text(f'"""A bench."""\n\nimport no_such_module_anywhere\n\n{body}\n')
    monkeypatch.setattr(catalog, "BENCH_DIR", bench_dir)
    assert main(["bench", "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "benchmark  quick         full",
        "a_call     not recorded  not recorded",
        "a_name     not recorded  not recorded",
        "a_string   not recorded  not recorded",
        "annotated  not recorded  466 s",
        "broken     not recorded  not recorded",
        "missing    not recorded  not recorded",
        "recorded   about 5 min   1 h 50 min (2 processes)",
    ]


def test_bench_without_a_name_or_list_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("omnigym bench: error:") and len(err.strip().splitlines()) == 1
    assert "--list" in err
    assert main(["bench", "--list", "ppo_vs_sb3"]) == 2  # --list runs nothing
    assert "ppo_vs_sb3" in capsys.readouterr().err


def test_bench_list_outside_a_checkout_says_what_omnigym_list_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(catalog, "BENCH_DIR", tmp_path / "missing")
    assert main(["bench", "--list"]) == 0
    assert capsys.readouterr().out.strip() == "(benchmarks: only in a source checkout)"


def test_bench_help_makes_no_promise_about_quick_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "under a minute" not in out and "see --list for the times" in out


def test_train_seeds_aggregates_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["train", "ppo_cartpole", "total_steps=512", "eval.episodes=2", "log.progress=false"]
    assert main([*argv, "--seeds", "1,2", "log.tensorboard=false"]) == 0
    out = capsys.readouterr().out
    assert "2 seeds" in out and "IQM" in out
    (aggregate,) = tmp_path.glob("runs/*/aggregate.json")
    summary = json.loads(aggregate.read_text())
    assert summary["seeds"] == [1, 2]
    finals = [run["final_return"] for run in summary["runs"].values()]
    assert summary["final_return"]["mean"] == pytest.approx(sum(finals) / 2)
    assert summary["final_return"]["num_runs"] == 2


def test_eval_of_a_run_dir_uses_the_runs_env_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    argv = ["train", "ppo_cartpole", "total_steps=256", "eval.episodes=1", "env.max_episode_steps=20"]
    assert main([*argv, "log.progress=false", "log.tensorboard=false", f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    assert main(["eval", "--policy", str(run_dir), "--env", "CartPole-v1", "--episodes", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["length_mean"] <= 20  # the run's time limit, not CartPole's 500


def test_model_ids_become_language_model_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    from omnigym.platform.cli import resolve_policy
    from omnigym.policies.vlm.policy import VLMPolicy

    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path))
    kwargs = {"action_space": "text"}
    vlm = resolve_policy("tiny:idefics3", "omnigym/NumberLine-v0", kwargs)
    assert isinstance(vlm, VLMPolicy) and vlm.config.obs_keys == ("image", "text")
    text_only = resolve_policy("tiny:qwen2", "omnigym/NumberLine-v0", kwargs)
    assert isinstance(text_only, VLMPolicy) and text_only.config.obs_keys == ("text",)
    with pytest.raises(FileNotFoundError, match="no such local path, registered policy or loadable"):
        resolve_policy("no-such-org/no-such-model", "omnigym/NumberLine-v0", kwargs)


def test_world_model_dream_fits_an_rssm_trains_in_imagination_and_saves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    out = tmp_path / "dream"
    argv = ["world-model", "dream", "Pendulum-v1", "--collect", "600", "--out", str(out)]
    assert (
        main([*argv, "--fit-steps", "20", "--updates", "10", "--episodes", "2", "--set", "sequence_length=8"])
        == 0
    )
    captured = capsys.readouterr()
    assert "imagination update 10/10" in captured.err and "real return" in captured.out
    results = json.loads((out / "results.json").read_text())
    assert results["env"] == "Pendulum-v1" and -2000 < results["real_return"] < 0
    from omnigym.core.policy import Policy
    from omnigym.world_models.base import WorldModel

    assert WorldModel.from_pretrained(out / "world_model").sequence_length == 8
    Policy.from_pretrained(out / "policy")
    assert main(["world-model", "dream", "Pendulum-v1", "--out", str(out)]) == 2
    assert "exactly one of --dataset ID and --collect STEPS" in capsys.readouterr().err


def test_eval_video_episodes_writes_one_whole_episode_per_mp4(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    video_dir = tmp_path / "videos"
    argv = ["eval", "--policy", "random", "--env", "CartPole-v1", "--episodes", "3", "--json", "--stochastic"]
    assert main([*argv, "--video", "--video-dir", str(video_dir), "--video-episodes", "2"]) == 0
    summary = last_json_line(capsys.readouterr().out)
    videos = sorted(video_dir.glob("*.mp4"))
    assert [v.name.rsplit("-", 1)[-1] for v in videos] == ["episode0.mp4", "episode1.mp4"]
    assert Path(summary["video"]) == videos[0]
    for video in videos:
        capture = cv2.VideoCapture(str(video))
        try:
            assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) >= 2  # the reset frame and every step
        finally:
            capture.release()


def test_train_pixel_env_with_state_obs_keys_fails_naming_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "ppo_reach", "env.id=omnigym/ReachPixels-v0"]) == 2
    err = capsys.readouterr().err
    assert "env.kwargs.obs_keys" in err and "~env.kwargs.obs_keys" in err
    assert len(err.strip().splitlines()) == 1, err


def test_train_delete_override_of_a_missing_key_fails_with_a_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["train", "ppo_reach", "~policy.normalize_ob"]) == 2
    err = capsys.readouterr().err
    assert "'~policy.normalize_ob'" in err and "Did you mean '~policy.normalize_obs'?" in err
