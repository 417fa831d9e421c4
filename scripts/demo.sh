#!/usr/bin/env bash
# The main job: set up (first run only), then train, evaluate and write a report (omnigym demo).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
exec "${OMNIGYM_VENV:-$root/.venv}/bin/omnigym" demo "$@"
