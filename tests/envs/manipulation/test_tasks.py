"""The MuJoCo manipulation tasks: PushT coverage by hand, rewards, success, randomisation, images."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

import omnigym.envs  # noqa: F401  (registers the ids)
from omnigym.envs.manipulation import cube, pusht, tabletop, tblock
from omnigym.envs.manipulation.base import ManipulationEnv
from omnigym.envs.manipulation.cube import PickPlaceEnv, PushCubeEnv
from omnigym.envs.manipulation.pusht import PushTEnv
from omnigym.envs.manipulation.reach import ReachEnv
from omnigym.envs.manipulation.rendering import mujoco
from omnigym.envs.manipulation.two_stage import PushCubeTwoStageEnv

TASKS = (PushTEnv, ReachEnv, PushCubeEnv, PickPlaceEnv, PushCubeTwoStageEnv)
TABLETOP = (ReachEnv, PushCubeEnv, PickPlaceEnv)
T_AREA = 0.2 * 0.05 + 0.05 * 0.15


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd


def make(cls: type[ManipulationEnv], **kwargs) -> ManipulationEnv:
    """The env, or a skip when it needs images and this machine has no offscreen OpenGL."""
    try:
        return cls(**kwargs)
    except mujoco.FatalError as exc:
        pytest.skip(f"no offscreen OpenGL for MuJoCo here: {exc}")


@pytest.fixture
def pixels_env() -> Iterator[ManipulationEnv]:
    env = make(PushCubeEnv, obs_keys=("image", "state", "text"), render_mode="rgb_array")
    yield env
    env.close()


def hold_action(env: ManipulationEnv) -> np.ndarray:
    """An action that keeps the pusher / gripper where it is."""
    qpos = env.data.qpos
    if isinstance(env, PushTEnv):
        return (qpos[3:5] / pusht.WORKSPACE).astype(np.float32)
    return np.array([0.0, 0.0, 0.0, 1.0], np.float32)


# --- PushT coverage -------------------------------------------------------------------------------
@pytest.mark.parametrize("pose", [(0.0, 0.0, 0.0), (0.1, -0.2, 1.3), (-0.3, 0.05, -3.0)])
def test_coverage_of_identical_poses_is_one(pose) -> None:
    assert tblock.coverage(pose, pose) == pytest.approx(1.0, abs=1e-12)


def test_coverage_of_disjoint_poses_is_zero() -> None:
    assert tblock.coverage((0.5, 0.0, 0.0), (0.0, 0.0, 0.0)) == 0.0
    assert tblock.coverage((0.0, 0.0, 0.0), (0.0, 0.4, 2.0)) == 0.0
    # Bars side by side: they touch along an edge and share no area.
    assert tblock.coverage((0.2, 0.0, 0.0), (0.0, 0.0, 0.0)) == pytest.approx(0.0, abs=1e-12)


def test_pusht_max_coverage_is_the_running_maximum_of_the_steps() -> None:
    """LeRobot's per-episode figure: the best coverage over the steps (the start does not count)."""
    env = make(PushTEnv)
    _, info = env.reset(seed=6)
    assert info["max_coverage"] == 0.0
    rng, seen = np.random.default_rng(0), []
    for _ in range(30):
        _, _, _, _, info = env.step(rng.uniform(-1, 1, 2))
        seen.append(info["coverage"])
        assert info["max_coverage"] == max(seen)
    assert info["max_coverage"] > 0.4 and info["coverage"] < 0.01  # pushed over the goal and off it
    _, info = env.reset(seed=5)
    assert info["max_coverage"] == 0.0  # a new episode starts from nothing


def test_coverage_of_half_shifts_matches_hand_computed_areas() -> None:
    assert pytest.approx(T_AREA) == tblock.AREA
    # Half the bar's width along x: only the bars overlap, 0.1 x 0.05 m.
    assert tblock.coverage((0.1, 0.0, 0.0), (0.0, 0.0, 0.0)) == pytest.approx(0.1 * 0.05 / T_AREA)
    # Half the bar's height along y: bar on bar 0.2 x 0.025, stem on stem 0.05 x 0.125, and the
    # raised stem's top on the goal's bar 0.05 x 0.025: 5/7 of the T.
    expected = (0.2 * 0.025 + 0.05 * 0.125 + 0.05 * 0.025) / T_AREA
    assert expected == pytest.approx(5 / 7)
    assert tblock.coverage((0.0, 0.025, 0.0), (0.0, 0.0, 0.0)) == pytest.approx(expected)
    # The same shift in the frame of a turned, moved goal gives the same number.
    goal = (0.1, -0.2, 0.7)
    shifted = (*tblock.to_world(goal, 0.0, 0.025), 0.7)
    assert tblock.coverage(shifted, goal) == pytest.approx(expected)


def raster_coverage(pose: tblock.Pose, goal: tblock.Pose, step: float = 0.0005) -> float:
    """Coverage counted on a 0.5 mm grid of the goal T (an independent check)."""
    grid = np.arange(-0.15, 0.15, step) + step / 2
    x, y = np.meshgrid(grid, grid)
    in_goal = inside_t(x, y)
    wx, wy = tblock.to_world(goal, x, y)  # type: ignore[arg-type]
    c, s = math.cos(pose[2]), math.sin(pose[2])
    dx, dy = wx - pose[0], wy - pose[1]
    in_pose = inside_t(c * dx + s * dy, -s * dx + c * dy)
    return float((in_goal & in_pose).sum() / in_goal.sum())


def inside_t(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.logical_or.reduce(
        [(abs(x - cx) <= hx) & (abs(y - cy) <= hy) for cx, cy, hx, hy in tblock.RECTS]
    )


def test_coverage_matches_a_fine_raster_on_random_poses() -> None:
    rng = np.random.default_rng(0)
    goal = (0.0, 0.0, math.pi / 4)
    checked = 0
    for _ in range(12):
        pose = (*rng.uniform(-0.08, 0.08, 2), rng.uniform(-math.pi, math.pi))
        exact = tblock.coverage(pose, goal)
        assert exact == pytest.approx(raster_coverage(pose, goal), abs=0.005)
        assert exact == pytest.approx(tblock.coverage(goal, pose), abs=1e-12)  # equal areas
        checked += 0 < exact < 1
    assert checked >= 6, "too few partial overlaps to test"


def test_distance_to_point() -> None:
    pose = (0.1, 0.0, math.pi / 2)  # the bar's top edge faces -x
    assert tblock.distance_to_point(pose, 0.1, 0.0) == 0.0  # the centre is inside
    top = tblock.BAR[1] + tblock.BAR[3]
    assert tblock.distance_to_point(pose, 0.1 - top - 0.03, 0.0) == pytest.approx(0.03)


# --- spaces, actions, state layout ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("env_id", "steps", "keys"),
    [
        ("omnigym/PushT-v0", 300, ["state"]),
        ("omnigym/ReachPixels-v0", 50, ["image", "state", "text"]),
        ("omnigym/PushCube-v0", 100, ["state"]),
        ("omnigym/PickPlacePixels-v0", 150, ["image", "state", "text"]),
    ],
)
def test_registered_ids(env_id: str, steps: int, keys: list[str]) -> None:
    assert gym.spec(env_id).max_episode_steps == steps
    try:
        env = gym.make(env_id)
    except mujoco.FatalError as exc:
        pytest.skip(f"no offscreen OpenGL for MuJoCo here: {exc}")
    try:
        assert sorted(env.observation_space.spaces) == keys
        assert env.action_space == gym.spaces.Box(-1.0, 1.0, env.action_space.shape, np.float32)
    finally:
        env.close()


@pytest.mark.parametrize("cls", TASKS)
def test_nan_and_misshapen_actions_raise(cls: type[ManipulationEnv]) -> None:
    env = cls()
    env.reset(seed=0)
    bad = np.zeros(env.action_space.shape, np.float32)
    bad[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        env.step(bad)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(7, np.float32))


def test_obs_keys_select_the_observation() -> None:
    env = PushTEnv(obs_keys=["text"])
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["text"] and obs["text"] == PushTEnv.instruction
    assert env.observation_space["text"].contains(obs["text"])
    with pytest.raises(ValueError, match="obs_keys"):
        PushTEnv(obs_keys=("pixels",))
    with pytest.raises(ValueError, match="reward_type"):
        ReachEnv(reward_type="shaped")
    with pytest.raises(TypeError):
        ReachEnv(no_such_option=1)


def test_pusht_action_is_a_scaled_absolute_target() -> None:
    env = PushTEnv(block_xy_range=0.0, block_yaw_range=0.0)
    env.reset(seed=0)
    env.step(np.array([0.5, -1.5], np.float32))  # clipped to -1
    np.testing.assert_allclose(env.data.ctrl, [0.5 * pusht.WORKSPACE, -pusht.WORKSPACE])


def test_tabletop_action_moves_the_tcp_and_fingers() -> None:
    env = ReachEnv()
    obs, _ = env.reset(seed=0)
    env.step(np.array([1.0, 0.0, 0.0, -1.0], np.float32))
    np.testing.assert_allclose(
        env.data.ctrl[:3], tabletop.HOME + np.array([tabletop.MAX_STEP, 0, 0]), atol=1e-9
    )
    np.testing.assert_allclose(env.data.ctrl[3:5], 0.0)
    for _ in range(2):
        obs, *_ = env.step(np.array([0.0, 0.0, 0.0, 1.0], np.float32))
    state = obs["state"]
    assert state[0] == pytest.approx(tabletop.MAX_STEP, abs=0.005)  # the TCP followed
    assert state[tabletop.GAP] == pytest.approx(2 * tabletop.FINGER_OPEN, abs=0.003)
    np.testing.assert_allclose(env.data.ctrl[3:5], tabletop.FINGER_OPEN)


def test_state_layouts() -> None:
    env = PushTEnv(goal_pose=(0.05, -0.1, 0.3))
    state = env.reset(seed=3)[0]["state"]
    qpos = env.data.qpos
    assert state.dtype == np.float32 and state.shape == (pusht.STATE_DIM,)
    np.testing.assert_allclose(state[0:2], qpos[3:5], atol=1e-6)
    np.testing.assert_allclose(
        state[4:8], [qpos[0], qpos[1], math.cos(qpos[2]), math.sin(qpos[2])], atol=1e-6
    )
    np.testing.assert_allclose(state[11:15], [0.05, -0.1, math.cos(0.3), math.sin(0.3)], atol=1e-6)

    env = PickPlaceEnv()
    state = env.reset(seed=3)[0]["state"]
    assert state.shape == (cube.STATE_DIM,)
    np.testing.assert_allclose(state[tabletop.TCP], tabletop.HOME, atol=1e-6)
    np.testing.assert_allclose(state[tabletop.GOAL], env.goal, atol=1e-6)
    np.testing.assert_allclose(state[cube.CUBE_POS], env.data.qpos[5:8], atol=1e-6)
    np.testing.assert_allclose(state[cube.CUBE_QUAT], [1, 0, 0, 0], atol=1e-6)
    assert state[cube.CUBE_POS][2] == pytest.approx(cube.CUBE_HALF)
    assert np.linalg.norm(env.goal - state[cube.CUBE_POS]) >= 0.08
    assert 0.06 <= env.goal[2] <= 0.2  # PickPlace goals are in the air
    assert PushCubeEnv().reset(seed=3)[0]["state"][tabletop.GOAL][2] == pytest.approx(cube.CUBE_HALF)


@pytest.mark.parametrize("frame_skip", [None, 7])
def test_frame_skip_sets_the_control_period(frame_skip: int | None) -> None:
    env = ReachEnv(frame_skip=frame_skip)
    env.reset(seed=0)
    env.step(hold_action(env))
    steps = frame_skip or ReachEnv.default_frame_skip
    assert env.data.time == pytest.approx(steps * 0.002)
    assert env.dt == pytest.approx(steps * 0.002)
    assert env.metadata["render_fps"] == round(1 / (steps * 0.002))


# --- rewards and success --------------------------------------------------------------------------
def place_pusht_block(env: PushTEnv, pose: tblock.Pose) -> None:
    env.data.qpos[0:3] = pose
    env.data.qvel[:] = 0.0


def test_pusht_reward_is_coverage_and_success_flips_at_goal() -> None:
    dense, sparse = PushTEnv(), PushTEnv(reward_type="sparse")
    goal = dense.goal
    near = (goal[0] + 0.01, goal[1], goal[2])  # 1 cm off: about 89 % covered
    for env in (dense, sparse):
        env.reset(seed=0)
        env.data.qpos[3:5] = (0.3, -0.3)  # pusher out of the way
        place_pusht_block(env, near)
    _, reward, terminated, _, info = dense.step(hold_action(dense))
    assert info["coverage"] == pytest.approx(tblock.coverage(near, goal), abs=1e-3)
    assert 0.8 < info["coverage"] < 0.95
    assert reward == info["coverage"] and not info["is_success"] and not terminated
    _, reward, terminated, _, info = sparse.step(hold_action(sparse))
    assert reward == 0.0 and not info["is_success"] and not terminated

    for env in (dense, sparse):
        place_pusht_block(env, goal)
    _, reward, terminated, _, info = dense.step(hold_action(dense))
    assert info["is_success"] and terminated and reward == pytest.approx(1.0, abs=1e-6)
    _, reward, terminated, _, info = sparse.step(hold_action(sparse))
    assert info["is_success"] and terminated and reward == 1.0


def move_to_goal(env: ManipulationEnv) -> None:
    """Put the TCP (Reach) or the cube (cube tasks) at the goal, at rest."""
    qpos = env.data.qpos
    if isinstance(env, ReachEnv):
        qpos[0:3] = env.data.ctrl[0:3] = env.goal
    else:
        qpos[5:8] = env.goal
    env.data.qvel[:] = 0.0


@pytest.mark.parametrize("cls", TABLETOP)
def test_tabletop_rewards_and_success_flag(cls: type[ManipulationEnv]) -> None:
    dense, sparse, endless = cls(), cls(reward_type="sparse"), cls(terminate_on_success=False)
    for env in (dense, sparse, endless):
        env.reset(seed=1)
    _, reward, terminated, _, info = dense.step(hold_action(dense))
    tcp = dense.data.qpos[0:3]
    box = dense.data.qpos[5:8]
    if cls is ReachEnv:
        assert reward == pytest.approx(-np.linalg.norm(tcp - dense.goal))
    elif cls is PickPlaceEnv:
        expected = -np.linalg.norm(box - dense.goal) - cube.REACH_WEIGHT * np.linalg.norm(tcp - box)
        assert reward == pytest.approx(expected)
    else:  # the TCP starts far above the cube: the reaching term alone
        to_push = np.linalg.norm(tcp - dense.push_pose())
        assert to_push > cube.PUSH_REACHED
        assert reward == pytest.approx((1 - math.tanh(cube.SHAPING_SCALE * to_push)) / 3 - 1)
    assert not info["is_success"] and not terminated
    _, reward, terminated, _, info = sparse.step(hold_action(sparse))
    assert reward == 0.0 and not info["is_success"]

    for env in (dense, sparse, endless):
        move_to_goal(env)
    _, reward, terminated, _, info = dense.step(hold_action(dense))
    assert info["is_success"] and terminated and info["distance"] < dense.config.success_distance
    if cls is PushCubeEnv:
        assert reward == 0.0  # the most a PushCube step pays
    _, reward, terminated, _, info = sparse.step(hold_action(sparse))
    assert info["is_success"] and terminated and reward == 1.0
    _, _, terminated, _, info = endless.step(hold_action(endless))
    assert info["is_success"] and not terminated


def pushcube_reward(
    tcp: tuple[float, float, float], box: tuple[float, float], goal: tuple[float, float]
) -> float:
    """PushCube's dense reward for the TCP, the cube's and the goal's positions (m), at rest."""
    env = PushCubeEnv()
    env.reset(seed=0)
    env.data.qpos[0:3] = tcp
    env.data.qpos[5:12] = (*box, cube.CUBE_HALF, 1.0, 0.0, 0.0, 0.0)
    env.goal[:] = (*goal, cube.CUBE_HALF)
    mujoco.mj_forward(env.model, env.data)
    success, reward, info = env._score(env._state())
    assert success == (info["distance"] < env.config.success_distance)
    return reward


def test_pushcube_push_pose_is_behind_the_cube_on_the_goal_line() -> None:
    env = PushCubeEnv()
    env.reset(seed=0)
    env.data.qpos[5:8] = (0.05, 0.05, cube.CUBE_HALF)
    env.goal[:] = (-0.03, -0.01, cube.CUBE_HALF)  # 0.1 m from the cube along (-0.8, -0.6)
    offset = cube.PUSH_OFFSET
    np.testing.assert_allclose(env.push_pose(), (0.05 + 0.8 * offset, 0.05 + 0.6 * offset, cube.CUBE_HALF))


def test_pushcube_dense_reward_by_hand() -> None:
    """Staged like ManiSkill's PushCube-v1: reach the push pose, then the placement term counts."""
    tanh = math.tanh
    behind = -cube.PUSH_OFFSET  # the push pose when the goal lies along +x from a cube at the origin
    # TCP at the push pose, cube 0.1 m from the goal: both terms, (1 + 1 - tanh(0.5)) / 3 - 1
    at_pose = pushcube_reward((behind, 0.0, cube.CUBE_HALF), (0.0, 0.0), (0.1, 0.0))
    assert at_pose == pytest.approx((2 - tanh(0.5)) / 3 - 1) and at_pose == pytest.approx(-0.487372, abs=1e-6)
    # 2 cm off the pose, within PUSH_REACHED: still both terms
    near = pushcube_reward((behind, 0.02, cube.CUBE_HALF), (0.0, 0.0), (0.1, 0.0))
    assert near == pytest.approx((1 - tanh(0.1) + 1 - tanh(0.5)) / 3 - 1)
    # 6 cm above the pose, beyond PUSH_REACHED: the placement term is not paid
    above = pushcube_reward((behind, 0.0, cube.CUBE_HALF + 0.06), (0.0, 0.0), (0.1, 0.0))
    assert above == pytest.approx((1 - tanh(0.3)) / 3 - 1) and above == pytest.approx(-0.763771, abs=1e-6)
    # in front of the cube (between it and the goal) pays less than behind it
    front = pushcube_reward((-behind, 0.0, cube.CUBE_HALF), (0.0, 0.0), (0.1, 0.0))
    assert front == pytest.approx((1 - tanh(5 * 2 * cube.PUSH_OFFSET)) / 3 - 1)
    assert front < above < near < at_pose
    # the cube nearer the goal pays more, with the TCP at the (moved) push pose
    closer = pushcube_reward((0.05 + behind, 0.0, cube.CUBE_HALF), (0.05, 0.0), (0.1, 0.0))
    assert closer == pytest.approx((2 - tanh(0.25)) / 3 - 1) and closer > at_pose
    # success: 0, the most any step pays, wherever the TCP is
    assert pushcube_reward((0.2, 0.2, 0.2), (0.1, 0.03), (0.1, 0.0)) == 0.0


def test_pushcube_dense_reward_stays_in_minus_one_to_zero() -> None:
    env = PushCubeEnv(terminate_on_success=False)
    rng = np.random.default_rng(0)
    rewards = []
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(30):
            rewards.append(env.step(rng.uniform(-1, 1, 4).astype(np.float32))[1])
    assert all(-1.0 <= r <= 0.0 for r in rewards) and len(set(rewards)) > 1


# --- randomisation and determinism ----------------------------------------------------------------
@pytest.mark.parametrize("cls", TASKS)
def test_initial_poses_vary_with_seed_and_ranges(cls: type[ManipulationEnv]) -> None:
    env = cls()
    first = [env.reset(seed=seed)[0]["state"] for seed in (0, 1, 0)]
    assert not np.array_equal(first[0], first[1])
    np.testing.assert_array_equal(first[0], first[2])
    if cls is PushTEnv:
        fixed = PushTEnv(block_xy_range=0.0, block_yaw_range=0.0).reset(seed=5)[0]["state"]
        np.testing.assert_allclose(fixed[4:8], [0, 0, 1, 0], atol=1e-7)
    elif cls is not ReachEnv:
        fixed = cls(cube_xy_range=0.0).reset(seed=5)[0]["state"]
        np.testing.assert_allclose(fixed[cube.CUBE_POS], [0, 0, cube.CUBE_HALF], atol=1e-7)
        turned = cls(cube_yaw_range=1.0).reset(seed=5)[0]["state"]
        assert abs(turned[cube.CUBE_QUAT][3]) > 1e-3  # a yaw about z


@pytest.mark.parametrize("cls", TASKS)
def test_friction_and_colour_randomisation(cls: type[ManipulationEnv]) -> None:
    plain = cls()
    randomised = cls(friction_range=(0.5, 2.0), randomize_colors=True)
    geoms = randomised._object_geoms
    base_friction = plain.model.geom_friction[geoms, 0].copy()
    base_rgba = plain.model.geom_rgba[geoms].copy()
    plain.reset(seed=0)
    np.testing.assert_array_equal(plain.model.geom_friction[geoms, 0], base_friction)
    np.testing.assert_array_equal(plain.model.geom_rgba[geoms], base_rgba)

    draws = []
    for seed in (0, 1, 0):
        obs, _ = randomised.reset(seed=seed)
        np.testing.assert_array_equal(obs["state"], plain.reset(seed=seed)[0]["state"])  # same poses
        draws.append(
            (randomised.model.geom_friction[geoms, 0].copy(), randomised.model.geom_rgba[geoms].copy())
        )
    for i in range(2):
        assert not np.array_equal(draws[0][i], draws[1][i]), "seeds 0 and 1 drew the same values"
        np.testing.assert_array_equal(draws[0][i], draws[2][i])
    scale = draws[0][0] / base_friction
    assert np.allclose(scale, scale[0]) and 0.5 <= scale[0] <= 2.0
    if cls is PushTEnv:  # the table's drag on the block scales too
        np.testing.assert_allclose(randomised.model.dof_damping[:3] / plain.model.dof_damping[:3], scale[0])


def test_friction_randomisation_changes_the_dynamics() -> None:
    def push(friction: tuple[float, float]) -> np.ndarray:
        env = PushTEnv(friction_range=friction)
        env.reset(seed=2)
        obs = None
        for _ in range(8):
            obs, *_ = env.step(np.zeros(2, np.float32))  # to the centre, through the block's start
        return obs["state"]

    assert not np.allclose(push((0.3, 0.3)), push((3.0, 3.0)))


def test_same_seed_same_trajectory_with_randomisation() -> None:
    actions = np.random.default_rng(0).uniform(-1, 1, (30, 4)).astype(np.float32)
    runs = []
    for _ in range(2):
        env = PickPlaceEnv(friction_range=(0.5, 1.5), randomize_colors=True, cube_yaw_range=0.5)
        obs, _ = env.reset(seed=11)
        runs.append([obs["state"]] + [env.step(a)[0]["state"] for a in actions])
    np.testing.assert_array_equal(np.array(runs[0]), np.array(runs[1]))


# --- images ---------------------------------------------------------------------------------------
def test_image_observation(pixels_env: ManipulationEnv) -> None:
    obs, _ = pixels_env.reset(seed=0)
    image = obs["image"]
    assert image.dtype == np.uint8 and image.shape == (96, 96, 3)
    assert pixels_env.observation_space.contains(obs)
    assert image.std() > 10, "a nearly constant image"
    assert obs["text"] == PushCubeEnv.instruction
    move_to_goal(pixels_env)  # the cube jumps: the next image differs
    moved, *_ = pixels_env.step(hold_action(pixels_env))
    assert np.abs(moved["image"].astype(int) - image).sum() > 0
    frame = pixels_env.render()
    assert frame is not None and frame.shape == (256, 256, 3) and frame.std() > 10


def test_image_size_and_camera_are_configurable() -> None:
    front = make(PickPlaceEnv, obs_keys=("image",), image_size=(48, 64))
    top = make(PickPlaceEnv, obs_keys=("image",), image_size=(48, 64), camera="top")
    images = [env.reset(seed=0)[0]["image"] for env in (front, top)]
    assert images[0].shape == images[1].shape == (48, 64, 3)
    assert not np.array_equal(images[0], images[1])
    with pytest.raises(ValueError, match="camera"):
        make(PickPlaceEnv, obs_keys=("image",), camera="ceiling")
    for env in (front, top):
        env.close()
    assert PushTEnv().render() is None  # no render_mode


def test_drawing_frames_leaves_the_physics_alone() -> None:
    actions = np.random.default_rng(1).uniform(-1, 1, (20, 2)).astype(np.float32)
    states = []
    for keys in (("state",), ("image", "state")):
        env = make(PushTEnv, obs_keys=keys)
        env.reset(seed=4)
        states.append([env.step(a)[0]["state"] for a in actions])
        env.close()
    np.testing.assert_array_equal(np.array(states[0]), np.array(states[1]))


WORKERS_SCRIPT = """
from omnigym.platform.vec_env import EnvConfig, make_vec_env
kwargs = {"obs_keys": ["image"]}
envs = make_vec_env(EnvConfig(id="omnigym/PushTPixels-v0", num_envs=2, vectorization="async", kwargs=kwargs))
obs, _ = envs.reset(seed=0)
envs.close()
print(obs["image"].shape, float(obs["image"].std()))
"""


def test_pixel_env_in_worker_processes(tmp_path) -> None:
    """AsyncVectorEnv makes one env in the parent to read its spaces, then forks: an OpenGL
    context made at construction there hung the workers' contexts (so none is made before the
    first frame). A fresh interpreter, as this one has rendered already."""
    assert PushTEnv(obs_keys=("image",))._renderers == {}, "a renderer made before the first frame"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", WORKERS_SCRIPT], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the async pixel env hung")
    assert proc.returncode == 0, proc.stderr[-2000:]
    shape, std = proc.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert shape == "(2, 96, 96, 3)" and float(std) > 10


def test_pickled_env_continues_exactly() -> None:
    """Checkpoints pickle in-process envs (``platform/env_state.py``); renderers are left out."""
    env = make(PushCubeEnv, obs_keys=("image", "state"), friction_range=(0.5, 1.5), randomize_colors=True)
    actions = np.random.default_rng(2).uniform(-1, 1, (8, 4)).astype(np.float32)
    env.reset(seed=3)
    for action in actions[:4]:
        env.step(action)
    clone = pickle.loads(pickle.dumps(env))
    for action in actions[4:]:
        a, b = env.step(action)[0], clone.step(action)[0]
        np.testing.assert_array_equal(a["state"], b["state"])
        np.testing.assert_array_equal(a["image"], b["image"])
    env.close()
    clone.close()
