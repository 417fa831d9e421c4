"""The driving envs' behaviour: spaces, seeding, episodes, termination, autoreset, traffic, scene sets."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import omnigym  # noqa: F401  (registers the env ids)
from omnigym.envs.driving.agents import AgentFrame
from omnigym.envs.driving.dynamics import to_ego_frame
from omnigym.envs.driving.env import REWARD_COMPONENTS, DrivingEnv, DrivingVectorEnv
from omnigym.envs.driving.scene import EGO_LENGTH, HISTORY_STEPS
from omnigym.envs.driving.scene_sets import SceneSet, SceneSource
from omnigym.envs.driving.scenes import SPLIT_OFFSETS
from omnigym.envs.driving.step_results import STEP_COMPONENTS
from omnigym.envs.driving.text import text_space

TEST_ID = SPLIT_OFFSETS["test"]
EPISODE_KEYS = {"pdms", "epdms", "nc", "dac", "ddc", "tlc", "ttc", "ep", "c", "lk", "hc", "ec"}
EPISODE_KEYS |= {"progress", "failed"}
OFF_ROAD = np.array([3.0, 1.0])
"""Full throttle and full left steering: leaves the road of test scene 0 within 2 s."""


def _assert_obs_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if key == "text":
            assert a[key] == b[key]
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _run_until_end(
    env: DrivingEnv, action: np.ndarray, limit: int = 200
) -> tuple[int, bool, bool, dict, dict]:
    """Step ``action`` until the episode ends: steps taken, terminated, truncated, info, last obs."""
    for step in range(1, limit + 1):
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return step, terminated, truncated, info, obs
    raise AssertionError(f"no episode end in {limit} steps")


# --- spaces ---------------------------------------------------------------------------------------
def test_control_action_space(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    space = env.action_space
    assert isinstance(space, spaces.Box) and space.shape == (2,) and space.dtype == np.float32
    np.testing.assert_array_equal(space.low, [-6.0, -1.0])  # m/s², rad/s
    np.testing.assert_array_equal(space.high, [3.0, 1.0])
    vector = DrivingVectorEnv(3, **driving_kwargs)
    assert vector.action_space.shape == (3, 2) and vector.single_action_space == space


def test_registered_ids_set_action_mode_and_traffic(driving_kwargs):
    env = gym.make("omnigym/DrivingPlan-v0", **driving_kwargs)
    assert env.action_space.shape == (8, 3)
    assert env.unwrapped.config.action_mode == "plan" and env.unwrapped.config.traffic == "log"
    np.testing.assert_array_equal(env.action_space.low[0], np.float32([-10.0, -40.0, -np.pi]))
    np.testing.assert_array_equal(env.action_space.high[0], np.float32([120.0, 40.0, np.pi]))
    reactive = gym.make("omnigym/DrivingReactive-v0", **driving_kwargs).unwrapped.config
    assert (reactive.action_mode, reactive.traffic) == ("control", "idm")
    plan_reactive = gym.make("omnigym/DrivingPlanReactive-v0", **driving_kwargs).unwrapped.config
    assert (plan_reactive.action_mode, plan_reactive.traffic) == ("plan", "idm")
    vlm = gym.make("omnigym/DrivingVLM-v0", **driving_kwargs).unwrapped
    assert set(vlm.observation_space.spaces) == {"state", "image", "text"}
    assert vlm.observation_space["image"].shape == (128, 128, 3)


def test_default_observation_keys_and_shapes(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    shapes = {key: space.shape for key, space in env.observation_space.spaces.items()}
    assert shapes == {
        "state": (12,),
        "agents": (16, 9),
        "route": (20, 3),
        "lanes": (6, 10, 3),
        "lights": (4, 6),
    }
    obs, info = env.reset(seed=0)
    assert info == {}
    assert obs.keys() == shapes.keys()
    assert env.observation_space.contains(obs)


def test_observation_keys_and_sizes_as_configured(driving_kwargs):
    env = DrivingEnv(
        obs_keys=("state", "route", "agents"), num_route_points=7, num_agents_obs=5, **driving_kwargs
    )
    assert {key: space.shape for key, space in env.observation_space.spaces.items()} == {
        "state": (12,),
        "route": (7, 3),
        "agents": (5, 9),
    }
    obs, _ = env.reset(seed=1)
    assert set(obs) == {"state", "route", "agents"}
    assert env.observation_space.contains(obs)
    # the route starts ahead of the ego: 4 m spacing, mostly along +x in the ego frame
    assert obs["route"][0, 2] == 1.0 and 2.0 < obs["route"][0, 0] < 6.0
    assert np.all(np.diff(obs["route"][:, 0]) > 0)


def test_image_and_text_keys(driving_kwargs):
    env = DrivingEnv(obs_keys=("state", "image", "text"), image_size=32, **driving_kwargs)
    image_space = env.observation_space["image"]
    assert image_space.shape == (32, 32, 3) and image_space.dtype == np.uint8
    assert isinstance(env.observation_space["text"], spaces.Text)
    obs, _ = env.reset(seed=0)
    assert obs["image"].dtype == np.uint8 and obs["image"].shape == (32, 32, 3)
    assert obs["image"].max() > 0  # the road, the route and the ego are drawn
    assert len(np.unique(obs["image"].reshape(-1, 3), axis=0)) > 2
    assert isinstance(obs["text"], str) and len(obs["text"]) > 0
    assert text_space().contains(obs["text"]) and env.observation_space.contains(obs)
    assert "m/s" in obs["text"]
    obs, *_ = env.step(np.zeros(2))
    assert env.observation_space.contains(obs)
    vector = DrivingVectorEnv(2, obs_keys=("text",), **driving_kwargs)
    texts = vector.reset(seed=0)[0]["text"]
    assert isinstance(texts, tuple) and len(texts) == 2 and all(isinstance(t, str) and t for t in texts)


@pytest.mark.parametrize("action_mode, shape", [("control", (2,)), ("plan", (8, 3))])
def test_privileged_keys_hold_expert_actions(driving_kwargs, action_mode, shape):
    env = DrivingEnv(action_mode=action_mode, privileged=("pdm_closed", "log_replay"), **driving_kwargs)
    assert env.observation_space["pdm_closed"].shape == shape
    assert env.observation_space["log_replay"].shape == shape
    obs, _ = env.reset(seed=2)
    assert env.observation_space.contains(obs)
    if action_mode == "plan":
        # the human's plan drives forward (x grows along the horizon)
        assert np.all(np.diff(obs["log_replay"][:, 0]) > 0)
    assert "pdm_closed" not in DrivingEnv(**driving_kwargs).observation_space.spaces


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"obs_keys": ("state", "radar")}, "radar"),
        ({"action_mode": "steer"}, "action_mode"),
        ({"traffic": "chaos"}, "traffic"),
        ({"scene": {"num_lanes": 3}}, "num_lanes"),
        ({"privileged": ("oracle",)}, "oracle"),
        ({"split": "dev"}, "split"),
        ({"replan_every": 0}, "replan_every"),
        ({"num_scenes": 0}, "num_scenes"),
        ({"navsim_version": "v3"}, "navsim_version"),
        ({"scene": {"lead_brake": 2.0}}, "lead_brake"),
    ],
)
def test_bad_kwargs_raise_value_error_naming_the_field(driving_kwargs, kwargs, name):
    with pytest.raises(ValueError, match=name):
        DrivingEnv(**{**driving_kwargs, **kwargs})
    with pytest.raises(ValueError, match=name):
        DrivingVectorEnv(2, **{**driving_kwargs, **kwargs})


# --- seeding --------------------------------------------------------------------------------------
def test_reset_with_the_same_seed_gives_identical_observations(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    first, _ = env.reset(seed=3)
    env.step(np.array([1.0, 0.2]))
    again, _ = env.reset(seed=3)
    _assert_obs_equal(first, again)
    _assert_obs_equal(first, DrivingEnv(**driving_kwargs).reset(seed=3)[0])


def _noisy_replay(env: DrivingEnv, seed: int) -> tuple[list, list, list]:
    """An episode of the logged human's plans plus seeded noise: rewards, infos and observations."""
    rng = np.random.default_rng(100)
    obs, _ = env.reset(seed=seed)
    rewards, infos, observations = [], [], [obs]
    while True:
        action = obs["log_replay"] + rng.normal(0.0, 0.3, (8, 3))
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        infos.append(info)
        observations.append(obs)
        if terminated or truncated:
            return rewards, infos, observations


def test_seeded_action_sequence_is_reproducible(driving_kwargs):
    kwargs = {"action_mode": "plan", "privileged": ("log_replay",), **driving_kwargs}
    env = DrivingEnv(**kwargs)
    rewards, infos, observations = _noisy_replay(env, seed=1)
    assert "pdms" in infos[-1] and "pdms" not in infos[0]
    for other in (env, DrivingEnv(**kwargs)):  # the same env again, and a fresh one
        rewards2, infos2, observations2 = _noisy_replay(other, seed=1)
        assert rewards2 == rewards
        assert infos2 == infos
        for a, b in zip(observations, observations2, strict=True):
            _assert_obs_equal(a, b)


def test_different_seeds_drive_different_scenes(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    obs0, _ = env.reset(seed=0)
    assert env.simulator.scenes[0].scene_id == TEST_ID
    obs1, _ = env.reset(seed=1)
    assert env.simulator.scenes[0].scene_id == TEST_ID + 1
    assert not np.array_equal(obs0["route"], obs1["route"])
    assert not np.array_equal(obs0["agents"], obs1["agents"])
    env.reset(seed=5)  # seeds wrap around num_scenes
    assert env.simulator.scenes[0].scene_id == TEST_ID + 1


def test_vector_env_i_drives_scene_seed_plus_i_like_a_single_env(driving_kwargs):
    kwargs = {"action_mode": "plan", "privileged": ("log_replay",), **driving_kwargs}
    vector = DrivingVectorEnv(3, **kwargs)
    obs, _ = vector.reset(seed=2)
    assert [scene.scene_id for scene in vector.sim.scenes] == [TEST_ID + 2, TEST_ID + 3, TEST_ID + 0]
    singles = [DrivingEnv(**kwargs) for _ in range(3)]
    single_obs = [env.reset(seed=2 + i)[0] for i, env in enumerate(singles)]
    for step in range(1, 33):
        for i in range(3):
            _assert_obs_equal({key: value[i] for key, value in obs.items()}, single_obs[i])
        obs, rewards, terminated, truncated, info = vector.step(obs["log_replay"])
        results = [env.step(single_obs[i]["log_replay"]) for i, env in enumerate(singles)]
        single_obs = [result[0] for result in results]
        np.testing.assert_array_equal(rewards, [result[1] for result in results])
        np.testing.assert_array_equal(terminated, [result[2] for result in results])
        np.testing.assert_array_equal(truncated, [result[3] for result in results])
        if step < 32:
            assert not truncated.any()
    assert truncated.all()
    for i in range(3):  # every episode ended at step 32: final observations and metrics match
        _assert_obs_equal(info["final_obs"][i], single_obs[i])
        for key in EPISODE_KEYS:
            assert info["final_info"][key][i] == results[i][4][key], key


# --- actions --------------------------------------------------------------------------------------
def test_nan_or_inf_actions_raise(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    env.reset(seed=0)
    for bad in ([np.nan, 0.0], [0.0, np.inf]):
        with pytest.raises(ValueError, match="NaN or inf"):
            env.step(np.array(bad))
    plan_env = DrivingEnv(action_mode="plan", **driving_kwargs)
    plan_env.reset(seed=0)
    plan = np.zeros((8, 3))
    plan[5, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        plan_env.step(plan)
    vector = DrivingVectorEnv(3, **driving_kwargs)
    vector.reset(seed=0)
    actions = np.zeros((3, 2))
    actions[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"envs \[1\]"):
        vector.step(actions)


def test_step_before_reset_raises(driving_kwargs):
    with pytest.raises(gym.error.ResetNeeded):
        DrivingVectorEnv(1, **driving_kwargs).step(np.zeros((1, 2)))


def test_out_of_range_actions_are_clipped(driving_kwargs):
    clipped, limit = DrivingEnv(**driving_kwargs), DrivingEnv(**driving_kwargs)
    clipped.reset(seed=1)
    limit.reset(seed=1)
    speed0, steer0 = float(clipped.simulator.ego.speed[0]), float(clipped.simulator.ego.steer[0])
    for big, edge in [([100.0, 10.0], [3.0, 1.0]), ([-100.0, -10.0], [-6.0, -1.0])]:
        result = clipped.step(np.array(big))
        expected = limit.step(np.array(edge))
        _assert_obs_equal(result[0], expected[0])
        assert result[1:] == expected[1:]
        if big[0] > 0:
            assert clipped.simulator.ego.speed[0] == pytest.approx(speed0 + 0.3)  # 3 m/s² for 0.1 s
            assert clipped.simulator.ego.steer[0] == pytest.approx(min(steer0 + 0.1, 0.6))  # 1 rad/s


# --- episodes -------------------------------------------------------------------------------------
def test_log_replay_plan_episode_lasts_the_whole_scene(driving_kwargs):
    env = DrivingEnv(action_mode="plan", privileged=("log_replay",), **driving_kwargs)
    obs, _ = env.reset(seed=0)
    assert obs["state"][11] == 0.0  # elapsed share of the episode
    for step in range(1, 33):
        obs, reward, terminated, truncated, info = env.step(obs["log_replay"])
        assert set(info[REWARD_COMPONENTS]) == set(STEP_COMPONENTS)
        # plan steps sum the components of their 5 sub-steps
        assert all(0.0 <= value <= 5.0 for value in info[REWARD_COMPONENTS].values())
        assert 0.0 <= reward <= 5.0
        assert not terminated
        assert truncated == (step == 32)
        if step < 32:
            assert not EPISODE_KEYS & set(info)
        assert obs["state"][11] == pytest.approx(step * 5 / 160)
    assert set(info) >= EPISODE_KEYS
    assert 0.0 <= info["pdms"] <= 1.0 and 0.0 <= info["epdms"] <= 1.0
    assert info["pdms"] > 0.8 and info["failed"] == 0.0
    assert info["nc"] == info["dac"] == 1.0
    assert info["progress"] > 20.0  # metres along the route
    assert env.simulator.time[0] == HISTORY_STEPS + 160


def test_log_replay_control_episode_and_per_step_reward(driving_kwargs):
    env = DrivingEnv(privileged=("log_replay",), **driving_kwargs)
    obs, _ = env.reset(seed=3)
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(obs["log_replay"])
        steps += 1
        c = info[REWARD_COMPONENTS]
        assert set(c) == set(STEP_COMPONENTS)
        assert all(0.0 <= value <= 1.0 for value in c.values())
        # the PDMS-shaped step reward: multipliers x weighted average (docs: 5 TTC, 5 EP, 2 C)
        assert reward == pytest.approx(c["nc"] * c["dac"] * (5 * c["ttc"] + 5 * c["ep"] + 2 * c["c"]) / 12)
        if terminated or truncated:
            break
    assert steps == 160 and truncated and not terminated
    assert set(info) >= EPISODE_KEYS and 0.0 <= info["pdms"] <= 1.0 and info["failed"] == 0.0


def test_epdms_reward_weights(driving_kwargs):
    env = DrivingEnv(reward="epdms", privileged=("log_replay",), **driving_kwargs)
    obs, _ = env.reset(seed=1)
    for _ in range(20):
        obs, reward, *_, info = env.step(obs["log_replay"])
        c = info[REWARD_COMPONENTS]
        multiplier = c["nc"] * c["dac"] * c["ddc"] * c["tlc"]
        weighted = 5 * c["ep"] + 5 * c["ttc"] + 2 * c["lk"] + 2 * c["c"] + 2
        assert reward == pytest.approx(multiplier * weighted / 16)


def test_driving_off_the_road_terminates_with_dac_zero(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    env.reset(seed=0)
    steps, terminated, truncated, info, _ = _run_until_end(env, OFF_ROAD)
    assert terminated and not truncated and steps < 40  # within the first 4 s window
    assert info[REWARD_COMPONENTS]["dac"] == 0.0
    assert info["dac"] == 0.0 and info["failed"] == 1.0
    # the failed window scores 0 and so do the three windows never reached
    assert info["pdms"] == 0.0 and info["epdms"] == 0.0
    # without termination the same drive goes on past that step
    lenient = DrivingEnv(terminate_on_failure=False, **driving_kwargs)
    lenient.reset(seed=0)
    for _ in range(steps):
        _, _, terminated, truncated, info = lenient.step(OFF_ROAD)
    assert not terminated and not truncated
    assert info[REWARD_COMPONENTS]["dac"] == 0.0


def test_same_step_autoreset_in_the_vector_env(driving_kwargs):
    env = DrivingVectorEnv(2, **driving_kwargs)
    env.reset(seed=0)
    actions = np.stack([OFF_ROAD, np.zeros(2)])
    step, ended = 0, False
    while not ended:
        obs, rewards, terminated, truncated, info = env.step(actions)
        step, ended = step + 1, terminated.any() or truncated.any()
        assert step < 100
    np.testing.assert_array_equal(terminated, [True, False])
    np.testing.assert_array_equal(truncated, [False, False])
    np.testing.assert_array_equal(info["_final_obs"], [True, False])
    np.testing.assert_array_equal(info["_final_info"], [True, False])
    assert info["final_obs"][1] is None
    final_obs = info["final_obs"][0]
    assert final_obs["state"][11] == pytest.approx(step / 160)  # the ended episode's last frame
    final_info = info["final_info"]
    np.testing.assert_array_equal(final_info["_pdms"], [True, False])
    assert final_info["pdms"][0] == 0.0 and final_info["dac"][0] == 0.0 and final_info["failed"][0] == 1.0
    assert set(final_info) >= EPISODE_KEYS
    # slot 0 already drives a new episode: the scene its reset seed's generator draws next
    assert obs["state"][0, 11] == 0.0 and obs["state"][1, 11] == pytest.approx(step / 160)
    expected_index = int(np.random.default_rng(0).integers(driving_kwargs["num_scenes"]))
    assert env.sim.scenes[0].scene_id == TEST_ID + expected_index
    fresh, _ = DrivingEnv(**driving_kwargs).reset(options={"scene_index": expected_index})
    _assert_obs_equal({key: value[0] for key, value in obs.items()}, fresh)
    # and it keeps stepping
    _, rewards, terminated, _, _ = env.step(np.zeros((2, 2)))
    assert not terminated[0] and rewards[0] > 0


# --- reactive traffic -----------------------------------------------------------------------------
def _follower_gaps(traffic: str, driving_kwargs: dict) -> tuple[list[float], float]:
    """The ego brakes to a stop on test scene 2 and waits: the smallest bumper gap to the agents
    right behind it in its lane, every step for 6 s, and the ego's final speed."""
    env = DrivingEnv(traffic=traffic, **driving_kwargs)
    env.reset(seed=2)
    sim = env.simulator
    gaps = []
    for _ in range(60):
        _, _, terminated, _, info = env.step(np.array([-6.0, 0.0]))
        assert not terminated and info[REWARD_COMPONENTS]["nc"] == 1.0
        frame = sim.agents_now()
        local = to_ego_frame(frame.pose[:, :, :2], sim.ego.pose)[0]
        behind = frame.valid[0] & (local[:, 0] < 0) & (np.abs(local[:, 1]) < 1.5)
        gap = -local[behind, 0] - 0.5 * (sim.agent_size[0, behind, 0] + EGO_LENGTH)
        gaps.append(float(gap.min()) if behind.any() else np.inf)
    return gaps, float(sim.ego.speed[0])


def test_reactive_agents_behind_a_stopped_ego_brake(driving_kwargs):
    gaps, speed = _follower_gaps("idm", driving_kwargs)
    assert speed == 0.0
    assert np.isfinite(gaps).sum() >= 40  # someone follows the ego most of the time
    assert min(gaps) > 0.5  # IDM keeps its jam distance (2 m) roughly
    # with log replay the same followers drive on as they did behind the logged human: into the ego
    log_gaps, _ = _follower_gaps("log", driving_kwargs)
    assert min(log_gaps) < 0.0


# --- scene sets -----------------------------------------------------------------------------------
def test_env_drives_a_saved_scene_set(driving_kwargs, tmp_path):
    source = SceneSource("test", 4, cache_dir=driving_kwargs["cache_dir"])
    scenes = SceneSet([source.get(3), source.get(1)], source.config)
    scenes.save(tmp_path / "set")
    assert SceneSet.load(tmp_path / "set").ids == [TEST_ID + 3, TEST_ID + 1]
    env = DrivingEnv(scene_dir=str(tmp_path / "set"), privileged=("log_replay",))
    procedural = DrivingEnv(privileged=("log_replay",), **driving_kwargs)
    for seed, index in [(0, 3), (1, 1), (2, 3)]:  # reset seeds wrap around the set's 2 scenes
        obs, _ = env.reset(seed=seed)
        assert env.simulator.scenes[0].scene_id == TEST_ID + index
        np.testing.assert_array_equal(
            env.simulator.ego.pose[0], source.get(index).log.ego_pose[HISTORY_STEPS].astype(np.float64)
        )
        expected, _ = procedural.reset(options={"scene_index": index})
        _assert_obs_equal(obs, expected)
    for _ in range(10):
        result = env.step(obs["log_replay"])
        other = procedural.step(expected["log_replay"])
        obs, expected = result[0], other[0]
        assert result[1:] == other[1:]


# --- regressions: time limits and episode ends inside a plan ---------------------------------------
def test_time_limit_truncation_scores_the_partial_window(driving_kwargs):
    env = DrivingVectorEnv(
        1, action_mode="plan", privileged=("log_replay",), max_episode_steps=3, **driving_kwargs
    )
    obs, _ = env.reset(seed=1)
    for _ in range(3):
        obs, _, _, truncated, info = env.step(obs["log_replay"])
    assert truncated[0] and info["_pdms"][0]
    assert info["pdms"][0] > 0.5  # the logged human drove 1.5 s without a fault


def test_time_limit_metrics_when_another_env_terminates_in_the_same_step(driving_kwargs):
    steps, terminated, *_ = _run_until_end(_reset(DrivingEnv(**driving_kwargs), 0), OFF_ROAD)
    assert terminated
    env = DrivingVectorEnv(2, max_episode_steps=steps, **driving_kwargs)
    env.reset(seed=0)
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(np.stack([OFF_ROAD, np.zeros(2)]))
    np.testing.assert_array_equal(terminated, [True, False])
    np.testing.assert_array_equal(truncated, [False, True])
    np.testing.assert_array_equal(info["_pdms"], [True, True])


def _reset(env: DrivingEnv, seed: int) -> DrivingEnv:
    env.reset(seed=seed)
    return env


def test_vector_final_obs_is_the_terminal_state_in_plan_mode(driving_kwargs):
    times = 0.5 * np.arange(1, 9)
    swerve = np.stack([8.0 * times, -3.0 * times**2, np.zeros(8)], axis=1)  # hard right
    single = _reset(DrivingEnv(action_mode="plan", **driving_kwargs), 3)
    steps, terminated, _, _, terminal = _run_until_end(single, swerve)
    assert terminated and (single.simulator.time[0] - HISTORY_STEPS) % 5 != 0  # ended mid-plan
    vector = DrivingVectorEnv(2, action_mode="plan", privileged=("log_replay",), **driving_kwargs)
    obs, _ = vector.reset(seed=3)
    for _ in range(steps):
        actions = obs["log_replay"].copy()
        actions[0] = swerve
        obs, _, terminated, _, info = vector.step(actions)
    assert terminated[0]
    np.testing.assert_array_equal(info["final_obs"][0]["state"], terminal["state"])


def test_one_channel_bev_and_bad_channel_count(driving_kwargs):
    env = DrivingEnv(obs_keys=("state", "image"), image_channels=1, image_size=32, **driving_kwargs)
    obs, _ = env.reset(seed=0)
    assert env.observation_space["image"].shape == (32, 32, 1) and obs["image"].shape == (32, 32, 1)
    assert obs["image"].max() == 255  # the ego
    with pytest.raises(ValueError, match="image_channels"):
        DrivingEnv(image_channels=2, **driving_kwargs)


def test_extended_comfort_component_follows_plan_consistency(driving_kwargs):
    env = DrivingEnv(action_mode="plan", privileged=("log_replay",), **driving_kwargs)
    obs, _ = env.reset(seed=1)
    for _ in range(3):  # consistent human plans: EC holds on every sub-step
        obs, _, _, _, info = env.step(obs["log_replay"])
        assert info[REWARD_COMPONENTS]["ec"] == pytest.approx(5.0)
    swerve = obs["log_replay"].copy()
    swerve[:, 0] *= 0.3  # a plan that suddenly brakes hard disagrees with the previous one
    _, _, _, _, info = env.step(swerve)
    assert info[REWARD_COMPONENTS]["ec"] < 5.0


class _FrozenTraffic:
    """A TrafficModel that holds every agent where the episode found it, recording its calls."""

    def __init__(self):
        self.resets, self.plans, self.frame = [], [], None

    def reset(self, slots, frames, size):
        self.resets.append(list(slots))
        self.frame = AgentFrame(frames.pose.copy(), np.zeros_like(frames.speed), frames.valid.copy())

    def step(self, ego_pose, ego_speed, plan):
        self.plans.append(None if plan is None else plan.shape)
        return self.frame


def test_traffic_model_hook_moves_the_agents(driving_kwargs):
    model = _FrozenTraffic()
    env = DrivingEnv(action_mode="plan", traffic_model=model, privileged=("log_replay",), **driving_kwargs)
    obs, _ = env.reset(seed=0)
    assert model.resets == [[0]]
    start = env.simulator.agents_now()
    for _ in range(2):
        obs, *_ = env.step(obs["log_replay"])
    assert model.plans == [(1, 41, 2)] * 10  # once per 0.1 s, with the dense plan being driven
    now = env.simulator.agents_now()  # the model's frame replaced the log's moving agents
    np.testing.assert_array_equal(now.pose[now.valid], start.pose[start.valid])
    assert np.all(now.speed == 0)


def test_autoreset_recomputes_only_the_reset_envs_and_matches_a_full_observation(driving_kwargs):
    # vector keys only: the env observes once, resets the ended envs and recomputes just those;
    # with the text key it observes everything twice. The stateless keys must agree exactly.
    keys = ("state", "agents", "route", "lights")
    fast = DrivingVectorEnv(num_envs=4, obs_keys=keys, **driving_kwargs)
    full = DrivingVectorEnv(num_envs=4, obs_keys=(*keys, "text"), **driving_kwargs)
    fast.reset(seed=1)
    full.reset(seed=1)
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(120):
        action = np.stack([rng.uniform(-3, 3, 4), rng.uniform(-0.5, 0.5, 4)], axis=1)
        obs_fast, _, term, trunc, info_fast = fast.step(action)
        obs_full, *_, info_full = full.step(action)
        for key in keys:
            np.testing.assert_array_equal(obs_fast[key], obs_full[key], err_msg=key)
        for i in np.flatnonzero(term | trunc):
            resets += 1
            for key in keys:
                np.testing.assert_array_equal(info_fast["final_obs"][i][key], info_full["final_obs"][i][key])
    assert resets >= 3
