"""``game_solver``: plays every solvable game through the platform's evaluation path, from text."""

from __future__ import annotations

from pathlib import Path

import minari
import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.registry import POLICIES
from omnigym.envs.games.experts import SOLVABLE_GAMES, GameSolver, GameSolverConfig, action_words, solve_text
from omnigym.platform.datasets import collect_dataset
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.vec_env import make_env

DETERMINISTIC_GAMES = {
    "Sokoban": {},
    "Maze": {},
    "FrozenLake": {"is_slippery": False},
    "NumberLine": {},
    "EZPoints": {},
    "Points24": {},
}
"""Games the solver wins every time (no chance after the deal)."""


def solver_for(env_id: str, **kwargs: object) -> GameSolver:
    env = make_env(env_id, **kwargs)
    policy = POLICIES.build("game_solver", GameSolverConfig(), env.observation_space, env.action_space)
    env.close()
    assert isinstance(policy, GameSolver)
    return policy


def test_every_game_with_a_solver_is_listed_under_its_header() -> None:
    for name in SOLVABLE_GAMES:
        env = make_env(f"omnigym/{name}-v0")
        obs, _ = env.reset(seed=0)
        assert obs["text"].startswith(f"game: {name}\n")
        env.close()


@pytest.mark.parametrize("action_space", ["discrete", "text"])
@pytest.mark.parametrize("game", list(DETERMINISTIC_GAMES))
def test_solver_wins_every_seeded_episode(game: str, action_space: str) -> None:
    kwargs = {**DETERMINISTIC_GAMES[game], "action_space": action_space, "obs_keys": ("text",)}
    env_id = f"omnigym/{game}-v0"
    result = evaluate_policy(solver_for(env_id, **kwargs), env_id, episodes=30, num_envs=4, env_kwargs=kwargs)
    summary = result.summary()
    assert summary["success_rate"] == 1.0, summary
    assert summary["action_valid_mean"] == 1.0, summary


def test_solver_beats_random_play_at_blackjack_and_on_slippery_ice() -> None:
    for game, episodes in (("Blackjack", 400), ("FrozenLake", 200)):
        env_id = f"omnigym/{game}-v0"
        solved = evaluate_policy(solver_for(env_id), env_id, episodes=episodes).summary()
        random = evaluate_policy(
            POLICIES.build("random", POLICIES.get("random").config_class(), *spaces_of(env_id)),
            env_id,
            episodes=episodes,
            deterministic=False,
        ).summary()
        assert solved["return_mean"] > random["return_mean"] + 0.15, (game, solved, random)


def spaces_of(env_id: str) -> tuple[spaces.Dict, spaces.Space]:
    env = make_env(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def test_text_answers_use_the_observations_vocabulary() -> None:
    env = make_env("omnigym/Sokoban-v0", action_space="text")
    obs, _ = env.reset(seed=3)
    assert action_words(obs["text"]) == ["up", "down", "left", "right"]
    step = solver_for("omnigym/Sokoban-v0", action_space="text").act(
        {"text": np.array([obs["text"]], dtype=object)}
    )
    assert step.action == [action_words(obs["text"])[solve_text(obs["text"])]]
    discrete = solver_for("omnigym/Sokoban-v0").act({"text": np.array([obs["text"]], dtype=object)})
    assert torch.equal(discrete.action, torch.tensor([solve_text(obs["text"])]))


def test_solver_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="no solver for 'Atari-Pong'"):
        solve_text("game: Atari-Pong\nlives: 3")
    with pytest.raises(ValueError, match="no solver for 'Atari-Pong'"):
        action_words("game: Atari-Pong\nlives: 3")  # no actions line and no default vocabulary
    with pytest.raises(ValueError, match="'text' observation"):
        POLICIES.build("game_solver", GameSolverConfig(), *spaces_of_keys("omnigym/Maze-v0", ("image",)))


def spaces_of_keys(env_id: str, keys: tuple[str, ...]) -> tuple[spaces.Dict, spaces.Space]:
    env = make_env(env_id, obs_keys=keys)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def test_solver_demonstrations_become_a_minari_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    kwargs = {"obs_keys": ("image", "text")}
    summary = collect_dataset(
        solver_for("omnigym/Sokoban-v0", **kwargs), "omnigym/Sokoban-v0", "omnigym/sokoban-solver-v0",
        episodes=5, env_kwargs=kwargs,
    )  # fmt: skip
    assert summary.episodes == 5
    dataset = minari.load_dataset("omnigym/sokoban-solver-v0")
    for episode in dataset.iterate_episodes():
        assert episode.terminations[-1] and not episode.truncations.any()
        assert episode.rewards[-1] == pytest.approx(-0.1 + 1.0 + 10.0)  # the last push finishes the room
        assert episode.observations["image"].shape[1:] == (96, 96, 3)


def test_text_answers_without_instructions_use_the_default_vocabulary() -> None:
    """A learner may see states only (instructions=False); the solver still answers in words."""
    env = make_env("omnigym/NumberLine-v0", action_space="text", instructions=False)
    solver = solver_for("omnigym/NumberLine-v0", action_space="text", instructions=False)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        assert "actions:" not in obs["text"] and "rules:" not in obs["text"]
        done = False
        while not done:
            (word,) = solver.act({"text": np.array([obs["text"]], dtype=object)}).action
            obs, _, done, _, info = env.step(word)
            assert info["action_valid"], info["action_error"]
        assert info["is_success"]
    assert action_words("game: Maze\nboard:\n#####") == ["up", "down", "left", "right"]
