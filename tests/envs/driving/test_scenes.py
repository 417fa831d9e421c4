"""Procedural scenes: determinism, the human track's quality, splits, scene sets and the scene source."""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest

from omnigym.envs.driving import scene_sets, scenes
from omnigym.envs.driving.map_raster import DRIVABLE, RasterStack, rasterize_map
from omnigym.envs.driving.maps import LaneGeometry
from omnigym.envs.driving.scene import (
    AGENT_STATIC,
    AGENT_VEHICLE,
    COMMAND_LEFT,
    COMMAND_RIGHT,
    COMMAND_STRAIGHT,
    DT,
    EGO_LENGTH,
    EGO_WIDTH,
    HISTORY_STEPS,
    HORIZON_STEPS,
    RoadMap,
    Scene,
    TrafficLog,
    box_corners,
    route_polyline,
)
from omnigym.envs.driving.scene_sets import SceneSet, SceneSource
from omnigym.envs.driving.scenes import (
    SPLIT_OFFSETS,
    SceneConfig,
    generate_scene,
    split_of,
    split_scene_ids,
)

KINDS = ("straight", "curve", "merge", "intersection")
SMALL = SceneConfig(num_agents=12, episode_seconds=3.0)


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Separating-axis test for boxes given by corners ``[..., 4, 2]``: True where they intersect."""
    a, b = np.broadcast_arrays(a, b)
    edges = np.concatenate([a[..., 1:3, :] - a[..., 0:2, :], b[..., 1:3, :] - b[..., 0:2, :]], axis=-2)
    axes = np.stack([-edges[..., 1], edges[..., 0]], axis=-1)  # the 4 edge normals
    proj_a = np.einsum("...ci,...ki->...kc", a, axes)
    proj_b = np.einsum("...ci,...ki->...kc", b, axes)
    separated = (proj_a.max(-1) < proj_b.min(-1)) | (proj_b.max(-1) < proj_a.min(-1))
    return ~separated.any(-1)


def _ego_corners(scene: Scene, shrink: float = 0.0) -> np.ndarray:
    size = np.array([EGO_LENGTH - 2 * shrink, EGO_WIDTH - 2 * shrink])
    return box_corners(scene.log.ego_pose.astype(np.float64), size)


def _assert_same(a: Scene, b: Scene) -> None:
    assert (a.scene_id, a.kind, a.route.command) == (b.scene_id, b.kind, b.route.command)
    np.testing.assert_array_equal(a.route.lanes, b.route.lanes)
    for part, cls in ((a.road_map, RoadMap), (a.log, TrafficLog)):
        other = b.road_map if cls is RoadMap else b.log
        for f in fields(cls):
            np.testing.assert_array_equal(getattr(part, f.name), getattr(other, f.name), err_msg=f.name)


@pytest.fixture(scope="module")
def by_kind() -> dict[str, list[Scene]]:
    """Two default-size scenes of every kind."""
    return {kind: [generate_scene(i, SceneConfig(kinds={kind: 1.0})) for i in (0, 1)] for kind in KINDS}


def test_overlap_helper():
    square = box_corners(np.array([0.0, 0.0, 0.0]), np.array([2.0, 2.0]))
    near = box_corners(np.array([1.9, 0.0, 0.0]), np.array([2.0, 2.0]))
    apart = box_corners(np.array([2.1, 0.0, 0.0]), np.array([2.0, 2.0]))
    # diagonal neighbour rotated 45 degrees: bounding boxes overlap, the boxes do not
    diamond = box_corners(np.array([2.3, 2.3, np.pi / 4]), np.array([2.0, 2.0]))
    assert _overlap(square, near) and not _overlap(square, apart) and not _overlap(square, diamond)
    assert _overlap(square, box_corners(np.array([1.5, 1.5, np.pi / 4]), np.array([2.0, 2.0])))


def test_config_validation_names_the_bad_field():
    for kwargs, field in [
        ({"num_agents": -1}, "num_agents"),
        ({"num_static": 1.5}, "num_static"),
        ({"episode_seconds": 0.0}, "episode_seconds"),
        ({"episode_seconds": 24.5}, "episode_seconds"),
        ({"kinds": {"roundabout": 1.0}}, "kinds"),
        ({"kinds": {"merge": 0.0}}, "kinds"),
    ]:
        with pytest.raises(ValueError, match=field):
            SceneConfig(**kwargs)
    assert SceneConfig().num_steps == HISTORY_STEPS + 160 + HORIZON_STEPS
    assert SceneConfig().key() == SceneConfig().key() != SceneConfig(num_agents=49).key()


def test_generation_is_deterministic_and_ids_differ():
    a, b, c = generate_scene(7), generate_scene(7), generate_scene(8)
    _assert_same(a, b)
    assert not np.array_equal(a.log.ego_pose, c.log.ego_pose)
    with pytest.raises(ValueError, match="scene_id"):
        generate_scene(-1)


def test_kinds_follow_the_weights():
    drawn = [generate_scene(i, SceneConfig(num_agents=5, episode_seconds=1.0)).kind for i in range(16)]
    assert set(drawn) == set(KINDS)
    assert {generate_scene(i, SceneConfig(num_agents=5, kinds={"curve": 1.0})).kind for i in range(3)} == {
        "curve"
    }


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_generates_a_valid_scene(by_kind, kind):
    for scene in by_kind[kind]:
        scene.validate()
        log = scene.log
        assert scene.kind == kind and log.num_steps == SceneConfig().num_steps
        assert scene.episode_steps == round(16.0 / DT)
        vehicles = log.agent_valid[0] & (log.agent_type == AGENT_VEHICLE)
        assert 35 <= vehicles.sum() <= 50
        assert log.agent_valid.any(axis=0).all()  # unused reserve slots are dropped
        assert np.all(log.agent_speed >= 0) and np.all(log.ego_speed >= 0)
        assert np.all(log.agent_pose[~log.agent_valid] == 0)
        if kind == "intersection":
            assert (
                log.light_state.shape == (log.num_steps, len(scene.road_map.light_lane))
                and log.light_state.size
            )
        else:
            assert log.light_state.shape == (log.num_steps, 0)


def test_intersection_commands_match_the_route(by_kind):
    turn = {COMMAND_LEFT: np.pi / 2, COMMAND_STRAIGHT: 0.0, COMMAND_RIGHT: -np.pi / 2}
    commands = set()
    for i in range(6):
        scene = generate_scene(i, SceneConfig(num_agents=5, episode_seconds=1.0, kinds={"intersection": 1.0}))
        points = scene.road_map.centreline(int(scene.route.lanes[1]))
        heading = [np.arctan2(*(points[j + 1] - points[j])[::-1]) for j in (0, -2)]
        assert np.angle(np.exp(1j * (heading[1] - heading[0]))) == pytest.approx(
            turn[scene.route.command], abs=0.03
        )
        commands.add(scene.route.command)
    assert len(commands) >= 2


def test_initial_boxes_do_not_overlap(by_kind):
    for scene in (s for group in by_kind.values() for s in group):
        log = scene.log
        agents = box_corners(log.agent_pose[0].astype(np.float64), log.agent_size.astype(np.float64))[
            log.agent_valid[0]
        ]
        pairs = _overlap(agents[:, None], agents[None])
        assert not pairs[~np.eye(len(agents), dtype=bool)].any()
        assert not _overlap(_ego_corners(scene)[0], agents).any()


def test_human_track_never_touches_another_agent(by_kind):
    for scene in (s for group in by_kind.values() for s in group):
        log = scene.log
        agents = box_corners(log.agent_pose.astype(np.float64), log.agent_size.astype(np.float64)[None])
        hits = _overlap(_ego_corners(scene)[:, None], agents) & log.agent_valid
        assert not hits.any(), f"scene {scene.scene_id} ({scene.kind}): ego touches agents {np.nonzero(hits)}"


def test_human_track_stays_on_drivable_area(by_kind):
    for scene in (s for group in by_kind.values() for s in group):
        raster = RasterStack.of([rasterize_map(scene.road_map, scene.route)])
        # corners 0.3 m inside the box: the raster's 0.5 m cells blur lane edges by up to a cell
        area, _ = raster.query(np.zeros(1, int), _ego_corners(scene, shrink=0.3).reshape(1, -1, 2))
        assert np.all(area & DRIVABLE), f"scene {scene.scene_id} ({scene.kind}) leaves the drivable area"


def test_human_track_is_comfortable(by_kind):
    # NAVSIM's comfort bounds: longitudinal acceleration, jerk, yaw rate and yaw acceleration
    for scene in (s for group in by_kind.values() for s in group):
        speed = scene.log.ego_speed.astype(np.float64)
        heading = np.unwrap(scene.log.ego_pose[:, 2].astype(np.float64))
        accel, yaw_rate = np.diff(speed) / DT, np.diff(heading) / DT
        assert accel.min() >= -4.05 and accel.max() <= 2.40
        assert np.abs(np.diff(accel) / DT).max() <= 4.13
        assert np.abs(yaw_rate).max() <= 0.95 and np.abs(np.diff(yaw_rate) / DT).max() <= 1.93
        assert np.abs(speed[1:] * yaw_rate).max() <= 4.89


def test_route_outlasts_the_episode_at_the_speed_limit(by_kind):
    for scene in (s for group in by_kind.values() for s in group):
        line = route_polyline(scene, spacing=0.5)
        start = np.linalg.norm(line - scene.log.ego_pose[0, :2], axis=1).argmin() * 0.5
        lanes = scene.route.lanes
        first = LaneGeometry.of(scene.road_map).length[lanes[0]]
        assert 40.0 - 1.0 <= start <= min(60.0, first) + 1.0  # the ego starts 40-60 m into its first lane
        limit = scene.road_map.lane_speed_limit[lanes].max()
        assert (len(line) - 1) * 0.5 - start >= limit * scene.log.num_steps * DT


def test_static_objects_stand_still_off_the_route():
    scene = generate_scene(3, SceneConfig(num_static=3))
    log = scene.log
    static = np.flatnonzero(log.agent_type == AGENT_STATIC)
    assert 1 <= len(static) <= 3
    assert np.all(log.agent_valid[:, static]) and np.all(log.agent_speed[:, static] == 0)
    np.testing.assert_array_equal(
        log.agent_pose[:, static], log.agent_pose[:1, static].repeat(log.num_steps, 0)
    )
    raster = RasterStack.of([rasterize_map(scene.road_map, scene.route)])
    _, lane = raster.query(np.zeros(1, int), log.agent_pose[:1, static, :2].astype(np.float64))
    assert not np.isin(lane, scene.route.lanes).any()


def test_routes_too_short_for_the_episode_are_refused_with_a_clear_error(monkeypatch):
    # at the longest episode, the shortest routes hold a 6 m/s limit; demanding 12 m/s cannot be met
    monkeypatch.setattr(scenes, "MIN_SPEED_LIMIT", 12.0)
    config = SceneConfig(
        episode_seconds=scenes.MAX_EPISODE_SECONDS, num_agents=2, kinds={"intersection": 1.0}
    )
    with pytest.raises(ValueError, match=r"episode_seconds=24\.0 is too long for intersection maps"):
        generate_scene(0, config)


def test_splits_are_disjoint_and_invertible():
    train, val, test = (set(split_scene_ids(s, 1000)) for s in ("train", "val", "test"))
    assert not (train & val or train & test or val & test)
    assert split_scene_ids("val", 3) == [SPLIT_OFFSETS["val"] + i for i in range(3)]
    assert [split_of(i) for i in (0, 999_999, 1_000_000, 2_000_005, 3_000_000)] == [
        "train",
        "train",
        "val",
        "test",
        "hard",
    ]
    assert not set(split_scene_ids("hard", 1000)) & (train | val | test)
    with pytest.raises(ValueError, match="split"):
        split_scene_ids("dev", 1)
    with pytest.raises(ValueError):
        split_of(4_000_000)


def test_default_scenes_draw_the_original_kinds_and_no_events():
    config = SceneConfig()
    assert tuple(config.kinds) == KINDS and config.lead_brake == 0.0
    with pytest.raises(ValueError, match="lead_brake"):
        SceneConfig(lead_brake=1.5)


def test_hard_split_config_is_the_preset_under_the_users_overrides():
    from omnigym.envs.driving.config import DrivingConfig

    hard = DrivingConfig(split="hard").scene_config
    assert hard.kinds == scenes.HARD_SCENES["kinds"] and hard.lead_brake == scenes.HARD_SCENES["lead_brake"]
    assert DrivingConfig(split="hard", scene={"lead_brake": 0.0}).scene_config.lead_brake == 0.0
    assert DrivingConfig(split="test").scene_config == SceneConfig()


def test_braking_lead_stops_early_in_the_episode_and_the_human_stops_behind_it():
    config = SceneConfig(num_agents=12, kinds={"straight": 1.0}, lead_brake=1.0)
    for scene_id in (3_000_000, 3_000_001):
        scene = generate_scene(scene_id, config)
        plain = generate_scene(scene_id, SceneConfig(num_agents=12, kinds={"straight": 1.0}))
        # the event has its own random stream: the map and the route are those of the plain scene
        np.testing.assert_array_equal(scene.road_map.lane_points, plain.road_map.lane_points)
        np.testing.assert_array_equal(scene.route.lanes, plain.route.lanes)
        log = scene.log
        lead = 0  # placed right after the ego, it is the log's first agent
        assert log.agent_type[lead] == AGENT_VEHICLE and log.agent_valid[:, lead].all()
        ahead = np.linalg.norm(log.agent_pose[0, lead, :2] - log.ego_pose[0, :2])
        assert 25.0 - 1e-3 <= ahead <= 40.0 + 1e-3
        speed = log.agent_speed[:, lead]
        assert speed[: HISTORY_STEPS + 5].min() > 1.0  # moving until 0.5 s into the episode at least
        stopped = np.flatnonzero(speed < 1e-3)
        assert len(stopped) and stopped[0] < HISTORY_STEPS + round(6.0 / DT)  # at rest within 6 s
        assert speed[-1] > 1.0  # and drives on after its wait
        # the human (the ego's log) stops behind it or passes it in the next lane, never touching it
        lead_box = box_corners(log.agent_pose[:, lead].astype(np.float64), log.agent_size[lead])
        assert not _overlap(_ego_corners(scene), lead_box).any()


def test_scene_set_round_trip(tmp_path):
    original = SceneSet.generate("val", 3, SMALL)
    assert len(original) == 3 and original.ids == split_scene_ids("val", 3)
    index = original.save(tmp_path / "set")
    meta = json.loads(index.read_text())
    assert meta["config"]["num_agents"] == 12 and meta["format_version"] >= 1
    assert [e["file"] for e in meta["scenes"]] == [f"scenes/{i}.npz" for i in original.ids]
    assert [e["kind"] for e in meta["scenes"]] == [s.kind for s in original.scenes]
    loaded = SceneSet.load(tmp_path / "set")
    assert loaded.config == SMALL and loaded.ids == original.ids
    for a, b in zip(original.scenes, loaded.scenes, strict=True):
        _assert_same(a, b)


def test_scene_set_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no scene set directory"):
        SceneSet.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"index\.json"):
        SceneSet.load(tmp_path / "empty")
    SceneSet.generate("train", 2, SMALL).save(tmp_path / "set")
    (tmp_path / "set" / "scenes" / "1.npz").unlink()
    with pytest.raises(FileNotFoundError, match=r"1\.npz"):
        SceneSet.load(tmp_path / "set")


def test_scene_source_caches_in_memory_and_on_disk(tmp_path, monkeypatch):
    source = SceneSource("test", 2, SMALL, cache_dir=tmp_path)
    assert len(source) == 2 and source.ids == split_scene_ids("test", 2)
    first = source.get(1)
    assert source.get(1) is first  # memory cache
    files = list(tmp_path.glob("scenes-*/*.npz"))
    assert [f.name for f in files] == [f"{SPLIT_OFFSETS['test'] + 1}.npz"]

    def no_generation(*args, **kwargs):
        raise AssertionError("a cached scene was generated again")

    monkeypatch.setattr(scene_sets, "generate_scene", no_generation)
    again = SceneSource("test", 2, SMALL, cache_dir=tmp_path).get(1)  # a new run reads the disk cache
    _assert_same(first, again)
    with pytest.raises(AssertionError, match="generated again"):  # another config has another folder
        SceneSource("test", 2, SceneConfig(num_agents=11, episode_seconds=3.0), cache_dir=tmp_path).get(1)
    with pytest.raises(IndexError):
        source.get(2)


def test_scene_source_serves_a_saved_set(tmp_path):
    saved = SceneSet.generate("train", 2, SMALL)
    saved.save(tmp_path)
    source = SceneSource.from_directory(tmp_path, memory_cache_size=1)
    assert len(source) == 2 and source.ids == saved.ids and source.config == SMALL
    _assert_same(source.get(0), saved[0])
    _assert_same(source.get(1), saved[1])
    assert source.get(1) is source.get(1)
