"""The rule-based planners and baselines: PDM-Closed beats constant velocity, the IDM progress reference."""

import numpy as np
import pytest
import torch

from omnigym.envs.driving.assets import ROUTE_SPACING
from omnigym.envs.driving.controller import densify_plan
from omnigym.envs.driving.dynamics import to_ego_frame
from omnigym.envs.driving.env import DrivingEnv, DrivingVectorEnv
from omnigym.envs.driving.experts import (
    ConstantVelocityConfig,
    ConstantVelocityPolicy,
    LogReplayConfig,
    LogReplayPolicy,
    PDMClosedConfig,
    PDMClosedPolicy,
)
from omnigym.envs.driving.planner import (
    constant_velocity_plan,
    log_replay_plan,
    pdm_closed_plans,
    reference_progress,
)
from omnigym.envs.driving.scene import EGO_LENGTH, HISTORY_STEPS, LIGHT_GREEN, LIGHT_RED
from omnigym.envs.driving.traffic import IDMParams

NUM_EVAL_SCENES = 4


def _policies(env: DrivingVectorEnv) -> dict:
    space, action = env.single_observation_space, env.single_action_space
    return {
        "constant_velocity": ConstantVelocityPolicy(ConstantVelocityConfig(), space, action),
        "pdm_closed": PDMClosedPolicy(PDMClosedConfig(), space, action),
        "log_replay": LogReplayPolicy(LogReplayConfig(), space, action),
    }


def _first_episode_pdms(env: DrivingVectorEnv, policy) -> np.ndarray:
    """Each slot's first episode PDMS (slots start on scenes 0..N-1) driven by ``policy.act``."""
    obs, _ = env.reset(seed=0)
    pdms = np.full(env.num_envs, np.nan)
    for _ in range(40):
        batch = {key: torch.as_tensor(value) for key, value in obs.items()}
        action = policy.act(batch, deterministic=True).action.numpy()
        obs, _, terminated, truncated, info = env.step(action)
        ended = (terminated | truncated) & np.isnan(pdms)
        if ended.any():
            pdms[ended] = info["final_info"]["pdms"][ended]
        if not np.isnan(pdms).any():
            return pdms
    raise AssertionError("episodes did not end within 40 plan steps")


def _split_scores(split: str, num_scenes: int, cache_dir: str) -> dict[str, np.ndarray]:
    """Each expert's first-episode PDMS on the first ``num_scenes`` scenes of ``split``."""
    privileged = PDMClosedPolicy.env_kwargs["privileged"] + LogReplayPolicy.env_kwargs["privileged"]
    env = DrivingVectorEnv(
        num_scenes,
        action_mode="plan",
        privileged=privileged,
        split=split,
        num_scenes=num_scenes,
        cache_dir=cache_dir,
    )
    return {name: _first_episode_pdms(env, policy) for name, policy in _policies(env).items()}


def test_pdm_closed_beats_constant_velocity_and_the_human_scores_high(scene_cache):
    scores = _split_scores("test", NUM_EVAL_SCENES, scene_cache)
    for name, pdms in scores.items():
        assert np.all((pdms >= 0.0) & (pdms <= 1.0)), name
    assert scores["pdm_closed"].mean() > scores["constant_velocity"].mean() + 0.15
    assert scores["pdm_closed"].mean() > 0.85
    assert scores["log_replay"].mean() > 0.85


def test_constant_velocity_policy_in_control_mode_keeps_speed_and_centres_the_wheel(driving_kwargs):
    env = DrivingVectorEnv(2, **driving_kwargs)
    policy = ConstantVelocityPolicy(
        ConstantVelocityConfig(), env.single_observation_space, env.single_action_space
    )
    obs, _ = env.reset(seed=0)
    state = torch.as_tensor(obs["state"])
    action = policy.act({"state": state}).action
    assert action.shape == (2, 2)
    np.testing.assert_array_equal(action[:, 0].numpy(), 0.0)  # no throttle
    np.testing.assert_allclose(action[:, 1].numpy(), -obs["state"][:, 2] / 0.1, rtol=1e-6)  # steer to 0


def test_experts_need_their_privileged_key(driving_kwargs):
    env = DrivingVectorEnv(1, action_mode="plan", **driving_kwargs)
    with pytest.raises(ValueError, match="privileged"):
        PDMClosedPolicy(PDMClosedConfig(), env.single_observation_space, env.single_action_space)


# --- plans ----------------------------------------------------------------------------------------
def test_constant_velocity_plan():
    plan = constant_velocity_plan(np.array([10.0, 0.0]))
    assert plan.shape == (2, 8, 3)
    np.testing.assert_allclose(plan[0, :, 0], 5.0 * np.arange(1, 9))  # 10 m/s x 0.5 s steps
    np.testing.assert_array_equal(plan[0, :, 1:], 0.0)
    np.testing.assert_array_equal(plan[1], 0.0)


def test_log_replay_plan_is_the_logged_future_in_the_ego_frame(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    env.reset(seed=1)
    sim = env.simulator
    plan = log_replay_plan(sim, np.array([0]))
    logged = sim.log_ego_pose[0, HISTORY_STEPS + 5 * np.arange(1, 9)]  # 0.5 s .. 4 s ahead
    np.testing.assert_allclose(plan[0, :, :2], to_ego_frame(logged[None, :, :2], sim.ego.pose)[0], atol=1e-9)
    np.testing.assert_allclose(plan[0, :, 2], np.unwrap(logged[:, 2] - sim.ego.pose[0, 2]), atol=1e-9)


def test_pdm_closed_plan_starts_at_the_ego_and_moves_forward(driving_kwargs):
    env = DrivingEnv(**driving_kwargs)
    env.reset(seed=2)
    sim = env.simulator
    plan, dense = pdm_closed_plans(sim, np.array([0]))
    assert plan.shape == (1, 8, 3) and dense.shape == (1, 41, 2)
    np.testing.assert_allclose(dense[0, 0], sim.ego.pose[0, :2])
    # the plan's poses are every 5th dense point, in the ego frame
    np.testing.assert_allclose(densify_plan(plan, sim.ego.pose)[0, 5::5], dense[0, 5::5], atol=1e-9)
    assert np.all(np.diff(plan[0, :, 0]) >= 0) and plan[0, -1, 0] > 0


# --- the progress reference -----------------------------------------------------------------------
def _free_road(env: DrivingEnv, seed: int):
    """The simulator of ``env`` on scene ``seed`` with every agent removed and all lights green."""
    env.reset(seed=seed)
    sim = env.simulator
    sim.agent_valid[0] = False
    sim.light_state[0] = LIGHT_GREEN
    return sim


def _speed_limit(sim) -> float:
    return float(sim.route_limit[0, round(sim.station[0] / ROUTE_SPACING)])


def _free_road_idm(v0: float, limit: float) -> float:
    """IDM on a free road for 4 s in 0.4 s steps (the reference's integration), by hand."""
    params = IDMParams()
    v, s = v0, 0.0
    for _ in range(10):
        accel = params.a_max * (1 - (v / limit) ** params.delta)
        new_v = max(v + accel * 0.4, 0.0)
        s += 0.5 * (v + new_v) * 0.4
        v = new_v
    return s


@pytest.mark.parametrize("seed", [0, 1])
def test_reference_progress_from_rest_on_a_free_road(driving_kwargs, seed):
    sim = _free_road(DrivingEnv(**driving_kwargs), seed)
    sim.ego.speed[0] = 0.0
    limit = _speed_limit(sim)
    reference = reference_progress(sim, np.array([0]))
    assert reference.shape == (1,)
    assert 0.0 < reference[0] < 4.0 * limit
    assert reference[0] < 0.5 * IDMParams().a_max * 4.0**2  # 12 m: never more than full throttle
    assert reference[0] == pytest.approx(_free_road_idm(0.0, limit), rel=1e-9)


def test_reference_progress_at_the_speed_limit_is_four_seconds_of_it(driving_kwargs):
    sim = _free_road(DrivingEnv(**driving_kwargs), 3)
    limit = _speed_limit(sim)
    sim.ego.speed[0] = limit  # IDM's free-road acceleration is exactly 0 at the desired speed
    assert reference_progress(sim, np.array([0]))[0] == pytest.approx(4.0 * limit, rel=1e-9)


def test_reference_progress_stops_for_a_red_light(driving_kwargs):
    sim = _free_road(DrivingEnv(**driving_kwargs), 0)
    sim.ego.speed[0] = 0.0
    free = reference_progress(sim, np.array([0]))[0]
    sim.light_valid[0, 0] = True
    sim.light_station[0, 0] = sim.station[0] + 10.0
    assert reference_progress(sim, np.array([0]))[0] == pytest.approx(free)  # a green light: no stop
    sim.light_state[0, :, 0] = LIGHT_RED
    stopped = reference_progress(sim, np.array([0]))[0]
    assert 0.0 < stopped < 10.0
    # the front bumper stays at least IDM's jam distance (2 m) short of the stop line
    assert stopped < 10.0 - 0.5 * EGO_LENGTH - IDMParams().min_gap
    assert reference_progress(sim, np.array([], np.int64)).shape == (0,)


def test_hard_split_separates_constant_velocity_from_the_planners(scene_cache):
    scores = _split_scores("hard", 8, scene_cache)
    assert scores["pdm_closed"].mean() > scores["constant_velocity"].mean() + 0.3
    assert scores["log_replay"].mean() > scores["constant_velocity"].mean() + 0.3


@pytest.mark.slow
def test_hard_split_matches_navsims_ratios_on_40_scenes(scene_cache):
    # NAVSIM v1 navtest: constant velocity 20.6, PDM-Closed 89.1, human 94.8 (PDMS x 100)
    scores = {name: pdms.mean() for name, pdms in _split_scores("hard", 40, scene_cache).items()}
    assert scores["constant_velocity"] <= 0.4, scores
    assert scores["pdm_closed"] >= 0.85, scores
    assert scores["log_replay"] >= 0.9, scores
