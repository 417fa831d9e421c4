"""Packaging: the wheel ships the root ``configs/`` as ``omnigym/configs`` and the CLI finds them there.

The full check (build the wheel, install it away from the checkout, train and evaluate) is
scripts/wheel_smoke.sh, which scripts/test.sh runs after pytest; these are the fast parts of it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from omnigym.platform import experiment
from omnigym.platform.cli import catalog, main
from omnigym.platform.experiment import REPO_ROOT, config_dir

CONFIGS = REPO_ROOT / "configs"


def yaml_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml"))


def test_config_dir_in_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNIGYM_CONFIG_DIR", raising=False)
    assert (config_dir() / "experiment" / "ppo_cartpole.yaml").is_file()
    assert experiment.packaged_config_dir() is None  # the checkout has no omnigym/configs copy
    assert config_dir() == CONFIGS


def test_config_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OMNIGYM_CONFIG_DIR", str(tmp_path))
    assert config_dir() == tmp_path


def test_config_dir_in_a_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An installed wheel: ``omnigym/configs`` next to the modules, no repository around them."""
    package = tmp_path / "site" / "omnigym"
    shutil.copytree(CONFIGS, package / "configs")
    monkeypatch.delenv("OMNIGYM_CONFIG_DIR", raising=False)
    monkeypatch.setattr(experiment.importlib.resources, "files", lambda name: package)
    monkeypatch.setattr(experiment, "REPO_ROOT", tmp_path / "site")
    assert config_dir() == package / "configs"
    assert "ppo_cartpole" in experiment.list_experiments()


def test_build_py_copies_the_root_configs_into_the_package(tmp_path: Path) -> None:
    """setup.py's build hook puts every YAML file of the root ``configs/`` under ``omnigym/configs``."""
    src = tmp_path / "src"
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(CONFIGS, src / "configs")
    (src / "omnigym").mkdir()
    (src / "omnigym" / "__init__.py").write_text("")  # a stand-in package: only the hook is tested
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    packaged = tmp_path / "lib" / "omnigym" / "configs"
    assert (packaged / "experiment" / "ppo_cartpole.yaml").is_file()
    assert yaml_files(packaged) == yaml_files(CONFIGS)


def test_pyproject_and_sdist_manifest() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"  # PEP 639 SPDX expression, not a table
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(setuptools.split(">=")[1].split(".")[0]) >= 77, setuptools  # 77: SPDX `license`
    assert "recursive-include configs *.yaml" in (REPO_ROOT / "MANIFEST.in").read_text()
    assert '"build_py": BuildPyWithConfigs' in (REPO_ROOT / "setup.py").read_text()


def test_bench_outside_a_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(catalog, "BENCH_DIR", tmp_path / "missing")
    assert catalog.list_benchmarks() == []
    assert main(["bench", "pushcube_rl_finetune"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "omnigym bench: error: benchmarks are repository scripts (bench/ in a source checkout of "
        "omnigym); they are not installed with the package"
    )
    assert main(["list"]) == 0
    assert "(benchmarks: only in a source checkout)" in capsys.readouterr().out
