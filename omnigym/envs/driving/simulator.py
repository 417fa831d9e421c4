"""The batched pseudo-simulator: N scenes stepped together as arrays.

Each of N slots holds a scene, the ego's state, the background agents and the running scores.
One :meth:`DrivingSimulator.step` advances every slot by one action (0.1 s in control mode,
``replan_every`` x 0.1 s in plan mode) with vectorised NumPy, which is what makes 64 scenes cost
about as much as a few. Gymnasium wrappers (``env.py``) add spaces, autoreset and info.

Scoring: an episode is cut into NAVSIM horizons (4 s windows from the episode start); each window
is scored like a NAVSIM plan (PDMS and EPDMS, with the logged human's scores as the
false-positive filter); the episode's score is the mean over its windows, windows it never
reached (after a failure) counting 0. The per-step reward components are the same sub-metrics
evaluated on one step, so their return tracks the episode's score. The compiled passes live
beside it: the per-step checks (``step_checks.py``), what they make of a step (reward, ends,
window minima: ``step_results.py``) and the window scores (``window_scores.py``).
"""

from __future__ import annotations

import numpy as np

from omnigym.envs.driving import metrics
from omnigym.envs.driving.agents import (
    AgentFrame,
    LogTrafficModel,
    ReactiveAgents,
    TrafficLog,
)
from omnigym.envs.driving.assets import AssetCache, SceneAssets, build_assets, human_window_scores
from omnigym.envs.driving.comfort import last_step_weights, savgol_filters
from omnigym.envs.driving.config import DrivingConfig
from omnigym.envs.driving.controller import PlanTracker, TrackerConfig, densify_plan
from omnigym.envs.driving.dynamics import BicycleLimits, EgoState, bicycle_step, wrap_angle
from omnigym.envs.driving.geometry import project_to_polyline
from omnigym.envs.driving.map_raster import RasterPool, RasterStack
from omnigym.envs.driving.planner import reference_progress
from omnigym.envs.driving.scene import (
    AGENT_VEHICLE,
    DT,
    EGO_LENGTH,
    EGO_WHEEL_BASE,
    EGO_WIDTH,
    HISTORY_STEPS,
    HORIZON_STEPS,
    LIGHT_GREEN,
    LIGHT_RED,
    Scene,
)
from omnigym.envs.driving.step_checks import CHECKS, score_step
from omnigym.envs.driving.step_results import (
    STEP_COMPONENTS,
    WINDOW,
    WINDOW_MINIMA,
    WINDOW_MINIMA_COLUMNS,
    WINDOW_MINIMA_METRICS,
    StepResult,
    accumulate,
    step_outcome,
)
from omnigym.envs.driving.window_scores import score_windows

COMFORT_CONTEXT = 15
"""Past poses the per-step comfort check differentiates (the jerk filter's window)."""
EGO_SIZE = np.array([EGO_LENGTH, EGO_WIDTH])
TTC_OFFSETS = np.asarray(metrics.TTC_OFFSETS)


class DrivingSimulator:
    """N driving scenes stepped as arrays.

    Args:
        num_slots: N.
        config: the env settings.
        scene_source: gives scenes by index (``scene_sets.SceneSource``).
        map_image_builder: builds a scene's pre-rendered BEV map when the image key is used.
    """

    def __init__(
        self, num_slots: int, config: DrivingConfig, scene_source: object, map_image_builder: object = None
    ) -> None:
        self.n = num_slots
        self.config = config
        self.source = scene_source
        self.map_image_builder = map_image_builder
        self.limits = BicycleLimits()
        self.tracker = PlanTracker(self.limits, TrackerConfig())
        self.tracker.resize(num_slots)
        self.assets = AssetCache(self._build_assets, config.asset_cache_size, on_evict=self._drop_raster)
        scene_config = config.scene_config
        self.step_limit: int | None = None  # a shorter time limit than the scenes', in 0.1 s steps
        self.max_steps = HISTORY_STEPS + round(scene_config.episode_seconds / DT) + HORIZON_STEPS
        self._allocate(self.max_steps, config.max_agents, config.max_lights)
        self.scenes: list[Scene | None] = [None] * num_slots
        self.slot_assets: list[SceneAssets | None] = [None] * num_slots

    # --- storage ------------------------------------------------------------------------------------
    def _allocate(self, num_steps: int, num_agents: int, num_lights: int) -> None:
        n, t, a, k = self.n, num_steps, num_agents, num_lights
        # float32 like the scene logs: half the memory traffic of the per-step reads and the resets
        self.agent_pose = np.zeros((n, t, a, 3), np.float32)
        self.agent_speed = np.zeros((n, t, a), np.float32)
        self.agent_valid = np.zeros((n, t, a), bool)
        self.agent_size = np.ones((n, a, 2))
        self.agent_type = np.full((n, a), AGENT_VEHICLE, np.int8)
        self.light_state = np.zeros((n, t, k), np.int8)
        self.light_red = np.zeros((n, t, k), bool)
        self.light_pose = np.zeros((n, k, 3))
        self.light_size = np.zeros((n, k, 2))
        self.light_valid = np.zeros((n, k), bool)
        self.light_station = np.full((n, k), np.inf)
        self.agent_travel = np.full(n, np.inf)  # metres a logged agent moves within the TTC horizon
        self.log_ego_pose = np.zeros((n, t, 3))
        self.log_ego_speed = np.zeros((n, t))
        self.ego_pose = np.zeros((n, t, 3))  # the driven track, by log index (history from the log)
        self.ego_speed = np.zeros((n, t))
        self.route_points = np.zeros((n, 1, 2))
        self.route_heading = np.zeros((n, 1))
        self.route_limit = np.zeros((n, 1))
        self.route_num = np.ones(n, np.int64)
        self.route_station = np.zeros((n, 1))
        self._world: metrics.ScoringWorld | None = None
        self.raster_pool: RasterPool | None = None  # created with the first scene's raster
        self.map_index = np.full(n, -1, np.int64)  # each slot's entry in the pool
        self.episode_steps = np.zeros(n, np.int64)
        self.command = np.zeros(n, np.int64)
        self.time = np.full(n, HISTORY_STEPS, np.int64)  # log index of "now"
        self.ego = EgoState.zeros(n)
        self.collided = np.zeros((n, a), bool)
        self.ttc_tolerated = np.zeros((n, a), bool)  # objects TTC no longer checks in this window
        self.route_index = np.zeros(n, np.int64)
        self.station = np.zeros(n)
        self.episode_start_station = np.zeros(n)
        self.lateral = np.zeros(n)
        self.oncoming_progress = np.zeros((n, 10))  # last 1 s of per-step progress in oncoming lanes
        self.off_centre_steps = np.zeros(n, np.int64)
        self.reference_step = np.ones(n)  # reference progress per step in the current window (m)
        self.reference_window = np.zeros(n)  # reference progress over the current window (m)
        self.window_start_station = np.zeros(n)
        self.window_ec_sum = np.zeros(n)  # two-frame extended comfort of the window's plans: sum
        self.window_ec_count = np.zeros(n, np.int64)  # and count
        self.human = np.ones((n, 1, len(metrics.SUB_METRICS)))  # the logged human's window scores
        self.human_count = np.ones(n, np.int64)
        self.previous_plan: np.ndarray | None = None
        self.plan_ec = np.ones(n)  # two-frame extended comfort of the current plan vs the previous
        self.window_min = np.ones((n, len(WINDOW_MINIMA)))  # running minima of per-step sub-metrics
        self.window_sum = np.zeros((n, len(metrics.SUB_METRICS)))
        self.pdms_sum = np.zeros(n)
        self.epdms_sum = np.zeros(n)
        self.windows_done = np.zeros(n, np.int64)
        self.failed = np.zeros(n, bool)
        self.model = self.config.make_traffic_model()  # a learned TrafficModel overrides the IDM agents
        if isinstance(self.model, LogTrafficModel):
            self.model.allocate(n, t, a)
        self.reactive = (
            ReactiveAgents(n, t, a) if self.config.traffic == "idm" and self.model is None else None
        )

    # --- scenes ---------------------------------------------------------------------------------------
    def _build_assets(self, scene: Scene) -> SceneAssets:
        assets = build_assets(scene)
        if self.raster_pool is None:  # at most every cached scene plus one per slot
            self.raster_pool = RasterPool(self.assets.max_size + self.n + 1, like=assets.raster)
        assets.raster_index = self.raster_pool.store(assets.raster)
        assets.raster = self.raster_pool.stack.view(assets.raster_index)  # one copy in memory
        if self.map_image_builder is not None:
            assets.map_image = self.map_image_builder(scene)  # type: ignore[operator]
        assets.human = human_window_scores(scene, assets, WINDOW)
        return assets

    def _drop_raster(self, assets: SceneAssets) -> None:
        assert self.raster_pool is not None
        self.raster_pool.drop(assets.raster_index)

    @property
    def rasters(self) -> RasterStack:
        """The map rasters; slot ``i`` drives on entry ``map_index[i]``."""
        assert self.raster_pool is not None, "no scene loaded yet"
        return self.raster_pool.stack

    def load(self, slot: int, scene: Scene) -> None:
        """Put ``scene`` in ``slot``; :meth:`start_episodes` then starts its episode."""
        log = scene.log
        t, a = log.num_steps, log.num_agents
        k = len(scene.road_map.light_lane)
        if t > self.max_steps or a > self.agent_size.shape[1] or k > self.light_pose.shape[1]:
            raise ValueError(
                f"scene {scene.scene_id} has {t} log steps, {a} agents and {k} lights; the env holds "
                f"{self.max_steps} steps (scene.episode_seconds), {self.agent_size.shape[1]} agents "
                f"(max_agents) and {self.light_pose.shape[1]} lights (max_lights)"
            )
        assets = self.assets.get(scene)
        self.scenes[slot], self.slot_assets[slot] = scene, assets
        for array, values in (
            (self.agent_pose, log.agent_pose),
            (self.agent_speed, log.agent_speed),
            (self.agent_valid, log.agent_valid),
        ):  # the log, padded (each element written once)
            array[slot, :t, :a] = values
            array[slot, :t, a:] = 0
            array[slot, t:] = 0
        self.agent_size[slot] = 1.0
        self.agent_size[slot, :a] = log.agent_size
        self.agent_type[slot] = AGENT_VEHICLE
        self.agent_type[slot, :a] = log.agent_type
        self.light_state[slot] = LIGHT_GREEN
        self.light_state[slot, :t, :k] = log.light_state
        self.light_red[slot] = self.light_state[slot] == LIGHT_RED
        self.light_valid[slot] = False
        self.light_valid[slot, :k] = True
        self.light_pose[slot] = 0.0
        self.light_pose[slot, :k] = assets.light_pose
        self.light_size[slot, :k] = assets.light_size
        self.light_station[slot] = np.inf
        self.light_station[slot, :k] = assets.light_station
        self.agent_travel[slot] = assets.agent_travel
        assert assets.human is not None
        windows = len(assets.human)
        if windows > self.human.shape[1]:  # grow (rare: only for longer episodes)
            self.human = np.pad(self.human, ((0, 0), (0, windows - self.human.shape[1]), (0, 0)), mode="edge")
        self.human[slot, :windows] = assets.human
        self.human_count[slot] = windows
        self.log_ego_pose[slot, :t] = log.ego_pose
        self.log_ego_speed[slot, :t] = log.ego_speed
        self._load_route(slot, assets)
        assert self.raster_pool is not None
        if self.map_index[slot] >= 0:
            self.raster_pool.unpin(int(self.map_index[slot]))
        self.raster_pool.pin(assets.raster_index)
        self.map_index[slot] = assets.raster_index
        self.episode_steps[slot] = scene.episode_steps
        self.command[slot] = scene.route.command
        if self.model is not None and isinstance(self.model, LogTrafficModel):  # a Protocol: slow to test
            self.model.load_log(
                slot,
                TrafficLog(
                    log.agent_pose,
                    log.agent_speed,
                    log.agent_valid,
                    log.agent_size,
                    assets.light_pose,
                    assets.light_size,
                    log.light_state,
                    HISTORY_STEPS,
                ),
            )
        if self.model is not None:
            s = HISTORY_STEPS
            start = AgentFrame(
                self.agent_pose[slot : slot + 1, s],
                self.agent_speed[slot : slot + 1, s],
                self.agent_valid[slot : slot + 1, s],
            )
            self.model.reset(np.array([slot]), start, self.agent_size[slot : slot + 1])
        elif self.reactive is not None:
            self.reactive.load(
                slot, log.agent_pose, log.agent_speed, log.agent_valid, log.agent_size, HISTORY_STEPS
            )

    def _load_route(self, slot: int, assets: SceneAssets) -> None:
        r = len(assets.route_points)
        if r > self.route_points.shape[1]:  # grow the route buffers (rare: only for longer routes)
            grow = r - self.route_points.shape[1]
            self.route_points = np.pad(self.route_points, ((0, 0), (0, grow), (0, 0)), mode="edge")
            self.route_heading = np.pad(self.route_heading, ((0, 0), (0, grow)), mode="edge")
            self.route_limit = np.pad(self.route_limit, ((0, 0), (0, grow)), mode="edge")
            self.route_station = np.pad(self.route_station, ((0, 0), (0, grow)), mode="edge")
            self._world = None  # it holds views of the old buffers
        self.route_points[slot, :r] = assets.route_points
        self.route_points[slot, r:] = assets.route_points[-1]
        self.route_heading[slot, :r] = assets.route_heading
        self.route_heading[slot, r:] = assets.route_heading[-1]
        self.route_limit[slot, :r] = assets.route_speed_limit
        self.route_limit[slot, r:] = assets.route_speed_limit[-1]
        self.route_num[slot] = r
        self.route_station[slot] = metrics.polyline_stations(self.route_points[slot : slot + 1])[0]

    def start_episodes(self, idx: np.ndarray) -> None:
        """Start the episodes of slots ``idx`` (after :meth:`load`), from the logged ego state."""
        s = HISTORY_STEPS
        self.time[idx] = s
        self.ego_pose[idx] = self.log_ego_pose[idx]  # history (and a placeholder future)
        self.ego_speed[idx] = self.log_ego_speed[idx]
        pose, speed = self.log_ego_pose[idx, s], self.log_ego_speed[idx, s]
        yaw_rate = wrap_angle(self.log_ego_pose[idx, s + 1, 2] - pose[:, 2]) / DT
        self.ego.pose[idx] = pose
        self.ego.speed[idx] = speed
        self.ego.accel[idx] = (self.log_ego_speed[idx, s + 1] - speed) / DT
        self.ego.yaw_rate[idx] = yaw_rate
        steer = np.arctan(yaw_rate * EGO_WHEEL_BASE / np.maximum(speed, 1.0))
        self.ego.steer[idx] = np.clip(steer, -self.limits.max_steer, self.limits.max_steer)
        self.collided[idx] = False
        self.oncoming_progress[idx] = 0.0
        self.off_centre_steps[idx] = 0
        self.window_sum[idx] = 0.0
        self.pdms_sum[idx] = 0.0
        self.epdms_sum[idx] = 0.0
        self.windows_done[idx] = 0
        self.failed[idx] = False
        station, lateral, index = project_to_polyline(
            self.route_points[idx],
            self.route_station[idx],
            self.ego.pose[idx, :2],
            None,
            metrics.ROUTE_WINDOW,
        )
        self.station[idx], self.lateral[idx], self.route_index[idx] = station, lateral, index
        self.episode_start_station[idx] = station
        self.tracker.set_plan(idx, np.repeat(self.ego.pose[idx, None, :2], HORIZON_STEPS + 1, axis=1))
        self._start_window(idx)

    # --- the scoring world ---------------------------------------------------------------------------
    def world(self, idx: np.ndarray | None = None) -> metrics.ScoringWorld:
        """The static scoring inputs of slots ``idx`` (all slots when None).

        With ``idx`` None these are views of the slot arrays, not copies.
        """
        if self._world is None:
            self._world = metrics.ScoringWorld(
                raster=self.rasters,
                map_index=self.map_index,
                route_points=self.route_points,
                route_num_points=self.route_num,
                agent_size=self.agent_size,
                agent_type=self.agent_type,
                light_pose=self.light_pose,
                light_size=self.light_size,
                route_station=self.route_station,
            )
        return self._world if idx is None else self._world.take(idx)

    def agents_now(self) -> AgentFrame:
        """The background agents at the current time of every slot."""
        rows = np.arange(self.n)
        return AgentFrame(
            self.agent_pose[rows, self.time],
            self.agent_speed[rows, self.time],
            self.agent_valid[rows, self.time],
        )

    # --- stepping -------------------------------------------------------------------------------------
    def step(self, action: np.ndarray) -> StepResult:
        """Advance every slot by one action: ``[N, 2]`` controls or ``[N, 8, 3]`` plans."""
        action = np.asarray(action, dtype=np.float64)
        if not np.all(np.isfinite(action)):
            raise ValueError("driving action contains NaN or inf")
        if self.config.action_mode == "control":
            return self._substep(action[:, 0], action[:, 1], np.ones(self.n, bool))
        return self._plan_step(action)

    def _plan_step(self, plans: np.ndarray) -> StepResult:
        dense = densify_plan(plans, self.ego.pose)
        self.tracker.set_plan(np.arange(self.n), dense)
        self._record_extended_comfort(dense)
        active = np.ones(self.n, bool)
        total: StepResult | None = None
        for _ in range(self.config.replan_every):
            accel, steer_rate = self.tracker.command(self.ego)
            result = self._substep(accel, steer_rate, active)
            total = result if total is None else accumulate(total, result, active)
            active &= ~(result.terminated | result.truncated)
            if not active.any():
                break
        assert total is not None
        return total

    def _record_extended_comfort(self, dense: np.ndarray) -> None:
        """Two-frame extended comfort between this plan and the previous one (0.5 s apart in NAVSIM)."""
        poses = _poses_from_positions(dense)
        if self.previous_plan is not None:
            ec = metrics.two_frame_extended_comfort(self.previous_plan, poses, self.config.replan_every, DT)
            started = self.time > HISTORY_STEPS  # no previous plan at an episode's first step
            self.plan_ec = np.where(started, ec, 1.0)
            self.window_ec_sum[started] += ec[started]
            self.window_ec_count[started] += 1
        self.previous_plan = poses

    def _substep(self, accel: np.ndarray, steer_rate: np.ndarray, active: np.ndarray) -> StepResult:
        """One 0.1 s step of every slot; slots not ``active`` (already ended) are stepped but ignored."""
        rows = np.arange(self.n)
        frozen = None if active.all() else self.ego.take(~active)  # ended slots keep their final state
        bicycle_step(self.ego, accel, steer_rate, self.limits)
        if frozen is not None:
            for name in ("pose", "speed", "steer", "accel", "yaw_rate"):
                getattr(self.ego, name)[~active] = getattr(frozen, name)
        self.time = np.where(active, np.minimum(self.time + 1, self.max_steps - 1), self.time)
        t = self.time
        if self.model is not None:
            plan = self.tracker.points if self.config.action_mode == "plan" else None
            frame = self.model.step(self.ego.pose, self.ego.speed, plan)
            self.agent_pose[rows, t], self.agent_speed[rows, t], self.agent_valid[rows, t] = (
                frame.pose,
                frame.speed,
                frame.valid,
            )
        elif self.reactive is not None:
            previous = AgentFrame(
                self.agent_pose[rows, t - 1], self.agent_speed[rows, t - 1], self.agent_valid[rows, t - 1]
            )
            state = self.light_state[rows, t - 1]
            stops = AgentFrame(
                self.light_pose, np.zeros(self.light_valid.shape), self.light_valid & (state != LIGHT_GREEN)
            )
            self.reactive.step(previous, self.ego.pose, self.ego.speed, EGO_SIZE, stops, self.light_size)
            self.reactive.write_frame(t, self.agent_pose, self.agent_speed, self.agent_valid)
        self.ego_pose[rows, t] = self.ego.pose
        self.ego_speed[rows, t] = self.ego.speed
        checks = self._step_scores()  # [N, len(STEP_COMPONENTS)]
        n = self.n
        reward, terminated, truncated = np.empty(n), np.empty(n, bool), np.empty(n, bool)
        window_end, starting = np.empty(n, bool), np.empty(n, bool)
        step_outcome(
            checks,
            active,
            t - HISTORY_STEPS,
            self.episode_steps,
            -1 if self.step_limit is None else self.step_limit,
            self.config.reward == "epdms",
            self.config.terminate_on_failure,
            self.window_min,
            WINDOW_MINIMA_COLUMNS,
            self.failed,
            reward,
            terminated,
            truncated,
            window_end,
            starting,
        )
        result = StepResult(reward, terminated, truncated, dict(zip(STEP_COMPONENTS, checks.T, strict=True)))
        if window_end.any():
            self._score_windows(np.flatnonzero(window_end))
        ended = terminated | truncated
        if ended.any():
            result.episode_metrics = self._episode_metrics(ended)
        if starting.any():
            self._start_window(np.flatnonzero(starting))
        return result

    # --- per-step scores ------------------------------------------------------------------------------
    def _step_scores(self) -> np.ndarray:
        """This step's checks of every slot ``[N, len(STEP_COMPONENTS)]`` (see ``step_checks.py``)."""
        future_pose, future_valid, future_index, travel, future_speed = self._agents_ahead()
        out = np.empty((self.n, len(STEP_COMPONENTS)))
        rasters = self.rasters
        score_step(
            (
                self.ego.pose,
                self.ego.speed,
                EGO_SIZE,
                metrics.EGO_REAR_AXLE_TO_CENTRE,
                self.time,
                self.ego_pose,
            ),
            (self.agent_pose, self.agent_speed, self.agent_valid, self.agent_size, self.agent_type),
            (TTC_OFFSETS, future_pose, future_valid, future_index, travel, future_speed),
            (self.light_pose, self.light_size, self.light_red),
            (rasters.origin, rasters.resolution, rasters.area, rasters.lane, self.map_index),
            (self.route_points, self.route_station, self.route_index, self.station, self.lateral),
            (
                self.collided,
                self.ttc_tolerated,
                self.oncoming_progress,
                self.off_centre_steps,
                self.reference_step,
            ),
            last_step_weights(COMFORT_CONTEXT, DT),
            DT,
            out,
        )
        out[:, len(CHECKS)] = self.plan_ec  # EC: of the plan being driven (1 in control mode)
        return out

    def _agents_ahead(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """What TTC reads of the agents: ``(pose, valid, time_index [N, O], travel [N], speed)``.

        Replaying the log, the logged future at the TTC offsets (read in place, ``speed`` None);
        otherwise the agents now with their speeds, which the TTC check moves on at constant
        velocity itself (only for agents within reach of the ego).
        """
        if self.reactive is None and self.model is None:
            offsets = np.round(TTC_OFFSETS / DT).astype(np.int64)
            time_index = np.minimum(self.time[:, None] + offsets, self.max_steps - 1)
            return self.agent_pose, self.agent_valid, time_index, self.agent_travel, None
        return self.agent_pose, self.agent_valid, self.time[:, None], self.agent_travel, self.agent_speed

    # --- windows --------------------------------------------------------------------------------------
    def _start_window(self, idx: np.ndarray) -> None:
        """Fix the progress reference of a new window from the ego's state (an IDM driver on the route)."""
        reference = reference_progress(self, idx)
        self.reference_step[idx] = np.where(reference > metrics.PROGRESS_THRESHOLD, reference / WINDOW, 0.0)
        self.window_start_station[idx] = self.station[idx]
        self.reference_window[idx] = reference
        self.window_min[idx] = 1.0
        self.ttc_tolerated[idx] = False
        self.oncoming_progress[idx] = 0.0  # NAVSIM scores each plan from its own start
        self.off_centre_steps[idx] = 0
        self.window_ec_sum[idx] = 0.0
        self.window_ec_count[idx] = 0

    def _score_windows(self, idx: np.ndarray) -> None:
        """Score the window that just ended in slots ``idx`` like a NAVSIM plan and accumulate it.

        The per-step checks already ran; :func:`~omnigym.envs.driving.window_scores.score_windows`
        reduces them over the window and adds comfort, history comfort and progress.
        """
        score_windows(
            idx,
            self.time,
            self.ego_pose,
            self.window_min,
            WINDOW_MINIMA_METRICS,
            self.window_ec_sum,
            self.window_ec_count,
            self.station,
            self.window_start_station,
            self.reference_window,
            self.human,
            self.human_count,
            savgol_filters(WINDOW + 1, DT),
            savgol_filters(HISTORY_STEPS + WINDOW + 1, DT),
            metrics.PDMS_COLUMNS,
            metrics.EPDMS_COLUMNS,
            DT,
            self.config.navsim_version == "v1",
            self.pdms_sum,
            self.epdms_sum,
            self.window_sum,
            self.windows_done,
        )

    def _episode_metrics(self, ended: np.ndarray) -> dict[str, np.ndarray]:
        """Episode PDMS/EPDMS and sub-metric means for slots ``ended`` (NaN elsewhere)."""
        total = np.where(self.failed, np.ceil(self.episode_steps / WINDOW), np.maximum(self.windows_done, 1))
        out = {
            "pdms": self.pdms_sum / total,
            "epdms": self.epdms_sum / total,
            "progress": self.station - self.episode_start_station,
            "failed": self.failed.astype(np.float64),
        }
        means = self.window_sum / np.maximum(self.windows_done, 1)[:, None]
        out.update({name: means[:, i] for i, name in enumerate(metrics.SUB_METRICS)})
        return {key: np.where(ended, value, np.nan) for key, value in out.items()}


def _poses_from_positions(points: np.ndarray) -> np.ndarray:
    """Poses ``[N, T, 3]`` from positions ``[N, T, 2]``, heading along the path."""
    delta = np.diff(points, axis=1)
    heading = np.arctan2(delta[..., 1], delta[..., 0])
    heading = np.concatenate([heading, heading[:, -1:]], axis=1)
    return np.concatenate([points, heading[..., None]], axis=-1)
