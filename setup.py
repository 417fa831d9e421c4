"""Build hook: ship the repository's root ``configs/`` inside the package as ``omnigym/configs``.

``configs/`` stays the one source at the repository root; ``build_py`` copies its YAML files into the
wheel, where :func:`omnigym.platform.experiment.config_dir` finds them with ``importlib.resources``.
An editable install needs no copy: there ``config_dir()`` falls back to the checkout's ``configs/``.
Everything else about the build is declared in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = Path(__file__).resolve().parent / "configs"


class BuildPyWithConfigs(build_py):
    """``build_py`` that also copies ``configs/**/*.yaml`` to ``<build_lib>/omnigym/configs``."""

    def _config_files(self) -> list[tuple[Path, Path]]:
        target = Path(self.build_lib) / "omnigym" / "configs"
        return [(src, target / src.relative_to(CONFIGS)) for src in sorted(CONFIGS.rglob("*.yaml"))]

    def run(self) -> None:
        """Build the package as usual, then copy the configs into it (not for an editable install)."""
        super().run()
        if self.editable_mode:
            return
        if not CONFIGS.is_dir():
            raise SystemExit(f"setup.py: {CONFIGS} is missing; the wheel must ship the configs")
        for src, dst in self._config_files():
            self.mkpath(str(dst.parent))
            self.copy_file(str(src), str(dst), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        """The usual outputs plus the copied configs (so ``install --record`` lists them)."""
        outputs = list(super().get_outputs(include_bytecode))
        if not self.editable_mode and CONFIGS.is_dir():
            outputs += [str(dst) for _, dst in self._config_files()]
        return outputs


setup(cmdclass={"build_py": BuildPyWithConfigs})
