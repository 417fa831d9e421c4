"""The PDM score on hand-built scenes, against hand-computed expectations.

The map: a straight road along +x with two ego-direction lanes (centres y = 0 and 3.5) and one
oncoming lane (y = 7) up to x = 150, an intersection quad over x in [150, 160] with the route's
connector (y = 0, red-light controlled), and the route lane after it. Lanes are 3.5 m wide, the
ego box is 5.18 x 2.30 m, so an ego centred at y = 0 spans y in [-1.15, 1.15].
"""

import numpy as np
import pytest

from omnigym.envs.driving import agent_checks, map_checks, metrics, trajectory_scores
from omnigym.envs.driving.geometry import bearing, obb_overlap
from omnigym.envs.driving.map_raster import RasterStack, rasterize_map
from omnigym.envs.driving.scene import (
    AGENT_STATIC,
    AGENT_VEHICLE,
    EGO_LENGTH,
    RoadMap,
    Route,
    light_stop_box,
    resample_polyline,
)

HALF_EGO = EGO_LENGTH / 2
CAR = (4.5, 2.0)


def _road_map() -> RoadMap:
    lanes = [
        [(0.0, 0.0), (150.0, 0.0)],  # 0 ego right lane
        [(0.0, 3.5), (150.0, 3.5)],  # 1 ego left lane
        [(150.0, 7.0), (0.0, 7.0)],  # 2 oncoming
        [(150.0, 0.0), (160.0, 0.0)],  # 3 connector, with the light
        [(160.0, 0.0), (250.0, 0.0)],  # 4 after the intersection
    ]
    num = len(lanes)
    return RoadMap(
        lane_points=np.array(lanes, np.float32),
        lane_num_points=np.full(num, 2, np.int32),
        lane_width=np.full(num, 3.5, np.float32),
        lane_speed_limit=np.full(num, 15.0, np.float32),
        lane_is_connector=np.array([False, False, False, True, False]),
        lane_road=np.array([0, 0, 1, 2, 3], np.int32),
        lane_left=np.array([1, -1, -1, -1, -1], np.int32),
        lane_right=np.array([-1, 0, -1, -1, -1], np.int32),
        lane_successors=np.array([[3], [-1], [-1], [4], [-1]], np.int32),
        intersections=np.array([[(150, -1.75), (160, -1.75), (160, 8.75), (150, 8.75)]], np.float32),
        light_lane=np.array([3], np.int32),
    )


ROAD = _road_map()
RASTER = RasterStack.of([rasterize_map(ROAD, Route(lanes=np.array([0, 3, 4], np.int32), command=1))])
ROUTE = resample_polyline(np.array([(0.0, 0.0), (150.0, 0.0), (160.0, 0.0), (250.0, 0.0)]), 1.0)
LIGHT_POSE, LIGHT_SIZE = light_stop_box(ROAD)


def make_world(num: int, agent_size=((CAR,),), agent_type=((AGENT_VEHICLE,),)) -> metrics.ScoringWorld:
    size = np.broadcast_to(np.asarray(agent_size, float), (num, len(agent_size[0]), 2))
    kind = np.broadcast_to(np.asarray(agent_type), (num, len(agent_type[0])))
    return metrics.ScoringWorld(
        raster=RASTER,
        map_index=np.zeros(num, np.int64),
        route_points=np.broadcast_to(ROUTE, (num, *ROUTE.shape)),
        route_num_points=np.full(num, len(ROUTE)),
        agent_size=size,
        agent_type=kind,
        light_pose=np.broadcast_to(LIGHT_POSE, (num, 1, 3)),
        light_size=np.broadcast_to(LIGHT_SIZE, (num, 1, 2)),
    )


def straight(x0, speed, accel=0.0, y=0.0, heading=0.0, steps=41, dt=0.1):
    """Poses [T, 3] and speeds [T] of constant acceleration along ``heading`` from (x0, y)."""
    t = np.arange(steps) * dt
    dist = speed * t + 0.5 * accel * t**2
    poses = np.stack([x0 + dist * np.cos(heading), y + dist * np.sin(heading), np.full(steps, heading)], -1)
    return poses, speed + accel * t


def still_agents(num, steps, pose, speed=0.0):
    """One agent per query holding ``pose`` [num, 3] at ``speed``: pose/speed/valid over ``steps``."""
    pose = np.broadcast_to(np.asarray(pose, float)[:, None, None], (num, steps, 1, 3))
    return pose, np.full((num, steps, 1), speed), np.ones((num, steps, 1), bool)


def moving_agents(x0, speed, y=0.0, steps=41, dt=0.1):
    """One agent per query moving along +x: x0 [num], speed [num]."""
    x0, speed = np.asarray(x0, float), np.asarray(speed, float)
    x = x0[:, None] + speed[:, None] * np.arange(steps) * dt
    pose = np.stack([x, np.full_like(x, y), np.zeros_like(x)], -1)[:, :, None]
    shape = (*x.shape, 1)
    return pose, np.broadcast_to(speed[:, None, None], shape).copy(), np.ones(shape, bool)


def score(world, ego, speed, agents, light_red=None, **kwargs):
    num, steps = ego.shape[:2]
    red = np.zeros((num, steps, 1), bool) if light_red is None else light_red
    return trajectory_scores.score_trajectories(world, ego, speed, *agents, red, **kwargs)


def no_agents(num, steps=41):
    return np.zeros((num, steps, 1, 3)), np.zeros((num, steps, 1)), np.zeros((num, steps, 1), bool)


# --- geometry ---------------------------------------------------------------------------------------
def test_obb_overlap_is_exact_for_rotated_boxes():
    square = np.array([2.0, 2.0])
    diamond = np.pi / 4
    reach = 1 + np.sqrt(2)  # a 45-degree square's corner touches the other's side at this distance
    poses = np.array(
        [[reach - 0.01, 0, diamond], [reach + 0.01, 0, diamond], [2.3, 2.3, diamond], [1.9, 1.9, 0]]
    )
    # (2.3, 2.3): bounding boxes overlap, but the diamond's edge separates them along the diagonal
    assert obb_overlap(np.zeros(3), square, poses, square).tolist() == [True, False, False, True]
    # a segment (zero length) across x = 1.5 misses a box ending at x = 1.4 and hits one ending at 1.6
    segment = np.array([0.0, 2.0])
    boxes = np.array([[0.4, 0.0, 0.0], [0.6, 0.0, 0.0]])
    assert obb_overlap(np.array([1.5, 0, 0]), segment, boxes, square).tolist() == [False, True]


def test_bearing_from_heading():
    origin = np.array([1.0, 1.0, np.pi / 2])
    points = np.array([[1.0, 5.0], [2.0, 2.0], [1.0, -3.0], [0.0, 1.0]])
    np.testing.assert_allclose(bearing(origin, points), [0.0, np.pi / 4, np.pi, np.pi / 2], atol=1e-12)


# --- route and areas --------------------------------------------------------------------------------
def test_project_to_route_on_an_l_shaped_polyline():
    corner = np.array([(0.0, 0.0), (10.0, 0.0), (10.0, 10.0)])
    route = np.concatenate([resample_polyline(corner, 1.0), np.repeat([[10.0, 10.0]], 5, 0)])  # padded
    world = make_world(1)
    world.route_points, world.route_num_points = route[None], np.array([21])
    world.refresh_route()
    points = np.array([[[5.5, 2.0], [5.5, -1.0], [12.0, 5.5], [11.0, 9.5], [-3.0, 4.0], [10.5, 12.0]]])
    station, lateral, index = map_checks.project_to_route(world, points)
    np.testing.assert_allclose(station[0], [5.5, 5.5, 15.5, 19.5, 0, 20], atol=1e-9)
    # left of travel is positive; before the start and past the end: the distance to the end point
    np.testing.assert_allclose(lateral[0], [2, -1, -2, -1, 5, -np.hypot(0.5, 2)], atol=1e-9)
    assert index[0, :4].tolist() == [5, 5, 15, 19]
    # a hint near the answer finds the same projection
    hinted = map_checks.project_to_route(world, points[:, 2], hint=np.array([12]), window=4)
    np.testing.assert_allclose([hinted[0][0], hinted[1][0], hinted[2][0]], [15.5, -2, 15], atol=1e-9)


def test_ego_area_flags():
    poses = np.array(
        [
            [50.0, 0.0, 0.0],  # centred in the route lane
            [50.0, 1.75, 0.0],  # straddling the two ego lanes
            [50.0, -1.0, 0.0],  # right corners at y = -2.15, off the road
            [50.0, 7.0, np.pi],  # oncoming lane
            [155.0, 3.5, 0.0],  # inside the intersection, off the route connector
        ]
    )
    area = map_checks.ego_area(make_world(5), poses)
    assert area.multiple_lanes.tolist() == [False, True, False, False, False]
    assert area.non_drivable.tolist() == [False, False, True, False, False]
    assert area.oncoming.tolist() == [False, False, False, True, True]
    assert area.in_intersection.tolist() == [False, False, False, False, True]


# --- collisions -------------------------------------------------------------------------------------
def test_collision_typing_and_fault():
    touching = HALF_EGO + CAR[0] / 2 - 0.3  # centre distance of boxes overlapping by 0.3 m
    cases = [  # ego (y, speed), agent (x, y, speed, type), ignored, expected NC
        ((0.0, 10.0), (50 + touching, 0.0, 5.0, AGENT_VEHICLE), False, 0.0),  # ego front hits a car
        ((0.0, 10.0), (50 - touching, 0.0, 12.0, AGENT_VEHICLE), False, 1.0),  # rear-ended
        ((1.75, 10.0), (50 - touching, 1.75, 12.0, AGENT_VEHICLE), False, 1.0),  # rear-ended across lanes
        ((0.0, 10.0), (50 + touching, 0.0, 0.0, AGENT_STATIC), False, 0.5),  # hits a static object
        ((0.0, 0.0), (50 - touching, 0.0, 5.0, AGENT_VEHICLE), False, 1.0),  # stopped ego is hit
        ((0.0, 10.0), (50.0, 2.0, 10.0, AGENT_VEHICLE), False, 1.0),  # side swipe in its lane
        ((1.75, 10.0), (50.0, 3.75, 10.0, AGENT_VEHICLE), False, 0.0),  # side swipe across lanes
        ((0.0, 10.0), (50 + touching, 0.0, 5.0, AGENT_VEHICLE), True, 1.0),  # already collided
        ((0.0, 10.0), (50 + touching + 0.4, 0.0, 5.0, AGENT_VEHICLE), False, 1.0),  # 0.1 m apart
    ]
    num = len(cases)
    ego_pose = np.array([[50.0, y, 0.0] for (y, _), *_ in cases])
    kinds = np.array([[a[3]] for _, a, *_ in cases])
    world = make_world(num, agent_type=kinds)
    step = metrics.StepState(
        ego_pose=ego_pose,
        ego_speed=np.array([s for (_, s), *_ in cases]),
        agent_pose=np.array([[[a[0], a[1], 0.0]] for _, a, *_ in cases]),
        agent_speed=np.array([[a[2]] for _, a, *_ in cases]),
        agent_valid=np.ones((num, 1), bool),
        light_red=np.zeros((num, 1), bool),
    )
    ignore = np.array([[c[2]] for c in cases])
    nc, colliding = agent_checks.collisions(world, step, map_checks.ego_area(world, ego_pose), ignore)
    assert nc.tolist() == [c[3] for c in cases]
    assert colliding[:, 0].tolist() == [True] * 7 + [False, False]


def test_nc_over_a_trajectory_counts_the_first_contact():
    ego, speed = straight(50.0, 10.0)
    world = make_world(2)
    # a parked car 20 m ahead is hit at fault; a faster car from behind rear-ends the ego
    parked = still_agents(1, 41, [[50 + 20 + HALF_EGO + CAR[0] / 2, 0.0, 0.0]])
    chaser = moving_agents([50 - 10 - HALF_EGO - CAR[0] / 2], [14.0])
    agents = tuple(np.concatenate(pair) for pair in zip(parked, chaser, strict=True))
    scores = score(world, np.stack([ego, ego]), np.stack([speed, speed]), agents)
    assert scores.nc.tolist() == [0.0, 1.0]
    # ignored at the start (already in contact), the parked car no longer counts
    scores = score(
        world, np.stack([ego, ego]), np.stack([speed, speed]), agents, ignore_at_start=np.ones((2, 1), bool)
    )
    assert scores.nc.tolist() == [1.0, 1.0]


def test_trajectory_scores_match_the_per_step_functions():
    """The vectorised horizon gives what stepping NAVSIM's loops one step at a time gives."""
    rng = np.random.default_rng(3)
    num, steps, num_agents = 24, 41, 4
    ego, speed = straight(50.0, 8.0)
    ego, speed = np.repeat(ego[None], num, 0), np.repeat(speed[None], num, 0)
    start = np.stack(
        [
            50 + rng.uniform(-20, 45, (num, num_agents)),
            rng.uniform(-4, 4, (num, num_agents)),
            rng.normal(0, 0.4, (num, num_agents)),
        ],
        -1,
    )
    agent_speed = rng.uniform(0, 12, (num, num_agents)) * (rng.random((num, num_agents)) < 0.8)
    t = np.arange(steps)[None, :, None] * 0.1
    heading = start[:, None, :, 2]
    agent_pose = np.stack(
        [
            start[:, None, :, 0] + agent_speed[:, None] * t * np.cos(heading),
            start[:, None, :, 1] + agent_speed[:, None] * t * np.sin(heading),
            np.broadcast_to(heading, (num, steps, num_agents)),
        ],
        -1,
    )
    speeds = np.broadcast_to(agent_speed[:, None], (num, steps, num_agents))
    valid = np.ones((num, steps, num_agents), bool)
    kinds = np.where(rng.random((num, num_agents)) < 0.3, AGENT_STATIC, AGENT_VEHICLE)
    world = make_world(num, agent_size=np.broadcast_to(CAR, (num, num_agents, 2)), agent_type=kinds)
    scores = score(world, ego, speed, (agent_pose, speeds, valid))
    nc, ttc = np.ones(num), np.ones(num, bool)
    ignore, tolerated = np.zeros((num, num_agents), bool), np.zeros((num, num_agents), bool)
    offsets = np.round(np.asarray(metrics.TTC_OFFSETS) / 0.1).astype(int)
    for step in range(steps):
        area = map_checks.ego_area(world, ego[:, step])
        state = metrics.StepState(
            ego[:, step],
            speed[:, step],
            agent_pose[:, step],
            speeds[:, step],
            valid[:, step],
            np.zeros((num, 1), bool),
        )
        step_nc, colliding = agent_checks.collisions(world, state, area, ignore)
        nc, ignore = np.minimum(nc, step_nc), ignore | colliding
        if step + offsets[-1] < steps:
            future = step + offsets
            no_ignore = np.zeros((num, num_agents), bool)
            ttc &= agent_checks.ttc_ok(
                world,
                ego[:, step],
                speed[:, step],
                area,
                agent_pose[:, future],
                valid[:, future],
                no_ignore,
                tolerated=tolerated,
            )
    assert set(scores.nc) == {0.0, 0.5, 1.0} and set(scores.ttc) == {0.0, 1.0}  # every outcome occurs
    np.testing.assert_array_equal(scores.nc, nc)
    np.testing.assert_array_equal(scores.ttc, ttc.astype(float))


# --- drivable area, progress ------------------------------------------------------------------------
def test_dac_and_progress():
    on_road, speed = straight(20.0, 10.0)
    drifting, _ = straight(20.0, 10.0, heading=-0.05)  # 40 m at -0.05 rad ends 2 m right: off the road
    stopped, zero = straight(20.0, 0.0)
    ego = np.stack([on_road, drifting, stopped])
    scores = score(make_world(3), ego, np.stack([speed, speed, zero]), no_agents(3))
    assert scores.dac.tolist() == [1.0, 0.0, 1.0]
    np.testing.assert_allclose(scores.progress, [40.0, 40 * np.cos(0.05), 0.0], atol=1e-6)
    assert np.isnan(scores.ep).all() and scores.ec.tolist() == [1.0, 1.0, 1.0]


def test_normalise_progress():
    # a stationary proposal scores 0 when another one makes 40 m; 1 when none makes over 5 m
    ep = metrics.normalise_progress(np.array([[0.0, 40.0, 30.0], [0.0, 3.0, 4.0]]), np.ones((2, 3)))
    np.testing.assert_allclose(ep, [[0.0, 1.0, 0.75], [1.0, 1.0, 1.0]])
    # a failed proposal's progress does not set the scale; progress beyond the best clips to 1
    ep = metrics.normalise_progress(np.array([[50.0, 20.0, 10.0]]), np.array([[0.0, 1.0, 0.5]]))
    np.testing.assert_allclose(ep, [[1.0, 1.0, 0.5]])


# --- time to collision ------------------------------------------------------------------------------
def test_ttc_against_leaders_and_followers():
    gap_close, gap_far = 3.0, 50.0
    contact = HALF_EGO + CAR[0] / 2
    ego, speed = straight(50.0, 10.0)
    xs = [50 + contact + gap_close, 50 + contact + gap_far, 50 - contact - gap_far]
    agents = moving_agents(xs, [5.0, 5.0, 15.0])
    num = len(xs)
    scores = score(make_world(num), np.repeat(ego[None], num, 0), np.repeat(speed[None], num, 0), agents)
    # only the leader 3 m ahead, closing at 5 m/s, is within reach of the ego's next 0.9 s
    assert scores.ttc.tolist() == [0.0, 1.0, 1.0]


def test_ttc_ok_per_step_and_special_areas():
    offsets = np.round(np.asarray(metrics.TTC_OFFSETS) / 0.1).astype(int)
    ego_pose = np.array([[50.0, 0.0, 0.0], [50.0, 0.0, 0.0], [50.0, 1.75, 0.0], [50.0, 0.0, 0.0]])
    ego_speed = np.array([10.0, 3.0, 10.0, 0.0])
    contact = HALF_EGO + CAR[0] / 2
    # a slow leader 3 m ahead; a follower 0.3 m behind, 2 m/s faster than the ego (overlapping from
    # 0.3 s on, its centre then behind the rear axle); a car alongside (54 degrees from the axle)
    start = np.array(
        [
            [50 + contact + 3, 0.0, 5.0],
            [50 - contact - 0.3, 0.0, 5.0],
            [50.0, 3.8, 10.0],
            [50 + contact + 3, 0.0, 5.0],
        ]
    )
    t = offsets * 0.1
    x = start[:, None, 0] + start[:, None, 2] * t
    agent_pose = np.stack([x, np.broadcast_to(start[:, None, 1], x.shape), np.zeros_like(x)], -1)[:, :, None]
    world = make_world(4)
    area = map_checks.ego_area(world, ego_pose)
    assert area.multiple_lanes.tolist() == [False, False, True, False]
    tolerated = np.zeros((4, 1), bool)
    valid = np.ones((4, len(offsets), 1), bool)
    ok = agent_checks.ttc_ok(
        world, ego_pose, ego_speed, area, agent_pose, valid, np.zeros((4, 1), bool), tolerated=tolerated
    )
    # leader: violation; follower: behind, tolerated; alongside while across lanes: violation;
    # a stopped ego never violates
    assert ok.tolist() == [False, True, False, True]
    assert tolerated[:, 0].tolist() == [False, True, False, False]
    # the same car alongside an ego inside one lane is neither ahead nor relevant
    single = ego_pose[2:3] - [0.0, 1.75, 0.0]
    alongside = agent_pose[2:3] - [0.0, 1.75, 0.0]
    ok = agent_checks.ttc_ok(
        world.take([0]),
        single,
        ego_speed[:1],
        map_checks.ego_area(world.take([0]), single),
        alongside,
        valid[:1],
        np.zeros((1, 1), bool),
    )
    assert ok.tolist() == [True]


# --- lights, direction, lane keeping ----------------------------------------------------------------
def test_red_light_violation():
    # the stop box spans x in [150, 154] on the connector; the ego at x = 150 reaches x = 152.59
    ego_pose = np.array([[150.0, 0.0, 0.0], [150.0, 0.0, 0.0], [140.0, 0.0, 0.0]])
    red = np.array([[True], [False], [True]])
    assert map_checks.red_light_violation(make_world(3), ego_pose, red).tolist() == [True, False, False]
    ego, speed = straight(130.0, 10.0)
    scores = score(
        make_world(2),
        np.stack([ego, ego]),
        np.stack([speed, speed]),
        no_agents(2),
        light_red=red[:2, None].repeat(41, 1),
    )
    assert scores.tlc.tolist() == [0.0, 1.0]


@pytest.mark.parametrize(("distance", "expected"), [(1.5, 1.0), (4.0, 0.5), (10.0, 0.0)])
def test_ddc_thresholds(distance, expected):
    # drive ``distance`` metres against traffic within the first second, then stand
    travelled = np.minimum(np.arange(41), 10) * distance / 10
    ego = np.stack([100.0 - travelled, np.full(41, 7.0), np.full(41, np.pi)], -1)[None]
    scores = score(make_world(1), ego, np.zeros((1, 41)), no_agents(1))
    assert scores.ddc.tolist() == [expected]


def test_ddc_skips_intersections():
    # 5 m against traffic: 0.5 in the oncoming lane, not counted inside the intersection
    travelled = np.minimum(np.arange(41), 10) * 0.5
    lane = np.stack([100.0 - travelled, np.full(41, 7.0), np.full(41, np.pi)], -1)
    junction = lane + np.array([59.0, -3.5, 0.0])  # x from 159 to 154, y = 3.5: off the route connector
    scores = score(make_world(2), np.stack([lane, junction]), np.zeros((2, 41)), no_agents(2))
    assert scores.ddc.tolist() == [0.5, 1.0]


def test_lane_keeping():
    ego, speed = straight(20.0, 5.0)
    off = [np.where(np.arange(41) < steps, 0.7, 0.0) for steps in (20, 15)]
    trajectories = [ego + np.stack([np.zeros(41), y, np.zeros(41)], -1) for y in off]
    # 0.7 m off the centreline inside the intersection for the whole horizon
    trajectories.append(np.stack([150.5 + 0.2 * np.arange(41), np.full(41, 0.7), np.zeros(41)], -1))
    scores = score(make_world(3), np.stack(trajectories), np.repeat(speed[None], 3, 0), no_agents(3))
    assert scores.lk.tolist() == [0.0, 1.0, 1.0]


# --- aggregation ------------------------------------------------------------------------------------
def sub_scores(**values):
    base = {name: np.ones(2) for name in metrics.SUB_METRICS}
    base.update({k: np.asarray(v, float) for k, v in values.items()})
    return metrics.SubScores(**base, progress=np.zeros(2))


def test_pdms_and_epdms_by_hand():
    s = sub_scores(nc=[0.5, 1], ddc=[0.5, 1], ep=[0.8, 0.4], ttc=[0, 1], c=[1, 0], hc=[0, 1], lk=[1, 0])
    # PDMS = NC DAC (5 TTC + 5 EP + 2 C) / 12
    np.testing.assert_allclose(metrics.pdms(s), [0.5 * (0 + 4 + 2) / 12, (5 + 2 + 0) / 12])
    # EPDMS = NC DAC DDC TLC (5 EP + 5 TTC + 2 LK + 2 HC + 2 EC) / 16
    np.testing.assert_allclose(metrics.epdms(s), [0.25 * (4 + 0 + 2 + 0 + 2) / 16, (2 + 5 + 0 + 2 + 2) / 16])
    np.testing.assert_allclose(s.multiplier, [0.25, 1.0])


def test_human_filter():
    agent = sub_scores(nc=[0.5, 0.5], ddc=[0.5, 0.5], ep=[0.8, 0.8], ttc=[0, 0], hc=[0, 0])
    human = sub_scores(ddc=[0, 0.5], ttc=[0, 1], hc=[0, 1], nc=[1, 0.5])
    # query 0: the human fails DDC, TTC and HC, so the agent gets 1 there; query 1: nothing filtered
    np.testing.assert_allclose(
        metrics.filtered(agent, human).to_array()[:, :6], [[0.5, 1, 1, 1, 0.8, 1], [0.5, 1, 0.5, 1, 0.8, 0]]
    )
    np.testing.assert_allclose(
        metrics.epdms(agent, human), [0.5 * (4 + 5 + 2 + 2 + 2) / 16, 0.25 * (4 + 0 + 2 + 0 + 2) / 16]
    )
    round_trip = metrics.SubScores.from_array(agent.to_array())
    np.testing.assert_array_equal(round_trip.to_array(), agent.to_array())


# --- window scoring -------------------------------------------------------------------------------
def _score_one_window(window_min, progress, reference, human_row, *, v1):
    """score_windows on one slot whose ego drove 4 s straight at 5 m/s after a 2 s history like it."""
    from omnigym.envs.driving.comfort import savgol_filters
    from omnigym.envs.driving.scene import DT, HISTORY_STEPS, HORIZON_STEPS
    from omnigym.envs.driving.step_results import WINDOW_MINIMA_METRICS
    from omnigym.envs.driving.window_scores import score_windows

    steps = HISTORY_STEPS + HORIZON_STEPS + 1
    track = np.zeros((1, steps, 3))
    track[0, :, 0] = 5.0 * DT * np.arange(steps)
    sums = [np.zeros(1), np.zeros(1), np.zeros((1, len(metrics.SUB_METRICS))), np.zeros(1, np.int64)]
    score_windows(
        np.array([0]),
        np.array([HISTORY_STEPS + HORIZON_STEPS]),
        track,
        np.array([window_min], float),
        WINDOW_MINIMA_METRICS,
        np.zeros(1),
        np.zeros(1),
        np.array([100.0 + progress]),
        np.array([100.0]),
        np.array([reference]),
        np.array([[human_row]], float),
        np.array([1]),
        savgol_filters(HORIZON_STEPS + 1, DT),
        savgol_filters(HISTORY_STEPS + HORIZON_STEPS + 1, DT),
        metrics.PDMS_COLUMNS,
        metrics.EPDMS_COLUMNS,
        DT,
        v1,
        *sums,
    )
    pdms_sum, epdms_sum, window_sum, done = sums
    assert done[0] == 1
    return pdms_sum[0], epdms_sum[0], dict(zip(metrics.SUB_METRICS, window_sum[0], strict=True))


def test_window_score_hand_numbers_with_a_static_collision_and_the_human_filter():
    # window minima (nc, dac, ddc, tlc, ttc, lk): hit a parked car (NC 0.5), TTC violated
    minima = [0.5, 1.0, 1.0, 1.0, 0.0, 1.0]
    human = np.ones(len(metrics.SUB_METRICS))
    human[metrics.SUB_METRICS.index("ttc")] = 0.0  # the human fails TTC too: EPDMS counts it passed
    pdms_v1, epdms, subs = _score_one_window(minima, 20.0, 25.0, human, v1=True)
    # straight at constant speed: comfortable alone and after its history; no EC pairs: EC 1
    assert subs["c"] == 1.0 and subs["hc"] == 1.0 and subs["ec"] == 1.0
    # v2 EP (reported, and EPDMS's): 20 / max(20 * 0.5, 25) = 0.8
    assert subs["ep"] == pytest.approx(0.8)
    # v1.1 EP: masked 10 / max(10, 25) = 0.4; PDMS = 0.5 * (5 * 0 + 5 * 0.4 + 2 * 1) / 12
    assert pdms_v1 == pytest.approx(0.5 * 4.0 / 12)
    pdms_v2, _, _ = _score_one_window(minima, 20.0, 25.0, human, v1=False)
    assert pdms_v2 == pytest.approx(0.5 * 6.0 / 12)  # 0.5 * (0 + 5 * 0.8 + 2) / 12
    # EPDMS: NC 0.5 * (5 EP 0.8 + 5 TTC (filtered to 1) + 2 LK + 2 HC + 2 EC) / 16
    assert epdms == pytest.approx(0.5 * 15.0 / 16)


def test_window_score_progress_below_the_threshold_counts_as_full():
    minima = [1.0] * 6
    human = np.ones(len(metrics.SUB_METRICS))
    for v1 in (True, False):
        pdms, epdms, subs = _score_one_window(minima, 3.0, 4.0, human, v1=v1)  # both under 5 m
        assert subs["ep"] == 1.0 and pdms == pytest.approx(1.0) and epdms == pytest.approx(1.0)
    # masked out entirely (an at-fault collision): v1.1 gives EP 0, and PDMS is 0 either way
    pdms, _, _ = _score_one_window([0.0] + [1.0] * 5, 20.0, 25.0, human, v1=True)
    assert pdms == 0.0
