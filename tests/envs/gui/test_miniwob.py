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
@pytest.mark.parametrize("task", TASKS)
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
