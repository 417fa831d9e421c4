"""Procedural maps: geometry, lane graph and fit on the raster canvas."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from omnigym.envs.driving.map_raster import DRIVABLE, INTERSECTION, RasterPool, RasterStack, rasterize_map
from omnigym.envs.driving.maps import (
    BUILDERS,
    LaneGeometry,
    build_intersection,
    build_merge,
    build_straight,
)
from omnigym.envs.driving.scene import (
    COMMAND_LEFT,
    COMMAND_RIGHT,
    COMMAND_STRAIGHT,
    RoadMap,
    Route,
)

SEEDS = range(6)


def _heading(points: np.ndarray, at: int) -> float:
    step = points[at + 1] - points[at] if at >= 0 else points[-1] - points[-2]
    return float(np.arctan2(step[1], step[0]))


def _turn(road_map: RoadMap, lane: int) -> float:
    """Heading change along a lane, in (-pi, pi]."""
    points = road_map.centreline(lane)
    return float(np.angle(np.exp(1j * (_heading(points, -1) - _heading(points, 0)))))


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_every_kind_builds_a_consistent_map_that_fits_the_canvas(kind):
    for seed in SEEDS:
        built = BUILDERS[kind](np.random.default_rng(seed))
        m = built.road_map
        assert built.kind == kind and built.routes
        spacing = np.linalg.norm(np.diff(m.lane_points, axis=1), axis=2)
        assert spacing.max() <= 2.0
        assert np.all((m.lane_width >= 3.5) & (m.lane_width <= 3.75))
        assert np.all((m.lane_speed_limit > 3.0) & (m.lane_speed_limit <= 16.7 + 1e-4))
        # sharp curves (radius >= 50 m, inner lanes down to about 37 m) are capped for comfort lower
        floor = 9.5 if kind == "sharp_curve" else 11.0
        assert np.all(m.lane_speed_limit[~m.lane_is_connector] >= floor)
        for lane in range(m.num_lanes):
            for succ in m.lane_successors[lane][m.lane_successors[lane] >= 0]:
                assert np.linalg.norm(m.centreline(lane)[-1] - m.centreline(succ)[0]) < 0.05
            for side, back in ((m.lane_left, m.lane_right), (m.lane_right, m.lane_left)):
                if side[lane] >= 0:
                    assert back[side[lane]] == lane
                    assert m.lane_road[side[lane]] == m.lane_road[lane]
        for option in built.routes:
            for a, b in itertools.pairwise(option.lanes):
                assert b in m.lane_successors[a]
        option = built.routes[0]
        raster = rasterize_map(m, Route(option.lanes, option.command))  # raises if the map does not fit
        assert (raster.area & DRIVABLE).any()


def test_maps_vary_with_the_seed_and_repeat_with_it():
    first, again = build_straight(np.random.default_rng(1)), build_straight(np.random.default_rng(1))
    other = build_straight(np.random.default_rng(2))
    assert np.array_equal(first.road_map.lane_points, again.road_map.lane_points)
    directions = {
        round(_heading(build_straight(np.random.default_rng(s)).road_map.centreline(0), 0), 3) for s in SEEDS
    }
    assert len(directions) == len(SEEDS)  # the whole map is rotated at random
    assert not np.array_equal(first.road_map.lane_points[0, :2], other.road_map.lane_points[0, :2])


def test_straight_road_has_forward_and_oncoming_blocks_side_by_side():
    for seed in SEEDS:
        m = build_straight(np.random.default_rng(seed)).road_map
        blocks = [np.flatnonzero(m.lane_road == r) for r in np.unique(m.lane_road)]
        assert len(blocks) == 2 and 2 <= len(blocks[0]) <= 4 and 1 <= len(blocks[1]) <= 3
        forward, oncoming = blocks
        # opposite directions, and the leftmost lanes of both blocks are adjacent (a continuous road)
        assert (
            abs(abs(_heading(m.centreline(forward[0]), 0) - _heading(m.centreline(oncoming[0]), 0)) - np.pi)
            < 1e-3
        )
        start = m.centreline(forward[0])[0]
        gap = np.linalg.norm(m.centreline(oncoming[0]) - start, axis=1).min()
        assert gap == pytest.approx((m.lane_width[forward[0]] + m.lane_width[oncoming[0]]) / 2, abs=0.02)


def test_merge_ramp_runs_beside_the_rightmost_main_lane_then_joins_it():
    for seed in SEEDS:
        built = build_merge(np.random.default_rng(seed))
        m = built.road_map
        ramp = next(r for r in built.routes if r.name == "ramp").lanes
        merge_lane = int(ramp[1])
        main = int(m.lane_left[merge_lane])
        assert main >= 0 and m.lane_right[main] == merge_lane and m.lane_right[merge_lane] < 0
        assert m.lane_successors[merge_lane][0] == m.lane_successors[main][0] == ramp[2]
        side_by_side = np.linalg.norm(m.centreline(merge_lane)[0] - m.centreline(main)[0])
        assert side_by_side == pytest.approx(float(m.lane_width[main]), abs=0.02)


def test_intersection_connectors_turn_the_way_their_command_says_and_have_lights():
    for seed in SEEDS:
        built = build_intersection(np.random.default_rng(seed))
        m = built.road_map
        connectors = np.flatnonzero(m.lane_is_connector)
        assert len(m.intersections) == 1
        assert sorted(m.light_lane) == sorted(connectors)
        assert set(built.light_group) == {0, 1, 2, 3}
        expected = {COMMAND_LEFT: np.pi / 2, COMMAND_STRAIGHT: 0.0, COMMAND_RIGHT: -np.pi / 2}
        for option in built.routes:
            assert (
                m.lane_is_connector[option.lanes[1]] and not m.lane_is_connector[option.lanes[[0, 2]]].any()
            )
            assert _turn(m, int(option.lanes[1])) == pytest.approx(expected[option.command], abs=0.03)
        # connectors lie inside the junction box: their midpoints read as INTERSECTION on the raster
        raster = RasterStack.of([rasterize_map(m, Route(built.routes[0].lanes, built.routes[0].command))])
        middles = np.stack([m.centreline(c)[m.lane_num_points[c] // 2] for c in connectors])
        area, _ = raster.query(np.zeros(1, int), middles[None])
        assert np.all(area & INTERSECTION)


def test_lane_geometry_pose_on_a_straight_lane():
    points = np.stack([np.linspace(0.0, 10.0, 11), np.linspace(0.0, 10.0, 11)], axis=1).astype(np.float32)
    m = RoadMap(
        lane_points=points[None],
        lane_num_points=np.array([11], np.int32),
        lane_width=np.array([3.5], np.float32),
        lane_speed_limit=np.array([10.0], np.float32),
        lane_is_connector=np.array([False]),
        lane_road=np.array([0], np.int32),
        lane_left=np.array([-1], np.int32),
        lane_right=np.array([-1], np.int32),
        lane_successors=np.full((1, 1), -1, np.int32),
        intersections=np.zeros((0, 4, 2), np.float32),
        light_lane=np.zeros(0, np.int32),
    )
    geometry = LaneGeometry.of(m)
    assert geometry.length[0] == pytest.approx(10 * np.sqrt(2), rel=1e-6)
    pose = geometry.pose(np.array([0, 0]), np.array([np.sqrt(2), 100.0]), np.array([np.sqrt(2), 0.0]))
    # 1 m along x and y, then sqrt(2) m to the left (direction (-1, 1)/sqrt(2)); stations clip at the end
    np.testing.assert_allclose(pose[0], [0.0, 2.0, np.pi / 4], atol=1e-5)
    np.testing.assert_allclose(pose[1], [10.0, 10.0, np.pi / 4], atol=1e-5)


def test_raster_pool_frees_an_entry_only_when_out_of_the_cache_and_unused():
    built = build_straight(np.random.default_rng(0))
    raster = rasterize_map(built.road_map, built.routes[0])
    pool = RasterPool(capacity=2, like=raster)
    first, second = pool.store(raster), pool.store(raster)
    assert {first, second} == {0, 1}
    np.testing.assert_array_equal(pool.stack.view(first).area, raster.area)
    with pytest.raises(RuntimeError, match="pool full"):
        pool.store(raster)
    pool.pin(first)
    pool.drop(first)  # out of the cache but still driven on: kept
    with pytest.raises(RuntimeError, match="pool full"):
        pool.store(raster)
    pool.unpin(first)  # now free
    assert pool.store(raster) == first
    pool.drop(second)  # out of the cache and unused: free at once
    assert pool.store(raster) == second
