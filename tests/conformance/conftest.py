"""Shared parametrization and helpers for the conformance tests.

The conformance tests run over *every* registered env, policy and algorithm, so a new one is
covered without editing them: a test that takes an ``env_id``, ``policy_name`` or ``algo_name``
argument is parametrized here over the registries (pytest ids are the names).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

from omnigym.envs import omnigym_env_ids
from omnigym.platform.config import list_options, load_yaml
from omnigym.platform.experiment import config_dir
from omnigym.platform.registry import ALGORITHMS, POLICIES


def config_env_ids() -> list[str]:
    """The env ids the YAML files in ``configs/env`` use."""
    root = config_dir() / "env"
    return [load_yaml(root / f"{name}.yaml")["id"] for name in list_options(config_dir(), "env")]


def conformance_env_ids() -> list[str]:
    """Every omnigym env plus every env a config uses, each once, in a stable order."""
    return list(dict.fromkeys([*omnigym_env_ids(), *config_env_ids()]))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``env_id``, ``policy_name`` and ``algo_name`` over the registries."""
    sources = {
        "env_id": conformance_env_ids,
        "policy_name": POLICIES.names,
        "algo_name": ALGORITHMS.names,
    }
    for argname, names in sources.items():
        if argname in metafunc.fixturenames:
            values = names()
            metafunc.parametrize(argname, values, ids=values)


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test in its own directory: MuJoCo writes MUJOCO_LOG.TXT into the cwd."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def restore_mujoco_gl() -> Iterator[None]:
    """Restore ``MUJOCO_GL`` (or its absence) after the test: make_env may set it for rendering."""
    saved = os.environ.get("MUJOCO_GL")
    yield
    if saved is None:
        os.environ.pop("MUJOCO_GL", None)
    else:
        os.environ["MUJOCO_GL"] = saved


@cache
def _mujoco_gl_works(backend: str) -> bool:
    code = "import mujoco; ctx = mujoco.GLContext(8, 8); ctx.make_current(); ctx.free()"
    env = {**os.environ, "MUJOCO_GL": backend}
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


@pytest.fixture(scope="session")
def mujoco_gl_works() -> Callable[[str], bool]:
    """``mujoco_gl_works(backend)``: whether MuJoCo can make an offscreen OpenGL context with
    ``MUJOCO_GL=backend``. Probed once per backend in a fresh interpreter, because the backend
    is fixed when ``mujoco`` is first imported."""
    return _mujoco_gl_works
