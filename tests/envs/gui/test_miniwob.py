"""Real MiniWoB++ tasks in headless Chromium through the omnigym GUI adapter (marker ``browser``).

A scripted policy reads only the ``text`` observation (instruction + accessibility tree) and writes
grammar actions at the centres of the boxes it reads, as a text agent would; so solving a task
checks the tree's boxes against the browser's coordinates as well as the action translation.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from omnigym.envs.gui.miniwob import accessibility_tree, browser_unavailable_reason
from omnigym.envs.miniwob_ids import MINIWOB_SUITE

_REASON = browser_unavailable_reason()


def needs_browser(test):
    """Marks ``test`` ``browser`` and skips it, saying why, where miniwob or Chromium is missing."""
    skip = pytest.mark.skipif(_REASON is not None, reason=f"MiniWoB++ unavailable: {_REASON}")
    return pytest.mark.browser(skip(test))


_LINE = re.compile(r'\[(\d+)\] (\w+) "((?:[^"\\]|\\.)*)" \((-?\d+), (-?\d+), (\d+), (\d+)\)(.*)')


def _elements(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match:
            _, role, label, x, y, w, h, states = match.groups()
            rows.append(
                {"role": role, "label": label, "box": tuple(map(int, (x, y, w, h))), "states": states}
            )
    return rows


def _centre(element: dict) -> str:
    x, y, w, h = element["box"]
    return f"click({x + w // 2}, {y + h // 2})"


def _find(elements: list[dict], role: str, label: str | None = None) -> dict:
    return next(e for e in elements if e["role"] == role and (label is None or e["label"] == label))


def scripted_actions(task: str, text: str) -> list[str]:
    """The grammar actions that solve ``task`` from its first text observation alone."""
    instruction = text.splitlines()[0]
    quoted = re.findall(r'"([^"]*)"', instruction)
    elements = _elements(text)
    if task == "click-button":
        return [_centre(_find(elements, "button", quoted[0]))]
    if task == "click-link":
        return [_centre(_find(elements, "link", quoted[0]))]
    if task == "focus-text":
        return [_centre(_find(elements, "textbox"))]
    if task == "enter-text":
        box = _find(elements, "textbox")
        return [_centre(box), f'type("{quoted[0]}")', _centre(_find(elements, "button", "Submit"))]
    if task == "login-user":
        user, password = [e for e in elements if e["role"] == "textbox"]
        return [
            _centre(user),
            f'type("{quoted[0]}")',
            _centre(password),
            f'type("{quoted[1]}")',
            _centre(_find(elements, "button", "Login")),
        ]
    if task == "click-checkboxes":
        wanted = re.match(r"instruction: Select (.*) and click Submit\.", instruction).group(1)
        targets = set() if wanted == "nothing" else set(re.split(r", | and ", wanted)) - {""}
        boxes = [e for e in elements if e["role"] == "checkbox" and e["label"] in targets]
        assert len(boxes) == len(targets), (targets, elements)
        return [_centre(b) for b in boxes] + [_centre(_find(elements, "button", "Submit"))]
    raise KeyError(task)


TASKS = ["click-button", "click-link", "focus-text", "enter-text", "login-user", "click-checkboxes"]
FAST_TASKS = ("login-user", "click-checkboxes")
"""Run by default (a browser start each); the others are ``slow`` (``gui_oracle`` covers them too)."""


@pytest.fixture(scope="module")
def make():
    from omnigym.envs.gui.miniwob import make_miniwob_env

    envs = []

    def _make(task: str, **kwargs):
        env = make_miniwob_env(task, **kwargs)
        envs.append(env)
        return env

    yield _make
    for env in envs:
        env.close()


def _check_screenshot(obs: dict) -> None:
    image = obs["image"]
    assert image.shape == (210, 160, 3) and image.dtype == np.uint8
    assert image.std() > 5  # a rendered page, not a blank frame


@needs_browser
@pytest.mark.parametrize(
    "task", [t if t in FAST_TASKS else pytest.param(t, marks=pytest.mark.slow) for t in TASKS]
)
def test_scripted_policy_solves_real_task(make, task):
    env = make(task)
    assert env.observation_space["image"].shape == (210, 160, 3)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        assert obs in env.observation_space
        _check_screenshot(obs)
        assert obs["text"].startswith("instruction: ")
        actions = scripted_actions(task, obs["text"])
        for i, action in enumerate(actions):
            obs, reward, terminated, truncated, info = env.step(action)
            assert info["action_valid"], (action, info)
            assert not truncated
            if i < len(actions) - 1:
                assert not terminated and reward == 0.0, (task, seed, action, info)
                _check_screenshot(obs)
        assert terminated and info["is_success"], (task, seed, actions, info)
        assert 0.5 < reward <= 1.0  # time-discounted success


@needs_browser
def test_same_seed_same_task_and_typing_shows_in_tree(make):
    env = make("login-user")
    first = env.reset(seed=7)[0]
    again = env.reset(seed=7)[0]
    assert first["text"] == again["text"]
    np.testing.assert_array_equal(first["image"], again["image"])
    assert env.reset(seed=8)[0]["text"] != first["text"]
    user = next(e for e in _elements(first["text"]) if e["role"] == "textbox")
    env.reset(seed=7)
    env.step(_centre(user))
    obs = env.step('type("ab")')[0]
    assert 'value="ab" focused' in obs["text"]
    obs = env.step('key("Backspace")')[0]
    assert 'value="a" focused' in obs["text"]
    assert not np.array_equal(obs["image"], first["image"])  # the typed letter is painted


@needs_browser
def test_wrong_commit_fails_and_invalid_actions_never_raise(make):
    env = make("click-button", raw_reward=True)
    obs, _ = env.reset(seed=3)
    for bad in ["click(1, 2", "fly()", 'key("F13")', "click(160, 5)", "drag(-1, 0, 3, 3)", 42, "x" * 300]:
        after, reward, terminated, _, info = env.step(bad)
        assert not info["action_valid"] and info["action_error"]
        assert reward == pytest.approx(-0.1) and not terminated
        assert after is obs or after["text"] == obs["text"]
    target = re.findall(r'"([^"]*)"', obs["text"].splitlines()[0])[0]
    wrong = next(e for e in _elements(obs["text"]) if e["role"] == "button" and e["label"] != target)
    _, reward, terminated, _, info = env.step(_centre(wrong))
    assert terminated and not info["is_success"] and reward == -1.0
    _, reward, terminated, _, info = env.step("click(5, 5)")  # after the end: nothing is sent
    assert terminated and reward == 0.0


@needs_browser
def test_random_valid_actions_and_text_only_mode(make):
    env = make("click-checkboxes", obs_keys=("text",))
    assert set(env.observation_space.spaces) == {"text"}
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    rewards = []
    for _ in range(15):
        action = f"click({rng.integers(160)}, {rng.integers(50, 210)})"
        obs, reward, terminated, _, info = env.step(action)
        assert info["action_valid"] and "image" not in obs
        rewards.append(reward)
        if terminated:
            assert reward in (-1.0,) or info["is_success"]
            obs, _ = env.reset()
    assert all(-1.0 <= r <= 1.0 for r in rewards)


def test_accessibility_tree_from_dom_elements():
    def element(ref, parent, tag, text="", value="", box=(0, 0, 10, 10), classes="", focused=0):
        left, top, width, height = box
        return {
            "ref": ref, "parent": parent, "tag": tag, "text": text, "value": value, "classes": classes,
            "left": np.array([left], np.float32), "top": np.array([top], np.float32),
            "width": np.array([width], np.float32), "height": np.array([height], np.float32),
            "flags": np.array([focused, 0, 0, 1], np.int8),
        }  # fmt: skip

    dom = [
        element(1, 0, "body", box=(0, 0, 780, 210), focused=1),
        element(2, 1, "div", box=(0, 50, 160, 100)),
        element(3, 2, "label", box=(2, 59, 40, 11)),
        element(4, 3, "input_checkbox", value=True, box=(6, 55.4, 20, 13)),
        element(-1, 3, "t", text="HF2", box=(29, 59, 14, 11)),
        element(5, 2, "input_password", value='a"b', box=(7, 130, 108, 21), focused=1),
        element(6, 2, "span", text="Eget", classes="alink", box=(132, 74, 20.6, 11)),
        element(-2, 2, "t", text="Close", box=(-4908, 84, 26, 11)),
        element(7, 2, "button", text="Ok", box=(2, 74, 33, 21)),
    ]
    assert accessibility_tree(dom, 160, 210).splitlines() == [
        '[0] window "" (0, 0, 160, 210)',
        '[1] checkbox "HF2" (6, 55, 20, 13) checked',
        '[2] text "HF2" (29, 59, 14, 11)',
        '[3] textbox "" (7, 130, 108, 21) value="***" password focused',
        '[4] link "Eget" (132, 74, 21, 11)',
        '[5] button "Ok" (2, 74, 33, 21)',
    ]


def test_missing_browser_gives_install_hint(monkeypatch):
    from omnigym.envs.gui import miniwob

    monkeypatch.setenv("MINIWOB_CHROME_BINARY", "/nonexistent/chromium")
    monkeypatch.setenv("MINIWOB_CHROMEDRIVER", "/nonexistent/chromedriver")
    reason = miniwob.browser_unavailable_reason()
    assert reason is not None
    with pytest.raises(RuntimeError, match="cannot start MiniWoB"):
        miniwob.make_miniwob_env("click-button")


# --- registered ids and the command line (the oracle on real utterances: test_oracle_miniwob.py) ---


def test_ids_registered_without_importing_miniwob() -> None:
    import subprocess
    import sys

    code = (
        "import sys, gymnasium as gym, omnigym\n"
        "assert 'miniwob' not in sys.modules and 'selenium' not in sys.modules\n"
        "print(gym.registry['miniwob/click-button-v1'].entry_point,"
        " gym.registry['omnigym/MiniWoB-ClickTab2-v0'].kwargs)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "omnigym.envs.gui.miniwob:MiniWoBEnv {'task': 'click-tab-2'}"


def test_suite_ids_and_task_list() -> None:
    import gymnasium as gym

    import omnigym.envs  # noqa: F401
    from omnigym.envs.gui.families import FAMILIES
    from omnigym.envs.miniwob_ids import MINIWOB_SUITE, MINIWOB_TASK_NAMES, miniwob_env_id
    from omnigym.platform.agent_eval import suite_env_ids

    assert miniwob_env_id("click-tab-2") == "omnigym/MiniWoB-ClickTab2-v0"
    ids = suite_env_ids("miniwob")
    assert ids == [t.env_id for t in MINIWOB_SUITE] and len(set(ids)) == len(ids) >= 20
    assert all(gym.registry[i].kwargs["task"] in MINIWOB_TASK_NAMES for i in ids)
    # every synthetic family but MultiWindow (a MiniWoB++ task is one page) has a real counterpart
    assert {t.counterpart for t in MINIWOB_SUITE} == set(FAMILIES) - {"MultiWindow"}
    assert all(f"miniwob/{name}-v1" in gym.registry for name in MINIWOB_TASK_NAMES)


def test_task_list_matches_the_package() -> None:
    import importlib.util
    from pathlib import Path

    from omnigym.envs.miniwob_ids import MINIWOB_TASK_NAMES

    spec = importlib.util.find_spec("miniwob")
    if spec is None or spec.origin is None:
        pytest.skip("miniwob is not installed")
    source = (Path(spec.origin).parent / "registration.py").read_text()
    assert tuple(re.findall(r'id="miniwob/(.+)-v1"', source)) == MINIWOB_TASK_NAMES


def test_tree_roles_of_jquery_widgets() -> None:
    def element(ref, parent, tag, text="", classes="", box=(0, 60, 20, 20)):
        left, top, width, height = box
        return {
            "ref": ref, "parent": parent, "tag": tag, "text": text, "value": "", "classes": classes,
            "left": np.array([left], np.float32), "top": np.array([top], np.float32),
            "width": np.array([width], np.float32), "height": np.array([height], np.float32),
            "flags": np.array([0, 0, 0, 1], np.int8),
        }  # fmt: skip

    dom = [
        element(1, 0, "li", classes="ui-tabs-tab ui-tabs-active ui-state-active"),
        element(2, 1, "a", "Tab #1", "ui-tabs-anchor"),
        element(3, 0, "div", classes="ui-dialog ui-widget", box=(10, 60, 100, 100)),
        element(4, 3, "span", "Note", "ui-dialog-title"),
        element(5, 3, "button", classes="ui-dialog-titlebar-close", box=(90, 62, 20, 20)),
        element(-1, 5, "t", "Close", box=(-4900, 62, 26, 11)),
        element(6, 0, "span", classes="ui-slider-handle ui-state-default", box=(8, 77, 14, 14)),
        element(7, 0, "select", box=(2, 57, 150, 19)),
        element(8, 0, "li", classes="page-item active"),
        element(9, 8, "a", "2", "page-link", box=(44, 191, 8, 17)),
    ]
    assert accessibility_tree(dom, 160, 210, {7: 'Bo"b'}).splitlines()[1:] == [
        '[1] tab "Tab #1" (0, 60, 20, 20) selected',
        '[2] dialog "Note" (10, 60, 100, 100)',
        '[3] text "Note" (0, 60, 20, 20)',
        '[4] button "Close" (90, 62, 20, 20)',
        '[5] slider "" (8, 77, 14, 14)',
        '[6] combobox "" (2, 57, 150, 19) value="Bo\\"b"',
        '[7] link "2" (44, 191, 8, 17) selected',
    ]


def _missing_browser(monkeypatch) -> None:
    monkeypatch.setenv("MINIWOB_CHROME_BINARY", "/nonexistent/chromium")
    monkeypatch.setenv("MINIWOB_CHROMEDRIVER", "/nonexistent/chromedriver")


def test_cli_without_browser_says_what_to_install(monkeypatch, capsys, tmp_path) -> None:
    from omnigym.platform.cli import main

    _missing_browser(monkeypatch)
    assert (
        main(["eval", "--env", "miniwob/click-button-v1", "--policy", "gui_oracle", "--episodes", "1"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "apt-get install chromium chromium-driver" in err, err
    assert main(["eval-agent", "--suite", "miniwob", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "apt-get install chromium chromium-driver" in err, err


def test_cli_without_miniwob_says_what_to_install(monkeypatch, capsys) -> None:
    import importlib.util

    from omnigym.envs.gui import miniwob
    from omnigym.platform.cli import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        miniwob.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "miniwob" else real_find_spec(name, *a),
    )
    assert (
        main(["eval", "--env", "omnigym/MiniWoB-ClickButton-v0", "--policy", "gui_oracle", "--episodes", "1"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'omnigym[gui]'" in err, err


@needs_browser
def test_registered_ids_make_the_wrapped_env() -> None:
    import gymnasium as gym

    from omnigym.envs.gui.miniwob import MiniWoBEnv
    from omnigym.platform.vec_env import make_env

    env = make_env("miniwob/click-button-v1")
    try:
        assert isinstance(env.unwrapped, MiniWoBEnv)
        assert env.observation_space["image"].shape == (210, 160, 3)
        assert isinstance(env.observation_space["text"], gym.spaces.Text)
        assert isinstance(env.action_space, gym.spaces.Text)
        obs, _ = env.reset(seed=0)
        assert obs in env.observation_space and obs["text"].startswith('instruction: Click on the "')
    finally:
        env.close()
    # importing miniwob (which registers its raw envs under the same ids) left omnigym's in place
    assert gym.registry["miniwob/click-button-v1"].entry_point == "omnigym.envs.gui.miniwob:MiniWoBEnv"
    text_only = make_env("miniwob/click-button-v1", obs_keys=["text"])  # omnigym's own options reach it
    try:
        assert list(text_only.observation_space.spaces) == ["text"]
    finally:
        text_only.close()


@needs_browser
def test_cli_eval_with_the_oracle_in_the_browser(capsys) -> None:
    import json

    from omnigym.platform.cli import main

    argv = ["eval", "--env", "miniwob/click-button-v1", "--policy", "gui_oracle", "--episodes", "3", "--json"]
    argv += ["--num-envs", "1"]  # one Chromium, reused by the three episodes
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["success_rate"] > 0.8, summary


@needs_browser
def test_cli_eval_agent_miniwob_suite_writes_the_table(monkeypatch, capsys, tmp_path) -> None:
    import json

    from omnigym.envs import miniwob_ids
    from omnigym.platform.cli import main

    # one task here (the whole suite, task by task: the slow test below)
    monkeypatch.setattr(miniwob_ids, "MINIWOB_SUITE", miniwob_ids.MINIWOB_SUITE[:1])
    argv = ["eval-agent", "--suite", "miniwob", "--policy", "gui_oracle", "--no-reference", "--episodes", "2"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["env_id"] for r in rows] == ["omnigym/MiniWoB-ClickButton-v0"]
    assert all(r["success_rate"] == 1.0 and r["episodes"] == 2 and not r["error"] for r in rows), rows
    assert (
        "| gui_oracle | omnigym/MiniWoB-ClickButton-v0 | 2 | 1.00 |" in (tmp_path / "results.md").read_text()
    )


@pytest.mark.slow
@needs_browser
@pytest.mark.parametrize("task", [t.name for t in MINIWOB_SUITE])
def test_oracle_solves_real_suite_task(task: str) -> None:
    from omnigym.platform.agent_eval import registered_agent
    from omnigym.platform.evaluate import evaluate_policy

    env_id = next(t.env_id for t in MINIWOB_SUITE if t.name == task)
    kwargs = {"obs_keys": ("text",)}
    policy = registered_agent("gui_oracle", env_id, kwargs)
    result = evaluate_policy(policy, env_id, episodes=10, env_kwargs=kwargs, num_envs=1)
    assert result.summary()["success_rate"] >= 0.9, result.summary()
