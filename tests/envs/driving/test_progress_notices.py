"""The first driving run is not silent: scene generation and kernel compilation are announced."""

from __future__ import annotations

from pathlib import Path

import pytest

from omnigym.envs.driving import env as driving_env
from omnigym.envs.driving import scene_sets
from omnigym.envs.driving.scene_sets import SceneSource
from omnigym.envs.driving.scenes import SceneConfig

SMALL = SceneConfig(num_agents=4, episode_seconds=2.0)


def test_generating_many_scenes_announces_the_eta(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scene_sets, "SCENE_NOTICE_S", 0.0)
    source = SceneSource("test", 3, SMALL, cache_dir=tmp_path)
    got = source.get_many([0, 1, 2])
    assert [s.scene_id for s in got] == source.ids
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1  # one notice per batch, not one per scene
    assert err[0].startswith("[omnigym] generating 2 more driving scenes (eta ")
    assert str(source.cache_path) in err[0]
    monkeypatch.setattr(scene_sets, "SCENE_NOTICE_S", 1e9)
    assert [s.scene_id for s in source.get_many([2, 0])] == [source.ids[2], source.ids[0]]
    assert capsys.readouterr().err == ""  # expected to be quick: nothing


def test_uncompiled_kernels_are_announced_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kernels = driving_env._kernels()
    assert len(kernels) >= 20  # every numba kernel of the driving modules is found
    monkeypatch.setattr(driving_env, "_kernels_checked", False)
    monkeypatch.setattr(driving_env, "_is_cached", lambda kernel: kernel is not kernels[0])
    assert driving_env.announce_kernel_compilation()
    assert not driving_env.announce_kernel_compilation()  # once per process
    err = capsys.readouterr().err
    assert err.count(f"compiling driving kernels (first run only: 1 of {len(kernels)} numba kernels") == 1
    monkeypatch.setattr(driving_env, "_kernels_checked", False)
    monkeypatch.setattr(driving_env, "_is_cached", lambda kernel: True)
    assert not driving_env.announce_kernel_compilation() and capsys.readouterr().err == ""
