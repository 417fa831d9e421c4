"""Shared fixtures of the bench tests."""

import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

import pytest

from omnigym.platform.cli import BENCH_DIR


def _load(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as a module (bench/ is not a package), registered in sys.modules."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bench_module() -> Callable[[str], ModuleType]:
    """A loader of ``bench/<name>.py`` as a module: ``bench_module("offline_vs_d3rlpy")``."""
    return _load
