"""Steps per second of every omnigym game with image observations, against peers in the same run.

Each game runs as one env in this process with random discrete actions; only ``reset`` and
``step`` are timed and resets count as steps. omnigym's games emit ``image`` + ``text`` (Atari:
the 84x84x4 ``frames`` stack + ``image`` + ``text``). Peers, like with like:

- **Sokoban** vs gym-sokoban 0.0.6 (the generator RAGEN and the Sokoban RL literature use): 6x6
  rooms with one box, 96x96 RGB observations (16-pixel tiles on both sides). gym-sokoban needs the
  legacy ``gym`` package and ``pkg_resources``, so it is installed once into its own directory
  (``~/.cache/omnigym/peers/gym-sokoban``, from PyPI) and run in a subprocess; without network or
  PyPI it is skipped with the reason.
- **FrozenLake** vs Gymnasium's ``FrozenLake-v1`` with ``render_mode="rgb_array"`` and a
  ``render()`` per step (256x256 frames on a 4x4 lake; omnigym draws 64-pixel tiles to match).
- **Atari Pong** vs Gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation`` on
  ``ALE/Pong-v5`` (the pipeline omnigym wraps), both emitting only the frame stack: the
  wrapper's overhead.

Last line: one JSON object; ``ratio`` = omnigym Sokoban steps/s / gym-sokoban steps/s (null when
gym-sokoban cannot be installed), ``ratio_frozenlake`` and ``ratio_atari`` the same for the other
peers, and ``<game>_steps_per_s`` for every game.

Usage: ``omnigym bench games_throughput [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 30 s (beside two training jobs)", "full": "not recorded"}
"""Quick: timed 2026-12-03 on the 2-core CPU beside two training jobs; full: not timed."""

GAMES = {
    "sokoban": ("omnigym/Sokoban-v0", {"size": 6, "num_boxes": 1, "tile_size": 16}),
    "maze": ("omnigym/Maze-v0", {}),
    "frozenlake": ("omnigym/FrozenLake-v0", {}),
    "frozenlake_256px": ("omnigym/FrozenLake-v0", {"size": 4, "tile_size": 64}),
    "numberline": ("omnigym/NumberLine-v0", {}),
    "ezpoints": ("omnigym/EZPoints-v0", {}),
    "points24": ("omnigym/Points24-v0", {}),
    "blackjack": ("omnigym/Blackjack-v0", {}),
    "atari_pong": ("omnigym/Atari-Pong-v0", {"obs_keys": ("frames", "image", "text")}),
    "atari_pong_frames": ("omnigym/Atari-Pong-v0", {"obs_keys": ("frames",)}),
}
"""Figure name -> (env id, kwargs); every grid/card game emits ``image`` + ``text``."""
GYM_SOKOBAN_DIR = Path.home() / ".cache" / "omnigym" / "peers" / "gym-sokoban"
GYM_SOKOBAN_PACKAGES = [
    "gym-sokoban==0.0.6", "gym==0.26.2", "gym-notices", "cloudpickle", "setuptools<70", "requests",
    "urllib3", "idna", "certifi", "charset-normalizer", "imageio", "tqdm",
]  # fmt: skip
"""Installed with ``--no-deps`` into their own directory: the rest (numpy, pillow) is the venv's."""

GYM_SOKOBAN_SCRIPT = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import numpy as np
from gym_sokoban.envs.sokoban_env import SokobanEnv
seconds = float(sys.argv[1])
env = SokobanEnv(dim_room=(6, 6), num_boxes=1, max_steps=100)
rng = np.random.default_rng(0)
steps, wall = 0, 0.0
start = time.perf_counter(); env.reset(); wall += time.perf_counter() - start; steps += 1
while wall < seconds:
    action = int(rng.integers(1, 5))  # push up/down/left/right (0 is no-op)
    start = time.perf_counter()
    obs, _, done, _ = env.step(action)
    if done:
        obs = env.reset(); steps += 1
    wall += time.perf_counter() - start
    steps += 1
print(json.dumps({"steps_per_s": steps / wall, "shape": list(np.asarray(obs).shape)}))
"""


def run_random(env: Any, seconds: float, render: bool = False) -> float:
    """Steps/s of ``env`` under uniformly random actions for about ``seconds`` of timed calls."""
    env.action_space.seed(0)
    steps, wall, seed = 0, 0.0, 0
    start = time.perf_counter()
    env.reset(seed=seed)
    wall += time.perf_counter() - start
    steps += 1
    while wall < seconds:
        action = env.action_space.sample()
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        if render:
            env.render()
        if terminated or truncated:
            seed += 1
            env.reset(seed=seed)
            steps += 1
        wall += time.perf_counter() - start
        steps += 1
    return steps / wall


def measure_omnigym(seconds: float) -> dict[str, float]:
    """Steps/s of every game in :data:`GAMES`."""
    import gymnasium as gym

    import omnigym.envs

    omnigym.envs.register_envs()
    rates = {}
    for name, (env_id, kwargs) in GAMES.items():
        env = gym.make(env_id, **kwargs)
        rates[name] = run_random(env, seconds)
        env.close()
        print(f"omnigym {name:18s} {env_id:28s} {rates[name]:>10,.0f} steps/s")
    return rates


def install_gym_sokoban() -> str | None:
    """Install gym-sokoban into its own directory once; the reason it is unavailable, or None."""
    marker = GYM_SOKOBAN_DIR / ".installed"
    if marker.exists():
        return None
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(GYM_SOKOBAN_DIR)]
    try:
        proc = subprocess.run([*command, *GYM_SOKOBAN_PACKAGES], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "pip install of gym-sokoban timed out"
    if proc.returncode != 0:
        return f"pip install of gym-sokoban failed: {proc.stderr.strip().splitlines()[-1:]}"
    marker.touch()
    return None


def measure_gym_sokoban(seconds: float) -> tuple[float | None, str | None]:
    """gym-sokoban's steps/s (6x6, one box, 96x96 RGB), or None and the reason."""
    reason = install_gym_sokoban()
    if reason is not None:
        return None, reason
    env = {**os.environ, "PYTHONPATH": str(GYM_SOKOBAN_DIR)}
    proc = subprocess.run(
        [sys.executable, "-c", GYM_SOKOBAN_SCRIPT, str(seconds)], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        return None, f"gym-sokoban failed: {proc.stderr.strip().splitlines()[-1:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["shape"] == [96, 96, 3], result
    return float(result["steps_per_s"]), None


def measure_gymnasium_frozenlake(seconds: float) -> float:
    """Gymnasium FrozenLake-v1 (4x4, slippery) with an ``rgb_array`` render every step."""
    import gymnasium as gym

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = gym.make("FrozenLake-v1", render_mode="rgb_array")
    rate = run_random(env, seconds, render=True)
    env.reset(seed=0)
    assert np.asarray(env.render()).shape == (256, 256, 3)
    env.close()
    return rate


def measure_gymnasium_atari(seconds: float) -> float:
    """Gymnasium's Atari pipeline on Pong: AtariPreprocessing + 4-frame stack, sticky actions."""
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    env = FrameStackObservation(AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)), 4)
    rate = run_random(env, seconds)
    env.close()
    return rate


def main() -> None:
    """Measure every game and the peers; print the figures (the last line is JSON)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short timings (well under a minute)")
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1 (the games do not use torch)
    seconds = 1.0 if args.quick else 5.0
    ours = measure_omnigym(seconds)
    sokoban, sokoban_reason = measure_gym_sokoban(seconds)
    print(f"gym-sokoban 6x6, 1 box, 96x96 RGB: {f'{sokoban:,.0f} steps/s' if sokoban else sokoban_reason}")
    frozenlake = measure_gymnasium_frozenlake(seconds)
    print(f"Gymnasium FrozenLake-v1, rgb_array 256x256: {frozenlake:,.0f} steps/s")
    atari = measure_gymnasium_atari(seconds)
    print(f"Gymnasium Atari pipeline (Pong, 84x84x4): {atari:,.0f} steps/s")
    figures: dict[str, Any] = {
        "bench": "games_throughput",
        "ratio": ours["sokoban"] / sokoban if sokoban else None,
        "ratio_frozenlake": ours["frozenlake_256px"] / frozenlake,
        "ratio_atari": ours["atari_pong_frames"] / atari,
        **{f"{name}_steps_per_s": rate for name, rate in ours.items()},
        "gym_sokoban_steps_per_s": sokoban,
        "gym_sokoban_skipped": sokoban_reason,
        "gymnasium_frozenlake_steps_per_s": frozenlake,
        "gymnasium_atari_steps_per_s": atari,
        "torch_threads": threads,
        "quick": args.quick,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
