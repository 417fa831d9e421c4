"""Text actions of the driving env: written plans and meta actions, and replies that do not parse."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from omnigym.core.text_actions import ActionParseError
from omnigym.envs.driving.env import PLAN_HIGH, PLAN_LOW, DrivingEnv, DrivingVectorEnv
from omnigym.envs.driving.planner import meta_action_plans
from omnigym.envs.driving.text_actions import (
    ACTION_TEXT_MAX_LENGTH,
    LATERAL,
    LONGITUDINAL,
    META_ACTIONS,
    format_meta_action,
    format_plan,
    meta_plans,
    nearest_meta_actions,
    parse_driving_action,
)

LOW, HIGH = PLAN_LOW.astype(np.float64), PLAN_HIGH.astype(np.float64)
STRAIGHT = np.stack([np.arange(1, 9) * 4.0, np.zeros(8), np.zeros(8)], axis=1)


def parse(text: str):
    return parse_driving_action(text, LOW, HIGH)


def test_a_written_plan_reads_back_in_any_bracket_and_inside_the_answer_tag() -> None:
    plan = STRAIGHT + np.array([0.0, 0.25, 0.01])
    assert np.array_equal(parse(format_plan(plan)).plan, plan)
    square = "[" + ", ".join(f"[{x}, {y}, {h}]" for x, y, h in plan) + "]"
    assert np.array_equal(parse(square).plan, plan)
    reply = f"<think>clear road (1, 2, 3)</think><answer>{format_plan(plan)}</answer>"
    assert np.array_equal(parse(reply).plan, plan)  # only the answer counts


@pytest.mark.parametrize(
    ("text", "lateral", "longitudinal"),
    [
        ("keep lane, accelerate", "keep lane", "accelerate"),
        ("<answer>Change Left; keep speed.</answer>", "change left", "keep speed"),
        ("decelerate and change right", "change right", "decelerate"),
        ("right", "change right", "keep speed"),
        ("slow down", "keep lane", "decelerate"),
        ("stop", "stop", "keep speed"),
    ],
)
def test_meta_actions_read_in_either_order_with_defaults(text: str, lateral: str, longitudinal: str) -> None:
    action = parse(text)
    assert action.plan is None
    assert (LATERAL[action.lateral], LONGITUDINAL[action.longitudinal]) == (lateral, longitudinal)
    assert parse(format_meta_action(action.lateral, action.longitudinal)) == action


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty action"),
        (format_plan(STRAIGHT[:7]), "a plan has 8 poses"),
        (format_plan(STRAIGHT).replace("(4.00, 0.00, 0.000)", "(4.00, 0.00)"), "pose 1 has 2 numbers"),
        (format_plan(STRAIGHT).replace("4.00", "nan", 1), "NaN or infinite"),
        (format_plan(STRAIGHT).replace("4.00", "1e9", 1), "pose 1: x = 1e+09 is outside [-10, 120]"),
        (format_plan(STRAIGHT).replace("4.00", "four", 1), "'four' is not a number"),
        ("fly over the traffic", "unknown meta action 'fly over the traffic'"),
        ("keep lane, change left", "a second meta action 'change left'"),
        ("keep lane " * 200, f"at most {ACTION_TEXT_MAX_LENGTH} allowed"),
    ],
)
def test_bad_replies_say_why(text: str, reason: str) -> None:
    with pytest.raises(ActionParseError) as error:
        parse(text)
    assert reason in str(error.value)


def test_meta_action_plans_move_as_named(driving_kwargs) -> None:
    env = DrivingVectorEnv(num_envs=3, action_mode="plan", **driving_kwargs)
    env.reset(seed=0)
    sim, idx = env.sim, np.arange(3)
    sim.ego.speed[:] = 8.0

    def plan(lane_change: int, acceleration: float) -> np.ndarray:
        return meta_action_plans(sim, idx, np.full(3, lane_change), np.full(3, acceleration))

    def travelled(p: np.ndarray) -> np.ndarray:  # metres along the plan's knots
        knots = np.concatenate([np.zeros((3, 1, 2)), p[:, :, :2]], axis=1)
        return np.linalg.norm(np.diff(knots, axis=1), axis=2).sum(axis=1)

    keep, faster, slower, halt = plan(0, 0.0), plan(0, 1.5), plan(0, -2.0), plan(0, -3.0)
    np.testing.assert_allclose(travelled(keep), 32.0, rtol=0.03)  # 8 m/s for 4 s
    assert np.all(travelled(faster) > travelled(keep) + 4) and np.all(travelled(slower) < travelled(keep) - 4)
    # 8 m/s braking at 3 m/s² stops after 2.67 s and 10.7 m: the last knots stand still
    np.testing.assert_allclose(travelled(halt), 8.0**2 / 6.0, rtol=0.05)
    np.testing.assert_allclose(halt[:, -1, :2], halt[:, -3, :2], atol=1e-3)
    left, right = plan(1, 0.0), plan(-1, 0.0)
    assert np.all(left[:, -1, 1] > keep[:, -1, 1] + 2.5) and np.all(right[:, -1, 1] < keep[:, -1, 1] - 2.5)


def test_text_mode_drives_a_written_plan_exactly_like_the_box_mode(driving_kwargs) -> None:
    kwargs = {**driving_kwargs, "action_mode": "plan", "privileged": ["pdm_closed"]}
    text_env = DrivingVectorEnv(num_envs=2, action_space="text", **kwargs)
    box_env = DrivingVectorEnv(num_envs=2, **kwargs)
    text_obs, _ = text_env.reset(seed=1)
    box_obs, _ = box_env.reset(seed=1)
    for _ in range(6):
        replies = [f"<answer>{format_plan(p)}</answer>" for p in text_obs["pdm_closed"]]
        plans = np.stack([parse(reply).plan for reply in replies])  # what the text says, rounded
        text_obs, text_reward, *_, text_info = text_env.step(replies)
        box_obs, box_reward, *_ = box_env.step(plans)
        np.testing.assert_array_equal(text_reward, box_reward)
        np.testing.assert_array_equal(text_obs["state"], box_obs["state"])
        assert text_info["action_valid"].all() and list(text_info["action_error"]) == ["", ""]


def test_a_reply_that_does_not_parse_keeps_the_last_action_and_costs_the_penalty(driving_kwargs) -> None:
    kwargs = {**driving_kwargs, "action_mode": "plan", "action_space": "text", "invalid_action_penalty": -0.5}
    env, twin = DrivingVectorEnv(num_envs=2, **kwargs), DrivingVectorEnv(num_envs=2, **kwargs)
    env.reset(seed=2)
    twin.reset(seed=2)
    plan = format_plan(STRAIGHT * 0.5)
    env.step([plan, "keep lane, decelerate"])
    twin.step([plan, "keep lane, decelerate"])
    bad = [format_plan(STRAIGHT).replace("4.00", "nan", 1), "<answer>teleport</answer>"]
    obs, reward, _, _, info = env.step(bad)
    twin_obs, twin_reward, *_ = twin.step([plan, "keep lane, decelerate"])  # the last valid actions
    np.testing.assert_allclose(reward, twin_reward - 0.5)
    np.testing.assert_array_equal(obs["state"], twin_obs["state"])
    assert not info["action_valid"].any()
    assert "NaN" in info["action_error"][0] and "unknown meta action 'teleport'" in info["action_error"][1]


def test_the_vlm_env_takes_text_actions_through_gym_make(driving_kwargs) -> None:
    env = DrivingEnv(action_mode="plan", action_space="text", obs_keys=("state", "text"), **driving_kwargs)
    assert env.action_space.contains("keep lane, keep speed")
    env.reset(seed=0)
    *_, info = env.step("change left, accelerate")
    assert info["action_valid"] is True and info["action_error"] == ""
    env.action_space.seed(0)
    _, reward, *_, info = env.step(env.action_space.sample())  # random characters
    assert info["action_valid"] is False and info["action_error"] and np.isfinite(reward)


def test_text_actions_need_the_plan_mode(driving_kwargs) -> None:
    with pytest.raises(ValueError, match="action_space='text' writes plans: add action_mode='plan'"):
        DrivingVectorEnv(num_envs=1, action_space="text", **driving_kwargs)


def test_the_vlm_driving_prompt_names_every_meta_action_the_env_reads() -> None:
    from omnigym.envs.driving.text import describe
    from omnigym.policies.vlm.prompts import DRIVING_PROMPT, default_system_prompt

    situation = describe(
        command=1, ego_speed=5.0, speed_limit=13.9, agent_xy=np.zeros((0, 2)), agent_speed=[], agent_valid=[]
    )
    assert default_system_prompt(situation) == DRIVING_PROMPT
    assert all(word in DRIVING_PROMPT for word in (*LATERAL, *LONGITUDINAL))
    example = DRIVING_PROMPT.split("(e.g. ")[1].split(")")[0]
    assert parse(example) == parse("keep lane, accelerate")


def test_experts_write_their_plans_in_a_text_env_and_drive_the_same(driving_kwargs) -> None:
    import torch

    from omnigym.envs.driving.experts import (
        ConstantVelocityConfig,
        ConstantVelocityPolicy,
        PDMClosedConfig,
        PDMClosedPolicy,
    )

    kwargs = {**driving_kwargs, "action_mode": "plan", "privileged": ["pdm_closed"]}
    text_env = DrivingVectorEnv(num_envs=2, action_space="text", **kwargs)
    box_env = DrivingVectorEnv(num_envs=2, **kwargs)
    for make in (lambda o, a: PDMClosedPolicy(PDMClosedConfig(), o, a),
                 lambda o, a: ConstantVelocityPolicy(ConstantVelocityConfig(), o, a)):  # fmt: skip
        writer = make(text_env.single_observation_space, text_env.single_action_space)
        driver = make(box_env.single_observation_space, box_env.single_action_space)
        text_obs, _ = text_env.reset(seed=3)
        box_obs, _ = box_env.reset(seed=3)
        for _ in range(4):
            texts = writer.act({k: torch.as_tensor(v) for k, v in text_obs.items() if k != "text"}).action
            assert isinstance(texts[0], str) and text_env.single_action_space.contains(texts[0])
            plans = driver.act({k: torch.as_tensor(v) for k, v in box_obs.items()}).action.numpy()
            written = np.stack([parse(t).plan for t in texts])
            np.testing.assert_allclose(written, plans, atol=1e-2)  # 2 decimals, cut
            text_obs, text_reward, *_, info = text_env.step(texts)
            box_obs, box_reward, *_ = box_env.step(np.stack([parse(t).plan for t in texts]))
            np.testing.assert_array_equal(text_reward, box_reward)
            assert info["action_valid"].all()


def test_collect_writes_text_demonstrations_that_sft_reads(driving_kwargs, tmp_path, monkeypatch) -> None:
    import minari

    from omnigym.envs.driving.experts import PDMClosedConfig, PDMClosedPolicy
    from omnigym.platform.datasets import collect_dataset, load_dataset_steps
    from omnigym.platform.vec_env import make_env

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    kwargs = {**driving_kwargs, "action_space": "text", "scene": {"episode_seconds": 3.0}}
    env = make_env("omnigym/DrivingVLM-v0", **PDMClosedPolicy.env_kwargs, **kwargs)
    policy = PDMClosedPolicy(PDMClosedConfig(), env.observation_space, env.action_space)
    env.close()
    dataset_id = "omnigym/test-pdm-text-v0"
    collect_dataset(policy, "omnigym/DrivingVLM-v0", dataset_id, episodes=2, env_kwargs=kwargs)
    dataset = minari.load_dataset(dataset_id)
    assert isinstance(dataset.action_space, spaces.Text) and "pdm_closed" not in dataset.observation_space
    steps = load_dataset_steps(dataset_id)
    assert len(steps.actions) == 12  # 2 episodes of 3 s at 0.5 s per plan
    plans = np.stack([parse(action).plan for action in steps.actions])
    assert np.all(plans[:, -1, 0] > plans[:, 0, 0])  # every plan drives forward
    assert all(text.startswith("Command: ") for text in steps.obs["text"])


def test_written_plans_stay_inside_the_plan_box_the_env_reads() -> None:
    plan = STRAIGHT.copy()
    plan[:, 2] = np.pi  # rounded to 3 decimals this would be 3.142 > pi, an invalid reply
    plan[0, :2] = (1.239, -0.001)
    text = format_plan(plan)
    assert text.startswith("(1.23, 0.00, 3.141)")
    np.testing.assert_allclose(parse(text).plan, plan, atol=1e-2)


def test_nearest_meta_action_recovers_each_meta_actions_own_plan(driving_kwargs) -> None:
    env = DrivingVectorEnv(num_envs=2, action_mode="plan", **driving_kwargs)
    env.reset(seed=4)
    sim, idx = env.sim, np.arange(2)
    sim.ego.speed[:] = 6.0  # moving, below the limit: every meta action has a plan of its own
    for lateral, longitudinal in META_ACTIONS:
        plans = meta_plans(sim, idx, np.full(2, lateral), np.full(2, longitudinal))
        found = nearest_meta_actions(sim, idx, plans + np.array([0.3, -0.2, 0.0]))  # a nearby plan
        assert [tuple(row) for row in found] == [(lateral, longitudinal)] * 2


def test_pdm_closed_meta_writes_meta_actions_the_env_reads(driving_kwargs) -> None:
    import torch

    from omnigym.envs.driving.experts import PDMClosedMetaConfig, PDMClosedMetaPolicy

    env = DrivingVectorEnv(
        num_envs=3, action_mode="plan", action_space="text", privileged=["pdm_closed_meta"], **driving_kwargs
    )
    policy = PDMClosedMetaPolicy(PDMClosedMetaConfig(), env.single_observation_space, env.single_action_space)
    obs, _ = env.reset(seed=1)
    written = set()
    for _ in range(6):
        texts = policy.act({k: torch.as_tensor(v) for k, v in obs.items() if k != "text"}).action
        written.update(texts)
        assert all(parse(text).plan is None for text in texts)  # meta actions, not plans
        obs, _, _, _, info = env.step(texts)
        assert info["action_valid"].all()
    assert written <= {format_meta_action(lat, lon) for lat, lon in META_ACTIONS}


def test_pdm_closed_meta_needs_a_text_env_and_the_plan_mode(driving_kwargs) -> None:
    from omnigym.envs.driving.experts import PDMClosedMetaConfig, PDMClosedMetaPolicy

    box = DrivingVectorEnv(num_envs=1, action_mode="plan", privileged=["pdm_closed_meta"], **driving_kwargs)
    with pytest.raises(ValueError, match="action_space='text'"):
        PDMClosedMetaPolicy(PDMClosedMetaConfig(), box.single_observation_space, box.single_action_space)
    with pytest.raises(ValueError, match="needs action_mode='plan'"):
        DrivingVectorEnv(num_envs=1, action_mode="control", privileged=["pdm_closed_meta"], **driving_kwargs)
