#!/usr/bin/env bash
# The test suite: set up (first run only), lint (ruff), type-check (mypy), then pytest. The default
# run is CPU-only, complete and CI-sized; `scripts/test.sh -m slow` runs the slow checks instead
# (benchmark smoke runs). The default run also checks the LeRobot format in .venv-lerobot
# (scripts/setup-lerobot.sh). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
bin="${OMNIGYM_VENV:-$root/.venv}/bin"
# Cache bytecode (and pytest's rewritten test modules): else every test process compiles them again.
unset PYTHONDONTWRITEBYTECODE
"$bin/ruff" check omnigym tests bench setup.py
"$bin/ruff" format --check omnigym tests bench setup.py
# The driving env's numba kernels compile into their on-disk cache on the other core while mypy
# checks types, instead of in every pytest worker at once.
"$bin/python" -c "from omnigym.envs.driving.warmup import compile_kernels as c; print(f'driving kernels compiled in {c():.0f} s')" &
warmup=$!
"$bin/mypy" omnigym
wait "$warmup"
# One pytest-xdist worker per core (at most 4), each computing on one thread (tests/conftest.py);
# OMNIGYM_TEST_WORKERS overrides, 0 runs in this process.
workers="${OMNIGYM_TEST_WORKERS:-$(nproc)}"
if [ "$workers" -gt 4 ]; then workers=4; fi
"$bin/python" -m pytest -q -n "$workers" --dist worksteal --durations=15 "$@"
if [ "$#" -eq 0 ]; then
  # LeRobot's dataset classes load only beside a torchvision matching torch: their round trip runs
  # again in the second virtualenv that setup-lerobot.sh makes (tests/platform/test_lerobot.py).
  bash "$root/scripts/setup-lerobot.sh"
  lerobot_python="${OMNIGYM_LEROBOT_VENV:-$root/.venv-lerobot}/bin/python"
  "$lerobot_python" -c "from lerobot.datasets.lerobot_dataset import LeRobotDataset"  # else the test would skip
  "$lerobot_python" -m pytest -q -p no:cacheprovider tests/platform/test_lerobot.py
fi
bash "$root/scripts/wheel_smoke.sh"  # the built wheel, installed away from the checkout, lists/trains/evals
