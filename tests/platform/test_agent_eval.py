"""``omnigym eval-agent``: agents over a suite, the reference rows, invalid actions, the files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from omnigym.platform.agent_eval import (
    GAME_IDS,
    evaluate_agents,
    oracle_agent,
    random_agent,
    results_markdown,
    suite_env_ids,
)
from omnigym.platform.cli import main

ENVS = ["omnigym/NumberLine-v0", "omnigym/GUI-ClickButton-v0"]


def test_suites() -> None:
    assert len(suite_env_ids("gui")) == 12 and all(i.startswith("omnigym/GUI-") for i in suite_env_ids("gui"))
    assert suite_env_ids("games") == list(GAME_IDS)
    assert suite_env_ids(" omnigym/Maze-v0, CartPole-v1 ") == ["omnigym/Maze-v0", "CartPole-v1"]
    with pytest.raises(ValueError, match="--suite"):
        suite_env_ids(" , ")


def test_oracle_beats_random_and_invalid_actions_are_counted() -> None:
    agents = {
        "oracle": oracle_agent,
        "random": lambda env_id, kwargs: random_agent(env_id, kwargs, seed=0),
        "babbler": lambda env_id, kwargs: lambda obs: ["<answer>jump</answer>"] * len(obs["text"]),
    }
    results = {(r.agent, r.env_id): r for r in evaluate_agents(agents, ENVS, episodes=8)}
    for env_id in ENVS:
        oracle, random = results["oracle", env_id], results["random", env_id]
        assert oracle.success_rate == 1.0 and oracle.invalid_action_rate == 0.0
        assert oracle.mean_steps < random.mean_steps and random.invalid_action_rate == 0.0  # well-formed
        assert oracle.parts_per_step == 1.0  # one action part per step for a scripted policy
    babbler = results["babbler", "omnigym/NumberLine-v0"]
    assert babbler.invalid_action_rate == 1.0 and babbler.success_rate == 0.0
    assert babbler.mean_steps == 20  # every answer invalid until the time limit
    assert results["babbler", "omnigym/GUI-ClickButton-v0"].invalid_action_rate == 1.0


def test_an_agent_that_does_not_fit_an_env_is_an_error_row(tmp_path: Path) -> None:
    code = main([
        "eval-agent", "--suite", ",".join(ENVS), "--policy", "game_solver", "--episodes", "3",
        "--out", str(tmp_path),
    ])  # fmt: skip
    assert code == 0
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [(r["agent"], r["env_id"]) for r in rows] == [
        (agent, env) for env in ENVS for agent in ("oracle", "random", "game_solver")
    ]
    failed = [r for r in rows if r["error"]]
    assert len(failed) == 1 and failed[0]["env_id"] == "omnigym/GUI-ClickButton-v0"
    assert math.isnan(failed[0]["success_rate"])
    markdown = (tmp_path / "results.md").read_text()
    assert "| game_solver | omnigym/NumberLine-v0 | 3 | 1.00 |" in markdown
    assert "error: " in markdown and "| oracle | 2 | 1.00 |" in markdown


def test_results_markdown_has_one_row_per_pair_and_a_summary_per_agent() -> None:
    results = evaluate_agents({"oracle": oracle_agent}, ["omnigym/Maze-v0"], episodes=2)
    markdown = results_markdown(results)
    assert markdown.count("| oracle |") == 2


def test_game_kwargs_reach_the_games_only() -> None:
    """Agents trained on the state alone are scored on instruction-less games; GUI envs are untouched."""
    seen: dict[str, str] = {}

    def recorder(env_id: str, kwargs: dict) -> object:
        oracle = oracle_agent(env_id, kwargs)

        def act(obs: dict) -> object:
            seen[env_id] = str(obs["text"][0])
            return oracle.predict(obs)

        return act

    game_kwargs = {"instructions": False}
    results = evaluate_agents({"oracle": recorder}, ENVS, episodes=2, game_kwargs=game_kwargs)
    assert all(r.success_rate == 1.0 for r in results)  # the solver answers without the actions line
    assert "rules:" not in seen["omnigym/NumberLine-v0"] and "actions:" not in seen["omnigym/NumberLine-v0"]
    assert seen["omnigym/GUI-ClickButton-v0"].startswith("instruction:")
    random = random_agent("omnigym/NumberLine-v0", {"action_space": "text", **game_kwargs}, seed=0)
    assert set(random({"text": [seen["omnigym/NumberLine-v0"]] * 20})) == {"-", "+"}


def test_an_agent_that_fails_while_acting_is_an_error_row() -> None:
    def crashing(env_id: str, kwargs: dict) -> object:
        def act(obs: dict) -> object:
            raise ValueError("a prompt of 364 tokens does not fit max_prompt_tokens=160")

        return act

    results = evaluate_agents({"oracle": oracle_agent, "crashing": crashing}, ENVS, episodes=2)
    failed = [r for r in results if r.error]
    assert [r.agent for r in failed] == ["crashing", "crashing"] and "max_prompt_tokens" in failed[0].error
    assert all(r.success_rate == 1.0 for r in results if r.agent == "oracle")  # the run went on
