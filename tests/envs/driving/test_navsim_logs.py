"""NAVSIM / OpenScene logs to scenes: a procedural scene written in NAVSIM's log schema comes back."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from omnigym.envs.driving.navsim_logs import (
    MIN_FRAMES,
    REAR_AXLE_TO_CENTRE,
    SAMPLES_PER_FRAME,
    read_lane_map,
    read_navsim_log,
    scene_from_navsim_frames,
    scenes_from_navsim_log,
)
from omnigym.envs.driving.scene import AGENT_STATIC, LIGHT_RED, Scene
from omnigym.envs.driving.scene_sets import SceneSet
from omnigym.envs.driving.scenes import SceneConfig, generate_scene

GLOBAL_OFFSET = np.array([664_000.0, 3_997_000.0])
"""UTM-sized coordinates, as nuPlan's: the converter must move them to a local frame."""


def _rear_axle(pose: np.ndarray) -> np.ndarray:
    return pose[:2] - REAR_AXLE_TO_CENTRE * np.array([np.cos(pose[2]), np.sin(pose[2])])


def _navsim_frames(scene: Scene) -> list[dict]:
    """The scene's log at 2 Hz as NAVSIM frame dicts (boxes and velocities in the ego frame)."""
    log, road_map = scene.log, scene.road_map
    command = np.eye(4, dtype=int)[scene.route.command]
    frames = []
    for t in range(0, log.num_steps, SAMPLES_PER_FRAME):
        yaw = float(log.ego_pose[t, 2])
        rear = _rear_axle(log.ego_pose[t].astype(np.float64))
        c, s = np.cos(yaw), np.sin(yaw)
        boxes, velocities, names, tokens = [], [], [], []
        for a in np.flatnonzero(log.agent_valid[t]):
            d = log.agent_pose[t, a, :2] - rear
            rel_yaw = float(log.agent_pose[t, a, 2]) - yaw
            length, width = log.agent_size[a]
            boxes.append([c * d[0] + s * d[1], -s * d[0] + c * d[1], 0.8, length, width, 1.6, rel_yaw])
            speed = float(log.agent_speed[t, a])
            velocities.append([speed * np.cos(rel_yaw), speed * np.sin(rel_yaw), 0.0])
            names.append("generic_object" if log.agent_type[a] == AGENT_STATIC else "vehicle")
            tokens.append(f"track-{a}")
        frames.append(
            {
                "token": f"frame-{t}",
                "timestamp": t * 100_000,
                "log_name": "synthetic",
                "map_location": "us-nv-las-vegas-strip",
                "ego2global_translation": [*(rear + GLOBAL_OFFSET), 0.0],
                "ego2global_rotation": [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)],
                "ego_dynamic_state": [float(log.ego_speed[t]), 0.0, 0.0, 0.0],
                "driving_command": command,
                "roadblock_ids": [f"block-{road_map.lane_road[lane]}" for lane in scene.route.lanes],
                "traffic_lights": [
                    (f"lane-{lane}", bool(log.light_state[t, k] == LIGHT_RED))
                    for k, lane in enumerate(road_map.light_lane)
                ],
                "anns": {
                    "gt_boxes": np.array(boxes).reshape(-1, 7),
                    "gt_names": names,
                    "gt_velocity_3d": np.array(velocities).reshape(-1, 3),
                    "instance_tokens": tokens,
                    "track_tokens": tokens,
                },
            }
        )
    return frames


def _lane_map_json(scene: Scene) -> dict:
    m = scene.road_map
    lanes = []
    for lane in range(m.num_lanes):
        lanes.append(
            {
                "id": f"lane-{lane}",
                "points": (m.centreline(lane) + GLOBAL_OFFSET).tolist(),
                "width": float(m.lane_width[lane]),
                "speed_limit": float(m.lane_speed_limit[lane]),
                "successors": [f"lane-{s}" for s in m.lane_successors[lane] if s >= 0],
                "left": f"lane-{m.lane_left[lane]}" if m.lane_left[lane] >= 0 else None,
                "right": f"lane-{m.lane_right[lane]}" if m.lane_right[lane] >= 0 else None,
                "is_connector": bool(m.lane_is_connector[lane]),
                "roadblock": f"block-{m.lane_road[lane]}",
            }
        )
    return {"lanes": lanes, "intersections": (m.intersections + GLOBAL_OFFSET).tolist()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """An intersection scene, written as a NAVSIM log pickle and a lane map, then converted back."""
    config = SceneConfig(num_agents=20, kinds={"intersection": 1.0}, num_static=2)
    original = generate_scene(2_000_003, config)
    folder = tmp_path_factory.mktemp("navsim")
    (folder / "log.pkl").write_bytes(pickle.dumps(_navsim_frames(original)))
    (folder / "map.json").write_text(json.dumps(_lane_map_json(original)))
    frames = read_navsim_log(folder / "log.pkl")
    scene = scene_from_navsim_frames(
        frames, read_lane_map(folder / "map.json"), scene_id=7, crop_radius=500.0
    )
    return original, scene, folder


def test_ego_agents_and_lights_come_back_at_the_frames(converted):
    original, scene, _ = converted
    frames = slice(0, scene.log.num_steps, SAMPLES_PER_FRAME)
    origin = _rear_axle(original.log.ego_pose[0].astype(np.float64))
    log, source = scene.log, original.log
    np.testing.assert_allclose(log.ego_pose[frames, :2] + origin, source.ego_pose[frames, :2], atol=2e-3)
    heading_error = np.angle(np.exp(1j * (log.ego_pose[:, 2] - source.ego_pose[: log.num_steps, 2])))
    assert np.abs(heading_error).max() < 0.02  # between frames too: headings interpolate smoothly
    np.testing.assert_allclose(log.ego_speed[frames], source.ego_speed[frames], atol=1e-4)
    # between frames, linear interpolation of a smooth track: within a few centimetres
    np.testing.assert_allclose(log.ego_pose[:, :2] + origin, source.ego_pose[: log.num_steps, :2], atol=0.05)
    # every agent present at a frame is there, at its place, with its size and type
    for t in range(0, log.num_steps, SAMPLES_PER_FRAME):
        ours = np.sort(np.round(log.agent_pose[t, log.agent_valid[t], :2] + origin, 2), axis=0)
        theirs = np.sort(np.round(source.agent_pose[t, source.agent_valid[t], :2], 2), axis=0)
        np.testing.assert_allclose(ours, theirs, atol=0.02)
    assert sorted(map(tuple, np.round(log.agent_size, 3))) == sorted(
        map(tuple, np.round(source.agent_size[source.agent_valid[: log.num_steps].any(axis=0)], 3))
    )
    assert (log.agent_type == AGENT_STATIC).sum() == (
        source.agent_type[source.agent_valid[: log.num_steps].any(axis=0)] == AGENT_STATIC
    ).sum()
    red = log.light_state[frames] == LIGHT_RED
    lanes = list(scene.road_map.light_lane)
    source_red = source.light_state[frames][
        :, [list(original.road_map.light_lane).index(lane) for lane in lanes]
    ]
    np.testing.assert_array_equal(red, source_red == LIGHT_RED)


def test_map_and_route_come_back(converted):
    original, scene, _ = converted
    m, source = scene.road_map, original.road_map
    assert m.num_lanes == source.num_lanes  # the crop radius keeps every lane, in order
    origin = _rear_axle(original.log.ego_pose[0].astype(np.float64))
    for lane in range(m.num_lanes):
        np.testing.assert_allclose(
            m.centreline(lane)[[0, -1]] + origin, source.centreline(lane)[[0, -1]], atol=1e-3
        )
    np.testing.assert_array_equal(m.lane_successors[:, :2], source.lane_successors[:, :2])
    np.testing.assert_array_equal(m.lane_is_connector, source.lane_is_connector)
    assert scene.route.command == original.route.command
    # the route is the chain the human drove, continued along the route's road blocks
    assert scene.route.lanes[0] == original.route.lanes[0]
    np.testing.assert_array_equal(scene.route.lanes[: len(original.route.lanes)], original.route.lanes)


def _human_score(scene: Scene, folder) -> dict:
    import gymnasium as gym

    SceneSet([scene]).save(folder)
    env = gym.make("omnigym/DrivingPlan-v0", scene_dir=str(folder), privileged=["log_replay"])
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(np.asarray(obs["log_replay"]))
        done = terminated or truncated
    return info


def test_converted_scene_drives_in_the_env_and_the_human_scores_as_on_the_original(converted, tmp_path):
    original, scene, _ = converted
    ours, theirs = _human_score(scene, tmp_path / "converted"), _human_score(original, tmp_path / "original")
    assert ours["failed"] == 0.0 and ours["nc"] == 1.0 and ours["dac"] == 1.0
    # 2 Hz frames lose a little smoothness (comfort can fail in one more window); the rest holds
    assert abs(ours["pdms"] - theirs["pdms"]) < 0.06 and abs(ours["ep"] - theirs["ep"]) < 0.03


def test_a_log_cuts_into_consecutive_scenes(converted):
    original, _, folder = converted
    frames = read_navsim_log(folder / "log.pkl")
    scenes = scenes_from_navsim_log(frames, read_lane_map(folder / "map.json"), first_scene_id=100)
    assert len(frames) == 44 and [s.scene_id for s in scenes] == [100, 101]  # 2 x 21 frames, 2 left over
    assert all(s.log.num_steps == 20 * SAMPLES_PER_FRAME + 1 and s.episode_steps == 41 for s in scenes)
    # the second scene starts at frame 21 (log index 105): its origin is the ego's rear axle there
    heading = float(original.log.ego_pose[105, 2])
    first = scenes[1].log.ego_pose[0]
    np.testing.assert_allclose(
        first[:2], REAR_AXLE_TO_CENTRE * np.array([np.cos(heading), np.sin(heading)]), atol=2e-3
    )
    assert first[2] == pytest.approx(heading, abs=1e-4)


def test_bad_inputs_raise_one_clear_error(converted, tmp_path):
    _, _, folder = converted
    frames = read_navsim_log(folder / "log.pkl")
    lane_map = read_lane_map(folder / "map.json")
    with pytest.raises(ValueError, match="at least"):
        scene_from_navsim_frames(frames[: MIN_FRAMES - 1], lane_map)
    with pytest.raises(ValueError, match="frames_per_scene"):
        scenes_from_navsim_log(frames, lane_map, frames_per_scene=MIN_FRAMES - 1)
    with pytest.raises(ValueError, match="crop_radius"):
        scene_from_navsim_frames(frames, lane_map, crop_radius=-1.0)
    (tmp_path / "bad.json").write_text(json.dumps({"lanes": [{"id": "a", "points": [[0, 0]]}]}))
    with pytest.raises(ValueError, match="lane 0"):
        read_lane_map(tmp_path / "bad.json")
    (tmp_path / "bad.pkl").write_bytes(pickle.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="NAVSIM log"):
        read_navsim_log(tmp_path / "bad.pkl")
