"""``game_solver``: plays every solvable game from its ``text`` observation.

Each game's solver (``GameEnv.solve``) reads the state part of the text and returns the next
discrete action: optimal for Sokoban and Maze (BFS), Points24/EZPoints (search), FrozenLake
(value iteration) and Blackjack (the exact infinite-deck decision); see docs/envs/games.md. The
policy answers in the env's own format: an index for ``action_space="discrete"``, the action's
word for ``"text"`` (read from the observation's ``actions:`` line, or the game's default
vocabulary when the env was made with ``instructions=False``). It produces demonstrations
(``omnigym collect --policy game_solver``) and validates that generated levels are solvable.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_TEXT, Obs, PolicyStep
from omnigym.envs.games.base import GameEnv, game_name, solver_text_state

SOLVABLE_GAMES = {
    "Sokoban": "omnigym.envs.games.sokoban:SokobanEnv",
    "Maze": "omnigym.envs.games.maze:MazeEnv",
    "FrozenLake": "omnigym.envs.games.frozenlake:FrozenLakeEnv",
    "NumberLine": "omnigym.envs.games.cards:NumberLineEnv",
    "EZPoints": "omnigym.envs.games.cards:EZPointsEnv",
    "Points24": "omnigym.envs.games.cards:Points24Env",
    "Blackjack": "omnigym.envs.games.blackjack:BlackjackEnv",
}
"""The ``game:`` header of each game with a solver -> its env class."""
ACTIONS_PREFIX = "actions: "


def game_class(name: str) -> type[GameEnv]:
    """The env class of the game called ``name`` (its ``game:`` header)."""
    if name not in SOLVABLE_GAMES:
        raise ValueError(f"game_solver has no solver for {name!r}; solvable: {', '.join(SOLVABLE_GAMES)}")
    module, cls = SOLVABLE_GAMES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def action_words(text: str) -> list[str]:
    """The action vocabulary in index order, from a ``text`` observation's ``actions:`` line.

    The line reads ``w0 | w1 | ...``, then an optional ``; note``. A text without it (an env made
    with ``instructions=False``) gets the vocabulary of the game's default configuration.
    """
    for line in text.split("\n"):
        if line.startswith(ACTIONS_PREFIX):
            words = line[len(ACTIONS_PREFIX) :].split("; ", 1)[0]
            return [word.strip() for word in words.split(" | ")]
    return list(default_action_words(game_name(text)))


@cache
def default_action_words(name: str) -> tuple[str, ...]:
    """The action words, in index order, of game ``name`` made with its default configuration."""
    env = game_class(name)()
    try:
        return tuple(env.action_word(index) for index in range(env.grammar.num_actions))
    finally:
        env.close()


def solve_text(text: str) -> int:
    """The solver's next discrete action for one game ``text`` observation."""
    return game_class(game_name(text)).solve(solver_text_state(text))


@dataclass
class GameSolverConfig(PolicyConfig):
    """``game_solver`` has no settings."""

    type: str = "game_solver"


class GameSolver(Policy):
    """Plays any solvable game from the ``text`` observation; deterministic either way."""

    name: ClassVar[str] = "game_solver"
    config_class: ClassVar[type[PolicyConfig]] = GameSolverConfig
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Text)
    env_kwargs: ClassVar[dict[str, Any]] = {"instructions": True}

    def __init__(
        self, config: PolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(observation_space.spaces.get(OBS_TEXT), spaces.Text):
            raise ValueError("game_solver reads a game's 'text' observation; include 'text' in obs_keys")
        if not isinstance(action_space, (spaces.Discrete, spaces.Text)):
            raise ValueError(f"game_solver acts in a Discrete or Text action space, not {action_space}")
        self._text_actions = isinstance(action_space, spaces.Text)

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """One action per observation: indices ``[B]`` (Discrete) or a list of words (Text)."""
        texts: Any = obs[OBS_TEXT]
        rows = (
            [texts] if isinstance(texts, str) else [str(t) for t in np.asarray(texts, dtype=object).ravel()]
        )
        indices = [solve_text(text) for text in rows]
        action: Any = (
            [action_words(text)[index] for text, index in zip(rows, indices, strict=True)]
            if self._text_actions
            else torch.tensor(indices, dtype=torch.long)
        )
        batch = len(rows)
        return PolicyStep(
            action=action, logprob=torch.zeros(batch, 1), mask=torch.ones(batch, 1, dtype=torch.bool)
        )
