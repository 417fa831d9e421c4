#!/usr/bin/env bash
# Creates a second virtualenv (.venv-lerobot, or $OMNIGYM_LEROBOT_VENV) in which LeRobot's dataset
# classes load, for `omnigym datasets export/import --format lerobot` and its tests.
#
# Why a second one: lerobot's dataset module imports torchvision, and PyPI's torchvision builds link
# CUDA libraries, so none loads beside the CPU-only torch of .venv. Here torch and torchvision are
# the matching PyPI pair (a CUDA build that runs on the CPU; about 5.5 GB). lerobot 0.4.4 (the last
# release for Python 3.11) pins torch < 2.11, so it goes in without its pins, with what its dataset
# module needs; NumPy stays below 2.4, where 0.4.4's one-value features (next.reward) still convert
# (NumPy 2.4 turned that conversion into an error).
# Idempotent: it reinstalls only when pyproject.toml or this script changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${OMNIGYM_LEROBOT_VENV:-$root/.venv-lerobot}"
python="${PYTHON:-python3}"
case "$(uname -m)" in
  x86_64) torch_pair=("torch==2.14.1" "torchvision==0.29.1") ;;
  aarch64 | arm64) torch_pair=("torch==2.9.1" "torchvision==0.24.1") ;;  # CPU builds there
  *) echo "setup-lerobot.sh: no known torch/torchvision pair for $(uname -m)" >&2; exit 1 ;;
esac
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
stamp="$venv/.omnigym-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ "$root/scripts/setup-lerobot.sh" -nt "$stamp" ]; then
  pip=("$venv/bin/python" -m pip install -q --no-compile)
  "${pip[@]}" --upgrade pip "setuptools>=77,<81"
  "${pip[@]}" "${torch_pair[@]}"
  # lerobot's dataset module needs these; its hub pin (< 0.36) is left to diffusers and datasets,
  # which agree on a newer huggingface-hub that the dataset classes work with.
  "${pip[@]}" -e "$root[mujoco,offline,diffusion,dev]" "numpy<2.4" "${torch_pair[@]}" \
    "datasets>=4,<5" "accelerate>=1.10,<2" "av>=15,<16" "draccus==0.10.0" jsonlines deepdiff termcolor imageio einops
  "${pip[@]}" --no-deps "lerobot==0.4.4"
  touch "$stamp"
fi
