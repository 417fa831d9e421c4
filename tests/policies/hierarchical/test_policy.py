"""The ``hierarchical`` policy: when the planner speaks, what the controller sees, bad replies, saving."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import Obs, PolicyStep
from omnigym.platform.policy_fit import build_policy
from omnigym.policies.hierarchical.planners import SUBGOAL_SPACE
from omnigym.policies.hierarchical.policy import SUBGOAL_KEY, HierarchicalPolicy, HierarchicalPolicyConfig
from omnigym.policies.hierarchical.subgoals import PICKPLACE_SUBGOALS, TWO_STAGE_SUBGOALS, embed_text

from .test_subgoals import cube_state, two_stage_state

STATE_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (23,), np.float32)})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (4,), np.float32)
FAR = cube_state((0.0, 0.0, 0.15), 0.08)
ALIGNED = cube_state((0.05, -0.03, 0.075), 0.08)
HOLDING = cube_state((0.05, -0.03, 0.025), 0.045)


def make(planner: str = "scripted", **fields: Any) -> HierarchicalPolicy:
    torch.manual_seed(0)
    config = HierarchicalPolicyConfig(planner=planner, **fields)
    policy = build_policy("hierarchical", config, STATE_SPACE, ACTION_SPACE)
    assert isinstance(policy, HierarchicalPolicy)
    return policy


def batch(*states: np.ndarray) -> Obs:
    return {"state": torch.as_tensor(np.stack(states))}


class SpyController(Policy):
    """Records the sub-goal embeddings it is given; acts with zeros."""

    seen: ClassVar[list[torch.Tensor]] = []

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        self.seen.append(obs[SUBGOAL_KEY].clone())
        rows = len(obs[SUBGOAL_KEY])
        return PolicyStep(torch.zeros(rows, 4), torch.zeros(rows, 1), torch.ones(rows, 1, dtype=torch.bool))


class ReplyPlanner(Policy):
    """A text planner that answers with a fixed list of replies, one call after another."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(PolicyConfig(), spaces.Dict({"text": SUBGOAL_SPACE}), SUBGOAL_SPACE)
        self.replies = list(replies)
        self.prompts: list[str] = []

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        self.prompts.extend(obs["text"])
        reply = self.replies.pop(0)
        rows = len(obs["text"])
        return PolicyStep([reply] * rows, torch.zeros(rows, 1), torch.ones(rows, 1, dtype=torch.bool))


def test_scripted_planner_speaks_every_k_steps_per_row() -> None:
    policy = make("scripted", every_k_steps=3)
    states = [FAR, ALIGNED, HOLDING, HOLDING, FAR]  # row 0 walks through them; row 1 stays far
    got = []
    for state in states:
        policy.act(batch(state, FAR), deterministic=True)
        got.append(policy.subgoals)
    move, lower, _, carry = PICKPLACE_SUBGOALS
    # row 0 re-plans at steps 0 and 3 only: "lower" at step 1 and "carry" at step 2 go unheard
    assert [g[0] for g in got] == [move, move, move, carry, carry]
    assert [g[1] for g in got] == [move] * 5
    policy.reset(torch.tensor([True, False]))  # row 0's new episode re-plans at once
    policy.act(batch(ALIGNED, ALIGNED), deterministic=True)
    assert policy.subgoals == [lower, move]  # row 1 is at its step 5: not due until step 6


def test_controller_sees_the_embedding_of_each_rows_subgoal() -> None:
    policy = make("scripted", every_k_steps=1)
    policy.controller = SpyController(PolicyConfig(), STATE_SPACE, ACTION_SPACE)
    SpyController.seen.clear()
    policy.act(batch(FAR, HOLDING))
    expected = embed_text([PICKPLACE_SUBGOALS[0], PICKPLACE_SUBGOALS[3]], 32)
    torch.testing.assert_close(SpyController.seen[0], torch.as_tensor(expected))
    flat = make("instruction")
    flat.controller = SpyController(PolicyConfig(), STATE_SPACE, ACTION_SPACE)
    flat.act(batch(FAR, HOLDING))
    instruction = torch.as_tensor(embed_text(flat.config.instruction, 32))
    torch.testing.assert_close(SpyController.seen[1], instruction.expand(2, -1))


def test_a_text_planners_bad_reply_keeps_the_previous_subgoal() -> None:
    policy = make("scripted", every_k_steps=1)
    planner = ReplyPlanner(
        ["<answer>lower onto the cube</answer>", "<answer>fly away</answer>", "grasp the cube"]
    )
    object.__setattr__(policy, "planner", planner)
    policy.text_planner = True
    seen = []
    for _ in range(3):
        policy.act(batch(FAR))
        seen.append(policy.subgoals[0])
    assert seen == ["lower onto the cube", "lower onto the cube", "grasp the cube"]
    assert policy.invalid_replies == 1
    assert "current sub-goal: lower onto the cube" in planner.prompts[1]
    assert "scene: gripper at (0, 0, 15) cm" in planner.prompts[0]


def test_save_load_round_trip_keeps_the_controller_and_the_planner(tmp_path: Path) -> None:
    policy = make("scripted", every_k_steps=2)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.1 * torch.randn_like(param))
    path = policy.save_pretrained(tmp_path / "agent")
    loaded = Policy.from_pretrained(path)
    assert isinstance(loaded, HierarchicalPolicy) and loaded.config == policy.config
    obs = batch(FAR, ALIGNED, HOLDING)
    for _ in range(3):
        torch.testing.assert_close(
            loaded.act(obs, deterministic=True).action, policy.act(obs, deterministic=True).action
        )
    assert loaded.subgoals == policy.subgoals == list(np.array(PICKPLACE_SUBGOALS)[[0, 1, 3]])


def test_a_saved_controller_is_taken_in_and_saved_with_the_agent(tmp_path: Path) -> None:
    policy = make("instruction")
    policy.controller.save_pretrained(tmp_path / "controller")
    agent = make("scripted", controller_path=str(tmp_path / "controller"))
    assert agent.config.controller_path == "" and agent.config.controller == "flow"
    for mine, theirs in zip(
        agent.controller.state_dict().values(), policy.controller.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(mine, theirs)


def test_bad_configs_fail_with_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every_k_steps must be >= 1"):
        HierarchicalPolicyConfig(every_k_steps=0)
    with pytest.raises(FileNotFoundError, match="controller_path"):
        make(controller_path=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="neither a built-in planner"):
        make("oracle")
    small = spaces.Dict({"state": spaces.Box(-1, 1, (4,), np.float32)})
    with pytest.raises(ValueError, match="23-value 'state'"):
        HierarchicalPolicy(HierarchicalPolicyConfig(planner="scripted"), small, ACTION_SPACE)
    flow = make("instruction").controller
    flow_dir = flow.save_pretrained(tmp_path / "flow")
    with pytest.raises(ValueError, match="does not read a 16-wide 'subgoal'"):
        make(controller_path=str(flow_dir), embedding_dim=16)
    pixels = spaces.Dict({"image": spaces.Box(0, 255, (32, 32, 3), np.uint8)})
    with pytest.raises(ValueError, match=r"reads \['state'\], which the env does not observe"):
        HierarchicalPolicy(HierarchicalPolicyConfig(controller_path=str(flow_dir)), pixels, ACTION_SPACE)


def test_two_stage_planner_remembers_the_marker_per_row_between_its_calls() -> None:
    space = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (26,), np.float32)})
    torch.manual_seed(0)
    config = HierarchicalPolicyConfig(task="pushcube_two_stage", planner="scripted", every_k_steps=3)
    policy = build_policy("hierarchical", config, space, ACTION_SPACE)
    assert isinstance(policy, HierarchicalPolicy)
    assert policy.config.subgoals == TWO_STAGE_SUBGOALS and "blue marker, then" in policy.config.instruction
    start, at_marker = two_stage_state((0.0, 0.0)), two_stage_state((0.09, 0.0))
    # row 0 passes the marker at step 1, between two planner calls; row 1 never does
    got = [
        policy.act(batch(s, start), deterministic=True) and policy.subgoals
        for s in (start, at_marker, start, start)
    ]
    marker, target = TWO_STAGE_SUBGOALS
    assert [g[0] for g in got] == [marker, marker, marker, target]  # heard at step 3, remembered
    assert [g[1] for g in got] == [marker] * 4
    policy.reset(torch.tensor([True, False]))  # row 0's new episode: back to the marker
    policy.act(batch(start, start), deterministic=True)
    assert policy.subgoals == [marker, marker]
    with pytest.raises(ValueError, match=r"policy\.task 'stack' is not one of"):
        HierarchicalPolicyConfig(task="stack")
    with pytest.raises(ValueError, match="26-value 'state'"):
        HierarchicalPolicy(config, STATE_SPACE, ACTION_SPACE)
