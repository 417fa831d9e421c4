"""Sub-goals: PickPlace's and the two-stage push's rules on crafted states, the embedding, parsing."""

from __future__ import annotations

import numpy as np
import pytest

from omnigym.core.text_actions import ActionParseError
from omnigym.policies.hierarchical.subgoals import (
    CARRY,
    EXPERT_TOLERANCES,
    GRASP,
    LOWER,
    MOVE_ABOVE,
    PICKPLACE_SUBGOALS,
    PLANNER_TOLERANCES,
    TWO_STAGE_STATE_DIM,
    WAYPOINT,
    SubgoalVocabulary,
    describe_cube_state,
    embed_text,
    pickplace_subgoals,
    planner_prompt,
    relabel_episodes,
    relabel_two_stage,
    two_stage_subgoals,
)

CUBE = np.array([0.05, -0.03, 0.02])


def cube_state(tcp: tuple[float, float, float], gap: float, cube: np.ndarray = CUBE) -> np.ndarray:
    """A 23-value cube-task state with the TCP, pad gap and cube where given (goal in the air)."""
    state = np.zeros(23, dtype=np.float32)
    state[0:3], state[6], state[7:10], state[10:13] = tcp, gap, (0.1, 0.1, 0.15), cube
    state[13] = 1.0  # identity quaternion
    return state


def test_pickplace_rule_reads_each_stage_from_the_state() -> None:
    states = np.stack([
        cube_state((0.0, 0.0, 0.15), 0.08),  # at home: 5.8 cm from the cube in the plane
        cube_state((0.05 + 0.021, -0.03, 0.075), 0.08),  # 2.1 cm off in the plane: still flying
        cube_state((0.05 + 0.019, -0.03, 0.075), 0.08),  # 1.9 cm off, above it: lower
        cube_state((0.05 + 0.014, -0.03, 0.039), 0.08),  # pads around it (1.4 cm, 1.9 cm), open: grasp
        cube_state((0.05, -0.03, 0.02 + 0.021), 0.08),  # 2.1 cm above its centre: not around it yet
        cube_state((0.05, -0.03, 0.025), 0.045),  # around it, pads 4.5 cm apart (< 4.6): carry
        cube_state((0.05, -0.03, 0.025), 0.047),  # 4.7 cm apart: not holding yet
        cube_state((0.05 + 0.016, -0.03, 0.025), 0.045),  # closed but 1.6 cm off: not around it
    ])  # fmt: skip
    expected = [MOVE_ABOVE, MOVE_ABOVE, LOWER, GRASP, LOWER, CARRY, GRASP, LOWER]
    np.testing.assert_array_equal(pickplace_subgoals(states), expected)
    assert int(pickplace_subgoals(states[5])) == CARRY  # one state, no batch dim


def test_relabelling_at_the_experts_switching_points() -> None:
    """The expert lowers within 8 mm and closes within (1 cm, 1.2 cm); the planner's points are wider."""
    states = np.stack([
        cube_state((0.05 + 0.009, -0.03, 0.075), 0.08),  # 9 mm off
        cube_state((0.05 + 0.007, -0.03, 0.075), 0.08),  # 7 mm off
        cube_state((0.05 + 0.005, -0.03, 0.035), 0.08),  # 5 mm off, 1.5 cm above its centre
        cube_state((0.05 + 0.005, -0.03, 0.031), 0.08),  # 5 mm off, 1.1 cm above
    ])  # fmt: skip
    np.testing.assert_array_equal(
        pickplace_subgoals(states, EXPERT_TOLERANCES), [MOVE_ABOVE, LOWER, LOWER, GRASP]
    )
    np.testing.assert_array_equal(
        pickplace_subgoals(states, PLANNER_TOLERANCES), [LOWER, LOWER, GRASP, GRASP]
    )


def test_carry_follows_the_cube_in_the_air() -> None:
    lifted = np.array([0.1, 0.1, 0.12])
    state = cube_state((0.1, 0.1, 0.125), 0.041, cube=lifted)
    assert int(pickplace_subgoals(state)) == CARRY


def test_pickplace_rule_refuses_other_states() -> None:
    with pytest.raises(ValueError, match="23-value state"):
        pickplace_subgoals(np.zeros((2, 15)))


def test_relabelling_merges_one_step_flickers_within_an_episode_only() -> None:
    far, aligned = cube_state((0.0, 0.0, 0.15), 0.08), cube_state((0.05, -0.03, 0.075), 0.08)
    states = np.stack([far, far, aligned, far, far, aligned, aligned])
    episodes = np.array([0, 0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(relabel_episodes(states, episodes), [0, 0, 1, 0, 0, 1, 1])
    # the lone "lower" at step 2 joins the run before it; episode 1's first run has no run before it
    np.testing.assert_array_equal(relabel_episodes(states, episodes, min_steps=2), [0, 0, 0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="episode indices"):
        relabel_episodes(states, episodes[:3])


def test_embedding_is_fixed_unit_norm_and_tells_the_subgoals_apart() -> None:
    vectors = embed_text(list(PICKPLACE_SUBGOALS), 32)
    assert vectors.shape == (4, 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    gram = vectors @ vectors.T
    assert np.all(gram[~np.eye(4, dtype=bool)] < 0.99), "two sub-goals embed alike"
    # case and punctuation do not matter; the same text always gives the same vector
    np.testing.assert_array_equal(embed_text("Grasp the CUBE.", 32), vectors[2])
    np.testing.assert_array_equal(embed_text("", 32), np.zeros(32, dtype=np.float32))
    with pytest.raises(ValueError, match="dim"):
        embed_text("x", 0)


def test_vocabulary_parses_answers_and_refuses_other_replies() -> None:
    vocabulary = SubgoalVocabulary(PICKPLACE_SUBGOALS)
    assert vocabulary.parse("I see it. <answer>Grasp the cube.</answer>") == GRASP
    assert vocabulary.parse('  "carry the  cube to the target" ') == CARRY
    with pytest.raises(ActionParseError, match="'jump' is not a sub-goal; answer one of: move above"):
        vocabulary.parse("<answer>jump</answer>")
    with pytest.raises(ValueError, match="distinct"):
        SubgoalVocabulary(["grasp", "Grasp."])
    with pytest.raises(ValueError, match="embed alike"):
        SubgoalVocabulary(["a b", "b a"]).check_embeddings(32)  # a bag of words ignores order


def test_prompt_lists_the_choices_and_the_scene_in_centimetres() -> None:
    vocabulary = SubgoalVocabulary(PICKPLACE_SUBGOALS)
    scene = describe_cube_state(cube_state((0.0, 0.0, 0.15), 0.08))
    assert scene == "gripper at (0, 0, 15) cm, opening 8 cm; cube at (5, -3, 2) cm; target at (10, 10, 15) cm"
    prompt = planner_prompt("Pick it up.", vocabulary, "grasp the cube", scene)
    assert prompt.splitlines()[1] == "sub-goals: " + " | ".join(PICKPLACE_SUBGOALS)
    assert "current sub-goal: grasp the cube" in prompt and "scene: gripper" in prompt


def two_stage_state(cube_xy: tuple[float, float], marker: tuple[float, float] = (0.1, 0.0)) -> np.ndarray:
    """A 26-value two-stage state: the cube at ``cube_xy``, the marker at ``marker`` (m)."""
    state = np.zeros(TWO_STAGE_STATE_DIM, dtype=np.float32)
    state[:23] = cube_state((0.0, 0.0, 0.15), 0.0, np.array([*cube_xy, 0.02]))
    state[7:10] = (-0.1, 0.0, 0.02)  # the red target
    state[WAYPOINT] = (*marker, 0.02)
    return state


def test_two_stage_rule_remembers_the_marker_per_row() -> None:
    start, near, at_marker = (
        two_stage_state((0.0, 0.0)),
        two_stage_state((0.059, 0.0)),
        two_stage_state((0.07, 0.0)),
    )
    reached = np.zeros(2, dtype=bool)
    assert two_stage_subgoals(np.stack([start, near]), reached).tolist() == [0, 0]  # 4.1 cm: not yet
    assert two_stage_subgoals(np.stack([start, at_marker]), reached).tolist() == [0, 1]  # 3 cm: reached
    # row 1 back at the start: the same state as row 0's, a different sub-goal
    assert two_stage_subgoals(np.stack([start, start]), reached).tolist() == [0, 1]
    with pytest.raises(ValueError, match="26-value"):
        two_stage_subgoals(np.zeros((1, 23)), np.zeros(1, dtype=bool))


def test_two_stage_relabelling_switches_at_the_first_step_at_the_marker_of_each_episode() -> None:
    start, at_marker = two_stage_state((0.0, 0.0)), two_stage_state((0.08, 0.0))
    states = np.stack([start, at_marker, start, start, at_marker, start])
    episodes = np.array([0, 0, 0, 1, 1, 1])
    assert relabel_two_stage(states, episodes).tolist() == [0, 1, 1, 0, 1, 1]
    with pytest.raises(ValueError, match="episode indices"):
        relabel_two_stage(states, episodes[:3])
