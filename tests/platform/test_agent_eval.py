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
    reference_agents,
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


# --- one load per agent, policy kwargs, warnings, error text (issue 27, item 8) ----------------


def test_a_shared_agent_is_built_once_for_envs_with_the_same_spaces() -> None:
    from omnigym.platform.agent_eval import SharedAgent

    built: list[str] = []

    def counting(env_id: str, kwargs: dict) -> object:
        built.append(env_id)
        return oracle_agent(env_id, kwargs)

    gui = ["omnigym/GUI-ClickButton-v0", "omnigym/GUI-ClickCheckboxes-v0", "omnigym/GUI-EnterText-v0"]
    shared = SharedAgent(counting)
    results = evaluate_agents({"oracle": shared}, gui, episodes=2)
    assert built == gui[:1] and shared.builds == 1  # the GUI families share their spaces
    assert all(r.success_rate == 1.0 for r in results)
    evaluate_agents({"oracle": shared}, ["omnigym/Maze-v0", "omnigym/GUI-LoginUser-v0"], episodes=1)
    assert built == [*gui[:1], "omnigym/Maze-v0", "omnigym/GUI-LoginUser-v0"]  # new spaces: rebuilt


def test_eval_agent_loads_each_agent_once_for_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A VLM over the games loads once although every game's frame has its own size."""
    import omnigym.platform.cli.agents as agents_cli
    from omnigym.platform.cli.policy_spec import resolve_policy

    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path / "cache"))
    calls: list[tuple[str, str, dict | None]] = []

    def counting(spec: str, env_id: str, env_kwargs: dict | None = None, **kwargs: object) -> object:
        calls.append((spec, env_id, kwargs.get("policy_kwargs")))  # type: ignore[arg-type]
        return resolve_policy(spec, env_id, env_kwargs, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(agents_cli, "resolve_policy", counting)
    suite = "omnigym/NumberLine-v0,omnigym/Maze-v0,omnigym/FrozenLake-v0"
    code = main([
        "eval-agent", "--suite", suite, "--policy", "tiny:idefics3", "--policy", "game_solver",
        "--episodes", "1", "--no-reference", "--out", str(tmp_path / "out"),
        "--policy-kwargs", '{"max_new_tokens": 3, "temperature": 0, "max_prompt_tokens": 600}',
    ])  # fmt: skip
    assert code == 0
    assert [c[:2] for c in calls if c[0] == "tiny:idefics3"] == [("tiny:idefics3", "omnigym/NumberLine-v0")]
    assert len([c for c in calls if c[0] == "game_solver"]) == 3  # a cheap solver, rebuilt for new spaces
    assert calls[0][2] == {"max_new_tokens": 3, "max_prompt_tokens": 600}  # temperature 0: greedy, dropped
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    vlm_rows = [r for r in rows if r["agent"] == "tiny:idefics3"]
    assert len(vlm_rows) == 3 and not any(r["error"] for r in vlm_rows)
    assert all(r["parts_per_step"] == 3 for r in vlm_rows)  # max_new_tokens reached the policy


def test_policy_kwargs_reach_the_vlm_and_unknown_keys_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from omnigym.platform.cli.policy_spec import resolve_policy

    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path))
    kwargs = {"action_space": "text"}
    vlm = resolve_policy(
        "tiny:idefics3", "omnigym/NumberLine-v0", kwargs, policy_kwargs={"max_new_tokens": 5}
    )
    assert vlm.config.max_new_tokens == 5 and vlm.config.obs_keys == ("image", "text")  # type: ignore[attr-defined]
    capsys.readouterr()
    argv = ["eval-agent", "--suite", "omnigym/Maze-v0", "--policy", "tiny:idefics3", "--out", str(tmp_path)]
    assert main([*argv, "--policy-kwargs", '{"max_new_tokns": 8}']) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "max_new_tokns" in err and "max_new_tokens" in err
    assert "Valid keys" in err
    assert main([*argv, "--policy-kwargs", "[8]"]) == 2
    assert "JSON object" in capsys.readouterr().err
    assert main([*argv, "--policy-kwargs", '{"max_new_tokens": "many"}']) == 2
    assert "max_new_tokens" in capsys.readouterr().err


def test_warnings_are_summarised_once_by_kind(capsys: pytest.CaptureFixture[str]) -> None:
    import logging
    import warnings

    from omnigym.platform.agent_eval import WarningTally

    calls = []

    def noisy(env_id: str, kwargs: dict) -> object:
        oracle = oracle_agent(env_id, kwargs)

        def act(obs: dict) -> object:
            calls.append(1)
            warnings.warn(
                f"a prompt of {len(obs['text'][0])} tokens was truncated", UserWarning, stacklevel=1
            )
            logging.getLogger("transformers.generation").warning("Setting pad_token_id to eos_token_id")
            return oracle.predict(obs)

        return act

    library = logging.getLogger("transformers")
    before = (library.propagate, list(library.handlers))
    with WarningTally() as tally:
        results = evaluate_agents({"noisy": noisy}, ["omnigym/Maze-v0"], episodes=3)
    steps = len(calls)
    assert results[0].success_rate == 1.0 and steps > 1
    summary = tally.summary()
    assert summary is not None and summary.startswith(f"{2 * steps} warnings (2 kinds): ")
    assert f"UserWarning: a prompt of N tokens was truncated (x{steps})" in summary
    assert f"transformers: Setting pad_token_id to eos_token_id (x{steps})" in summary
    assert "truncated" not in capsys.readouterr().err  # held back, not printed per step
    assert WarningTally().summary() is None
    assert (library.propagate, library.handlers) == before  # the logger is restored


def test_eval_agent_prints_the_warning_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval-agent", "--suite", "omnigym/Maze-v0", "--episodes", "1", "--out", str(tmp_path)]
    assert main([*argv, "--no-reference", "--policy", "game_solver"]) == 0
    assert "warnings (" not in capsys.readouterr().err  # none raised: no summary line


def test_an_error_row_keeps_the_exception_type_message_and_traceback(tmp_path: Path) -> None:
    from omnigym.platform.agent_eval import write_results

    def crashing(env_id: str, kwargs: dict) -> object:
        def act(obs: dict) -> object:
            raise RuntimeError("CUDA out of memory while generating")

        return act

    results = evaluate_agents({"crashing": crashing}, ["omnigym/Maze-v0"], episodes=1)
    _, data = write_results(results, tmp_path)
    (row,) = json.loads(data.read_text())
    assert row["error"] == "CUDA out of memory while generating" and row["error_type"] == "RuntimeError"
    assert row["traceback"].startswith("Traceback (most recent call last):")
    assert "in act" in row["traceback"] and "RuntimeError: CUDA out of memory" in row["traceback"]


def test_a_misspelt_env_id_stops_the_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = "omnigym/Maze-v0,omnigym/Mazes-v0"
    argv = ["eval-agent", "--suite", suite, "--episodes", "1", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--suite: unknown env id 'omnigym/Mazes-v0'" in err and not (tmp_path / "results.json").exists()


def test_driving_suite_scores_pdms_beside_pdm_closed_and_constant_velocity(tmp_path: Path) -> None:
    assert suite_env_ids("driving") == ["omnigym/DrivingVLM-v0"]
    scenes = {"num_scenes": 4, "cache_dir": str(tmp_path / "scenes"), "scene": {"episode_seconds": 4.0}}
    agents = {
        **reference_agents("driving"),
        "babbler": lambda env_id, kwargs: lambda obs: ["<answer>fly</answer>"] * len(obs["text"]),
    }
    results = {r.agent: r for r in evaluate_agents(agents, ["omnigym/DrivingVLM-v0"], 4, game_kwargs=scenes)}
    assert list(results) == ["pdm_closed", "constant_velocity", "babbler"]
    expert, floor, babbler = results["pdm_closed"], results["constant_velocity"], results["babbler"]
    assert expert.scores["pdms"] > floor.scores["pdms"] and expert.invalid_action_rate == 0.0
    assert set(expert.scores) >= {"pdms", "epdms", "nc", "dac", "ttc", "ep", "c", "progress"}
    assert babbler.invalid_action_rate == 1.0 and 0.0 <= babbler.scores["pdms"] <= 1.0  # kept its lane
    markdown = results_markdown(list(results.values()))
    assert "| PDMS | EPDMS | NC | DAC | TTC | EP | C |" in markdown
    assert f"| {expert.scores['pdms']:.3f} |" in markdown.splitlines()[2]


def test_manipulation_suite_scores_the_experts_above_random_with_distance_and_coverage() -> None:
    assert suite_env_ids("manipulation") == [
        "omnigym/ReachPixels-v0", "omnigym/PushCubePixels-v0", "omnigym/PickPlacePixels-v0",
        "omnigym/PushTPixels-v0",
    ]  # fmt: skip
    envs = ["omnigym/ReachPixels-v0", "omnigym/PushTPixels-v0"]
    results = {(r.agent, r.env_id): r for r in evaluate_agents(reference_agents("manipulation"), envs, 2)}
    reach_expert, reach_random = results["oracle", envs[0]], results["random", envs[0]]
    assert reach_expert.success_rate == 1.0 and reach_random.success_rate < 1.0
    assert reach_expert.scores["distance"] < reach_random.scores["distance"]
    pusht_expert, pusht_random = results["oracle", envs[1]], results["random", envs[1]]
    assert pusht_expert.scores["coverage"] > pusht_random.scores["coverage"] + 0.3
    markdown = results_markdown(list(results.values()))
    assert "| COVERAGE | DISTANCE |" in markdown


def test_eval_agent_records_each_agent_on_each_env_side_by_side(tmp_path: Path) -> None:
    from omnigym.platform.episodes import Recording

    env_id = "omnigym/GUI-ClickButton-v0"
    argv = ["eval-agent", "--suite", env_id, "--episodes", "2", "--out", str(tmp_path / "out")]
    assert main([*argv, "--record", str(tmp_path / "rec")]) == 0
    oracle = Recording(tmp_path / "rec" / "oracle-omnigym_GUI-ClickButton-v0")
    random = Recording(tmp_path / "rec" / "random-omnigym_GUI-ClickButton-v0")
    assert [e.seed for e in oracle.episodes] == [e.seed for e in random.episodes] == [0, 1]
    assert oracle.manifest["agent"] == "oracle" and all(
        e.metrics["is_success"] == 1.0 for e in oracle.episodes
    )
    first = oracle.episode(0), random.episode(0)
    assert first[0].observations["text"][0] == first[1].observations["text"][0]  # the same screen
    assert main([*argv, "--record", str(tmp_path / "rec")]) == 2  # a used directory is refused
