"""The GameEnv base: observation keys, the two action spaces, invalid actions, tiles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from gymnasium import spaces

from omnigym.core.text_actions import WordGrammar
from omnigym.envs.games.base import GameConfig, GameEnv, Outcome, game_name, solver_text_state
from omnigym.envs.games.tiles import TileSheet, disc, fill


@dataclass
class CounterConfig(GameConfig):
    goal: int = 3


class CounterGame(GameEnv):
    """Count from a random start up to ``goal``; ``down`` below zero is against the rules."""

    game: ClassVar[str] = "Counter"
    rules: ClassVar[str] = "Reach the goal."
    config_class: ClassVar[type[GameConfig]] = CounterConfig
    has_state: ClassVar[bool] = True
    config: CounterConfig

    def make_grammar(self) -> WordGrammar:
        return WordGrammar(["up", "down"], max_actions=3)

    def image_shape(self) -> tuple[int, int, int]:
        return (4, 4, 3)

    def state_size(self) -> int:
        return 1

    def new_game(self, rng: np.random.Generator) -> None:
        self.count = int(rng.integers(0, 2))

    def apply(self, action: int) -> Outcome:
        if action == 1 and self.count == 0:
            return Outcome(error="cannot count below zero")
        self.count += 1 if action == 0 else -1
        won = self.count == self.config.goal
        return Outcome(reward=1.0 if won else 0.0, terminated=won, success=won)

    def draw(self) -> np.ndarray:
        return np.full((4, 4, 3), self.count * 40, np.uint8)

    def state_text(self) -> str:
        return f"count: {self.count}"

    def state_vector(self) -> np.ndarray:
        return np.array([self.count], np.float32)


def test_observation_keys_and_text_layout() -> None:
    env = CounterGame(obs_keys=("image", "text", "state"))
    assert set(env.observation_space.spaces) == {"image", "text", "state"}
    obs, info = env.reset(seed=0)
    assert info == {"is_success": False, "action_valid": True, "action_error": ""}
    assert obs["text"] == f"game: Counter\nrules: Reach the goal.\nactions: up | down\ncount: {env.count}"
    assert game_name(obs["text"]) == "Counter"
    assert solver_text_state(obs["text"]) == f"count: {env.count}"
    assert CounterGame(instructions=False).reset(seed=0)[0]["text"] == f"game: Counter\ncount: {env.count}"


def test_discrete_actions_and_rule_breaking_moves() -> None:
    env = CounterGame(obs_keys=("state",))
    assert env.action_space == spaces.Discrete(2)
    env.reset(seed=0)
    env.count = 0
    obs, reward, terminated, _, info = env.step(1)
    assert (reward, terminated, info["action_valid"]) == (-0.1, False, False)
    assert info["action_error"] == "cannot count below zero"
    assert obs["state"][0] == 0
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(2)


def test_text_actions_apply_in_order_and_stop_at_the_end_or_an_error() -> None:
    env = CounterGame(action_space="text", obs_keys=("text",), invalid_action_penalty=-0.5)
    assert isinstance(env.action_space, spaces.Text)
    env.reset(seed=0)
    env.count = 1
    _, reward, terminated, _, info = env.step("<answer>up, up, up</answer>")  # stops at the goal
    assert (env.count, reward, terminated, info["is_success"]) == (3, 1.0, True, True)
    env.count = 1
    _, reward, _, _, info = env.step("down, down, up")  # the second down breaks the rules
    assert (env.count, reward, info["action_valid"]) == (0, -0.5, False)
    _, reward, _, _, info = env.step("sideways")
    assert (env.count, reward, info["action_valid"]) == (0, -0.5, False)
    assert "unknown action 'sideways'" in info["action_error"]


def test_config_errors() -> None:
    with pytest.raises(ValueError, match="action_space"):
        CounterGame(action_space="continuous")
    with pytest.raises(ValueError, match="obs_keys"):
        CounterGame(obs_keys=("pixels",))
    with pytest.raises(ValueError, match="render_mode"):
        CounterGame(render_mode="human")


def test_step_before_reset_and_render_modes() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        CounterGame().step(0)
    env = CounterGame(render_mode="ansi")
    assert env.render() is None
    env.reset(seed=0)
    assert env.render().startswith("game: Counter")


def test_tile_sheet_lays_tiles_out_row_major() -> None:
    sheet = TileSheet(
        3, [((0, 0, 0), []), ((9, 9, 9), [fill((10, 20, 30))]), ((0, 0, 0), [disc((255, 0, 0), 0.2)])]
    )
    frame = sheet.draw(np.array([[0, 1], [2, 0]]))
    assert frame.shape == (6, 6, 3)
    np.testing.assert_array_equal(frame[0:3, 3:6], np.broadcast_to([10, 20, 30], (3, 3, 3)))
    assert tuple(frame[4, 1]) == (255, 0, 0) and tuple(frame[3, 0]) == (0, 0, 0)
    with pytest.raises(ValueError, match="tile size"):
        TileSheet(0, [])
