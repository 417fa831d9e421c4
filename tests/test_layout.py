"""The package's layout rules: one entry point, no runnable scripts, a light import, no shadowed stdlib."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import omnigym

PACKAGE_DIR = Path(omnigym.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
HEAVY_MODULES = ("transformers", "diffusers", "mujoco", "ray", "peft", "minari", "miniwob", "ale_py")
MAIN_GUARD = re.compile(r"""^\s*if\s+__name__\s*==\s*["']__main__["']""", re.MULTILINE)


def run_python(code: str, cwd: Path) -> str:
    """Run ``code`` in a fresh interpreter; its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_python_m_omnigym_help(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "omnigym", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: omnigym")
    for command in ("train", "eval", "list"):
        assert command in proc.stdout


def test_no_runnable_script_inside_the_package() -> None:
    """Only ``omnigym/__main__.py`` runs as a script, so no module is ever run with a package
    folder (``omnigym/platform``'s parent) first on ``sys.path``."""
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if path.name != "__main__.py" and MAIN_GUARD.search(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"runnable scripts inside the package (move them to bench/ or the CLI): {offenders}"


def test_import_omnigym_is_light(tmp_path: Path) -> None:
    code = f"import json, sys, omnigym; print(json.dumps([m for m in {HEAVY_MODULES!r} if m in sys.modules]))"
    imported = json.loads(run_python(code, cwd=tmp_path).strip().splitlines()[-1])
    assert imported == [], f"`import omnigym` imports heavy optional libraries: {imported}"


def test_stdlib_platform_is_not_shadowed() -> None:
    code = "import omnigym, platform; print(platform.__file__); print(platform.system())"
    platform_file, system = run_python(code, cwd=REPO_ROOT).strip().splitlines()[-2:]
    assert Path(platform_file).resolve().parent != PACKAGE_DIR / "platform", platform_file
    assert not Path(platform_file).resolve().is_relative_to(PACKAGE_DIR), f"platform is {platform_file}"
    assert system, "platform.system() returned nothing"


def test_stdlib_platform_in_this_process() -> None:
    import platform

    assert platform.system()
    assert not Path(platform.__file__).resolve().is_relative_to(PACKAGE_DIR)


def test_legacy_gym_and_benchmark_peers_stay_out_of_the_core_install() -> None:
    """d3rlpy (which pulls the unmaintained ``gym`` 0.26) is a benchmark peer, only in the ``bench`` extra."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~\[; ]", dep)[0].lower() for dep in project["dependencies"]]
    assert not {"d3rlpy", "gym", "stable-baselines3", "highway-env"} & set(names), names
    extras = {
        extra: [re.split(r"[<>=!~\[; ]", d)[0].lower() for d in deps]
        for extra, deps in project["optional-dependencies"].items()
    }
    assert [extra for extra, deps in extras.items() if "d3rlpy" in deps] == ["bench"]
