"""Text actions of the tabletop tasks: the skill grammar, the skills' controller, bad input, the
experts writing skills, the vector env and ``omnigym collect`` of skill-text datasets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omnigym.core.registry import POLICIES
from omnigym.core.text_actions import ACTION_TEXT_MAX_LENGTH, ActionParseError
from omnigym.core.types import OBS_STATE
from omnigym.envs.manipulation import cube, skills, tabletop
from omnigym.envs.manipulation.pusht import PushTEnv
from omnigym.envs.manipulation.skills import Skill, format_skill, parse_skill
from omnigym.platform.datasets import collect_dataset, load_dataset_steps
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.vec_env import EnvConfig, make_env, make_vec_env

TEXT = {"action_space": "text"}
LOW, HIGH = tabletop.TCP_LOW, tabletop.TCP_HIGH


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the cwd
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))


def parse(text: Any) -> Skill:
    return parse_skill(text, LOW, HIGH)


# --- grammar --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("move_to(3, -5.5, 2)", Skill("move_to", (3.0, -5.5, 2.0))),
        (
            "<think>above the cube</think><answer> Move_To( 3.0cm , -5.5 cm, 7.5 ) </answer>",
            Skill("move_to", (3.0, -5.5, 7.5)),
        ),
        ('{"thought": "x", "action": "push(4, -2)"}', Skill("push", (4.0, -2.0))),
        ("push(+1e1, -0)", Skill("push", (10.0, 0.0))),
        ("grasp", Skill("grasp")),
        ("<answer>grasp()</answer>", Skill("grasp")),
        ("RELEASE.", Skill("release")),
        ("move to(0, 0, 30)", Skill("move_to", (0.0, 0.0, 30.0))),  # workspace corners are inside
        ("move_to(-25, 25, 1.2)", Skill("move_to", (-25.0, 25.0, 1.2))),
    ],
)
def test_parser_reads_valid_skills(text: str, expected: Skill) -> None:
    assert parse(text) == expected


def test_format_round_trips_at_1_mm() -> None:
    skill = Skill("move_to", (3.14159, -0.04, 12.0))
    assert format_skill(skill) == "move_to(3.1, 0.0, 12.0)"  # never "-0.0"
    assert parse(format_skill(skill)) == Skill("move_to", (3.1, 0.0, 12.0))
    assert format_skill(Skill("grasp")) == "grasp" and parse("grasp") == Skill("grasp")


BAD_REPLIES = [
    ("", "empty action"),
    ("<answer></answer>", "empty action"),
    ("fly(1, 2, 3)", "unknown skill 'fly'"),
    ("move the gripper left", "unknown skill"),
    ("grasp; release", "not one skill"),
    ("move_to(1, 2, 3) move_to(1, 2, 4)", "one skill per answer"),
    ("move_to(1, 2)", "move_to takes 3 numbers, got 2"),
    ("push(1, 2, 3)", "push takes 2 numbers, got 3"),
    ("grasp(1)", "grasp takes 0 numbers, got 1"),
    ("move_to(1, two, 3)", "y = 'two' is not a number"),
    ("move_to(1, , 3)", "y = '' is not a number"),
    ("move_to(nan, 0, 10)", "x = nan is not finite"),
    ("push(inf, 0)", "dx = inf is not finite"),
    ("move_to(0, 0, 0)", r"z = 0 cm is outside \[1.2, 30\]"),
    ("move_to(40, 0, 10)", r"x = 40 cm is outside \[-25, 25\]"),
    ("move_to(1e30, 0, 10)", "x = 1e\\+30 cm is outside"),
    ("push(0, -80)", r"dy = -80 cm is outside \[-50, 50\]"),
    ("grasp" + " " * ACTION_TEXT_MAX_LENGTH, f"at most {ACTION_TEXT_MAX_LENGTH} allowed"),
    (None, "must be a str"),
    (b"grasp", "must be a str"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_REPLIES, ids=[str(b[1])[:30] for b in BAD_REPLIES])
def test_parser_rejects_bad_replies_with_the_reason(text: Any, reason: str) -> None:
    with pytest.raises(ActionParseError, match=reason):
        parse(text)


# --- the controller -------------------------------------------------------------------------------
def text_env(env_id: str = "omnigym/PickPlace-v0", **kwargs: Any) -> Any:
    return make_env(env_id, **TEXT, **kwargs)


def test_move_to_and_push_bring_the_gripper_where_asked() -> None:
    env = text_env()
    env.reset(seed=0)
    obs, _, _, _, info = env.step("move_to(10, -12, 8)")
    np.testing.assert_allclose(
        obs[OBS_STATE][tabletop.TCP], [0.10, -0.12, 0.08], atol=tabletop.SKILL_TOLERANCE
    )
    assert info["action_valid"] and info["action_error"] == "" and 1 < info["skill_steps"] < 25
    obs, _, _, _, info = env.step("<answer>push(-6, 4.5)</answer>")
    np.testing.assert_allclose(
        obs[OBS_STATE][tabletop.TCP], [0.04, -0.075, 0.08], atol=tabletop.SKILL_TOLERANCE
    )
    # a push runs at PUSH_SPEED (1.5 cm per step): 7.5 cm take at least 5 steps
    assert info["skill_steps"] >= 5


def test_grasp_holds_the_cube_and_release_opens() -> None:
    env = text_env()
    obs, _ = env.reset(seed=0)
    x, y, z = obs[OBS_STATE][cube.CUBE_POS] / 0.01
    for skill in (f"move_to({x}, {y}, 7.5)", f"move_to({x}, {y}, {z})", "grasp"):
        obs, *_ = env.step(skill)
    assert obs[OBS_STATE][tabletop.GAP] == pytest.approx(2 * cube.CUBE_HALF, abs=0.003)  # pads on the cube
    obs, *_ = env.step(f"move_to({x}, {y}, 12)")
    assert obs[OBS_STATE][cube.CUBE_POS][2] > 0.09  # lifted with the gripper
    obs, *_ = env.step("release")
    assert obs[OBS_STATE][tabletop.GAP] == pytest.approx(2 * tabletop.FINGER_OPEN, abs=0.002)


def test_reward_is_the_sum_over_the_skill_steps() -> None:
    env = text_env()
    env.reset(seed=3)
    rewards: list[float] = []
    unwrapped = env.unwrapped
    outcome = unwrapped._step_outcome

    def recording() -> Any:
        result = outcome()
        rewards.append(result[1])
        return result

    unwrapped._step_outcome = recording
    _, reward, *_, info = env.step("move_to(-20, 20, 25)")
    assert len(rewards) == info["skill_steps"] > 3
    assert reward == pytest.approx(sum(rewards))


def test_skill_steps_are_capped_and_the_budget_truncates_inside_a_skill() -> None:
    env = text_env(max_skill_steps=2, max_control_steps=5)
    env.reset(seed=0)
    obs, _, _, truncated, info = env.step("move_to(-25, -25, 30)")  # ~45 cm: more than 2 steps
    assert info["skill_steps"] == 2 and not truncated
    assert np.linalg.norm(obs[OBS_STATE][tabletop.TCP] - [-0.25, -0.25, 0.3]) > 0.1
    env.step("move_to(25, 25, 30)")
    *_, truncated, info = env.step("move_to(25, -25, 2)")
    assert truncated and info["skill_steps"] == 1  # the 5th control step of the episode


def test_success_inside_a_skill_ends_it() -> None:
    env = text_env("omnigym/Reach-v0")
    obs, _ = env.reset(seed=1)
    goal = obs[OBS_STATE][tabletop.GOAL] / 0.01
    _, _, terminated, _, info = env.step(format_skill(Skill("move_to", tuple(goal))))
    assert terminated and info["is_success"] and info["distance"] < 0.03


@pytest.mark.parametrize(
    "reply",
    ["", "jump", "move_to(1, 2)", "move_to(nan, 0, 5)", "move_to(0, 0, -3)", "x" * 2000, None, 5, b"grasp"],
)
def test_bad_input_holds_still_and_pays_the_penalty(reply: Any) -> None:
    env = text_env(invalid_action_penalty=-2.5)
    env.reset(seed=0)
    env.step("grasp")  # closed fingers must stay closed under the no-op
    before = env.unwrapped.data.qpos[:5].copy()
    _, reward, terminated, truncated, info = env.step(reply)
    assert info["action_valid"] is False and info["action_error"] and info["skill_steps"] == 1
    assert not terminated and not truncated
    after = env.unwrapped.data.qpos[:5]
    assert np.abs(after - before).max() < 0.001  # gripper and fingers held still
    hold = text_env(invalid_action_penalty=-2.5)
    hold.reset(seed=0)
    hold.step("grasp")
    assert reward == pytest.approx(-2.5 + hold.unwrapped._step_outcome()[1], abs=0.01)


def test_text_observation_states_the_positions_in_cm() -> None:
    env = text_env("omnigym/PickPlacePixels-v0")
    obs, info = env.reset(seed=4)
    assert info["action_valid"] and info["action_error"] == "" and info["skill_steps"] == 0
    text, state = obs["text"], obs[OBS_STATE]
    assert env.observation_space["text"].contains(text) and text.startswith("Task: Pick up the cube")

    def point(label: str) -> np.ndarray:
        match = re.search(label + r": \(([-\d.]+), ([-\d.]+), ([-\d.]+)\) cm", text)
        assert match, text
        return np.array([float(v) for v in match.groups()]) * 0.01

    np.testing.assert_allclose(point("Gripper"), state[tabletop.TCP], atol=0.0006)
    np.testing.assert_allclose(point("Cube"), state[cube.CUBE_POS], atol=0.0006)
    np.testing.assert_allclose(point("Target"), state[tabletop.GOAL], atol=0.0006)
    assert "move_to(x, y, z) | push(dx, dy) | grasp | release" in text and "fingers open" in text


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="action_space must be 'box' or 'text'"):
        make_env("omnigym/Reach-v0", action_space="words")
    with pytest.raises(ValueError, match="invalid_action_penalty must be finite"):
        text_env(invalid_action_penalty=float("nan"))
    with pytest.raises(ValueError, match="max_skill_steps"):
        text_env(max_skill_steps=0)
    with pytest.raises(ValueError, match="PushTEnv has no text actions"):
        PushTEnv(action_space="text")


# --- experts --------------------------------------------------------------------------------------
EXPERTS = [
    # (policy, env id, skills per episode measured on seeds 0-19)
    ("reach_expert", "omnigym/Reach-v0", 1.0),
    ("pushcube_expert", "omnigym/PushCube-v0", 6.5),
    ("pickplace_expert", "omnigym/PickPlace-v0", 4.0),
]


def build(name: str, env_id: str, **config: Any) -> Any:
    env = text_env(env_id)
    cls = POLICIES.get(name)
    return cls(cls.config_class(**config), env.observation_space, env.action_space)


@pytest.mark.parametrize(("name", "env_id", "skills"), EXPERTS, ids=[e[0] for e in EXPERTS])
def test_expert_solves_the_task_in_skills(name: str, env_id: str, skills: float) -> None:
    result = evaluate_policy(build(name, env_id), env_id, episodes=20, seed=0, num_envs=4, env_kwargs=TEXT)
    summary = result.summary()
    assert summary["success_rate"] >= 0.95, summary  # measured: 1.0 (the Box experts': 1.0)
    assert summary["invalid_actions_mean"] == 0
    assert summary["length_mean"] == pytest.approx(skills, abs=1.0)  # skills, not control steps


def test_stochastic_expert_perturbs_the_numbers_by_noise_std() -> None:
    env = text_env()
    obs, _ = env.reset(seed=0)
    batch = {OBS_STATE: torch.as_tensor(np.repeat(obs[OBS_STATE][None], 64, axis=0))}
    policy = build("pickplace_expert", "omnigym/PickPlace-v0")
    clean = policy.act(batch, deterministic=True).action
    assert len(set(clean)) == 1 and parse(clean[0]).name == "move_to"  # above the cube first
    torch.manual_seed(0)
    noisy = [parse(text).args for text in policy.act(batch, deterministic=False).action]
    spread = (np.array(noisy) - parse(clean[0]).args).std()
    expected = policy.config.noise_std * tabletop.MAX_STEP / 0.01  # 0.5 cm
    assert 0.7 * expected < spread < 1.3 * expected


def test_box_only_expert_refuses_a_text_env() -> None:
    observation_space = make_env("omnigym/PushT-v0").observation_space  # PushT has no text actions
    cls = POLICIES.get("pusht_expert")
    with pytest.raises(ValueError, match="Box"):
        cls(cls.config_class(), observation_space, skills.action_space())


# --- vectorised and collected ---------------------------------------------------------------------
def test_vector_env_equals_sync_copies_in_text_mode() -> None:
    kwargs = {**TEXT, "max_control_steps": 12}
    vector, sync = (
        make_vec_env(EnvConfig(id="omnigym/PushCube-v0", num_envs=3, vectorization=mode, kwargs=kwargs))
        for mode in ("vector", "sync")
    )
    replies = ["grasp", "move_to(0, 0, 5)", "jump", "push(3, -4)", "release", "move_to(10, 10, 20)"]
    obs_v, _ = vector.reset(seed=3)
    obs_s, _ = sync.reset(seed=3)
    np.testing.assert_array_equal(obs_v[OBS_STATE], obs_s[OBS_STATE])
    truncations = 0
    for t in range(12):
        actions = [replies[(t + i) % len(replies)] for i in range(3)]
        out_v, out_s = vector.step(actions), sync.step(actions)
        np.testing.assert_array_equal(out_v[0][OBS_STATE], out_s[0][OBS_STATE])
        for a, b in zip(out_v[1:4], out_s[1:4], strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(out_v[4]["action_valid"], out_s[4]["action_valid"])
        truncations += int(out_v[3].sum())
    assert truncations >= 3  # max_control_steps ended episodes inside skills
    with pytest.raises(ValueError, match="takes 3 text actions"):
        vector.step(["grasp"])
    vector.close()
    sync.close()


def test_collect_writes_a_skill_text_dataset() -> None:
    policy = build("pickplace_expert", "omnigym/PickPlacePixels-v0")
    summary = collect_dataset(
        policy, "omnigym/PickPlacePixels-v0", "omnigym/test-pickplace-skills-v0", episodes=3, env_kwargs=TEXT
    )
    assert summary.success_rate == 1.0 and summary.steps == 12  # 4 skills per episode
    steps = load_dataset_steps("omnigym/test-pickplace-skills-v0")
    assert len(steps) == summary.steps
    assert [parse(action).name for action in steps.actions[:4]] == ["move_to", "move_to", "grasp", "move_to"]
    first, _ = text_env("omnigym/PickPlacePixels-v0").reset(seed=0)
    assert steps.obs["text"][0] == first["text"] and steps.obs["text"][0].startswith("Task: ")
    assert np.array_equal(steps.obs["image"][0], first["image"])
