"""Map layers as rasters, for constant-time area queries on batches of points.

The metrics ask, for every ego corner at every step, "is this drivable? which lane? in an
intersection? on the route?". Polygon tests per query would dominate the step time, so each
scene's map is drawn once into a few layers on a fixed canvas, and queries
become array indexing. Resolution bounds the error on area boundaries (0.25 m at 0.5 m/px).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from omnigym.envs.driving.scene import RoadMap, Route

DRIVABLE = 1
INTERSECTION = 2
ON_ROUTE = 4
"""Bits of :attr:`MapRaster.area`."""

DEFAULT_RESOLUTION = 0.5
DEFAULT_EXTENT = 400.0
"""Canvas side in metres; procedural maps fit in it, centred."""


@dataclass
class MapRaster:
    """One map's layers.

    ``area`` holds the DRIVABLE / INTERSECTION / ON_ROUTE bits; ``lane`` the id of the
    (non-connector) lane covering a cell, -1 for none. Pixel ``(row, col)`` covers world
    ``origin + (col, row) * resolution`` to one pixel further.
    """

    origin: np.ndarray  # [2] float64 world x, y of the canvas corner
    resolution: float
    area: np.ndarray  # [H, W] uint8 bits
    lane: np.ndarray  # [H, W] int16

    def to_pixels(self, points: np.ndarray) -> np.ndarray:
        """Float pixel coordinates (col, row) of world points ``[..., 2]``."""
        return (np.asarray(points) - self.origin) / self.resolution


def _pixel_centres(
    low: np.ndarray, size: int, origin: np.ndarray, resolution: float, span: int
) -> tuple[np.ndarray, ...]:
    """Pixel rows, columns ``[S, span, span]`` from corners ``low`` [S, 2], and their centres.

    Indices are clipped to the canvas; centres are world x, y.
    """
    start = np.floor((low - origin) / resolution).astype(np.int64)
    offsets = np.arange(span)
    col = np.clip(start[:, 0, None, None] + offsets[None, None, :], 0, size - 1)
    row = np.clip(start[:, 1, None, None] + offsets[None, :, None], 0, size - 1)
    col, row = np.broadcast_arrays(col, row)
    centre_x = origin[0] + (col + 0.5) * resolution
    centre_y = origin[1] + (row + 0.5) * resolution
    return row, col, centre_x, centre_y


def _fill_lane(
    layer: np.ndarray, centreline: np.ndarray, width: float, origin: np.ndarray, resolution: float, value: int
) -> None:
    """Set the pixels whose centres lie within ``width / 2`` of the lane's centreline, between its ends.

    Exact at pixel centres (OpenCV's ``fillPoly`` is off by up to 1.5 px on long diagonal edges,
    which would put an ego well inside its lane "off-road"). Each segment claims the pixels near
    it; joints are rounded (distance to the segment), the lane's two ends are cut square.
    """
    points = np.asarray(centreline, np.float64)
    a, b = points[:-1], points[1:]
    seg = b - a
    length = np.maximum(np.linalg.norm(seg, axis=1), 1e-9)
    unit = seg / length[:, None]
    half = width / 2
    span = int(np.ceil((length.max() + width) / resolution)) + 2
    row, col, x, y = _pixel_centres(np.minimum(a, b) - half, layer.shape[0], origin, resolution, span)
    dx, dy = x - a[:, 0, None, None], y - a[:, 1, None, None]
    along = dx * unit[:, 0, None, None] + dy * unit[:, 1, None, None]
    lateral = -dx * unit[:, 1, None, None] + dy * unit[:, 0, None, None]
    low = np.zeros(len(a))[:, None, None]
    high = length[:, None, None].copy()
    clamped = np.clip(along, low, high)
    distance_sq = (along - clamped) ** 2 + lateral**2
    inside = distance_sq <= half * half
    inside[0] &= along[0] >= 0.0  # square ends
    inside[-1] &= along[-1] <= length[-1]
    layer[row[inside], col[inside]] = value


def _fill_convex(
    layer: np.ndarray, polygon: np.ndarray, origin: np.ndarray, resolution: float, value: int
) -> None:
    """Set the pixels whose centres lie inside a convex polygon ``[V, 2]`` (either winding)."""
    polygon = np.asarray(polygon, np.float64)
    low, high = polygon.min(axis=0), polygon.max(axis=0)
    span = int(np.ceil(np.max(high - low) / resolution)) + 2
    row, col, x, y = _pixel_centres(low[None], layer.shape[0], origin, resolution, span)
    edges = np.roll(polygon, -1, axis=0) - polygon
    cross = edges[:, 0, None, None] * (y - polygon[:, 1, None, None]) - edges[:, 1, None, None] * (
        x - polygon[:, 0, None, None]
    )
    inside = np.all(cross >= 0, axis=0) | np.all(cross <= 0, axis=0)
    layer[row[0][inside], col[0][inside]] = value


def map_bounds(road_map: RoadMap) -> tuple[np.ndarray, np.ndarray]:
    """World bounding box (min xy, max xy) of all lane centrelines."""
    points = np.concatenate([road_map.centreline(i) for i in range(road_map.num_lanes)])
    return points.min(axis=0), points.max(axis=0)


def rasterize_map(
    road_map: RoadMap,
    route: Route,
    *,
    resolution: float = DEFAULT_RESOLUTION,
    extent: float = DEFAULT_EXTENT,
) -> MapRaster:
    """Draw a map's layers on an ``extent`` x ``extent`` m canvas centred on the map.

    Raises ``ValueError`` when the map does not fit: raise ``extent`` for bigger maps.
    """
    low, high = map_bounds(road_map)
    margin = float(road_map.lane_width.max(initial=0.0)) + 2.0
    if np.any(high - low + 2 * margin > extent):
        raise ValueError(
            f"map spans {high - low} m, more than the raster extent {extent} m; raise map_extent"
        )
    size = int(np.ceil(extent / resolution))
    origin = (low + high) / 2 - extent / 2
    area = np.zeros((size, size), np.uint8)
    lane = np.full((size, size), -1, np.int16)
    route_lanes = set(int(i) for i in route.lanes)
    route_roads = {int(road_map.lane_road[i]) for i in route_lanes if not road_map.lane_is_connector[i]}
    on_route = np.zeros((size, size), np.uint8)
    for i in range(road_map.num_lanes):
        centreline, width = road_map.centreline(i), float(road_map.lane_width[i])
        _fill_lane(area, centreline, width, origin, resolution, DRIVABLE)
        connector = bool(road_map.lane_is_connector[i])
        if not connector:
            _fill_lane(lane, centreline, width, origin, resolution, i)
        if (connector and i in route_lanes) or (not connector and int(road_map.lane_road[i]) in route_roads):
            _fill_lane(on_route, centreline, width, origin, resolution, ON_ROUTE)
    junction = np.zeros((size, size), np.uint8)
    for quad in road_map.intersections:
        _fill_convex(junction, quad, origin, resolution, INTERSECTION)
    area |= junction | on_route
    area[junction > 0] |= DRIVABLE
    return MapRaster(origin=origin.astype(np.float64), resolution=resolution, area=area, lane=lane)


@dataclass
class RasterStack:
    """Rasters of several maps on one canvas size, queried together.

    ``map_index[b]`` picks the map of query ``b``. Slots are overwritten in place when an env
    loads a new scene.
    """

    origin: np.ndarray  # [M, 2]
    resolution: float
    area: np.ndarray  # [M, H, W] uint8
    lane: np.ndarray  # [M, H, W] int16

    @classmethod
    def of(cls, rasters: list[MapRaster]) -> RasterStack:
        """Stack rasters that share a resolution and canvas size."""
        if len({r.area.shape for r in rasters}) != 1 or len({r.resolution for r in rasters}) != 1:
            raise ValueError("rasters must share one resolution and canvas size to be stacked")
        return cls(
            origin=np.stack([r.origin for r in rasters]),
            resolution=rasters[0].resolution,
            area=np.stack([r.area for r in rasters]),
            lane=np.stack([r.lane for r in rasters]),
        )

    def put(self, slot: int, raster: MapRaster) -> None:
        """Load ``raster`` into ``slot``."""
        if raster.area.shape != self.area.shape[1:] or raster.resolution != self.resolution:
            raise ValueError(
                f"raster {raster.area.shape} at {raster.resolution} m/px does not fit the stack "
                f"{self.area.shape[1:]} at {self.resolution} m/px"
            )
        self.origin[slot] = raster.origin
        self.area[slot] = raster.area
        self.lane[slot] = raster.lane

    def view(self, index: int) -> MapRaster:
        """Entry ``index`` as a :class:`MapRaster` (views, not copies)."""
        return MapRaster(self.origin[index], self.resolution, self.area[index], self.lane[index])

    def query(self, map_index: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(area bits, lane id)`` at world ``points [B, ..., 2]`` of maps ``map_index [B]``.

        Points off the canvas read as non-drivable, lane -1.
        """
        map_index = np.asarray(map_index, dtype=np.int64)
        points = np.asarray(points, dtype=np.float64)
        flat = points.reshape(len(map_index), -1, 2)
        area = np.empty(flat.shape[:2], np.uint8)
        lane = np.empty(flat.shape[:2], np.int16)
        _query(self.origin, self.resolution, self.area, self.lane, map_index, flat, area, lane)
        return area.reshape(points.shape[:-1]), lane.reshape(points.shape[:-1])


class RasterPool:
    """The rasters of the scenes in memory, in one :class:`RasterStack` that queries index directly.

    A scene's raster is stored once, when its assets are built, and its entry is given back when
    the scene has left the asset cache and no env slot drives on it any more: loading a scene
    into a slot copies no raster. Entries never used take no memory (the stack is allocated
    uninitialised, so the OS maps its pages on first write).

    Args:
        capacity: entries; the asset cache size plus the number of slots always suffices.
        like: a raster giving the resolution and canvas size.
    """

    def __init__(self, capacity: int, like: MapRaster) -> None:
        self.stack = RasterStack(
            origin=np.zeros((capacity, 2)),
            resolution=like.resolution,
            area=np.empty((capacity, *like.area.shape), np.uint8),
            lane=np.empty((capacity, *like.lane.shape), np.int16),
        )
        self._free = list(range(capacity - 1, -1, -1))
        self._users = np.zeros(capacity, np.int64)
        self._dropped = np.zeros(capacity, bool)  # out of the cache: freed once unused

    def store(self, raster: MapRaster) -> int:
        """Copy ``raster`` into a free entry and return its index."""
        if not self._free:
            raise RuntimeError("raster pool full: every entry is cached or in use (capacity too small)")
        index = self._free.pop()
        self.stack.put(index, raster)
        self._dropped[index] = False
        return index

    def pin(self, index: int) -> None:
        """A slot drives on entry ``index``."""
        self._users[index] += 1

    def unpin(self, index: int) -> None:
        """A slot left entry ``index``."""
        self._users[index] -= 1
        self._free_if_unused(index)

    def drop(self, index: int) -> None:
        """Entry ``index`` left the asset cache."""
        self._dropped[index] = True
        self._free_if_unused(index)

    def _free_if_unused(self, index: int) -> None:
        if self._dropped[index] and self._users[index] == 0:
            self._dropped[index] = False
            self._free.append(index)


@njit(cache=True)
def lookup(
    origin: np.ndarray, resolution: float, area: np.ndarray, lane: np.ndarray, slot: int, x: float, y: float
) -> tuple[int, int]:
    """``(area bits, lane id)`` of map ``slot`` at world (x, y); off the canvas ``(0, -1)``."""
    col = int(np.floor((x - origin[slot, 0]) / resolution))
    row = int(np.floor((y - origin[slot, 1]) / resolution))
    if 0 <= col < area.shape[2] and 0 <= row < area.shape[1]:
        return int(area[slot, row, col]), int(lane[slot, row, col])
    return 0, -1


@njit(cache=True)
def _query(
    origin: np.ndarray,
    resolution: float,
    area: np.ndarray,
    lane: np.ndarray,
    map_index: np.ndarray,
    points: np.ndarray,
    out_area: np.ndarray,
    out_lane: np.ndarray,
) -> None:
    for b in range(points.shape[0]):
        for i in range(points.shape[1]):
            bits, lane_id = lookup(
                origin, resolution, area, lane, map_index[b], points[b, i, 0], points[b, i, 1]
            )
            out_area[b, i], out_lane[b, i] = bits, lane_id
