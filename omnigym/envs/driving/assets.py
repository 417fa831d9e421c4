"""Per-scene data derived once and reused by every episode on the scene.

Rasters, resampled route and lanes, the route's speed limits and stop lines, and the logged
human's scores (for NAVSIM's false-positive filter) cost milliseconds to build; an episode step
costs microseconds, so they are built once per scene and kept in a small LRU cache.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from omnigym.envs.driving import metrics
from omnigym.envs.driving.map_raster import (
    DEFAULT_EXTENT,
    DEFAULT_RESOLUTION,
    MapRaster,
    RasterStack,
    rasterize_map,
)
from omnigym.envs.driving.observations import LANE_SAMPLE_SPACING, LaneSamples
from omnigym.envs.driving.scene import (
    DT,
    HISTORY_STEPS,
    HORIZON_STEPS,
    LIGHT_RED,
    Scene,
    light_stop_box,
    resample_polyline,
    route_polyline,
)
from omnigym.envs.driving.trajectory_scores import score_trajectories

ROUTE_SPACING = 1.0
"""Metres between route samples (the metrics and observations index the route by metre)."""


@dataclass
class SceneAssets:
    """What the simulator derives from one scene."""

    raster: MapRaster
    route_points: np.ndarray  # [R, 2] every ROUTE_SPACING m
    route_heading: np.ndarray  # [R]
    route_speed_limit: np.ndarray  # [R]
    lane_samples: LaneSamples  # lane centrelines every LANE_SAMPLE_SPACING m
    light_pose: np.ndarray  # [K, 3] red-light objects (stop boxes)
    light_size: np.ndarray  # [K, 2]
    light_station: np.ndarray  # [K] station of the stop line on the route, inf when off the route
    agent_travel: float = np.inf  # metres a logged agent moves at most within the TTC horizon
    raster_index: int = -1  # entry of ``raster`` in the simulator's RasterPool
    map_image: Any = None  # render.MapImage when the image key is used
    human: np.ndarray | None = None  # [W, num sub-metrics] the logged human's window scores


def build_assets(
    scene: Scene, *, resolution: float = DEFAULT_RESOLUTION, extent: float = DEFAULT_EXTENT
) -> SceneAssets:
    """Derive the simulator's per-scene data (not the map image or human scores: see the simulator)."""
    road_map = scene.road_map
    raster = rasterize_map(road_map, scene.route, resolution=resolution, extent=extent)
    route = route_polyline(scene, ROUTE_SPACING)
    tangent = np.gradient(route, axis=0) if len(route) > 1 else np.array([[1.0, 0.0]])
    heading = np.arctan2(tangent[:, 1], tangent[:, 0])
    # speed limit along the route: the limit of the lane each sample lies on, carried through connectors
    lane_at = _nearest_route_lane(scene, route)
    limit = road_map.lane_speed_limit[lane_at].astype(np.float64)
    light_pose, light_size = light_stop_box(road_map)
    light_station = np.full(len(light_pose), np.inf)
    route_lanes = set(int(lane) for lane in scene.route.lanes)
    for k, lane in enumerate(road_map.light_lane):
        if int(lane) in route_lanes:
            start = road_map.centreline(int(lane))[0]
            light_station[k] = float(np.argmin(np.sum((route - start) ** 2, axis=1))) * ROUTE_SPACING
    lanes = LaneSamples.of(
        [resample_polyline(road_map.centreline(i), LANE_SAMPLE_SPACING) for i in range(road_map.num_lanes)]
    )
    return SceneAssets(
        raster=raster,
        route_points=route,
        route_heading=heading,
        route_speed_limit=limit,
        lane_samples=lanes,
        light_pose=light_pose,
        light_size=light_size,
        light_station=light_station,
        agent_travel=max_agent_travel(scene, round(metrics.TTC_OFFSETS[-1] / DT)),
    )


def max_agent_travel(scene: Scene, steps: int) -> float:
    """The farthest any logged agent moves between two valid samples at most ``steps`` apart (m).

    It lets the per-step TTC check skip agents that cannot reach the ego within its horizon.
    """
    xy, valid = scene.log.agent_pose[..., :2], scene.log.agent_valid
    travel = 0.0
    for k in range(1, min(steps, len(xy) - 1) + 1):
        both = valid[k:] & valid[:-k]
        if both.any():
            step = xy[k:] - xy[:-k]
            travel = max(travel, float(np.sqrt(np.max(np.sum(step**2, axis=-1)[both]))))
    return travel


def _nearest_route_lane(scene: Scene, route: np.ndarray) -> np.ndarray:
    """For each route sample, the route lane whose centreline passes nearest."""
    best = np.full(len(route), np.inf)
    lane_of = np.full(len(route), int(scene.route.lanes[0]))
    for lane in scene.route.lanes:
        points = scene.road_map.centreline(int(lane))
        d2 = np.min(np.sum((route[:, None, :] - points[None, :, :]) ** 2, axis=-1), axis=1)
        closer = d2 < best
        best[closer] = d2[closer]
        lane_of[closer] = int(lane)
    return lane_of


def human_window_scores(scene: Scene, assets: SceneAssets, window: int = HORIZON_STEPS) -> np.ndarray:
    """Sub-scores ``[W, len(SUB_METRICS)]`` of the logged human in each scoring window.

    Windows of ``window`` steps from the episode start, against the log-replay agents: the scores
    NAVSIM's false-positive filter compares the agent with.
    """
    log = scene.log
    num_windows = max(1, math.ceil(scene.episode_steps / window))
    starts = HISTORY_STEPS + window * np.arange(num_windows)
    steps = np.minimum(starts[:, None] + np.arange(window + 1), log.num_steps - 1)
    w = num_windows
    world = metrics.ScoringWorld(
        raster=RasterStack.of([assets.raster]),
        map_index=np.zeros(w, np.int64),
        route_points=np.broadcast_to(assets.route_points, (w, *assets.route_points.shape)),
        route_num_points=np.full(w, len(assets.route_points)),
        agent_size=np.broadcast_to(log.agent_size, (w, *log.agent_size.shape)),
        agent_type=np.broadcast_to(log.agent_type, (w, *log.agent_type.shape)),
        light_pose=np.broadcast_to(assets.light_pose, (w, *assets.light_pose.shape)),
        light_size=np.broadcast_to(assets.light_size, (w, *assets.light_size.shape)),
    )
    history = log.ego_pose[starts[:, None] - np.arange(HISTORY_STEPS, 0, -1)]
    scores = score_trajectories(
        world,
        log.ego_pose[steps].astype(np.float64),
        log.ego_speed[steps].astype(np.float64),
        log.agent_pose[steps].astype(np.float64),
        log.agent_speed[steps].astype(np.float64),
        log.agent_valid[steps],
        log.light_state[steps] == LIGHT_RED,
        ego_history=history.astype(np.float64),
    )
    scores.ep = np.ones(w)  # the human is its own reference here; EP is never filtered to 0
    return scores.to_array()


class AssetCache:
    """An LRU cache of :class:`SceneAssets` by scene id; ``on_evict`` hears of each eviction."""

    def __init__(
        self,
        build: Callable[[Scene], SceneAssets],
        max_size: int = 64,
        on_evict: Callable[[SceneAssets], None] | None = None,
    ) -> None:
        self.build = build
        self.max_size = max_size
        self.on_evict = on_evict
        self._items: OrderedDict[int, SceneAssets] = OrderedDict()

    def get(self, scene: Scene) -> SceneAssets:
        """The assets of ``scene``, built on first use."""
        key = int(scene.scene_id)
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        assets = self.build(scene)
        self._items[key] = assets
        while len(self._items) > self.max_size:
            _, evicted = self._items.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(evicted)
        return assets
