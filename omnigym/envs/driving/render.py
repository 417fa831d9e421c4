"""Bird's-eye-view rasters of a driving scene: the ``image`` observation and frames for humans.

The observation is ego-centric: the ego sits on the vertical centre line, with
``ego_forward_fraction`` of the view ahead of it, heading up (left of the ego is left in the image).
Each scene's static map is drawn once (:func:`prerender_map`); every frame then costs one
``cv2.warpAffine`` (crop + rotate) and a few ``cv2.fillPoly`` calls per env, with all box corners
transformed into pixels for all envs at once.

Channel semantics of the ``image`` observation (uint8):

- ``channels=3``:

  - ch0, road: drivable area (lanes and intersections) 100, lane markings (edges of lanes outside
    intersections) 255, off-road 0.
  - ch1, other agents 255; traffic-light stop boxes (:func:`scene.light_stop_box`) 150 for red and
    80 for yellow (green lights are not drawn). Agents are drawn over light boxes.
  - ch2, route lanes 100, ego 255.

- ``channels=1``, one grey composite, later entries drawn over earlier ones: off-road 0, drivable
  60, route 100, lane markings 140, yellow light 170, red light 200, agents 230, ego 255.

The map is anti-aliased (drawn on a finer grid, then averaged) and resampled bilinearly when
rotated, so its values blend at area edges: a one-pixel-wide marking straddling two pixels reads
about 180 in both. Agent, light and ego values are exact; their polygons include boundary pixels,
so boxes look up to one pixel larger than they are. The ego box is centred on the ego pose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np
from numba import njit

from omnigym.envs.driving.scene import (
    EGO_LENGTH,
    EGO_WIDTH,
    LIGHT_GREEN,
    LIGHT_RED,
    LIGHT_YELLOW,
    RoadMap,
    Route,
    box_corners,
    lane_polygon,
)

_SHIFT = 4
"""Fractional bits of the fixed-point coordinates given to OpenCV (1/16 pixel precision)."""
_MAX_SUBPIXELS = 1 << 24
"""Largest supersampled map layer (pixels) drawn by :func:`prerender_map`."""
_PARKED = -(1 << 12)
"""Fixed-point coordinate where hidden boxes are parked: off the image, so fillPoly draws nothing."""

# observation values for channels=3 (see the module docstring), grey levels for channels=1
ROAD, MARKING, ROUTE = 100, 255, 100
AGENT, LIGHT_RED_VALUE, LIGHT_YELLOW_VALUE, EGO = 255, 150, 80, 255
GREY = {"road": 60, "route": 100, "marking": 140, "yellow": 170, "red": 200, "agent": 230, "ego": 255}


@dataclass(frozen=True)
class BevConfig:
    """Size and framing of a bird's-eye view.

    Attributes:
        size: Side of the square image in pixels.
        meters: Side of the view in metres (``meters / size`` metres per pixel).
        channels: 3 for separate road / agents / route+ego channels, 1 for a grey composite.
        ego_forward_fraction: Share of the view ahead of the ego (0.5 puts it at the centre).
    """

    size: int = 64
    meters: float = 64.0
    channels: int = 3
    ego_forward_fraction: float = 0.75

    def __post_init__(self) -> None:
        if self.size < 1 or self.meters <= 0:
            raise ValueError(f"BevConfig needs size >= 1 and meters > 0, got {self.size}, {self.meters}")
        if self.channels not in (1, 3):
            raise ValueError(f"BevConfig.channels must be 1 or 3, got {self.channels}")
        if not 0.0 < self.ego_forward_fraction <= 1.0:
            raise ValueError(
                f"BevConfig.ego_forward_fraction must be in (0, 1], got {self.ego_forward_fraction}"
            )

    @property
    def resolution(self) -> float:
        """Metres per pixel."""
        return self.meters / self.size


RGB_CONFIG = BevConfig(size=400, meters=100.0, channels=3, ego_forward_fraction=0.7)
"""Framing of :func:`render_rgb` frames (0.25 m/px); prerender its map with this config."""


@dataclass
class MapImage:
    """A scene's static map drawn once, in a view's channel semantics.

    Pixel ``(row, col)`` covers world ``origin + (col, row) * resolution`` to one pixel further:
    rows run along world +y (the image is the map seen from below; the views flip it upright).
    """

    image: np.ndarray  # [H, W, C] uint8
    origin: np.ndarray  # [2] float64 world x, y of the corner of pixel (0, 0)
    resolution: float  # metres per pixel

    def to_pixels(self, points: np.ndarray) -> np.ndarray:
        """Pixel-centre coordinates (col, row) of world points ``[..., 2]``: pixel centres are integers."""
        return (np.asarray(points, np.float64) - self.origin) / self.resolution - 0.5


# --- static map ----------------------------------------------------------------------------------
def _fixed(pixels: np.ndarray) -> np.ndarray:
    """Float pixel coordinates as OpenCV's fixed-point int32."""
    return np.round(pixels * (1 << _SHIFT)).astype(np.int32)


def _canvas(road_map: RoadMap, resolution: float) -> tuple[np.ndarray, tuple[int, int]]:
    """Origin and ``(rows, cols)`` of a canvas covering every lane polygon and intersection."""
    points = [road_map.centreline(i) for i in range(road_map.num_lanes)]
    points.append(road_map.intersections.reshape(-1, 2))
    stacked = np.concatenate(points).astype(np.float64)
    margin = float(road_map.lane_width.max(initial=0.0)) / 2 + 2 * resolution
    low = stacked.min(axis=0) - margin
    cols, rows = np.ceil((stacked.max(axis=0) + margin - low) / resolution).astype(int)
    return low, (int(rows), int(cols))


def _supersampling(shape: tuple[int, int]) -> int:
    """Sub-pixels per map pixel side: up to 4, fewer for large maps (caps the temporary layers)."""
    return int(max(1, min(4, np.sqrt(_MAX_SUBPIXELS / (shape[0] * shape[1])))))


def _map_layers(
    road_map: RoadMap, route: Route, image: MapImage
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coverage ``[H, W]`` float32 in [0, 1] of the drivable area, lane markings and route lanes.

    Layers are drawn on a finer grid and box-averaged down, so area edges and markings are
    anti-aliased: a rotated view then shifts them smoothly instead of jumping whole pixels.
    """
    factor = _supersampling(image.image.shape[:2])
    shape = (image.image.shape[0] * factor, image.image.shape[1] * factor)
    fine = MapImage(image=image.image, origin=image.origin, resolution=image.resolution / factor)
    drivable, markings, on_route = (np.zeros(shape, np.uint8) for _ in range(3))
    route_lanes = {int(lane) for lane in route.lanes}
    for lane in range(road_map.num_lanes):
        polygon = _fixed(fine.to_pixels(lane_polygon(road_map, lane)))
        cv2.fillPoly(drivable, [polygon], 255, cv2.LINE_8, _SHIFT)
        if lane in route_lanes:
            cv2.fillPoly(on_route, [polygon], 255, cv2.LINE_8, _SHIFT)
        if not road_map.lane_is_connector[lane]:
            # lane_polygon is the left edge followed by the right edge reversed; markings are one
            # map pixel wide
            half = len(polygon) // 2
            cv2.polylines(markings, [polygon[:half], polygon[half:]], False, 255, factor, cv2.LINE_8, _SHIFT)
    if len(road_map.intersections):
        quads = _fixed(fine.to_pixels(road_map.intersections))
        cv2.fillPoly(drivable, list(quads), 255, cv2.LINE_8, _SHIFT)
    size = (image.image.shape[1], image.image.shape[0])
    return tuple(  # type: ignore[return-value]
        cv2.resize(layer, size, interpolation=cv2.INTER_AREA).astype(np.float32) / 255
        for layer in (drivable, markings, on_route)
    )


def prerender_map(road_map: RoadMap, route: Route, config: BevConfig) -> MapImage:
    """Draw a scene's static map once, at ``config``'s resolution and channel semantics.

    Area edges and markings are anti-aliased (values in between the documented ones).

    Args:
        road_map: The scene's lanes and intersections.
        route: The ego's route (its lanes are drawn as the route layer).
        config: The view the map will be cropped into; the image covers the whole map plus a margin.

    Returns:
        A :class:`MapImage` whose ``image`` is ``[H, W, config.channels]`` uint8.
    """
    origin, shape = _canvas(road_map, config.resolution)
    blank = np.zeros((*shape, config.channels), np.uint8)
    image = MapImage(image=blank, origin=origin, resolution=config.resolution)
    drivable, markings, on_route = _map_layers(road_map, route, image)
    if config.channels == 3:
        road = ROAD * drivable
        blank[..., 0] = np.round(road + (MARKING - road) * markings)
        blank[..., 2] = np.round(ROUTE * on_route)
    else:
        grey = GREY["road"] * drivable + (GREY["route"] - GREY["road"]) * np.minimum(on_route, drivable)
        blank[..., 0] = np.round(grey + (GREY["marking"] - grey) * markings)
    return image


# --- ego-centric views ---------------------------------------------------------------------------
class BevRenderer:
    """Ego-centric views of many envs at once (see the module docstring for channel semantics).

    Args:
        config: Image size, metres covered, channels and framing.
        ego_size: Ego footprint ``(length, width)`` in metres.
    """

    def __init__(
        self, config: BevConfig | None = None, ego_size: tuple[float, float] = (EGO_LENGTH, EGO_WIDTH)
    ) -> None:
        self.config = config or BevConfig()
        size = self.config.size
        # the ego's pixel-centre coordinates (col, row)
        self._centre = (size / 2 - 0.5, size * self.config.ego_forward_fraction - 0.5)
        self.ego_size = ego_size
        self._ego_pixels = self._ego_mask(ego_size)
        self._scratch = np.zeros((0, size, size), np.uint8)

    def _ego_mask(self, ego_size: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
        """Rows and cols of the ego's pixels: the same in every ego-centric frame."""
        origin = np.zeros((1, 3))
        corners = box_corners(origin, np.asarray([ego_size], np.float64))
        pixels = _fixed(self.view_pixels(origin, corners[None]))[0]
        mask = np.zeros((self.config.size, self.config.size), np.uint8)
        cv2.fillPoly(mask, list(pixels), 1, cv2.LINE_8, _SHIFT)
        rows, cols = np.nonzero(mask)
        return rows, cols

    def view_pixels(self, ego_pose: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Float pixel-centre coordinates (col, row) in each env's view.

        Args:
            ego_pose: ``[N, 3]`` world x, y, heading of each env's ego.
            points: ``[N, ..., 2]`` world points of each env.

        Returns:
            ``[N, ..., 2]`` (col, row); the view spans ``-0.5 .. size - 0.5`` on both axes.
        """
        extra = (1,) * (points.ndim - 2)
        ego = np.asarray(ego_pose, np.float64).reshape(-1, *extra, 3)
        cos, sin = np.cos(ego[..., 2]), np.sin(ego[..., 2])
        dx, dy = points[..., 0] - ego[..., 0], points[..., 1] - ego[..., 1]
        forward, left = dx * cos + dy * sin, dy * cos - dx * sin
        res = self.config.resolution
        return np.stack([self._centre[0] - left / res, self._centre[1] - forward / res], axis=-1)

    def warp_matrices(self, map_images: Sequence[MapImage], ego_pose: np.ndarray) -> np.ndarray:
        """``[N, 2, 3]`` affine maps from view pixels to map-image pixels (for ``WARP_INVERSE_MAP``)."""
        ego = np.asarray(ego_pose, np.float64)
        origin = np.stack([m.origin for m in map_images])
        map_res = np.asarray([m.resolution for m in map_images])
        scale = self.config.resolution / map_res
        cos, sin = np.cos(ego[:, 2]) * scale, np.sin(ego[:, 2]) * scale
        base = (ego[:, :2] - origin) / map_res[:, None] - 0.5  # the ego in map pixels
        cx, cy = self._centre
        matrices = np.empty((len(ego), 2, 3))
        matrices[:, 0] = np.stack([sin, -cos, base[:, 0] + cy * cos - cx * sin], axis=1)
        matrices[:, 1] = np.stack([-cos, -sin, base[:, 1] + cy * sin + cx * cos], axis=1)
        return matrices

    def box_polygons(
        self, ego_pose: np.ndarray, pose: np.ndarray, size: np.ndarray, show: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fixed-point pixel polygons of the boxes in view, for ``cv2.fillPoly(..., shift=4)``.

        Args:
            ego_pose: ``[N, 3]``.
            pose: ``[N, B, 3]`` box centres and headings in the world.
            size: ``[N, B, 2]`` length, width.
            show: ``[N, B]`` bool, boxes to draw.

        Returns:
            ``[N, B, 4, 2]`` int32 polygons and ``[N]`` counts: env ``n``'s boxes to draw (shown and
            in view) are ``polygons[n, :count[n]]``, corners front-left, front-right, rear-right,
            rear-left; the rest are parked off the image.
        """
        pose = np.asarray(pose, np.float64)
        polygons = np.full((*pose.shape[:2], 4, 2), _PARKED, np.int32)
        count = np.zeros(len(pose), np.int64)
        _box_polygons(
            np.asarray(ego_pose, np.float64),
            pose,
            np.broadcast_to(np.asarray(size, np.float64), (*pose.shape[:2], 2)),
            np.broadcast_to(np.asarray(show, bool), pose.shape[:2]),
            self._centre[0],
            self._centre[1],
            self.config.resolution,
            self.config.size,
            polygons,
            count,
        )
        return polygons, count

    def _layers(
        self,
        ego_pose: np.ndarray,
        agent_pose: np.ndarray,
        agent_size: np.ndarray,
        agent_valid: np.ndarray,
        light_pose: np.ndarray,
        light_size: np.ndarray,
        light_state: np.ndarray,
    ) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """``(polygons, count, value)`` per box layer, in drawing order: yellow, red lights, agents."""
        grey = self.config.channels == 1
        state = np.asarray(light_state)
        layers = []
        for light, value, key in (
            (LIGHT_YELLOW, LIGHT_YELLOW_VALUE, "yellow"),
            (LIGHT_RED, LIGHT_RED_VALUE, "red"),
        ):
            polygons, present = self.box_polygons(ego_pose, light_pose, light_size, state == light)
            layers.append((polygons, present, GREY[key] if grey else value))
        polygons, present = self.box_polygons(ego_pose, agent_pose, agent_size, agent_valid)
        layers.append((polygons, present, GREY["agent"] if grey else AGENT))
        return layers

    def _output(self, num_envs: int, out: np.ndarray | None) -> np.ndarray:
        size, channels = self.config.size, self.config.channels
        shape = (num_envs, size, size, channels)
        if out is None:
            return np.empty(shape, np.uint8)
        if out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous:
            raise ValueError(
                f"out must be a C-contiguous uint8 array of shape {shape}, got {out.dtype} {out.shape}"
            )
        return out

    def render(
        self,
        map_images: Sequence[MapImage],
        ego_pose: np.ndarray,
        agent_pose: np.ndarray,
        agent_size: np.ndarray,
        agent_valid: np.ndarray,
        light_pose: np.ndarray,
        light_size: np.ndarray,
        light_state: np.ndarray,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Render ``N`` ego-centric views.

        Args:
            map_images: ``N`` maps from :func:`prerender_map` with this renderer's channel count.
            ego_pose: ``[N, 3]`` world x, y, heading.
            agent_pose: ``[N, A, 3]`` other agents' box centres and headings.
            agent_size: ``[N, A, 2]`` length, width.
            agent_valid: ``[N, A]`` bool, agents to draw (padding and absent agents False).
            light_pose: ``[N, K, 3]`` traffic-light stop boxes (:func:`scene.light_stop_box`).
            light_size: ``[N, K, 2]``.
            light_state: ``[N, K]`` LIGHT_* states; only red and yellow are drawn, so pad with -1.
            out: Optional ``[N, size, size, C]`` uint8 C-contiguous buffer, filled in place.

        Returns:
            ``[N, size, size, C]`` uint8 (``out`` when given).
        """
        num_envs, size = len(map_images), self.config.size
        if any(m.image.shape[2] != self.config.channels for m in map_images):
            raise ValueError(f"map images must be prerendered with channels={self.config.channels}")
        out = self._output(num_envs, out)
        matrices = self.warp_matrices(map_images, ego_pose)
        layers = self._layers(
            ego_pose, agent_pose, agent_size, agent_valid, light_pose, light_size, light_state
        )
        canvas = out[..., 0] if self.config.channels == 1 else self._boxes_canvas(num_envs)
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        for i, map_image in enumerate(map_images):
            cv2.warpAffine(map_image.image, matrices[i], (size, size), dst=out[i], flags=flags)
            for polygons, present, value in layers:
                if present[i]:
                    cv2.fillPoly(canvas[i], list(polygons[i, : present[i]]), value, cv2.LINE_8, _SHIFT)
        rows, cols = self._ego_pixels
        if self.config.channels == 1:
            out[:, rows, cols, 0] = GREY["ego"]
        else:
            out[..., 1] = canvas
            out[:, rows, cols, 2] = EGO
        return out

    def _boxes_canvas(self, num_envs: int) -> np.ndarray:
        """A zeroed ``[N, size, size]`` scratch layer for channel 1 (fillPoly needs contiguous planes)."""
        if len(self._scratch) < num_envs:
            self._scratch = np.zeros((num_envs, *self._scratch.shape[1:]), np.uint8)
        canvas = self._scratch[:num_envs]
        canvas.fill(0)
        return canvas


@njit(cache=True)
def _box_polygons(
    ego_pose: np.ndarray,
    pose: np.ndarray,
    size: np.ndarray,
    show: np.ndarray,
    centre_col: float,
    centre_row: float,
    resolution: float,
    limit: int,
    polygons: np.ndarray,
    count: np.ndarray,
) -> None:
    """:meth:`BevRenderer.box_polygons`: corners in each ego's view, kept when the box is in view."""
    corner = np.empty((4, 2))
    for n in range(len(pose)):
        cos_e, sin_e = np.cos(ego_pose[n, 2]), np.sin(ego_pose[n, 2])
        for b in range(pose.shape[1]):
            if not show[n, b]:
                continue
            cos, sin = np.cos(pose[n, b, 2]), np.sin(pose[n, b, 2])
            half_l, half_w = size[n, b, 0] / 2, size[n, b, 1] / 2
            for k, (sign_l, sign_w) in enumerate(((1.0, 1.0), (1.0, -1.0), (-1.0, -1.0), (-1.0, 1.0))):
                x = pose[n, b, 0] + sign_l * half_l * cos - sign_w * half_w * sin - ego_pose[n, 0]
                y = pose[n, b, 1] + sign_l * half_l * sin + sign_w * half_w * cos - ego_pose[n, 1]
                forward, left = x * cos_e + y * sin_e, y * cos_e - x * sin_e
                corner[k, 0] = centre_col - left / resolution
                corner[k, 1] = centre_row - forward / resolution
            in_view = (
                corner[:, 0].max() >= -1
                and corner[:, 1].max() >= -1
                and corner[:, 0].min() <= limit
                and corner[:, 1].min() <= limit
            )
            if in_view:
                for k in range(4):
                    polygons[n, count[n], k, 0] = np.rint(corner[k, 0] * (1 << _SHIFT))
                    polygons[n, count[n], k, 1] = np.rint(corner[k, 1] * (1 << _SHIFT))
                count[n] += 1


# --- frames for humans ---------------------------------------------------------------------------
_OFF_ROAD = np.array([46, 52, 46], np.float32)
_ROAD = np.array([108, 108, 108], np.float32)
_MARKING = np.array([240, 240, 240], np.float32)
_ROUTE = np.array([70, 180, 90], np.float32)
_EGO_RGB = (40, 110, 240)
_AGENT_RGB = (245, 140, 30)
_OUTLINE_RGB = (20, 20, 20)
_LIGHT_RGB = {LIGHT_GREEN: (40, 200, 70), LIGHT_YELLOW: (240, 210, 40), LIGHT_RED: (230, 40, 40)}


@lru_cache(maxsize=4)
def _renderer(config: BevConfig) -> BevRenderer:
    return BevRenderer(config)


def _colourise(semantic: np.ndarray) -> np.ndarray:
    """RGB ``[H, W, 3]`` uint8 of a warped 3-channel map: grey road, white markings, green route."""
    road = np.clip(semantic[..., :1] / ROAD, 0.0, 1.0)
    marking = np.clip((semantic[..., :1].astype(np.float32) - ROAD) / (MARKING - ROAD), 0.0, 1.0)
    route = 0.45 * np.clip(semantic[..., 2:] / ROUTE, 0.0, 1.0)
    rgb = _OFF_ROAD + (_ROAD - _OFF_ROAD) * road
    rgb += (_ROUTE - rgb) * route
    rgb += (_MARKING - rgb) * marking
    return rgb.astype(np.uint8)


def _draw_boxes(frame: np.ndarray, polygons: np.ndarray, colour: tuple[int, int, int]) -> None:
    """Filled boxes with a dark outline and a thicker front edge (corners 0-1) showing the heading."""
    boxes = list(polygons)
    cv2.fillPoly(frame, boxes, colour, cv2.LINE_AA, _SHIFT)
    cv2.polylines(frame, boxes, True, _OUTLINE_RGB, 1, cv2.LINE_AA, _SHIFT)
    cv2.polylines(frame, [box[:2] for box in boxes], False, _OUTLINE_RGB, 2, cv2.LINE_AA, _SHIFT)


def render_rgb(
    map_image: MapImage,
    ego_pose: np.ndarray,
    agent_pose: np.ndarray,
    agent_size: np.ndarray,
    agent_valid: np.ndarray,
    light_pose: np.ndarray,
    light_size: np.ndarray,
    light_state: np.ndarray,
    config: BevConfig = RGB_CONFIG,
) -> np.ndarray:
    """A colour frame of ONE env for humans (``render_mode="rgb_array"``, videos).

    Grey road, white lane markings, green route, blue ego, orange agents (thick edge = front),
    traffic-light stop boxes in their light's colour.

    Args:
        map_image: A 3-channel map from :func:`prerender_map`, ideally at ``config``'s resolution
            (it is rescaled otherwise, which blurs a coarser map).
        ego_pose: ``[3]``; the other arguments are :meth:`BevRenderer.render`'s without the env axis.
        agent_pose: ``[A, 3]``.
        agent_size: ``[A, 2]``.
        agent_valid: ``[A]`` bool.
        light_pose: ``[K, 3]``.
        light_size: ``[K, 2]``.
        light_state: ``[K]``.
        config: Framing of the frame; ``channels`` is ignored (frames are RGB).

    Returns:
        ``[config.size, config.size, 3]`` uint8 RGB.
    """
    if map_image.image.ndim != 3 or map_image.image.shape[2] != 3:
        raise ValueError("render_rgb needs a map prerendered with channels=3")
    renderer = _renderer(BevConfig(config.size, config.meters, 3, config.ego_forward_fraction))
    ego = np.asarray(ego_pose, np.float64).reshape(1, 3)
    size = config.size
    matrix = renderer.warp_matrices([map_image], ego)[0]
    semantic = cv2.warpAffine(
        map_image.image, matrix, (size, size), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    )
    frame = _colourise(semantic)
    state = np.asarray(light_state)
    for light, colour in _LIGHT_RGB.items():
        polygons, present = renderer.box_polygons(
            ego, light_pose[None], light_size[None], state[None] == light
        )
        if present[0]:
            cv2.fillPoly(frame, list(polygons[0, : present[0]]), colour, cv2.LINE_AA, _SHIFT)
    polygons, present = renderer.box_polygons(ego, agent_pose[None], agent_size[None], agent_valid[None])
    if present[0]:
        _draw_boxes(frame, polygons[0, : present[0]], _AGENT_RGB)
    ego_size = np.array([[renderer.ego_size]])
    ego_box = renderer.box_polygons(ego, ego[None], ego_size, np.ones((1, 1), bool))[0]
    _draw_boxes(frame, ego_box[0], _EGO_RGB)
    return frame
