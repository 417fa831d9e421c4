"""omnigym's batched driving env vs highway-env: simulated seconds per wall-clock second.

Like with like: both simulate about 50 vehicles per scene. omnigym runs 64 scenes as one
``DrivingVectorEnv``: direct control with vector observations, again with the 64x64 BEV raster,
plan mode (one step drives 0.5 s) and reactive traffic; each with a route-following cruise driver
(episodes run their course, as under a policy that drives) and with random actions (episodes end
within a few seconds, so resets dominate). highway-env runs ``highway-v0`` in its default
configuration (50 vehicles, 15 Hz physics, one decision per simulated second), one env as its
users run it, with random actions. Resets are included in all timings.

Scenes are generated (and cached on disk) before timing: like NAVSIM's logs they are data the
simulator reads, not part of stepping. The generation cost is reported separately.

Last line: one JSON object; ``ratio`` = omnigym simulated s/s with reactive traffic (IDM/MOBIL
agents, as highway-env's; control mode, vector obs, cruise driver) / highway-env simulated s/s:
the like-for-like figure. ``ratio_<run>`` the same for the other runs (``ratio_control``: log
replay traffic, which highway-env does not have).

Usage: ``omnigym bench driving_throughput [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

DURATIONS = {"quick": "about 90 s", "full": "4 min"}
"""On a 2-core CPU, nothing else running: docs/envs/driving.md, "Batched stepping and performance"."""

NUM_ENVS = 64
NUM_SCENES = 64


def _omnigym_env(env_id: str, cache_dir: str, num_envs: int = NUM_ENVS, **kwargs: Any) -> Any:
    import gymnasium as gym

    import omnigym.envs  # noqa: F401  (registers the ids)

    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        num_scenes=max(num_envs, NUM_SCENES),
        cache_dir=cache_dir,
        **kwargs,
    )


def cruise_actions(obs: dict[str, np.ndarray], plan_mode: bool) -> np.ndarray:
    """A route-following driver computed from the observations (speed, steering, route points).

    Pure pursuit on the ``route`` key toward 80 % of the speed limit; in plan mode, the route
    points at the distances it would cover. Cheap, so the timing is the env's.
    """
    state, route = obs["state"], obs["route"]
    speed, steer, limit = state[:, 0], state[:, 2], state[:, 6]
    xy = route[..., :2]
    arc = np.cumsum(
        np.linalg.norm(np.diff(np.concatenate([np.zeros_like(xy[:, :1]), xy], axis=1), axis=1), axis=-1),
        axis=1,
    )
    rows = np.arange(len(speed))[:, None]
    if plan_mode:
        target = 0.8 * limit[:, None] * np.arange(1, 9)[None] * 0.5  # metres along the route at 0.5 s .. 4 s
        index = np.clip(np.sum(arc[:, None, :] < target[..., None], axis=-1), 0, arc.shape[1] - 1)
        plan = np.zeros((len(speed), 8, 3))
        plan[..., :2] = xy[rows, index]
        return plan
    lookahead = np.maximum(5.0, 0.8 * speed)
    index = np.clip(np.sum(arc < lookahead[:, None], axis=1), 0, arc.shape[1] - 1)
    goal = xy[rows[:, 0], index]
    curvature = 2 * goal[:, 1] / np.maximum(np.sum(goal**2, axis=1), 1.0)
    steer_rate = (np.arctan(curvature * 3.09) - steer) / 0.2
    accel = 1.0 * (0.8 * limit - speed)
    return np.stack([accel, steer_rate], axis=1)


def measure_omnigym(
    env_id: str, seconds: float, cache_dir: str, *, random: bool, **kwargs: Any
) -> dict[str, float]:
    """64 envs stepped for about ``seconds`` of wall time (only ``step`` is timed).

    Actions: random, or the route-following cruise driver.
    """
    envs = _omnigym_env(env_id, cache_dir, **kwargs)
    plan_mode = envs.unwrapped.config.action_mode == "plan"
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    samples = [envs.action_space.sample() for _ in range(32)]

    def act(step: int) -> np.ndarray:
        return samples[step % len(samples)] if random else cruise_actions(obs, plan_mode)

    # the first episodes build each scene's rasters: warm them before timing
    for i in range(20):
        obs = envs.step(act(i))[0]
    steps, wall, ends = 0, 0.0, 0
    while wall < seconds:
        action = act(steps)
        start = time.perf_counter()
        obs, _, terminated, truncated, _ = envs.step(action)
        wall += time.perf_counter() - start
        ends += int(np.sum(terminated | truncated))
        steps += 1
    step_seconds = (
        0.1 * envs.unwrapped.config.replan_every if envs.unwrapped.config.action_mode == "plan" else 0.1
    )
    envs.close()
    env_steps = steps * envs.num_envs
    return {
        "env_steps_per_s": env_steps / wall,
        "sim_seconds_per_s": env_steps * step_seconds / wall,
        "ms_per_vector_step": 1000 * wall / steps,
        "episode_ends_per_vector_step": ends / steps,
    }


def measure_highway(seconds: float) -> dict[str, float]:
    """highway-v0 (default config) with random actions for about ``seconds`` of wall time."""
    import gymnasium as gym
    import highway_env  # noqa: F401  (registers highway-v0)

    env = gym.make("highway-v0")
    config = env.unwrapped.config
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, resets, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds or steps < 3:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
            resets += 1
    wall = time.perf_counter() - start
    per_decision = 1.0 / config["policy_frequency"]
    env.close()
    return {
        "env_steps_per_s": steps / wall,
        "sim_seconds_per_s": steps * per_decision / wall,
        "vehicles": float(config["vehicles_count"]),
        "simulation_frequency": float(config["simulation_frequency"]),
        "resets": float(resets),
    }


def scene_generation_cost(count: int) -> dict[str, float]:
    """Seconds to generate one procedural scene (50 agents, 16 s), and its agent count."""
    from omnigym.envs.driving.scenes import SceneConfig, generate_scene, split_scene_ids

    ids = split_scene_ids("val", count)
    start = time.perf_counter()
    scenes = [generate_scene(i, SceneConfig()) for i in ids]
    wall = time.perf_counter() - start
    return {
        "ms_per_scene": 1000 * wall / count,
        "agents_per_scene": float(np.mean([s.log.num_agents for s in scenes])),
    }


def main() -> None:
    """Measure both simulators and print the figures (the last line is JSON)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short timings (about 90 s in all)")
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1 (the envs do not use torch)
    seconds = 3.0 if args.quick else 15.0
    highway_seconds = 6.0 if args.quick else 30.0
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    with tempfile.TemporaryDirectory() as cache_dir:
        generation = scene_generation_cost(4 if args.quick else 16)
        print(
            f"scene generation: {generation['ms_per_scene']:.0f} ms/scene, "
            f"{generation['agents_per_scene']:.0f} agents"
        )
        runs = {
            "control": ("omnigym/Driving-v0", {}),
            "control_bev": (
                "omnigym/Driving-v0",
                {"obs_keys": ("state", "agents", "route", "lanes", "lights", "image")},
            ),
            "plan": ("omnigym/DrivingPlan-v0", {}),
            "reactive": ("omnigym/DrivingReactive-v0", {}),
            "control_256_envs": ("omnigym/Driving-v0", {"num_envs": 256}),  # how it scales (not the ratio)
        }
        figures_by_run: dict[str, dict[str, float]] = {}
        for name, (env_id, kwargs) in runs.items():
            for random in (False, True) if "256" not in name else (False,):
                key = f"{name}_random" if random else name
                figures_by_run[key] = measure_omnigym(env_id, seconds, cache_dir, random=random, **kwargs)
                print(f"omnigym {key:18s} {env_id}: {figures_by_run[key]}")
    highway = measure_highway(highway_seconds)
    print(f"highway-env highway-v0 (default config, random actions): {highway}")
    peer = highway["sim_seconds_per_s"]
    raster_ms = (
        figures_by_run["control_bev"]["ms_per_vector_step"] - figures_by_run["control"]["ms_per_vector_step"]
    ) / NUM_ENVS
    figures: dict[str, Any] = {
        "bench": "driving_throughput",
        "ratio": figures_by_run["reactive"]["sim_seconds_per_s"] / peer,  # reactive traffic on both sides
        **{f"ratio_{key}": run["sim_seconds_per_s"] / peer for key, run in figures_by_run.items()},
        **{f"omnigym_{key}_sim_s_per_s": run["sim_seconds_per_s"] for key, run in figures_by_run.items()},
        **{f"omnigym_{key}_env_steps_per_s": run["env_steps_per_s"] for key, run in figures_by_run.items()},
        "raster_ms_per_env_step": raster_ms,
        "highway_sim_s_per_s": peer,
        "highway_env_steps_per_s": highway["env_steps_per_s"],
        "scene_generation_ms": generation["ms_per_scene"],
        "agents_per_scene": generation["agents_per_scene"],
        "torch_threads": threads,
        "quick": args.quick,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
