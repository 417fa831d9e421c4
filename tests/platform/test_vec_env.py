"""Async vector envs: workers start from a fork server, and text observations survive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gymnasium import spaces

from omnigym.envs.manipulation.reach import ReachEnv
from omnigym.platform.vec_env import EnvConfig, contains_text, make_vec_env


def test_async_env_returns_the_real_text() -> None:
    """Gymnasium's shared memory read a Text observation once, before the first reset: every
    observation was "aaaa..."; text observations now travel through the pipes."""
    config = EnvConfig(
        id="omnigym/ReachPixels-v0", num_envs=2, vectorization="async", kwargs={"obs_keys": ["state", "text"]}
    )
    envs = make_vec_env(config)
    try:
        obs, _ = envs.reset(seed=0)
        assert list(obs["text"]) == [ReachEnv.instruction] * 2
        assert obs["state"].shape == (2, 10)
        obs, *_ = envs.step(envs.action_space.sample())
        assert list(obs["text"]) == [ReachEnv.instruction] * 2
    finally:
        envs.close()


def test_async_env_without_text_keeps_shared_memory() -> None:
    envs = make_vec_env(EnvConfig(id="CartPole-v1", num_envs=2, vectorization="async"))
    try:
        assert envs.unwrapped.shared_memory  # type: ignore[attr-defined]
        assert envs.unwrapped.context == "forkserver"  # type: ignore[attr-defined]
    finally:
        envs.close()


def test_contains_text_looks_into_nested_spaces() -> None:
    text = spaces.Text(8)
    box = spaces.Box(0, 1, (2,))
    assert contains_text(text) and contains_text(spaces.Dict({"a": box, "b": spaces.Tuple((box, text))}))
    assert not contains_text(spaces.Dict({"a": box, "b": spaces.Tuple((box, spaces.Discrete(2)))}))


RENDERED_THEN_ASYNC = """
from omnigym.platform.vec_env import EnvConfig, make_env, make_vec_env

env = make_env("omnigym/ReachPixels-v0", obs_keys=["image"])
env.reset(seed=0)
env.step(env.action_space.sample())  # this process now holds an OpenGL context
env.close()
kwargs = {"obs_keys": ["image"]}
envs = make_vec_env(EnvConfig(id="omnigym/ReachPixels-v0", num_envs=2, vectorization="async", kwargs=kwargs))
obs, _ = envs.reset(seed=0)
envs.close()
print(obs["image"].shape, float(obs["image"].std()))
"""


def test_async_pixel_env_after_drawing_frames(tmp_path: Path) -> None:
    """Workers forked from a process that had drawn MuJoCo frames hung making their own OpenGL
    contexts (with start method fork: still waiting after 60 s); a fork server starts them from
    a clean process. A fresh interpreter, as this one may have rendered already."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RENDERED_THEN_ASYNC],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # its own process group: a hang is ended with its workers
    )
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the async pixel env hung after the parent drew frames")
    assert proc.returncode == 0, err[-2000:]
    shape, std = out.strip().splitlines()[-1].rsplit(" ", 1)
    assert shape == "(2, 96, 96, 3)" and float(std) > 10
