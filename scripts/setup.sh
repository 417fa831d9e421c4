#!/usr/bin/env bash
# Creates the virtualenv (.venv, or $OMNIGYM_VENV) and installs omnigym with what the demo and the
# tests need. Idempotent: it reinstalls only when pyproject.toml or this script changed. Source it
# or run it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${OMNIGYM_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

# MuJoCo renders offscreen through EGL or, where EGL is missing, OSMesa (Debian's libosmesa6).
# Installed only when missing and possible (root with apt-get, as on CI); a failure only warns.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && ! dpkg -s libosmesa6 >/dev/null 2>&1; then
  { apt-get install -y -qq libosmesa6 || { apt-get update -qq && apt-get install -y -qq libosmesa6; }; } \
    >/dev/null 2>&1 || echo "setup.sh: could not install libosmesa6 (MuJoCo falls back to EGL)" >&2
fi
# MiniWoB++ (omnigym[gui]) drives Debian's headless Chromium; without it the browser tests skip.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
  && ! { dpkg -s chromium >/dev/null 2>&1 && dpkg -s chromium-driver >/dev/null 2>&1; }; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq chromium chromium-driver \
    || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }; } >/dev/null 2>&1 \
    || echo "setup.sh: could not install chromium (the MiniWoB++ browser tests will skip)" >&2
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
stamp="$venv/.omnigym-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ "$root/scripts/setup.sh" -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip "setuptools>=77"  # 77: SPDX license (wheel smoke builds without isolation)
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    # No CUDA here: take the CPU build (an unpinned torch would pull a multi-GB CUDA build).
    "$venv/bin/python" -m pip install -q --no-compile "torch==2.13.0"
  fi
  "$venv/bin/python" -m pip install -q --no-compile \
    -e "$root[classic,mujoco,driving,robotics,gui,games,vlm,diffusion,offline,ray,bench,dev,pusht,view,deploy]"
  # LeRobot's PushT: without its pygame pin, which the pusht extra's pygame-ce satisfies (pyproject.toml)
  "$venv/bin/python" -m pip install -q --no-compile --no-deps "gym-pusht==0.1.8"
  # Peer env suites (docs/envs/peer-adapters.md), without the pins that would replace installed
  # packages: sapien wants opencv-python beside the headless build, gym-aloha wants MuJoCo 3.
  "$venv/bin/python" -m pip install -q --no-compile --no-deps \
    "browsergym-miniwob==0.14.3" "browsergym-core==0.14.3" "playwright==1.44.0" "greenlet==3.0.3" \
    "pyee==11.1.0" beautifulsoup4 soupsieve "lxml<6" \
    "gym-aloha==0.1.5" "dm_control==1.0.41" dm-env dm-tree labmaze wrapt \
    "mani_skill==3.0.1" "sapien==3.0.3" transforms3d dacite trimesh "pytorch_kinematics==0.7.6" \
    arm-pytorch-utilities pytorch-seed defusedxml
  "$venv/bin/python" -m pip install -q --no-compile ipython  # mani_skill imports IPython.display
  # pip compiles bytecode on one core; compileall uses them all (a third of the install time)
  "$venv/bin/python" -m compileall -q -j 0 "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
  touch "$stamp"
fi
