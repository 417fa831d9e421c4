"""Tests for omnigym.platform.checkpoint: round trip, pointer, pruning, kills and corruption."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from omnigym.platform import checkpoint as ckpt_mod
from omnigym.platform.checkpoint import (
    CheckpointError,
    checkpoint_dir_name,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from omnigym.platform.seeding import capture_rng_state, restore_rng_state, seed_everything


class _TinyPolicy(nn.Module):
    """A stand-in with the Policy saving interface."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def save_pretrained(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))
        (path / "config.json").write_text(json.dumps({"type": "tiny"}))
        return path


class _SimulatedKill(BaseException):
    """Stands for SIGKILL: no ``except Exception`` handler runs."""


def _save(run_dir: Path, step: int, *, keep: int = 2, env_state: bytes | None = None) -> Path:
    policy = _TinyPolicy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    policy(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return save_checkpoint(
        run_dir,
        step,
        policy=policy,
        algorithm_state={"optimizer": optimizer.state_dict(), "critic": {"w": torch.full((2,), float(step))}},
        trainer_state={"global_step": step, "num_updates": step // 10},
        rng_state=capture_rng_state(),
        env_state=env_state,
        keep=keep,
    )


def _step_dirs(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step_"))


def _hidden_dirs(run_dir: Path) -> list[str]:
    return [p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir() and p.name.startswith(".")]


def test_round_trip_restores_every_part(tmp_path: Path) -> None:
    seed_everything(7)
    policy = _TinyPolicy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    policy(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    rng = capture_rng_state()
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    path = save_checkpoint(
        tmp_path,
        1000,
        policy=policy,
        algorithm_state={"optimizer": optimizer.state_dict()},
        trainer_state={"global_step": 1000, "best_return": float("-inf")},
        rng_state=rng,
        env_state=b"\x00env\xff",
    )

    assert path == tmp_path / "checkpoints" / "step_0000001000"
    loaded = load_checkpoint(path)
    assert loaded.step == 1000
    assert loaded.trainer_state == {"global_step": 1000, "best_return": float("-inf")}
    assert loaded.env_state == b"\x00env\xff"
    weights = load_file(str(loaded.policy_dir / "model.safetensors"))
    torch.testing.assert_close(weights["linear.weight"], policy.linear.weight.detach())
    fresh = torch.optim.Adam(_TinyPolicy().parameters(), lr=1e-3)
    fresh.load_state_dict(loaded.algorithm_state["optimizer"])
    torch.testing.assert_close(
        fresh.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    restore_rng_state(loaded.rng_state)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    assert draws[:2] == expected_draws[:2]
    torch.testing.assert_close(draws[2], expected_draws[2])
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {
        "algorithm.pt",
        "trainer_state.json",
        "rng.pkl",
        "env_state.pkl",
        "policy/model.safetensors",
        "policy/config.json",
    }


def test_env_state_is_optional(tmp_path: Path) -> None:
    loaded = load_checkpoint(_save(tmp_path, 5))
    assert loaded.env_state is None
    assert not (loaded.path / "env_state.pkl").exists()


def test_latest_points_to_newest_and_run_dir_loads_it(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        _save(tmp_path, step, keep=5)
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_0000000030"
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step_0000000030"
    loaded = load_checkpoint(tmp_path)
    assert loaded.step == 30
    assert loaded.algorithm_state["critic"]["w"].tolist() == [30.0, 30.0]


def test_pruning_keeps_the_most_recent(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4, 5):
        _save(tmp_path, step, keep=2)
    assert _step_dirs(tmp_path) == ["step_0000000004", "step_0000000005"]
    _save(tmp_path, 6, keep=1)
    assert _step_dirs(tmp_path) == ["step_0000000006"]


def test_resaving_a_step_replaces_it(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    _save(tmp_path, 20, env_state=b"old")
    _save(tmp_path, 20, env_state=b"new")
    assert load_checkpoint(tmp_path).env_state == b"new"
    assert _step_dirs(tmp_path) == ["step_0000000010", "step_0000000020"]
    assert _hidden_dirs(tmp_path) == []


def test_kill_before_manifest_keeps_previous_and_next_save_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(tmp_path, 100)

    def killed(*args: object, **kwargs: object) -> None:
        raise _SimulatedKill

    with monkeypatch.context() as patch:
        patch.setattr(ckpt_mod, "_write_manifest", killed)
        with pytest.raises(_SimulatedKill):
            _save(tmp_path, 200)

    stale = _hidden_dirs(tmp_path)
    assert len(stale) == 1 and stale[0].startswith(".tmp-step_0000000200")
    assert (tmp_path / "checkpoints" / stale[0] / "algorithm.pt").exists()  # files were written
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step_0000000100"
    assert load_checkpoint(tmp_path).step == 100

    _save(tmp_path, 200)
    assert _hidden_dirs(tmp_path) == []
    assert load_checkpoint(tmp_path).step == 200


def test_kill_before_pointer_update_keeps_pointer_on_previous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(tmp_path, 100)
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == "latest":
            raise _SimulatedKill
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(ckpt_mod.os, "replace", replace)
        with pytest.raises(_SimulatedKill):
            _save(tmp_path, 200)

    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step_0000000100"
    # Resuming from 100 and saving 150 discards the abandoned step 200.
    _save(tmp_path, 150)
    assert _step_dirs(tmp_path) == ["step_0000000100", "step_0000000150"]


def test_kill_while_replacing_same_step_still_finds_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(tmp_path, 100, env_state=b"first")
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(src).name.startswith(".tmp-"):
            raise _SimulatedKill  # the old copy is already moved aside
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(ckpt_mod.os, "replace", replace)
        with pytest.raises(_SimulatedKill):
            _save(tmp_path, 100, env_state=b"second")

    assert load_checkpoint(tmp_path).env_state == b"first"
    _save(tmp_path, 110)
    assert _hidden_dirs(tmp_path) == []


def test_ordinary_error_leaves_no_temp_dir(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    with pytest.raises(TypeError):
        bad_state = {"bad": object()}
        save_checkpoint(
            tmp_path, 2, policy=_TinyPolicy(), algorithm_state={}, trainer_state=bad_state, rng_state={}
        )
    assert _hidden_dirs(tmp_path) == []
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step_0000000001"


_CHECKPOINT_FILES = ["algorithm.pt", "rng.pkl", "trainer_state.json", "policy/model.safetensors"]


@pytest.mark.parametrize("name", _CHECKPOINT_FILES)
def test_flipped_bytes_raise_naming_the_file(tmp_path: Path, name: str) -> None:
    path = _save(tmp_path, 3)
    target = path / name
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=name.split("/")[-1]):
        load_checkpoint(path)


def test_missing_file_raises_naming_it(tmp_path: Path) -> None:
    path = _save(tmp_path, 3)
    (path / "rng.pkl").unlink()
    with pytest.raises(CheckpointError, match=r"rng\.pkl"):
        load_checkpoint(path)


def test_unreadable_manifest_raises(tmp_path: Path) -> None:
    path = _save(tmp_path, 3)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"manifest\.json"):
        load_checkpoint(path)


def test_corrupt_latest_falls_back_to_older_valid(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    (newest / "algorithm.pt").write_bytes(b"garbage")
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / checkpoint_dir_name(1)
    (tmp_path / "checkpoints" / "latest").unlink()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / checkpoint_dir_name(1)
    (tmp_path / "checkpoints" / "latest").write_text("../../etc\n")
    assert load_checkpoint(tmp_path).step == 1


def test_missing_run_dir_or_checkpoint_raise_clear_errors(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "nope") is None
    with pytest.raises(CheckpointError, match="no such checkpoint or run dir"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(CheckpointError, match="no complete checkpoint in run dir"):
        load_checkpoint(tmp_path / "empty_run")
    incomplete = tmp_path / "run" / "checkpoints" / "step_0000000009"
    incomplete.mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"manifest\.json is missing"):
        load_checkpoint(incomplete)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep"):
        _save(tmp_path, 1, keep=0)
    with pytest.raises(TypeError, match="env_state"):
        not_bytes: Any = "x"
        save_checkpoint(
            tmp_path,
            1,
            policy=_TinyPolicy(),
            algorithm_state={},
            trainer_state={},
            rng_state={},
            env_state=not_bytes,
        )
