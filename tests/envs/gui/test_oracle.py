"""``gui_oracle``: solves every family through the platform's evaluation path, from text alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from gymnasium import spaces

from omnigym.core.registry import POLICIES
from omnigym.envs.gui.env import GUIEnv
from omnigym.envs.gui.families import FAMILIES
from omnigym.envs.gui.oracle import GUIOracle, GUIOracleConfig, parse_observation, solve
from omnigym.envs.gui.widgets import Slider
from omnigym.platform.evaluate import evaluate_policy


def oracle() -> GUIOracle:
    env = GUIEnv()
    return POLICIES.build("gui_oracle", GUIOracleConfig(), env.observation_space, env.action_space)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_oracle_solves_99_percent_of_100_seeded_episodes(family: str) -> None:
    result = evaluate_policy(
        oracle(), f"omnigym/GUI-{family}-v0", episodes=100, num_envs=4, env_kwargs={"obs_keys": ("text",)}
    )
    summary = result.summary()
    assert summary["success_rate"] >= 0.99, summary
    assert max(result.lengths) < FAMILIES[family].max_steps


@pytest.mark.parametrize("family", list(FAMILIES))
def test_oracle_with_screenshots_at_512(family: str) -> None:
    result = evaluate_policy(
        oracle(), f"omnigym/GUI-{family}-v0", episodes=10, env_kwargs={"width": 512, "height": 512}
    )
    assert result.summary()["success_rate"] == 1.0


def test_oracle_recovers_from_wrong_states() -> None:
    env = GUIEnv(task="LoginUser", obs_keys=("text",))
    obs, _ = env.reset(seed=0)
    env.step(solve(obs["text"]))  # focus the username field
    obs, *_ = env.step('type("zzz")')  # wrong text in it
    for _ in range(30):
        obs, reward, terminated, _, info = env.step(solve(obs["text"]))
        if terminated:
            break
    assert info["is_success"] and reward == 1.0

    env = GUIEnv(task="ClickCheckboxes", obs_keys=("text",))
    obs, _ = env.reset(seed=5)
    assert env.screen is not None
    boxes = [w for w in env.screen.widgets if w.role == "checkbox"]
    for box in boxes:  # tick every box first
        obs, *_ = env.step(f"click({box.rect.center[0]}, {box.rect.center[1]})")
    for _ in range(10):
        obs, reward, terminated, _, info = env.step(solve(obs["text"]))
        if terminated:
            break
    assert info["is_success"]


def run_oracle(env: GUIEnv, obs: dict, steps: int = 10) -> list[str]:
    """Act with the oracle until the episode ends; the actions taken."""
    actions = []
    for _ in range(steps):
        actions.append(solve(obs["text"]))
        obs, _, terminated, _, info = env.step(actions[-1])
        if terminated:
            assert info["is_success"]
            return actions
    raise AssertionError(f"not solved in {steps} steps: {actions}")


def test_oracle_fixes_a_slider_near_the_target_with_arrow_keys() -> None:
    env = GUIEnv(task="UseSlider", obs_keys=("text",))
    obs, _ = env.reset(seed=1)
    assert env.screen is not None
    slider = env.screen["slider"]
    assert isinstance(slider, Slider)
    target = int(obs["text"].split("Set the slider to ")[1].split()[0])
    near = target - 2 if target >= 2 else target + 2
    y = slider.rect.center[1]
    obs, *_ = env.step(f"drag({slider.x_of(slider.value)}, {y}, {slider.x_of(near)}, {y})")
    assert slider.value == near
    actions = run_oracle(env, obs)
    assert actions[:2] == ['key("ArrowRight")'] * 2 or actions[:2] == ['key("ArrowLeft")'] * 2


def test_oracle_picks_from_an_open_list_and_closes_a_dialog_first() -> None:
    env = GUIEnv(task="SelectOption", obs_keys=("text",))
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        assert env.screen is not None
        if "combobox" in obs["text"]:
            break
    obs, *_ = env.step('key("Tab")')
    obs, *_ = env.step('key("Enter")')  # the list is open (and the dropdown focused)
    assert "option" in obs["text"]
    actions = run_oracle(env, obs)
    assert len(actions) == 2  # the option, then Submit

    env = GUIEnv(task="CloseDialog", obs_keys=("text",))
    obs, _ = env.reset(seed=3)
    assert len(run_oracle(env, obs)) == 2


def test_oracle_needs_text_observations_and_text_actions() -> None:
    text_obs = spaces.Dict({"text": spaces.Text(100)})
    with pytest.raises(ValueError, match="text"):
        GUIOracle(GUIOracleConfig(), spaces.Dict({"image": spaces.Box(0, 255, (4, 4, 3))}), spaces.Text(10))
    with pytest.raises(ValueError, match="Text action"):
        GUIOracle(GUIOracleConfig(), text_obs, spaces.Discrete(2))


def test_oracle_rejects_unknown_instructions() -> None:
    with pytest.raises(ValueError, match="no solver"):
        solve("instruction: Juggle three balls.\nelements:\n")


def test_oracle_episodes_become_a_minari_dataset_with_text_actions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    minari = pytest.importorskip("minari")
    from omnigym.platform.datasets import collect_dataset

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    summary = collect_dataset(
        oracle(), "omnigym/GUI-EnterText-v0", "omnigym/test-gui-enter-text-v0", episodes=2,
        env_kwargs={"obs_keys": ("text",)},
    )  # fmt: skip
    assert summary.episodes == 2 and summary.steps == 6
    episode = next(iter(minari.load_dataset("omnigym/test-gui-enter-text-v0").iterate_episodes()))
    assert [str(a) for a in episode.actions][1].startswith('type("')
    assert episode.rewards[-1] == 1.0


def test_search_results_appear_after_searching_and_a_wrong_query_fails() -> None:
    env = GUIEnv(task="SearchAndClick", obs_keys=("text",))
    obs, _ = env.reset(seed=0)
    assert env.screen is not None
    assert len(parse_observation(obs["text"])[1]) == 3  # window, field, Search
    field = env.screen["query"]
    env.step(f"click({field.rect.center[0]}, {field.rect.center[1]})")
    obs, reward, terminated, *_ = env.step('type("zz")')
    obs, reward, terminated, *_ = env.step('key("Enter")')  # searches (the default button)
    results = [e for e in parse_observation(obs["text"])[1] if e.label.startswith("zz ")]
    assert len(results) >= 3 and not terminated and reward == 0.0
    obs, reward, terminated, _, info = env.step(f"click({results[0].center[0]}, {results[0].center[1]})")
    assert terminated and not info["is_success"] and reward == -1.0


def test_oracle_searches_again_after_a_wrong_query() -> None:
    env = GUIEnv(task="SearchAndClick", obs_keys=("text",))
    obs, _ = env.reset(seed=1)
    assert env.screen is not None
    field = env.screen["query"]
    env.step(f"click({field.rect.center[0]}, {field.rect.center[1]})")
    env.step('type("zz")')
    obs, *_ = env.step('key("Enter")')
    assert len(run_oracle(env, obs)) == 5  # 2 Backspaces, type, Search, the result


def test_fill_form_fails_with_a_wrong_value_and_the_oracle_fixes_one() -> None:
    env = GUIEnv(task="FillForm", obs_keys=("text",))
    obs, _ = env.reset(seed=2)
    assert env.screen is not None
    submit = env.screen["submit"]
    _, reward, terminated, _, info = env.step(f"click({submit.rect.center[0]}, {submit.rect.center[1]})")
    assert terminated and not info["is_success"] and reward == -1.0
    obs, _ = env.reset(seed=2)
    field = next(e for e in parse_observation(obs["text"])[1] if e.role == "textbox")
    env.step(f"click({field.center[0]}, {field.center[1]})")
    obs, *_ = env.step('type("wrong")')
    run_oracle(env, obs, steps=25)
