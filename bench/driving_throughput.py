"""omnigym's batched driving env vs highway-env: simulated seconds per wall-clock second.

Like with like: both simulate about 50 vehicles per scene. omnigym runs 64 scenes as one
``DrivingVectorEnv`` (vector observations; again with the 64x64 BEV raster; and in plan mode,
where one step drives 0.5 s); highway-env runs ``highway-v0`` in its default configuration
(50 vehicles, 15 Hz physics, one decision per simulated second), one env as its users run it.
Both take random actions; resets are included in the timings.

Scenes are generated (and cached on disk) before timing: like NAVSIM's logs they are data the
simulator reads, not part of stepping. The generation cost is reported separately.

Last line: one JSON object; ``ratio`` = omnigym simulated s/s (control mode, vector obs) /
highway-env simulated s/s.

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

NUM_ENVS = 64
NUM_SCENES = 64


def _omnigym_env(env_id: str, cache_dir: str, **kwargs: Any) -> Any:
    import gymnasium as gym

    import omnigym.envs  # noqa: F401  (registers the ids)

    return gym.make_vec(
        env_id,
        num_envs=NUM_ENVS,
        vectorization_mode="vector_entry_point",
        num_scenes=NUM_SCENES,
        cache_dir=cache_dir,
        **kwargs,
    )


def measure_omnigym(env_id: str, seconds: float, cache_dir: str, **kwargs: Any) -> dict[str, float]:
    """Random-action stepping of 64 envs for about ``seconds`` of wall time."""
    envs = _omnigym_env(env_id, cache_dir, **kwargs)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(32)]
    # the first episodes build each scene's rasters: warm them before timing
    for i in range(20):
        envs.step(actions[i % len(actions)])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % len(actions)])
        steps += 1
    wall = time.perf_counter() - start
    step_seconds = (
        0.1 * envs.unwrapped.config.replan_every if envs.unwrapped.config.action_mode == "plan" else 0.1
    )
    envs.close()
    env_steps = steps * NUM_ENVS
    return {
        "env_steps_per_s": env_steps / wall,
        "sim_seconds_per_s": env_steps * step_seconds / wall,
        "ms_per_vector_step": 1000 * wall / steps,
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
    parser.add_argument("--quick", action="store_true", help="short timings (about 30 s in all)")
    args = parser.parse_args()
    seconds = 3.0 if args.quick else 15.0
    highway_seconds = 6.0 if args.quick else 30.0
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    with tempfile.TemporaryDirectory() as cache_dir:
        generation = scene_generation_cost(4 if args.quick else 16)
        print(
            f"scene generation: {generation['ms_per_scene']:.0f} ms/scene, "
            f"{generation['agents_per_scene']:.0f} agents"
        )
        vector = measure_omnigym("omnigym/Driving-v0", seconds, cache_dir)
        print(f"omnigym Driving-v0, 64 envs, vector obs: {vector}")
        raster = measure_omnigym(
            "omnigym/Driving-v0",
            seconds,
            cache_dir,
            obs_keys=("state", "agents", "route", "lanes", "lights", "image"),
        )
        print(f"omnigym Driving-v0, 64 envs, vector obs + 64x64 BEV: {raster}")
        plan = measure_omnigym("omnigym/DrivingPlan-v0", seconds, cache_dir)
        print(f"omnigym DrivingPlan-v0, 64 envs, vector obs: {plan}")
        reactive = measure_omnigym("omnigym/DrivingReactive-v0", seconds, cache_dir)
        print(f"omnigym DrivingReactive-v0, 64 envs, vector obs: {reactive}")
    highway = measure_highway(highway_seconds)
    print(f"highway-env highway-v0 (default config): {highway}")
    raster_ms = (raster["ms_per_vector_step"] - vector["ms_per_vector_step"]) / NUM_ENVS
    figures = {
        "bench": "driving_throughput",
        "ratio": vector["sim_seconds_per_s"] / highway["sim_seconds_per_s"],
        "ratio_with_raster": raster["sim_seconds_per_s"] / highway["sim_seconds_per_s"],
        "ratio_plan_mode": plan["sim_seconds_per_s"] / highway["sim_seconds_per_s"],
        "ratio_reactive": reactive["sim_seconds_per_s"] / highway["sim_seconds_per_s"],
        "omnigym_sim_s_per_s": vector["sim_seconds_per_s"],
        "omnigym_env_steps_per_s": vector["env_steps_per_s"],
        "omnigym_raster_env_steps_per_s": raster["env_steps_per_s"],
        "omnigym_plan_sim_s_per_s": plan["sim_seconds_per_s"],
        "omnigym_reactive_sim_s_per_s": reactive["sim_seconds_per_s"],
        "raster_ms_per_env_step": raster_ms,
        "highway_sim_s_per_s": highway["sim_seconds_per_s"],
        "highway_env_steps_per_s": highway["env_steps_per_s"],
        "scene_generation_ms": generation["ms_per_scene"],
        "agents_per_scene": generation["agents_per_scene"],
        "quick": args.quick,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
