#!/usr/bin/env bash
# The test suite: set up (first run only), lint, then pytest (slow learning checks and benchmarks
# are marked `slow` and run with `scripts/test.sh -m slow`). Exits non-zero on any failure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
bin="${OMNIGYM_VENV:-$root/.venv}/bin"
"$bin/ruff" check omnigym tests bench
"$bin/ruff" format --check omnigym tests bench
"$bin/python" -m pytest -q "$@"
