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

The like-for-like comparison runs first, interleaved: 5 rounds (3 with ``--quick``) of omnigym
with reactive traffic (IDM agents, as highway-env's IDM/MOBIL vehicles; control mode, vector obs,
cruise driver) for 6 s, then highway-env for 12 s. Each round's ratio compares two stretches
timed seconds apart, so the drift of a shared machine's speed between minutes falls on both sides.

Last line: one JSON object; ``ratio`` = the median of the rounds' ratios of simulated s/s
(``ratio_rounds``: each round's). ``ratio_<run>`` = a run's simulated s/s over highway-env's
pooled over the rounds (``ratio_reactive``: the pooled reactive rounds; ``ratio_control``: log
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

DURATIONS = {"quick": "about 2 min", "full": "5 min"}
"""On a 2-core CPU, nothing else running: docs/envs/driving.md, "Batched stepping and performance"."""

NUM_ENVS = 64
NUM_SCENES = 64
ROUNDS = 5
"""Interleaved rounds of the like-for-like comparison in a full run (3 with ``--quick``)."""
BEV_KEYS = ("state", "agents", "route", "lanes", "lights", "image")


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


class OmnigymTimer:
    """64 envs of one omnigym env id, stepped in timed stretches (only ``step`` is timed).

    Actions: random, or the route-following cruise driver. Figures pool every stretch so far.
    """

    def __init__(self, env_id: str, cache_dir: str, *, random: bool, **kwargs: Any) -> None:
        self.envs = _omnigym_env(env_id, cache_dir, **kwargs)
        config = self.envs.unwrapped.config
        self.plan_mode = config.action_mode == "plan"
        self.step_seconds = 0.1 * config.replan_every if self.plan_mode else 0.1
        self.obs, _ = self.envs.reset(seed=0)
        self.envs.action_space.seed(0)
        self.samples = [self.envs.action_space.sample() for _ in range(32)]
        self.random = random
        self.steps, self.wall, self.ends, self.taken = 0, 0.0, 0, 0
        for _ in range(20):  # the first episodes build each scene's rasters: warm them before timing
            self.obs = self.envs.step(self._act())[0]

    def _act(self) -> np.ndarray:
        self.taken += 1
        if self.random:
            return self.samples[self.taken % len(self.samples)]
        return cruise_actions(self.obs, self.plan_mode)

    def run(self, seconds: float) -> dict[str, float]:
        """Step for about ``seconds`` of timed wall time; the figures of this stretch alone."""
        steps, wall = 0, 0.0
        while wall < seconds:
            action = self._act()
            start = time.perf_counter()
            self.obs, _, terminated, truncated, _ = self.envs.step(action)
            wall += time.perf_counter() - start
            self.ends += int(np.sum(terminated | truncated))
            steps += 1
        self.steps, self.wall = self.steps + steps, self.wall + wall
        return self._figures(steps, wall)

    def figures(self) -> dict[str, float]:
        """Every stretch pooled."""
        return {
            **self._figures(self.steps, self.wall),
            "episode_ends_per_vector_step": self.ends / self.steps,
        }

    def _figures(self, steps: int, wall: float) -> dict[str, float]:
        env_steps = steps * self.envs.num_envs
        return {
            "env_steps_per_s": env_steps / wall,
            "sim_seconds_per_s": env_steps * self.step_seconds / wall,
            "ms_per_vector_step": 1000 * wall / steps,
        }

    def close(self) -> None:
        """Close the envs."""
        self.envs.close()


def measure_omnigym(
    env_id: str, seconds: float, cache_dir: str, *, random: bool, **kwargs: Any
) -> dict[str, float]:
    """64 envs stepped for about ``seconds`` of wall time (see :class:`OmnigymTimer`)."""
    timer = OmnigymTimer(env_id, cache_dir, random=random, **kwargs)
    timer.run(seconds)
    timer.close()
    return timer.figures()


class HighwayTimer:
    """highway-v0 (default config) with random actions, timed in stretches (resets included)."""

    def __init__(self) -> None:
        import gymnasium as gym
        import highway_env  # noqa: F401  (registers highway-v0)

        self.env = gym.make("highway-v0")
        self.config = self.env.unwrapped.config
        self.env.reset(seed=0)
        self.env.action_space.seed(0)
        self.steps, self.wall, self.resets = 0, 0.0, 0

    def run(self, seconds: float) -> dict[str, float]:
        """Step for about ``seconds`` of wall time; the figures of this stretch alone."""
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds or steps < 3:
            _, _, terminated, truncated, _ = self.env.step(self.env.action_space.sample())
            steps += 1
            if terminated or truncated:
                self.env.reset()
                self.resets += 1
        wall = time.perf_counter() - start
        self.steps, self.wall = self.steps + steps, self.wall + wall
        return self._figures(steps, wall)

    def figures(self) -> dict[str, float]:
        """Every stretch pooled."""
        return {
            **self._figures(self.steps, self.wall),
            "vehicles": float(self.config["vehicles_count"]),
            "simulation_frequency": float(self.config["simulation_frequency"]),
            "resets": float(self.resets),
        }

    def _figures(self, steps: int, wall: float) -> dict[str, float]:
        per_decision = 1.0 / self.config["policy_frequency"]
        return {"env_steps_per_s": steps / wall, "sim_seconds_per_s": steps * per_decision / wall}

    def close(self) -> None:
        """Close the env."""
        self.env.close()


def reactive_rounds(
    cache_dir: str, rounds: int, seconds: float, highway_seconds: float
) -> tuple[dict[str, float], dict[str, float], list[float]]:
    """The like-for-like comparison, interleaved: ``rounds`` x (omnigym reactive, then highway-env).

    Each round's ratio compares two stretches timed a few seconds apart, so a shared machine's
    drift (measured here: up to 2.5x between minutes) hits both sides of it; the bench
    reports their median. Returns the pooled reactive and highway-env figures and the ratios.
    """
    reactive = OmnigymTimer("omnigym/DrivingReactive-v0", cache_dir, random=False)
    highway = HighwayTimer()
    ratios = []
    for _ in range(rounds):
        ours = reactive.run(seconds)["sim_seconds_per_s"]
        ratios.append(ours / highway.run(highway_seconds)["sim_seconds_per_s"])
    reactive.close()
    highway.close()
    return reactive.figures(), highway.figures(), ratios


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
    parser.add_argument("--quick", action="store_true", help="short timings (about 2 min in all)")
    args = parser.parse_args()
    from omnigym.platform.runtime import apply_thread_policy

    threads = apply_thread_policy()  # $OMNIGYM_THREADS, else 1 (the envs do not use torch)
    seconds = 3.0 if args.quick else 15.0
    rounds = 3 if args.quick else ROUNDS
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    with tempfile.TemporaryDirectory() as cache_dir:
        generation = scene_generation_cost(4 if args.quick else 16)
        print(
            f"scene generation: {generation['ms_per_scene']:.0f} ms/scene, "
            f"{generation['agents_per_scene']:.0f} agents"
        )
        # the like-for-like figure first: reactive traffic against highway-env, interleaved
        stretch = 2.0 if args.quick else 6.0  # highway-env's: twice as long (its steps are slower)
        reactive, highway, ratios = reactive_rounds(cache_dir, rounds, stretch, 2 * stretch)
        for i, ratio in enumerate(ratios):
            print(f"round {i + 1}/{rounds}: omnigym reactive / highway-env = {ratio:,.0f}")
        print(f"omnigym reactive           omnigym/DrivingReactive-v0: {reactive}")
        print(f"highway-env highway-v0 (default config, random actions): {highway}")
        runs = [  # (key, env id, random actions, env kwargs)
            ("control", "omnigym/Driving-v0", False, {}),
            ("control_random", "omnigym/Driving-v0", True, {}),
            ("control_bev", "omnigym/Driving-v0", False, {"obs_keys": BEV_KEYS}),
            ("control_bev_random", "omnigym/Driving-v0", True, {"obs_keys": BEV_KEYS}),
            ("plan", "omnigym/DrivingPlan-v0", False, {}),
            ("plan_random", "omnigym/DrivingPlan-v0", True, {}),
            ("reactive_random", "omnigym/DrivingReactive-v0", True, {}),
            ("control_256_envs", "omnigym/Driving-v0", False, {"num_envs": 256}),  # scaling (not the ratio)
        ]
        figures_by_run: dict[str, dict[str, float]] = {"reactive": reactive}
        for key, env_id, random, kwargs in runs:
            figures_by_run[key] = measure_omnigym(env_id, seconds, cache_dir, random=random, **kwargs)
            print(f"omnigym {key:18s} {env_id}: {figures_by_run[key]}")
    peer = highway["sim_seconds_per_s"]
    raster_ms = (
        figures_by_run["control_bev"]["ms_per_vector_step"] - figures_by_run["control"]["ms_per_vector_step"]
    ) / NUM_ENVS
    figures: dict[str, Any] = {
        "bench": "driving_throughput",
        # reactive traffic on both sides: the median of the interleaved rounds' ratios
        "ratio": float(np.median(ratios)),
        "ratio_rounds": ratios,
        **{f"ratio_{key}": run["sim_seconds_per_s"] / peer for key, run in figures_by_run.items()},
        **{f"omnigym_{key}_sim_s_per_s": run["sim_seconds_per_s"] for key, run in figures_by_run.items()},
        **{f"omnigym_{key}_env_steps_per_s": run["env_steps_per_s"] for key, run in figures_by_run.items()},
        "reactive_ms_per_vector_step": reactive["ms_per_vector_step"],
        "control_ms_per_vector_step": figures_by_run["control"]["ms_per_vector_step"],
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
