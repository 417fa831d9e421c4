"""Reactive IDM agents on tiny hand-built logs: who leads whom, stopping, parked agents, the ego."""

import numpy as np
import pytest

from omnigym.envs.driving.agents import LEADER_LATERAL_MARGIN, AgentFrame, ReactiveAgents
from omnigym.envs.driving.reactive_kernels import find_leaders
from omnigym.envs.driving.scene import DT
from omnigym.envs.driving.traffic import IDMParams, idm_acceleration

STEPS = 200
"""Log steps (20 s)."""
CAR = (4.5, 2.0)
"""Agent length and width (m)."""
EGO_SIZE = np.array([5.0, 2.0])
FAR_AWAY = np.array([-500.0, -500.0, 0.0])
"""An ego pose out of every agent's way."""


def _log(start: np.ndarray, heading: np.ndarray, speed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Straight logged paths at constant speed for agents ``[A]``: pose ``[T, A, 3]``, speed ``[T, A]``."""
    distance = np.arange(STEPS)[:, None] * DT * speed
    direction = np.stack([np.cos(heading), np.sin(heading)], axis=-1)
    xy = start + distance[..., None] * direction
    pose = np.concatenate([xy, np.broadcast_to(heading, distance.shape)[..., None]], axis=-1)
    return pose, np.broadcast_to(speed, distance.shape).copy()


def _agents(*slots: list[tuple[float, float, float]]) -> ReactiveAgents:
    """Agents driving along +x, per slot a list of (x, y, logged speed), from log index 0."""
    num_agents = max(len(agents) for agents in slots)
    reactive = ReactiveAgents(len(slots), STEPS, num_agents)
    for slot, agents in enumerate(slots):
        x, y, speed = np.array(agents, float).T
        pose, speeds = _log(np.stack([x, y], axis=-1), np.zeros(len(agents)), speed)
        valid = np.ones(speeds.shape, bool)
        reactive.load(slot, pose, speeds, valid, np.tile(CAR, (len(agents), 1)), 0)
    return reactive


def _drive(
    reactive: ReactiveAgents,
    steps: int,
    ego_pose: np.ndarray,
    stops: AgentFrame | None = None,
    stop_size: np.ndarray | None = None,
) -> list[AgentFrame]:
    """Step all slots ``steps`` times beside a standing ego; the frames after each step."""
    n = reactive.num_slots
    ego_pose = np.broadcast_to(ego_pose, (n, 3))
    frame = reactive.frame(np.zeros(n, np.int64))
    frames = []
    for t in range(1, steps + 1):
        reactive.step(frame, ego_pose, np.zeros(n), EGO_SIZE, stops, stop_size)
        frame = reactive.frame(np.full(n, t))
        frames.append(frame)
    return frames


def _bumper_gap(frames: list[AgentFrame], slot: int, follower: int, leader: int) -> np.ndarray:
    """Bumper-to-bumper distance along x from ``follower`` to ``leader``, every frame."""
    x = np.array([frame.pose[slot, :, 0] for frame in frames])
    return x[:, leader] - x[:, follower] - CAR[0]


def test_follower_brakes_behind_a_slower_leader_and_never_overlaps_it():
    # slot 0: a 12 m/s follower 30 m behind a 3 m/s leader in its lane; slot 1: the same pair, the
    # slow one a lane (4 m) to the side
    reactive = _agents([(0.0, 0.0, 12.0), (30.0, 0.0, 3.0)], [(0.0, 0.0, 12.0), (30.0, 4.0, 3.0)])
    frames = _drive(reactive, 190, FAR_AWAY)
    speed = np.array([frame.speed for frame in frames])  # [T, N, A]
    gaps = _bumper_gap(frames, 0, 0, 1)
    assert gaps.min() > 1.0  # IDM keeps (most of) its 2 m jam distance
    assert speed[:40, 0, 0].min() < 6.0  # braked down towards the leader's 3 m/s
    assert speed[-1, 0, 0] < 3.5 and abs(speed[-1, 0, 1] - 3.0) < 1e-9  # follows at its speed
    # with the slow one in the next lane the follower keeps its logged 12 m/s and overtakes
    assert speed[:, 1, 0].min() >= 12.0 - 1e-9
    assert _bumper_gap(frames, 1, 0, 1)[-1] < -10.0


def test_agents_stop_at_the_end_of_their_path_and_followers_behind_them():
    # a 3 m/s leader logged for 20 s (a 60 m path) and a 10 m/s follower behind it
    reactive = _agents([(0.0, 0.0, 10.0), (40.0, 0.0, 3.0)])
    frames = _drive(reactive, 230, FAR_AWAY)
    end = 40.0 + 3.0 * (STEPS - 1) * DT
    assert frames[-1].pose[0, 1, 0] == pytest.approx(end) and frames[-1].speed[0, 1] == 0.0
    assert frames[-1].speed[0, 0] < 0.5  # the follower is (all but) stopped behind it
    assert _bumper_gap(frames, 0, 0, 1).min() > 1.0


def test_agents_stop_before_an_active_stop_box_and_not_for_an_inactive_one():
    reactive = _agents([(0.0, 0.0, 10.0)], [(0.0, 0.0, 10.0)])
    stops = AgentFrame(
        pose=np.array([[[60.0, 0.0, 0.0]], [[60.0, 0.0, 0.0]]]),
        speed=np.zeros((2, 1)),
        valid=np.array([[True], [False]]),  # a red light in slot 0, a green one in slot 1
    )
    stop_size = np.full((2, 1, 2), [1.0, 4.0])
    frames = _drive(reactive, 150, FAR_AWAY, stops, stop_size)
    front = np.array([frame.pose[:, 0, 0] for frame in frames]) + 0.5 * CAR[0]
    assert front[:, 0].max() < 60.0 - 0.5 and frames[-1].speed[0, 0] < 0.1
    assert front[-1, 1] > 100.0 and frames[-1].speed[1, 0] >= 10.0 - 1e-9


def test_a_parked_agent_stays_put():
    # agent 0 never moves in its log; agent 1 drives up behind it and stops
    reactive = _agents([(50.0, 0.0, 0.0), (0.0, 0.0, 8.0)])
    start = reactive.frame(np.zeros(1, np.int64))
    frames = _drive(reactive, 150, FAR_AWAY)
    for frame in frames:
        np.testing.assert_array_equal(frame.pose[0, 0], start.pose[0, 0])
        assert frame.speed[0, 0] == 0.0 and frame.valid[0, 0]
    assert _bumper_gap(frames, 0, 1, 0).min() > 1.0 and frames[-1].speed[0, 1] < 0.1


def test_the_ego_counts_as_a_leader():
    reactive = _agents([(0.0, 0.0, 10.0)], [(0.0, 0.0, 10.0)])
    # slot 0: the ego stands in the agent's lane 60 m ahead; slot 1: in the next lane
    ego = np.array([[60.0, 0.0, 0.0], [60.0, 4.5, 0.0]])
    frames = _drive(reactive, 150, ego)
    x = np.array([frame.pose[:, 0, 0] for frame in frames])
    assert (60.0 - 0.5 * EGO_SIZE[0]) - (x[:, 0] + 0.5 * CAR[0]).max() > 1.0
    assert frames[-1].speed[0, 0] < 0.1
    assert x[-1, 1] > 100.0


def test_on_a_tied_gap_an_agent_leads_before_the_ego_and_the_ego_before_a_stop_box():
    # agent 0 follows; agent 1 (slot 0 only), the ego and a stop box all stand 20 m ahead, the same
    # length, so all three gaps tie: the first candidate leads (agents, then the ego, then stops)
    rows = np.array([[True, False], [True, False]])
    pose = np.zeros((2, 2, 3))
    pose[:, 1, 0] = 20.0
    speed = np.array([[0.0, 3.0], [0.0, 3.0]])
    valid = np.array([[True, True], [True, False]])  # slot 1: agent 1 is not in the log
    size = np.full((2, 2, 2), EGO_SIZE)
    ego_pose, ego_speed = np.array([[20.0, 0.0, 0.0], [20.0, 0.0, 0.0]]), np.array([7.0, 7.0])
    stop_pose, stop_valid = np.array([[[20.0, 0.0, 0.0]], [[20.0, 0.0, 0.0]]]), np.ones((2, 1), bool)
    stop_size = np.full((2, 1, 2), EGO_SIZE)
    gap, leader_speed = np.empty((2, 2)), np.empty((2, 2))
    find_leaders(
        rows, pose, speed, valid, size, ego_pose, ego_speed, EGO_SIZE, stop_pose, stop_valid, stop_size,
        LEADER_LATERAL_MARGIN, gap, leader_speed,
    )  # fmt: skip
    np.testing.assert_array_equal(gap[:, 0], [15.0, 15.0])
    np.testing.assert_array_equal(leader_speed[:, 0], [3.0, 7.0])
    assert np.isinf(gap[:, 1]).all() and not leader_speed[:, 1].any()  # not asked for: no leader


def _reference_leaders(
    pose: np.ndarray,
    size: np.ndarray,
    objects: np.ndarray,
    object_size: np.ndarray,
    object_speed: np.ndarray,
    exists: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The leader rule pair by pair in float64 for agents ``[A]`` among objects ``[M]`` (the A
    agents first): gap to and speed of the nearest existing object ahead in the lane band."""
    gaps, speeds = np.full(len(pose), np.inf), np.zeros(len(pose))
    for i, (x, y, heading) in enumerate(pose):
        for j, (ox, oy, _) in enumerate(objects):
            if j == i or not exists[j]:
                continue
            ahead = (ox - x) * np.cos(heading) + (oy - y) * np.sin(heading)
            side = -(ox - x) * np.sin(heading) + (oy - y) * np.cos(heading)
            width = 0.5 * (size[i, 1] + object_size[j, 1]) + LEADER_LATERAL_MARGIN
            gap = max(ahead - 0.5 * (size[i, 0] + object_size[j, 0]), 0.1)
            if ahead > 0 and abs(side) < width and gap < gaps[i]:
                gaps[i], speeds[i] = gap, object_speed[j]
    return gaps, speeds


def test_one_step_matches_the_pairwise_leader_rule_on_a_crowded_scene():
    rng = np.random.default_rng(7)
    num_agents, num_stops = 40, 3
    reactive = ReactiveAgents(2, STEPS, num_agents)
    logs = []
    for slot in range(2):
        start = rng.uniform(-60.0, 60.0, (num_agents, 2))
        heading = rng.choice([0.0, np.pi / 2, np.pi, -np.pi / 2], num_agents) + rng.normal(
            0, 0.05, num_agents
        )
        speed = rng.choice([0.0, 5.0, 10.0], num_agents)
        size = np.stack([rng.uniform(3.5, 6.0, num_agents), rng.uniform(1.6, 2.4, num_agents)], axis=-1)
        pose, speeds = _log(start, heading, speed)
        valid = np.ones(speeds.shape, bool)
        valid[:, : num_agents // 4] = False  # a quarter never in the log
        reactive.load(slot, pose, speeds, valid, size, 0)
        logs.append((speed, size, valid[0]))
    frame = reactive.frame(np.zeros(2, np.int64))
    ego, ego_speed = np.array([[0.0, 0.0, 0.3], [10.0, -5.0, 2.0]]), np.array([4.0, 7.0])
    stops = AgentFrame(
        pose=rng.uniform(-40.0, 40.0, (2, num_stops, 3)),
        speed=np.zeros((2, num_stops)),
        valid=rng.random((2, num_stops)) < 0.7,
    )
    stop_size = np.full((2, num_stops, 2), [1.0, 3.5])
    reactive.step(frame, ego, ego_speed, EGO_SIZE, stops, stop_size)
    num_led = 0
    for slot, (speed, size, valid) in enumerate(logs):
        gap, leader_speed = _reference_leaders(
            frame.pose[slot],
            size,
            np.concatenate([frame.pose[slot], ego[slot, None], stops.pose[slot]]),
            np.concatenate([size, EGO_SIZE[None], stop_size[slot]]),
            np.concatenate([speed, ego_speed[slot, None], np.zeros(num_stops)]),
            np.concatenate([valid, [True], stops.valid[slot]]),
        )
        top_speed = np.where(valid, speed, 0.0)
        accel = idm_acceleration(speed, np.maximum(top_speed, 1.0), gap, leader_speed, IDMParams())
        expected = np.where(top_speed > 0.1, np.maximum(speed + accel * DT, 0.0), 0.0)
        expected[~valid] = 0.0  # agents never in the log wait at their entry, at rest
        np.testing.assert_allclose(reactive.speed[slot], expected, rtol=1e-5, atol=1e-6)
        num_led += int(np.isfinite(gap[top_speed > 0.1]).sum())
    assert num_led >= 10  # crowded enough for leaders to matter


def test_an_agent_entering_later_waits_at_its_entry_until_its_log_starts():
    reactive = ReactiveAgents(1, STEPS, 1)
    pose, speeds = _log(np.array([[0.0, 0.0]]), np.zeros(1), np.array([10.0]))
    valid = np.ones(speeds.shape, bool)
    valid[:30] = False  # appears at log index 30, at x = 30 m
    reactive.load(0, pose, speeds, valid, np.tile(CAR, (1, 1)), 0)
    frames = _drive(reactive, 40, FAR_AWAY)
    entry = frames[28]  # log index 29: not in the log yet, held where it will appear
    assert not entry.valid[0, 0]
    np.testing.assert_allclose(entry.pose[0, 0, :2], [30.0, 0.0], atol=1e-9)
    assert frames[29].valid[0, 0]  # index 30: it appears where the log has it
    np.testing.assert_allclose(frames[29].pose[0, 0, :2], pose[30, 0, :2], atol=1e-6)
    assert frames[-1].pose[0, 0, 0] > 30.0 + 5.0  # and drives on from there


def test_a_slot_reloaded_with_a_smaller_scene_steps_as_a_fresh_one():
    # slot 0 first holds three agents and drives them; then it loads a one-agent log, which must
    # leave no trace of the larger scene (the compiled loops stop at each slot's agent count)
    reactive = _agents([(0.0, 0.0, 10.0), (30.0, 0.0, 3.0), (60.0, 4.0, 8.0)])
    _drive(reactive, 25, FAR_AWAY)
    fresh = ReactiveAgents(1, STEPS, 3)
    pose, speeds = _log(np.array([[5.0, 2.0]]), np.array([0.3]), np.array([6.0]))
    valid = np.ones(speeds.shape, bool)
    for agents in (reactive, fresh):
        agents.load(0, pose, speeds, valid, np.tile(CAR, (1, 1)), 0)
    reloaded, expected = _drive(reactive, 30, FAR_AWAY), _drive(fresh, 30, FAR_AWAY)
    for got, want in zip(reloaded, expected, strict=True):
        np.testing.assert_array_equal(got.pose, want.pose)
        np.testing.assert_array_equal(got.speed, want.speed)
        np.testing.assert_array_equal(got.valid, want.valid)
    assert not reloaded[-1].valid[0, 1:].any() and not reloaded[-1].pose[0, 1:].any()
    # the one agent drove its logged line at its logged speed
    np.testing.assert_allclose(reloaded[-1].pose[0, 0, :2], pose[30, 0, :2], atol=1e-6)


def test_write_frame_records_the_frame_in_each_slots_own_row_only():
    # two slots of different sizes, driven a few steps, recorded at different log rows
    reactive = _agents([(0.0, 0.0, 12.0), (30.0, 0.0, 3.0)], [(5.0, 0.0, 8.0)])
    frames = _drive(reactive, 5, FAR_AWAY)
    n, a = reactive.num_slots, reactive.capacity[1]
    pose = np.full((n, 12, a, 3), -7.0, np.float32)  # the simulator's float32 log arrays
    speed = np.full((n, 12, a), -7.0, np.float32)
    valid = np.zeros((n, 12, a), bool)
    rows = np.array([5, 9])
    reactive.write_frame(rows, pose, speed, valid)
    expected = reactive.frame(rows)
    for slot, (row, count) in enumerate(zip(rows, (2, 1), strict=True)):
        np.testing.assert_array_equal(pose[slot, row, :count], expected.pose[slot, :count].astype(np.float32))
        np.testing.assert_array_equal(
            speed[slot, row, :count], expected.speed[slot, :count].astype(np.float32)
        )
        np.testing.assert_array_equal(valid[slot, row, :count], expected.valid[slot, :count])
        assert valid[slot, row, :count].all()
        others = np.arange(12) != row
        assert np.all(pose[slot, others] == -7.0) and not valid[slot, others].any()
    # slot 1's padding agent is left as the scene's load left it (never valid)
    assert np.all(pose[1, 9, 1] == -7.0) and not valid[1, 9, 1] and not expected.valid[1, 1]
    np.testing.assert_allclose(pose[0, 5, :2, 0], frames[-1].pose[0, :, 0], rtol=1e-6)
