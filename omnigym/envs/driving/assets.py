"""Per-scene data derived once and reused by every episode on the scene.

Rasters, resampled route and lanes, the route's speed limits and stop lines, and the logged
human's scores (for NAVSIM's false-positive filter) cost milliseconds to build; an episode step
costs microseconds, so they are built once per scene and kept in a small LRU cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from omnigym.envs.driving.map_raster import DEFAULT_EXTENT, DEFAULT_RESOLUTION, MapRaster, rasterize_map
from omnigym.envs.driving.observations import LANE_SAMPLE_SPACING
from omnigym.envs.driving.scene import Scene, light_stop_box, resample_polyline, route_polyline

ROUTE_SPACING = 1.0
"""Metres between route samples (the metrics and observations index the route by metre)."""


@dataclass
class SceneAssets:
    """What the simulator derives from one scene."""

    raster: MapRaster
    route_points: np.ndarray  # [R, 2] every ROUTE_SPACING m
    route_heading: np.ndarray  # [R]
    route_speed_limit: np.ndarray  # [R]
    lane_samples: list[np.ndarray]  # per lane, points every LANE_SAMPLE_SPACING m
    light_pose: np.ndarray  # [K, 3] red-light objects (stop boxes)
    light_size: np.ndarray  # [K, 2]
    light_station: np.ndarray  # [K] station of the stop line on the route, inf when off the route
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
    lanes = [
        resample_polyline(road_map.centreline(i), LANE_SAMPLE_SPACING) for i in range(road_map.num_lanes)
    ]
    return SceneAssets(
        raster=raster,
        route_points=route,
        route_heading=heading,
        route_speed_limit=limit,
        lane_samples=lanes,
        light_pose=light_pose,
        light_size=light_size,
        light_station=light_station,
    )


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


class AssetCache:
    """An LRU cache of :class:`SceneAssets` by scene id."""

    def __init__(self, build: Callable[[Scene], SceneAssets], max_size: int = 64) -> None:
        self.build = build
        self.max_size = max_size
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
            self._items.popitem(last=False)
        return assets
