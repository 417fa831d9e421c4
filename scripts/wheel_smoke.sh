#!/usr/bin/env bash
# Wheel smoke test: builds omnigym's wheel from the working tree, installs it where the checkout is not
# importable, and runs the CLI from a temporary directory (list, a tiny train, eval), checking that the
# imported omnigym is the installed wheel. Its dependencies come from the venv (no network needed).
# Exits non-zero on any failure. Called by scripts/test.sh after pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${OMNIGYM_VENV:-$root/.venv}/bin/python"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/omnigym-wheel.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# Build from a copy of the sources, so no build/ or stale files land in (or leak from) the checkout.
mkdir -p "$tmp/src" "$tmp/dist" "$tmp/work"
tar -C "$root" --exclude=__pycache__ -cf - pyproject.toml setup.py MANIFEST.in README.md omnigym configs \
  | tar -C "$tmp/src" -xf -
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp/dist" "$tmp/src"
wheel="$(ls "$tmp/dist"/omnigym-*.whl)"
"$python" -m pip install -q --no-deps --no-compile --target "$tmp/site" "$wheel"
echo "wheel_smoke: built and installed $(basename "$wheel")"

# PYTHONPATH puts the wheel's copy ahead of the venv's editable finder (a meta-path hook searched
# after sys.path). The checkout is neither the working directory nor on the path.
export PYTHONPATH="$tmp/site"
unset OMNIGYM_CONFIG_DIR
cd "$tmp/work"
omnigym() { "$python" "$tmp/site/bin/omnigym" "$@"; }

where="$("$python" -c 'import omnigym, omnigym.platform.experiment as e; print(omnigym.__file__); print(e.config_dir())')"
case "$where" in
  "$tmp/site/omnigym/__init__.py"$'\n'"$tmp/site/omnigym/configs") ;;
  *) echo "wheel_smoke: imported the wrong omnigym or configs:"$'\n'"$where" >&2; exit 1 ;;
esac

omnigym list >"$tmp/list.txt"
grep -q "ppo_cartpole" "$tmp/list.txt" || { echo "wheel_smoke: 'omnigym list' lacks ppo_cartpole" >&2; exit 1; }
grep -q "(benchmarks: only in a source checkout)" "$tmp/list.txt" \
  || { echo "wheel_smoke: 'omnigym list' does not say benchmarks are checkout-only" >&2; exit 1; }
status=0
omnigym bench anything 2>"$tmp/bench.err" || status=$?
if [ "$status" != 2 ] || ! grep -q "not installed with the package" "$tmp/bench.err"; then
  echo "wheel_smoke: 'omnigym bench' outside a checkout gave status $status: $(cat "$tmp/bench.err")" >&2
  exit 1
fi
omnigym train ppo_cartpole total_steps=2000 log.progress=false run_dir="$tmp/work/run" >"$tmp/train.txt"
omnigym eval --policy "$tmp/work/run" --env CartPole-v1 --episodes 2 >"$tmp/eval.txt"
tail -n 2 "$tmp/eval.txt"
echo "wheel_smoke: ok ($((SECONDS - start)) s): the installed wheel lists, trains and evaluates outside the checkout"
