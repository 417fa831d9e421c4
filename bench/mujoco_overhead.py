"""omnigym's MuJoCo tasks against the physics they run: what an env step adds to ``mj_step``.

For each own task (PushT, Reach, PushCube, PickPlace; state-only ids, one env made with
``gym.make``, time-limit wrappers included) the same action sequence is timed twice:

* through omnigym: ``env.step`` (episodes that end are reset, and the resets are timed too);
* as a raw loop, the physical limit: ``data.ctrl[:] = ctrl; mj_step(model, data, nstep=frame_skip)``
  replaying the controls the env set, from the same initial states (restored where the env
  reset), so both runs simulate the same trajectory (``same_trajectory_<task>`` checks it).

PushT's actions are a random walk of the pusher target (random absolute targets would spend the
episode flying across the table, rarely touching the block); the others take uniform random
actions. Gymnasium's HalfCheetah-v5 is measured the same way, against a raw loop on its model
with its frame skip (5): the overhead of Gymnasium's own MuJoCo wrapper, for comparison.

Also measured: the cost of the ``image`` observation (the ``Pixels`` id minus the state-only
id, ms per frame at 96 x 96), and the batched env (``vectorization: vector``, ``vector.py``;
its default physics threads, one per core, and one thread) against a ``SyncVectorEnv`` of the
same number of single envs, at 16 and 64 envs.

The machine is shared and noisy, so the runs of each pair take turns (a load change hits both)
and each figure is the best of several runs (7 and 15 without ``--quick``; 5 and 9 for the
batched env): other processes only ever add time. ``loadavg`` in the JSON says how busy the machine was.

Last line: one JSON object; ``ratio`` = omnigym steps/s / raw-loop steps/s of the worst task
(target >= 0.75), ``ratio_<task>`` the same per task, ``halfcheetah_wrapper_ratio`` Gymnasium's
HalfCheetah steps/s / its raw loop, ``pixel_ms_per_frame_<task>``, and
``vector_<task>_<n>_steps_per_s``, ``vector_1thread_...`` and ``sync_...`` for the batched env.

``--render-sizes`` also times ``render()`` alone on PushT (``top`` camera) and PickPlace
(``front``) at 64², 96², 128² and 256² (median of 3 x 200 frames; ``frame_ms_<task>_<size>``): the
render-time table of docs/envs/manipulation.md.

Usage: ``omnigym bench mujoco_overhead [--quick] [--render-sizes]``
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 65 s (beside two training jobs)", "full": "not recorded"}
"""Quick: timed 2026-12-03 on the 2-core CPU beside two training jobs; full: not timed."""

TASKS = ("PushT", "Reach", "PushCube", "PickPlace")
VECTOR_SIZES = (16, 64)
REPEATS = 7


@dataclass
class Trace:
    """What the env did from ``reset(seed=0)``: enough to replay its physics without it."""

    initial: np.ndarray
    """Full integration state (``mjSTATE_INTEGRATION``) after the first reset."""
    ctrls: np.ndarray
    """``data.ctrl`` the env set at each step, ``[T, nu]``."""
    resets: dict[int, np.ndarray]
    """Step index -> integration state the env reset to just before that step."""
    final_qpos: np.ndarray
    """``data.qpos`` after the last step."""


def _mujoco() -> Any:
    from omnigym.envs.manipulation.rendering import mujoco  # picks the GL backend first

    return mujoco


def _integration_state(model: Any, data: Any) -> np.ndarray:
    mujoco = _mujoco()
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    return state


def task_actions(task: str, num_steps: int, seed: int = 0) -> np.ndarray:
    """Precomputed float32 actions: a random walk for PushT's absolute targets, else uniform."""
    rng = np.random.default_rng(seed)
    if task == "PushT":
        steps = rng.normal(0.0, 0.15, (num_steps, 2))
        return np.clip(np.cumsum(steps, axis=0), -1.0, 1.0).astype(np.float32)
    dim = 6 if task == "HalfCheetah" else 4
    return rng.uniform(-1.0, 1.0, (num_steps, dim)).astype(np.float32)


def record(env: Any, actions: np.ndarray) -> Trace:
    """Run ``actions`` from ``reset(seed=0)``, noting controls and the states resets set."""
    raw = env.unwrapped
    env.reset(seed=0)
    initial = _integration_state(raw.model, raw.data)
    ctrls = np.empty((len(actions), raw.model.nu))
    resets = {}
    for t, action in enumerate(actions):
        _, _, terminated, truncated, _ = env.step(action)
        ctrls[t], final_qpos = raw.data.ctrl, raw.data.qpos.copy()
        if terminated or truncated:
            env.reset()
            resets[t + 1] = _integration_state(raw.model, raw.data)
    return Trace(initial, ctrls, resets, final_qpos)


def time_env(env: Any, actions: np.ndarray) -> float:
    """Seconds for ``actions`` through the env from ``reset(seed=0)`` (resets included)."""
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return time.perf_counter() - start


def time_raw(model: Any, trace: Trace, frame_skip: int) -> tuple[float, bool]:
    """Seconds for the trace's controls as a raw ``mj_step(nstep=frame_skip)`` loop.

    Returns:
        The time, and whether the loop ended where the env did (same qpos, bit for bit).
    """
    mujoco = _mujoco()
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    data = mujoco.MjData(model)
    mujoco.mj_setState(model, data, trace.initial, spec)
    resets, ctrl = trace.resets, data.ctrl
    start = time.perf_counter()
    for t, step_ctrl in enumerate(trace.ctrls):
        if t in resets:
            mujoco.mj_setState(model, data, resets[t], spec)
        ctrl[:] = step_ctrl
        mujoco.mj_step(model, data, nstep=frame_skip)
    seconds = time.perf_counter() - start
    return seconds, bool(np.array_equal(data.qpos, trace.final_qpos))


def alternate(runs: dict[str, Callable[[], float]], repeats: int = REPEATS) -> dict[str, float]:
    """Best (least) seconds of each run, the runs taking turns so that load changes hit them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(run())
    return {name: min(values) for name, values in times.items()}


def measure_overhead(env_id: str, actions: np.ndarray, repeats: int = REPEATS) -> dict[str, Any]:
    """Env steps/s, raw-loop steps/s and their ratio for one env id."""
    import gymnasium as gym

    env = gym.make(env_id)
    raw = env.unwrapped
    trace = record(env, actions)
    same: list[bool] = []

    def raw_loop() -> float:
        seconds, matched = time_raw(raw.model, trace, raw.frame_skip)
        same.append(matched)
        return seconds

    seconds = alternate({"env": lambda: time_env(env, actions), "raw": raw_loop}, repeats)
    env.close()
    env_sps, raw_sps = len(actions) / seconds["env"], len(actions) / seconds["raw"]
    return {
        "env_steps_per_s": env_sps,
        "raw_steps_per_s": raw_sps,
        "ratio": env_sps / raw_sps,
        "frame_skip": raw.frame_skip,
        "resets": len(trace.resets),
        "same_trajectory": all(same),
    }


def measure_pixels(task: str, actions: np.ndarray, repeats: int = REPEATS) -> float | None:
    """Milliseconds the ``image`` observation (96 x 96) adds to a step; None without OpenGL."""
    import gymnasium as gym

    mujoco = _mujoco()
    state_env = gym.make(f"omnigym/{task}-v0")
    try:
        pixel_env = gym.make(f"omnigym/{task}Pixels-v0")
        pixel_env.reset(seed=0)  # the renderer is made at the first frame: not timed
    except mujoco.FatalError as exc:
        print(f"{task}: no offscreen OpenGL, pixel cost not measured ({exc})")
        return None
    seconds = alternate(
        {"pixels": lambda: time_env(pixel_env, actions), "state": lambda: time_env(state_env, actions)},
        repeats,
    )
    pixel_env.close()
    state_env.close()
    return 1000.0 * (seconds["pixels"] - seconds["state"]) / len(actions)


RENDER_SIZES = (64, 96, 128, 256)


def measure_frames(task: str, size: int, frames: int = 200, repeats: int = 3) -> float | None:
    """Median milliseconds of one ``render()`` frame of ``size`` x ``size``; None without OpenGL."""
    import gymnasium as gym

    mujoco = _mujoco()
    env = gym.make(f"omnigym/{task}-v0", render_mode="rgb_array", render_size=size)
    env.reset(seed=0)
    try:
        env.render()  # the renderer is made at the first frame: not timed
    except mujoco.FatalError as exc:
        print(f"{task}: no offscreen OpenGL, frames not timed ({exc})")
        return None
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(frames):
            env.render()
        times.append((time.perf_counter() - start) / frames)
    env.close()
    return 1000.0 * float(np.median(times))


def measure_vector(task: str, num_envs: int, env_steps: int, repeats: int = REPEATS) -> dict[str, float]:
    """Env steps/s of ``num_envs`` copies: batched (default threads and one), and SyncVectorEnv.

    Each run takes about ``env_steps`` env steps (whole vector steps).
    """
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    mode = AutoresetMode.SAME_STEP
    env_id = f"omnigym/{task}-v0"
    envs = {
        "vector": gym.make_vec(
            env_id, num_envs, vectorization_mode="vector_entry_point", autoreset_mode=mode
        ),
        "vector_1thread": gym.make_vec(
            env_id, num_envs, vectorization_mode="vector_entry_point", autoreset_mode=mode, num_threads=1
        ),
        "sync": gym.make_vec(
            env_id, num_envs, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode}
        ),
    }
    num_steps = max(1, env_steps // num_envs)
    actions = task_actions(task, num_steps * num_envs, seed=1).reshape(num_steps, num_envs, -1)

    def run(vector_env: Any) -> float:
        vector_env.reset(seed=0)
        vector_env.step(actions[0])  # warm: first-step allocations
        start = time.perf_counter()
        for step_actions in actions:
            vector_env.step(step_actions)
        return time.perf_counter() - start

    seconds = alternate({name: functools.partial(run, env) for name, env in envs.items()}, repeats)
    figures = {name: num_steps * num_envs / seconds[name] for name in envs}
    figures["threads"] = float(envs["vector"].unwrapped.physics.num_threads)
    for env in envs.values():
        env.close()
    return figures


def main() -> None:
    """Measure every figure and print them (the last line is JSON)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short timings (under a minute)")
    parser.add_argument(
        "--render-sizes", action="store_true", help="also render() alone at 64-256 px (PushT, PickPlace)"
    )
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1 (no torch here; MuJoCo's threads are separate)
    num_steps = 600 if args.quick else 1500
    pixel_steps = 200 if args.quick else 600
    vector_env_steps = 640 if args.quick else 2560
    repeats = REPEATS if args.quick else 15
    os.environ.setdefault("MUJOCO_GL", "egl")
    import omnigym.envs  # noqa: F401  (registers the ids)

    figures: dict[str, Any] = {"bench": "mujoco_overhead"}
    for task in TASKS:
        run = measure_overhead(f"omnigym/{task}-v0", task_actions(task, num_steps), repeats)
        print(f"{task:10s} {run}")
        figures[f"ratio_{task}"] = run["ratio"]
        figures[f"omnigym_{task}_steps_per_s"] = run["env_steps_per_s"]
        figures[f"raw_{task}_steps_per_s"] = run["raw_steps_per_s"]
        figures[f"same_trajectory_{task}"] = run["same_trajectory"]
    cheetah = measure_overhead("HalfCheetah-v5", task_actions("HalfCheetah", 2 * num_steps), repeats)
    print(f"HalfCheetah-v5 (Gymnasium) {cheetah}")
    figures["halfcheetah_wrapper_ratio"] = cheetah["ratio"]
    figures["halfcheetah_gym_steps_per_s"] = cheetah["env_steps_per_s"]
    figures["halfcheetah_raw_steps_per_s"] = cheetah["raw_steps_per_s"]
    for task in TASKS:
        figures[f"pixel_ms_per_frame_{task}"] = measure_pixels(task, task_actions(task, pixel_steps), repeats)
        print(f"{task:10s} image 96x96: {figures[f'pixel_ms_per_frame_{task}']} ms/frame")
    for task in TASKS:
        for num_envs in VECTOR_SIZES:
            vector = measure_vector(task, num_envs, vector_env_steps, 5 if args.quick else 9)
            print(f"{task:10s} {num_envs} envs, steps/s: {vector}")
            for name in ("vector", "vector_1thread", "sync"):
                figures[f"{name}_{task}_{num_envs}_steps_per_s"] = vector[name]
            figures["vector_threads"] = vector["threads"]
    for task in ("PushT", "PickPlace") if args.render_sizes else ():
        for size in RENDER_SIZES:
            figures[f"frame_ms_{task}_{size}"] = measure_frames(task, size)
            print(f"{task:10s} render() {size}x{size}: {figures[f'frame_ms_{task}_{size}']} ms")
    worst = min(figures[f"ratio_{task}"] for task in TASKS)
    figures["loadavg"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    figures["cores"] = os.cpu_count()
    figures["torch_threads"] = threads
    figures["quick"] = args.quick
    print(json.dumps({"bench": figures.pop("bench"), "ratio": worst, **figures}))


if __name__ == "__main__":
    main()
