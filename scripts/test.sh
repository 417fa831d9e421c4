#!/usr/bin/env bash
# The test suite: set up (first run only), lint (ruff), type-check (mypy), then pytest. The default
# run is CPU-only, complete and CI-sized; `scripts/test.sh -m slow` runs the slow checks instead
# (benchmark smoke runs). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
bin="${OMNIGYM_VENV:-$root/.venv}/bin"
"$bin/ruff" check omnigym tests bench setup.py
"$bin/ruff" format --check omnigym tests bench setup.py
"$bin/mypy" omnigym
"$bin/python" -m pytest -q --durations=15 "$@"
bash "$root/scripts/wheel_smoke.sh"  # the built wheel, installed away from the checkout, lists/trains/evals
