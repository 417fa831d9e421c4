"""BEV rasters: pixels land where the geometry says, in the documented channels."""

import time

import numpy as np
import pytest

from omnigym.envs.driving.render import (
    AGENT,
    EGO,
    GREY,
    LIGHT_RED_VALUE,
    LIGHT_YELLOW_VALUE,
    MARKING,
    RGB_CONFIG,
    ROAD,
    ROUTE,
    BevConfig,
    BevRenderer,
    prerender_map,
    render_rgb,
)
from omnigym.envs.driving.scene import (
    LIGHT_GREEN,
    LIGHT_RED,
    LIGHT_YELLOW,
    RoadMap,
    Route,
    light_stop_box,
)

# 64 px over 64 m: 1 m per pixel; the ego's pixel centre is at col 31.5, row 47.5
CONFIG = BevConfig(size=64, meters=64.0, channels=3)
EGO_COL, EGO_ROW = 31.5, 47.5
AGENT_SIZE = (4.5, 2.0)


def _road_map(rotation: float = 0.0) -> RoadMap:
    """Two eastbound lanes along y = -1.75 (lane 0) and y = +1.75 (lane 1), x in [-100, 100], then
    a connector turning left (north) from the end of lane 0 through an intersection; the whole map
    rotated by ``rotation`` about the origin."""
    xs = np.linspace(-100.0, 100.0, 41)
    turn = np.linspace(0.0, np.pi / 2, 20)
    lanes = [
        np.stack([xs, np.full_like(xs, -1.75)], axis=1),
        np.stack([xs, np.full_like(xs, 1.75)], axis=1),
        np.stack([100 + 30 * np.sin(turn), -1.75 + 30 - 30 * np.cos(turn)], axis=1),
    ]
    points = np.stack([np.concatenate([lane, np.repeat(lane[-1:], 41 - len(lane), 0)]) for lane in lanes])
    quad = np.array([[[100.0, -5.0], [130.0, -5.0], [130.0, 30.0], [100.0, 30.0]]])
    return RoadMap(
        lane_points=_rotate(points, rotation).astype(np.float32),
        lane_num_points=np.array([41, 41, 20], np.int32),
        lane_width=np.full(3, 3.5, np.float32),
        lane_speed_limit=np.full(3, 13.9, np.float32),
        lane_is_connector=np.array([False, False, True]),
        lane_road=np.array([0, 0, 1], np.int32),
        lane_left=np.array([1, -1, -1], np.int32),
        lane_right=np.array([-1, 0, -1], np.int32),
        lane_successors=np.array([[2], [-1], [-1]], np.int32),
        intersections=_rotate(quad, rotation).astype(np.float32),
        light_lane=np.array([2], np.int32),
    )


ROUTE_LANES = Route(lanes=np.array([0, 2], np.int32), command=0)


def _rotate(points: np.ndarray, angle: float) -> np.ndarray:
    cos, sin = np.cos(angle), np.sin(angle)
    return np.stack(
        [cos * points[..., 0] - sin * points[..., 1], sin * points[..., 0] + cos * points[..., 1]], -1
    )


def _rotate_pose(pose: np.ndarray, angle: float) -> np.ndarray:
    pose = np.asarray(pose, np.float64)
    return np.concatenate([_rotate(pose[..., :2], angle), pose[..., 2:] + angle], axis=-1)


def _render(config=CONFIG, ego=(0.0, -1.75, 0.0), agents=(), light_state=-1, rotation=0.0, out=None):
    """One env; ``agents`` are world poses (x, y, heading) before ``rotation``."""
    road_map = _road_map(rotation)
    map_image = prerender_map(road_map, ROUTE_LANES, config)
    agent_pose = np.array([*agents, (0.0, 0.0, 0.0)], np.float64)  # one invalid padding agent
    agent_valid = np.arange(len(agent_pose)) < len(agents)
    light_pose, light_size = light_stop_box(road_map)
    return BevRenderer(config).render(
        [map_image],
        _rotate_pose(np.array([ego]), rotation),
        _rotate_pose(agent_pose[None], rotation),
        np.broadcast_to(AGENT_SIZE, (1, len(agent_pose), 2)),
        agent_valid[None],
        light_pose[None],
        light_size[None],
        np.array([[light_state]]),
        out=out,
    )


def _centroid(mask: np.ndarray) -> tuple[float, float]:
    rows, cols = np.nonzero(mask)
    assert len(rows), "nothing drawn"
    return float(cols.mean()), float(rows.mean())


def test_agent_ahead_is_drawn_above_the_ego_in_channel_1():
    image = _render(agents=[(10.0, -1.75, 0.0)])[0]
    col, row = _centroid(image[..., 1] == AGENT)
    assert abs(col - EGO_COL) < 0.75 and abs(row - (EGO_ROW - 10)) < 0.75
    assert np.count_nonzero(image[..., 1]) <= (4.5 + 2) * (2 + 2)  # the box, not more
    assert not image[42:, :, 1].any() and not image[:34, :, 1].any()  # nothing outside its rows


def test_left_of_the_ego_is_left_in_the_image():
    image = _render(agents=[(0.0, 1.75, 0.0)])[0]  # alongside, in the lane to the ego's left (north)
    col, row = _centroid(image[..., 1] == AGENT)
    assert abs(col - (EGO_COL - 3.5)) < 0.75 and abs(row - EGO_ROW) < 0.75


def test_ego_is_drawn_in_channel_2_at_the_bottom_centre():
    image = _render()[0]
    rows, cols = np.nonzero(image[..., 2] == EGO)
    col, row = _centroid(image[..., 2] == EGO)
    assert abs(col - EGO_COL) < 0.5 and abs(row - EGO_ROW) < 0.5
    # 5.18 m long (rows), 2.3 m wide (cols), plus at most a boundary pixel each side
    assert 5 <= rows.max() - rows.min() + 1 <= 7 and 2 <= cols.max() - cols.min() + 1 <= 4


def test_road_markings_route_and_off_road():
    image = _render()[0]
    road, route = image[..., 0], image[..., 2]
    # the road spans 1.75 m right to 5.25 m left of the ego: cols 26.25 .. 33.25
    assert not road[:, :24].any() and not road[:, 36:].any()
    assert np.all(road[:, 28] == ROAD) and np.all(road[:40, 31:33] == ROAD)  # lane centres
    for edge in (26.25, 29.75, 33.25):  # lane markings, blended over two columns by the rotation
        assert np.all(road[:, int(edge) : int(edge) + 2].max(axis=1) > ROAD)
    assert road.max() <= MARKING
    assert np.all(route[:40, 31:33] == ROUTE) and not route[:, 28].any()  # lane 0 is the route


def test_traffic_light_boxes_coloured_by_state():
    # the light's stop box covers the first 4 m of the connector: 20 .. 24 m ahead of an ego at x = 80
    pixel = (int(EGO_ROW - 22), int(EGO_COL))
    for state, value in ((LIGHT_RED, LIGHT_RED_VALUE), (LIGHT_YELLOW, LIGHT_YELLOW_VALUE), (LIGHT_GREEN, 0)):
        image = _render(ego=(80.0, -1.75, 0.0), light_state=state)[0]
        assert image[pixel][1] == value
        assert set(np.unique(image[..., 1])) <= {0, value}
    # an agent waiting in the stop box is drawn over it
    image = _render(ego=(80.0, -1.75, 0.0), agents=[(102.0, -1.75, 0.0)], light_state=LIGHT_RED)[0]
    assert image[pixel][1] == AGENT and np.any(image[..., 1] == LIGHT_RED_VALUE)


@pytest.mark.parametrize("rotation", [np.pi / 2, 0.6])
def test_rotating_the_world_leaves_the_ego_centric_image_unchanged(rotation):
    agents = [(12.0, -1.75, 0.1), (-6.0, 1.75, 0.0), (30.0, 1.75, -0.2)]
    ego = (40.0, -1.2, 0.05)
    base = _render(ego=ego, agents=agents).astype(int)
    turned = _render(ego=ego, agents=agents, rotation=rotation).astype(int)
    # the maps are drawn on differently aligned pixel grids: one-pixel markings resample a little
    # differently, but far less than a one-pixel shift of the view (13 on average) or a mirror (14)
    difference = np.abs(base - turned).mean(axis=(0, 1, 2))
    assert difference[0] < 6 and difference[2] < 2
    for channel, value in ((1, AGENT), (2, EGO)):
        count = np.count_nonzero(base[0, ..., channel] == value)
        assert abs(np.count_nonzero(turned[0, ..., channel] == value) - count) <= 0.15 * count
        np.testing.assert_allclose(
            _centroid(turned[0, ..., channel] == value), _centroid(base[0, ..., channel] == value), atol=0.5
        )


def test_one_channel_grey_composite():
    config = BevConfig(size=64, meters=64.0, channels=1)
    image = _render(config=config, agents=[(10.0, -1.75, 0.0)])
    assert image.shape == (1, 64, 64, 1)
    grey = image[0, ..., 0]
    assert grey[int(EGO_ROW), int(EGO_COL)] == GREY["ego"]
    assert grey[int(EGO_ROW - 10), int(EGO_COL)] == GREY["agent"]
    assert grey[10, 28] == GREY["road"] and grey[10, 31] == GREY["route"]
    assert not grey[:, :24].any() and grey[10, 26:28].max() > GREY["route"]  # off-road, a marking


def test_out_buffer_is_filled_in_place():
    expected = _render(agents=[(10.0, -1.75, 0.0)])
    out = np.full_like(expected, 77)
    result = _render(agents=[(10.0, -1.75, 0.0)], out=out)
    assert result is out and np.array_equal(out, expected)
    with pytest.raises(ValueError, match="out must be"):
        _render(out=np.zeros((1, 32, 32, 3), np.uint8))


def test_map_images_must_match_the_channels():
    map_image = prerender_map(_road_map(), ROUTE_LANES, CONFIG)
    renderer = BevRenderer(BevConfig(channels=1))
    empty = (np.zeros((1, 0, 3)), np.zeros((1, 0, 2)), np.zeros((1, 0), bool))
    with pytest.raises(ValueError, match="channels=1"):
        renderer.render([map_image], np.zeros((1, 3)), *empty, *empty[:2], np.zeros((1, 0), int))


def test_envs_are_rendered_independently_and_invalid_agents_are_hidden():
    road_map = _road_map()
    map_image = prerender_map(road_map, ROUTE_LANES, CONFIG)
    light_pose, light_size = light_stop_box(road_map)
    agent_pose = np.array([[[10.0, -1.75, 0.0]], [[-90.0, -1.75, 0.0]]])
    image = BevRenderer(CONFIG).render(
        [map_image, map_image],
        np.array([[0.0, -1.75, 0.0], [-100.0, -1.75, 0.0]]),
        agent_pose,
        np.full((2, 1, 2), 4.0),
        np.array([[True], [False]]),
        np.repeat(light_pose[None], 2, 0),
        np.repeat(light_size[None], 2, 0),
        np.full((2, 1), LIGHT_RED),
    )
    assert image.shape == (2, 64, 64, 3)
    assert np.any(image[0, ..., 1] == AGENT) and not image[1, ..., 1].any()  # env 1's agent is invalid
    # env 1's ego is at the west end of the map: nothing drivable behind it
    assert not image[1, int(EGO_ROW) + 3 :, :, 0].any() and image[0, int(EGO_ROW) + 3 :, :, 0].any()


def test_prerendered_map_pixels():
    road_map = _road_map()
    map_image = prerender_map(road_map, ROUTE_LANES, CONFIG)
    col, row = (
        np.round(map_image.to_pixels(np.array([[0.0, -1.75], [0.0, 1.75], [50.0, 20.0]]))).astype(int).T
    )
    assert map_image.image.shape[2] == 3 and map_image.resolution == 1.0
    assert tuple(map_image.image[row[0], col[0]]) == (ROAD, 0, ROUTE)
    assert tuple(map_image.image[row[1], col[1]]) == (ROAD, 0, 0)
    assert not map_image.image[row[2], col[2]].any()


def test_config_validation():
    with pytest.raises(ValueError, match="channels"):
        BevConfig(channels=2)
    with pytest.raises(ValueError, match="ego_forward_fraction"):
        BevConfig(ego_forward_fraction=0.0)


def test_rgb_frame_colours():
    road_map = _road_map()
    map_image = prerender_map(road_map, ROUTE_LANES, RGB_CONFIG)
    light_pose, light_size = light_stop_box(road_map)
    frame = render_rgb(
        map_image,
        np.array([80.0, -1.75, 0.0]),
        np.array([[90.0, -1.75, 0.0]]),
        np.array([AGENT_SIZE]),
        np.array([True]),
        light_pose,
        light_size,
        np.array([LIGHT_RED]),
    )
    assert frame.shape == (400, 400, 3) and frame.dtype == np.uint8
    ppm = 4  # pixels per metre; the ego's pixel centre is at col 199.5, row 279.5
    ego = frame[280, 200].astype(int)
    agent = frame[280 - 10 * ppm, 200].astype(int)
    light = frame[280 - 22 * ppm, 200].astype(int)
    route = frame[280 + 10 * ppm, 200].astype(int)
    other_lane = frame[280 + 10 * ppm, 186].astype(int)
    assert ego[2] > ego[0] + 100  # blue
    assert agent[0] > agent[1] > agent[2] + 50  # orange
    assert light[0] > light[1] + 100 and light[0] > light[2] + 100  # red
    assert route[1] > route[0] + 30 and route[1] > route[2] + 30  # green
    assert np.ptp(other_lane) < 10 and 80 < other_lane[0] < 160  # grey road
    assert frame[20, 20].max() < 70  # dark off-road


@pytest.mark.slow
@pytest.mark.parametrize("size", [64, 128])
def test_render_speed(size):
    """64 envs, 32 agents and 4 lights each: about 60 us (64 px) / 100 us (128 px) per env measured."""
    rng = np.random.default_rng(0)
    road_map = _road_map()
    config = BevConfig(size=size, meters=64.0)
    maps = [prerender_map(road_map, ROUTE_LANES, config)] * 64
    light_pose, light_size = light_stop_box(road_map)
    args = (
        np.stack([rng.uniform(-80, 90, 64), rng.uniform(-2, 2, 64), rng.uniform(-0.3, 0.3, 64)], 1),
        np.stack(
            [rng.uniform(-100, 130, (64, 32)), rng.uniform(-5, 30, (64, 32)), rng.uniform(-3, 3, (64, 32))],
            -1,
        ),
        np.full((64, 32, 2), 4.0),
        rng.random((64, 32)) < 0.7,
        np.repeat(light_pose[None], 64, 0).repeat(4, 1),
        np.repeat(light_size[None], 64, 0).repeat(4, 1),
        rng.integers(0, 3, (64, 4)),
    )
    renderer = BevRenderer(config)
    out = renderer.render(maps, *args)
    start = time.perf_counter()
    for _ in range(50):
        renderer.render(maps, *args, out=out)
    per_env = (time.perf_counter() - start) / 50 / 64
    assert per_env < 3 * (150e-6 if size == 64 else 250e-6), f"{per_env * 1e6:.0f} us per env"
