"""Gymnasium faces of the driving pseudo-simulator: a batched ``VectorEnv`` and a single ``Env``.

``gym.make_vec("omnigym/Driving-v0", num_envs=64, vectorization_mode="vector_entry_point")``
builds :class:`DrivingVectorEnv`, which steps all scenes as arrays; ``gym.make`` builds
:class:`DrivingEnv`, the same simulator with one slot. See ``docs/envs/driving.md``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from omnigym.envs.driving import planner
from omnigym.envs.driving.config import DrivingConfig
from omnigym.envs.driving.controller import PLAN_POSES, PlanTracker, TrackerConfig, densify_plan
from omnigym.envs.driving.dynamics import to_ego_frame
from omnigym.envs.driving.observations import (
    VECTOR_KEYS,
    LaneTracker,
    agent_features,
    light_features,
    route_features,
    state_features,
    vector_spaces,
)
from omnigym.envs.driving.render import RGB_CONFIG, BevConfig, BevRenderer, prerender_map, render_rgb
from omnigym.envs.driving.scene import DT, HISTORY_STEPS, Scene
from omnigym.envs.driving.scene_sets import SceneSource
from omnigym.envs.driving.simulator import DrivingSimulator
from omnigym.envs.driving.step_results import STEP_COMPONENTS, StepResult
from omnigym.envs.driving.text import describe, text_space
from omnigym.envs.driving.text_actions import LATERAL, LONGITUDINAL, TextActionReader, nearest_meta_actions
from omnigym.envs.driving.text_actions import action_space as text_action_space

REWARD_COMPONENTS = "reward_components"
RGB_MAP_CACHE = 16
"""Scenes whose human-frame maps ``render`` keeps."""
CONTROL_LOW = np.array([-6.0, -1.0], np.float32)
CONTROL_HIGH = np.array([3.0, 1.0], np.float32)
"""Control actions: acceleration (m/s²) and steering rate (rad/s)."""
PLAN_LOW = np.tile(np.array([-10.0, -40.0, -np.pi], np.float32), (PLAN_POSES, 1))
PLAN_HIGH = np.tile(np.array([120.0, 40.0, np.pi], np.float32), (PLAN_POSES, 1))
"""Plan actions: 8 poses (x forward, y left, heading) in the ego frame, metres and radians."""


def default_cache_dir() -> str:
    """Where generated scenes are cached: $OMNIGYM_CACHE/driving or ~/.cache/omnigym/driving."""
    root = os.environ.get("OMNIGYM_CACHE") or str(Path.home() / ".cache" / "omnigym")
    return str(Path(root) / "driving")


def scene_source(config: DrivingConfig) -> SceneSource:
    """The scenes a config drives: a saved scene set, or a procedural split."""
    if config.scene_dir:
        return SceneSource.from_directory(config.scene_dir)
    cache = default_cache_dir() if config.cache_dir is None else (config.cache_dir or None)
    return SceneSource(
        split=config.split, num_scenes=config.num_scenes, config=config.scene_config, cache_dir=cache
    )


KERNEL_MODULES = (
    "agent_checks",
    "geometry",
    "map_checks",
    "metrics",
    "observations",
    "render",
    "step_checks",
    "step_results",
)
"""The modules of ``omnigym.envs.driving`` with numba kernels (compiled on first use, then cached)."""
_kernels_checked = False


def announce_kernel_compilation() -> bool:
    """Print a one-line notice on stderr when the driving kernels are not compiled yet.

    ``omnigym.envs.driving.warmup.compile_kernels()`` compiles them all ahead of use.

    Numba compiles them on first use (a minute or more on a small CPU, longer under load) and
    caches them on disk; until then the first reset and step look like a hang. Checked once per
    process; returns whether the notice was printed.
    """
    global _kernels_checked
    if _kernels_checked:
        return False
    _kernels_checked = True
    kernels = _kernels()
    missing = [kernel for kernel in kernels if not _is_cached(kernel)]
    if not missing:
        return False
    print(
        f"[omnigym] compiling driving kernels (first run only: {len(missing)} of {len(kernels)} numba "
        "kernels, a minute or more; cached for later runs)...",
        file=sys.stderr,
        flush=True,
    )
    return True


def _kernels() -> list[Any]:
    """The numba dispatchers of :data:`KERNEL_MODULES` that cache their machine code."""
    import importlib

    from numba.core.caching import FunctionCache
    from numba.core.registry import CPUDispatcher

    found: dict[int, Any] = {}
    for name in KERNEL_MODULES:
        module = importlib.import_module(f"omnigym.envs.driving.{name}")
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher) and isinstance(getattr(value, "_cache", None), FunctionCache):
                found[id(value)] = value
    return list(found.values())


def _is_cached(kernel: Any) -> bool:
    """Whether numba's on-disk cache holds machine code of ``kernel`` for its current source."""
    try:  # numba's cache index: empty when missing or stale (the source changed)
        return bool(kernel._cache._cache_file._load_index())
    except Exception:  # a numba version without this layout: say nothing
        return True


class DrivingVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` driving scenes stepped together (see the module docstring of ``simulator.py``).

    Reset seeds: ``reset(seed=s)`` starts env ``i`` on scene ``(s + i) mod num_scenes`` and seeds
    the generator that draws the scenes of its later (auto)resets. ``options={"scene_index": k}``
    (an int or one per env) picks scenes directly; ``options={"reset_mask": mask}`` resets some envs.

    Info: ``reward_components`` (per-step sub-metrics, see ``STEP_COMPONENTS``) every step; when an
    episode ends, its ``pdms``, ``epdms``, sub-metric means and ``progress`` (metres on the route).
    """

    metadata = {  # noqa: RUF012  (gymnasium's instance attribute)
        "render_modes": ["rgb_array"],
        "render_fps": 10,
        "autoreset_mode": AutoresetMode.SAME_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        *,
        render_mode: str | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        max_episode_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = DrivingConfig(**kwargs)
        announce_kernel_compilation()
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.source = scene_source(self.config)
        self.observation_config = self.config.observation  # built once: read every step
        keys = self.observation_config.keys
        self._bev = BevConfig(
            size=self.config.image_size, meters=self.config.image_meters, channels=self.config.image_channels
        )
        self._renderer = BevRenderer(self._bev) if "image" in keys else None
        needs_map_image = self._renderer is not None
        self.sim = DrivingSimulator(
            num_envs, self.config, self.source, self._map_image if needs_map_image else None
        )
        self.lanes = LaneTracker(
            num_envs, self.config.max_lanes, self.config.max_lane_samples, self.observation_config
        )
        self.single_observation_space = self._observation_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        if self.config.action_mode == "control":
            self._action_box = spaces.Box(CONTROL_LOW, CONTROL_HIGH, dtype=np.float32)
        else:
            self._action_box = spaces.Box(PLAN_LOW, PLAN_HIGH, dtype=np.float32)
        self._text: TextActionReader | None = None
        self.single_action_space: spaces.Space = self._action_box
        if self.config.action_space == "text":
            self._text = TextActionReader(num_envs, PLAN_LOW.astype(np.float64), PLAN_HIGH.astype(np.float64))
            self.single_action_space = text_action_space()
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._rngs = [np.random.default_rng() for _ in range(num_envs)]
        self._needs_reset = np.zeros(num_envs, bool)
        if max_episode_steps is not None:  # the simulator cuts episodes (scoring the last window)
            self.sim.step_limit = max_episode_steps * (
                self.config.replan_every if self.config.action_mode == "plan" else 1
            )
        self._expert_tracker = PlanTracker(self.sim.limits, TrackerConfig())
        self._expert_tracker.resize(num_envs)
        self._expert_age = np.zeros(num_envs, np.int64)
        self._started = False
        self._rgb_maps: dict[int, Any] = {}

    # --- spaces -----------------------------------------------------------------------------------------
    def _observation_space(self) -> spaces.Dict:
        keys = self.observation_config.keys
        vectors = vector_spaces(self.observation_config)
        out: dict[str, spaces.Space] = {key: vectors[key] for key in keys if key in vectors}
        if "image" in keys:
            out["image"] = spaces.Box(0, 255, (self._bev.size, self._bev.size, self._bev.channels), np.uint8)
        if "text" in keys:
            out["text"] = text_space()
        for name in self.config.privileged:
            if name == "pdm_closed_meta":
                high = np.array([len(LATERAL) - 1, len(LONGITUDINAL) - 1], np.float32)
                out[name] = spaces.Box(np.zeros(2, np.float32), high, dtype=np.float32)
            elif self.config.action_mode == "control":
                out[name] = spaces.Box(CONTROL_LOW, CONTROL_HIGH, dtype=np.float32)
            else:
                out[name] = spaces.Box(PLAN_LOW, PLAN_HIGH, dtype=np.float32)
        return spaces.Dict(out)

    def _map_image(self, scene: Scene) -> Any:
        return prerender_map(scene.road_map, scene.route, self._bev)

    # --- reset ------------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[Any, dict]:
        """Start episodes in every env (or the envs of ``options["reset_mask"]``)."""
        super().reset(seed=seed if isinstance(seed, int) else None)
        options = options or {}
        mask = np.asarray(options.get("reset_mask", np.ones(self.num_envs, bool)), bool)
        seeds = _per_env(seed, self.num_envs)
        choice = _per_env(options.get("scene_index"), self.num_envs)
        indices = {}
        for slot in np.flatnonzero(mask):
            if seeds[slot] is not None:
                self._rngs[slot] = np.random.default_rng(seeds[slot])
            index = choice[slot]
            if index is None:
                index = (
                    seeds[slot] if seeds[slot] is not None else self._rngs[slot].integers(len(self.source))
                )
            indices[int(slot)] = int(index) % len(self.source)
        self._load(indices)
        self._needs_reset[mask] = False
        self._started = True
        return self._observe(), {}

    def _load(self, indices: dict[int, int]) -> None:
        """Load scene ``indices[slot]`` into each slot and start the episodes together."""
        scenes = self.source.get_many(list(indices.values()))
        for (slot, _), scene in zip(indices.items(), scenes, strict=True):
            self.sim.load(slot, scene)
            self.lanes.load(slot, self.sim.slot_assets[slot].lane_samples)  # type: ignore[union-attr]
        slots = np.fromiter(indices, np.int64, len(indices))
        self.sim.start_episodes(slots)
        if self._text is not None:
            self._text.forget(slots)
        self._expert_age[slots] = 1 << 30  # re-plan the expert at once

    # --- step -------------------------------------------------------------------------------------------
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Advance every env by one action (see ``DrivingConfig.action_mode``)."""
        if not self._started:
            raise gym.error.ResetNeeded("call reset() before step()")
        box = self._action_box
        text_valid, text_errors = None, None
        if self._text is not None:  # replies -> plans (an unparseable one keeps its slot's last action)
            actions, text_valid, text_errors = self._text.plans(self.sim, _texts(actions, self.num_envs))
        actions = np.asarray(actions, np.float64).reshape((self.num_envs, *box.shape))
        if not np.all(np.isfinite(actions)):
            bad = np.flatnonzero(~np.all(np.isfinite(actions.reshape(self.num_envs, -1)), axis=1))
            raise ValueError(f"driving actions of envs {bad.tolist()} contain NaN or inf")
        actions = np.clip(actions, box.low, box.high)
        resetting = (
            self._needs_reset.copy()
            if self.autoreset_mode == AutoresetMode.NEXT_STEP
            else np.zeros(self.num_envs, bool)
        )
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and resetting.any():
            self._reset_slots(resetting)
        result = self.sim.step(actions)
        if text_valid is not None:
            result.reward = result.reward + self.config.invalid_action_penalty * ~text_valid
        if resetting.any():  # these envs only started their next episode
            for key in ("reward", "terminated", "truncated"):
                setattr(
                    result, key, np.where(resetting, 0 if key == "reward" else False, getattr(result, key))
                )
        info = self._step_info(result, ~resetting)
        if text_valid is not None:
            every = np.ones(self.num_envs, bool)  # as in the games: both keys on every step
            info.update(action_valid=text_valid | resetting, action_error=np.array(text_errors, object))
            info.update(_action_valid=every, _action_error=every)
        ended = (result.terminated | result.truncated) & ~resetting
        obs = None
        if self.autoreset_mode == AutoresetMode.SAME_STEP and ended.any():
            # vector keys only: observe every env, then recompute just the envs that reset
            partial = set(self.observation_config.keys) <= set(VECTOR_KEYS) and not self.config.privileged
            final_obs = self._observe() if partial else self._observe(final=True)
            info["final_obs"] = np.array(
                [_row(final_obs, i) if ended[i] else None for i in range(self.num_envs)],
                dtype=object,
            )
            info["_final_obs"] = ended.copy()
            info["final_info"] = dict(info)
            info["final_info"].pop("final_obs")
            info["final_info"].pop("_final_obs")
            info["_final_info"] = ended.copy()
            self._reset_slots(ended)
            if partial:
                light_now = self.sim.light_state[np.arange(self.num_envs), self.sim.time]
                obs = self._vector_keys(light_now, np.flatnonzero(ended), final_obs)
        self._needs_reset = ended
        return (
            self._observe() if obs is None else obs,
            result.reward.astype(np.float64),
            result.terminated.copy(),
            result.truncated.copy(),
            info,
        )

    def _reset_slots(self, mask: np.ndarray) -> None:
        self._load(
            {int(slot): int(self._rngs[slot].integers(len(self.source))) for slot in np.flatnonzero(mask)}
        )

    def _step_info(self, result: StepResult, live: np.ndarray) -> dict[str, Any]:
        live.flags.writeable = False  # one mask, shared by every component
        components = {name: result.components[name] for name in STEP_COMPONENTS}  # fresh arrays each step
        components.update({f"_{name}": live for name in STEP_COMPONENTS})
        info: dict[str, Any] = {REWARD_COMPONENTS: components, f"_{REWARD_COMPONENTS}": live}
        for key, value in result.episode_metrics.items():
            present = ~np.isnan(value) & live
            if present.any():
                info[key] = np.where(present, value, 0.0)
                info[f"_{key}"] = present
        return info

    # --- observations -----------------------------------------------------------------------------------
    def _observe(self, final: bool = False) -> dict[str, Any]:
        """The observation of every env.

        ``final``: an episode-end observation, which leaves the control-mode experts' plan
        tracking as it was.
        """
        sim, keys = self.sim, self.observation_config.keys
        pose = sim.ego.pose
        light_now = sim.light_state[np.arange(self.num_envs), sim.time]
        obs = self._vector_keys(light_now)
        if self._renderer is not None or "text" in keys:
            frame = sim.agents_now()
            if self._renderer is not None:
                maps = [assets.map_image for assets in sim.slot_assets]  # type: ignore[union-attr]
                state = np.where(sim.light_valid, light_now, -1)
                obs["image"] = self._renderer.render(
                    maps, pose, frame.pose, sim.agent_size, frame.valid, sim.light_pose, sim.light_size, state
                )
            if "text" in keys:
                route_index = np.minimum(np.round(sim.station).astype(np.int64), sim.route_num - 1)
                obs["text"] = tuple(
                    self._describe(i, frame, light_now, route_index) for i in range(self.num_envs)
                )
        if self.config.privileged:
            tracker = self._expert_tracker
            saved = (tracker.points.copy(), tracker.arc.copy(), tracker.speed.copy(), tracker.step.copy())
            age = self._expert_age.copy()
            for name in self.config.privileged:
                obs[name] = self._expert_action(name).astype(np.float32)
            if final:  # an episode-end observation must not advance the experts of the other envs
                tracker.points, tracker.arc, tracker.speed, tracker.step = saved
                self._expert_age = age
        return obs

    def _vector_keys(
        self,
        light_now: np.ndarray,
        rows: np.ndarray | None = None,
        out: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The vector keys (``state``, ``agents``, ``route``, ``lanes``, ``lights``) asked for.

        With ``rows`` and ``out``, only the envs ``rows`` are computed, into ``out``'s arrays.
        """
        sim, cfg = self.sim, self.observation_config
        keys = cfg.keys
        pose = sim.ego.pose
        out = {} if out is None else out
        if "state" in keys:
            out["state"] = state_features(
                sim.ego.speed,
                sim.ego.accel,
                sim.ego.steer,
                sim.ego.yaw_rate,
                pose[:, 2],
                sim.lateral,
                sim.station,
                sim.route_heading,
                sim.route_limit,
                sim.route_num,
                sim.command,
                light_now,
                sim.light_valid,
                sim.light_station,
                (sim.time - HISTORY_STEPS) / np.maximum(sim.episode_steps, 1),
                rows=rows,
                out=out.get("state"),
            )
        if "agents" in keys:
            out["agents"] = agent_features(
                pose,
                sim.agent_pose,
                sim.agent_speed,
                sim.agent_size,
                sim.agent_valid,
                cfg.num_agents,
                rows,
                out.get("agents"),
                time=sim.time,
            )
        if "route" in keys:
            out["route"] = route_features(
                pose, sim.route_points, sim.route_num, sim.station, cfg, rows, out.get("route")
            )
        if "lanes" in keys:
            out["lanes"] = self.lanes.features(pose, rows, out.get("lanes"))
        if "lights" in keys:
            out["lights"] = light_features(
                pose, sim.light_pose, light_now, sim.light_valid, cfg.num_lights, rows, out.get("lights")
            )
        return out

    def _describe(self, i: int, frame: Any, light_now: np.ndarray, route_index: np.ndarray) -> str:
        sim = self.sim
        local = to_ego_frame(frame.pose[i : i + 1, :, :2], sim.ego.pose[i : i + 1])[0]
        ahead = np.flatnonzero(sim.light_valid[i] & (sim.light_station[i] > sim.station[i]))
        light_state = light_distance = None
        if len(ahead):
            k = ahead[np.argmin(sim.light_station[i, ahead])]
            light_state, light_distance = (
                int(light_now[i, k]),
                float(sim.light_station[i, k] - sim.station[i]),
            )
        area, _ = sim.rasters.query(sim.map_index[i : i + 1], sim.ego.pose[i : i + 1, :2])  # type: ignore[union-attr]
        return describe(
            command=int(sim.command[i]),
            ego_speed=float(sim.ego.speed[i]),
            speed_limit=float(sim.route_limit[i, route_index[i]]),
            agent_xy=local,
            agent_speed=frame.speed[i],
            agent_valid=frame.valid[i],
            agent_static=sim.agent_type[i] != 0,
            light_state=light_state,
            light_distance=light_distance,
            route_offset=float(sim.lateral[i]),
            in_intersection=bool(area[0] & 2),
        )

    def _expert_action(self, name: str) -> np.ndarray:
        """The privileged expert's action for every env, in this env's action format."""
        rows = np.arange(self.num_envs)
        if self.config.action_mode == "plan":
            if name == "log_replay":
                return planner.log_replay_plan(self.sim, rows)
            plans = planner.pdm_closed_plans(self.sim, rows)[0]
            return nearest_meta_actions(self.sim, rows, plans) if name == "pdm_closed_meta" else plans
        # control mode: hold the expert's plan for replan_every steps, tracking it like the plan mode does
        due = self._expert_age >= self.config.replan_every
        if due.any():
            idx = np.flatnonzero(due)
            if name == "log_replay":
                dense = densify_plan(planner.log_replay_plan(self.sim, idx), self.sim.ego.pose[idx])
            else:
                dense = planner.pdm_closed_plans(self.sim, idx)[1]
            self._expert_tracker.set_plan(idx, dense)
            self._expert_age[idx] = 0
        self._expert_age += 1
        accel, steer_rate = self._expert_tracker.command(self.sim.ego)
        return np.clip(np.stack([accel, steer_rate], axis=1), CONTROL_LOW, CONTROL_HIGH)

    # --- rendering --------------------------------------------------------------------------------------
    def render(self) -> tuple[np.ndarray, ...] | None:
        """One RGB frame per env (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array":
            return None
        return tuple(self.render_slot(i) for i in range(self.num_envs))

    def render_slot(self, i: int) -> np.ndarray:
        """A colour frame of env ``i`` for humans."""
        sim = self.sim
        frame = sim.agents_now()
        state = np.where(sim.light_valid[i], sim.light_state[i, sim.time[i]], -1)
        return render_rgb(
            self._rgb_map(i), sim.ego.pose[i], frame.pose[i], sim.agent_size[i], frame.valid[i],
            sim.light_pose[i], sim.light_size[i], state,
        )  # fmt: skip

    def _rgb_map(self, i: int) -> Any:
        """Env ``i``'s map drawn for human frames (a few recent scenes kept)."""
        scene = self.sim.scenes[i]
        assert scene is not None
        if scene.scene_id not in self._rgb_maps:
            if len(self._rgb_maps) > RGB_MAP_CACHE:
                self._rgb_maps.clear()
            self._rgb_maps[scene.scene_id] = prerender_map(scene.road_map, scene.route, RGB_CONFIG)
        return self._rgb_maps[scene.scene_id]


class DrivingEnv(gym.Env):
    """One driving scene: :class:`DrivingVectorEnv` with a single slot and no autoreset.

    Observations, actions, rewards and the episode metrics in ``info`` are the vector env's, unbatched.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": round(1 / DT)}  # noqa: RUF012
    config_class = DrivingConfig
    """Its keyword arguments (read by error messages that list them)."""

    def __init__(
        self, render_mode: str | None = None, max_episode_steps: int | None = None, **kwargs: Any
    ) -> None:
        self.vector = DrivingVectorEnv(
            1,
            render_mode=render_mode,
            autoreset_mode=AutoresetMode.NEXT_STEP,
            max_episode_steps=max_episode_steps,
            **kwargs,
        )
        self.config = self.vector.config
        self.render_mode = render_mode
        self.observation_space = self.vector.single_observation_space
        self.action_space = self.vector.single_action_space
        if self.config.action_mode == "plan":
            self.metadata = {**self.metadata, "render_fps": round(1 / (DT * self.config.replan_every))}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, Any], dict]:
        """Start an episode (``seed`` picks the scene, see :class:`DrivingVectorEnv`)."""
        super().reset(seed=seed)
        options = dict(options or {})
        obs, _ = self.vector.reset(seed=seed, options=options)
        return _row(obs, 0), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """One action."""
        obs, reward, terminated, truncated, info = self.vector.step(np.asarray(action)[None])
        single: dict[str, Any] = {
            REWARD_COMPONENTS: {
                k: float(v[0]) for k, v in info[REWARD_COMPONENTS].items() if not k.startswith("_")
            }
        }
        for key, value in info.items():
            if key in ("action_valid", "action_error"):  # text actions: the games' info keys
                single[key] = bool(value[0]) if key == "action_valid" else str(value[0])
            elif (
                not key.startswith("_")
                and key != REWARD_COMPONENTS
                and info.get(f"_{key}", np.zeros(1, bool))[0]
            ):
                single[key] = float(value[0])
        return _row(obs, 0), float(reward[0]), bool(terminated[0]), bool(truncated[0]), single

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """An RGB frame (``render_mode="rgb_array"``)."""
        return self.vector.render_slot(0) if self.render_mode == "rgb_array" else None

    @property
    def simulator(self) -> DrivingSimulator:
        """The batched simulator underneath (one slot)."""
        return self.vector.sim


def _per_env(value: Any, num_envs: int) -> list[Any]:
    """An int (offset per env), a list (one per env) or None, as one value per env."""
    if value is None:
        return [None] * num_envs
    if isinstance(value, (int, np.integer)):
        return [int(value) + i for i in range(num_envs)]
    values = list(value)
    if len(values) != num_envs:
        raise ValueError(f"expected {num_envs} values (one per env), got {len(values)}")
    return values


def _texts(actions: Any, num_envs: int) -> list[str]:
    """One reply per env out of a batch of text actions (a tuple, list or array of strings)."""
    texts = [actions] if isinstance(actions, str) else list(np.asarray(actions, object).reshape(-1))
    if len(texts) != num_envs:
        raise ValueError(f"expected {num_envs} text actions (one per env), got {len(texts)}")
    return texts


def _row(obs: dict[str, Any], i: int) -> dict[str, Any]:
    """Env ``i``'s observation out of a batch."""
    return {key: (value[i] if isinstance(value, tuple) else value[i].copy()) for key, value in obs.items()}
