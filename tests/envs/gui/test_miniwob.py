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


# --- registered ids, the oracle on real utterances, the command line (issue 32) -----------------


def _tree(*lines: str) -> str:
    rows = ['window "" (0, 0, 160, 210)', *lines]
    return "elements:\n" + "\n".join(f"[{i}] {row}" for i, row in enumerate(rows))


def _solve(instruction: str, *lines: str) -> str:
    from omnigym.envs.gui.oracle import solve

    return solve(f"instruction: {instruction}\n" + _tree(*lines))


SUBMIT = 'button "Submit" (2, 100, 96, 30)'
"""Centre (50, 115)."""


@pytest.mark.parametrize(
    ("instruction", "lines", "action"),
    [
        # click-button / click-link / click-tab
        (
            'Click on the "Ok" button.',
            ['button "No" (2, 50, 30, 20)', 'button "Ok" (40, 50, 30, 20)'],
            "click(55, 60)",
        ),
        (
            'Click on the link "nam".',
            ['link "justo." (36, 52, 24, 11)', 'link "nam" (75, 85, 20, 10)'],
            "click(85, 90)",
        ),
        (
            "Click on Tab #2.",
            ['tab "Tab #1" (7, 58, 40, 24) selected', 'tab "Tab #2" (51, 58, 40, 24)'],
            "click(71, 70)",
        ),
        # click-tab-2: the link is not on the shown tab -> the tab after the selected one
        (
            'Switch between the tabs to find and click on the link "euismod.".',
            [
                'tab "Tab #1" (7, 58, 40, 24) selected',
                'tab "Tab #2" (51, 58, 40, 24)',
                'link "nam" (19, 159, 20, 10)',
            ],
            "click(71, 70)",
        ),
        (
            'Switch between the tabs to find and click on the link "euismod.".',
            [
                'tab "Tab #1" (7, 58, 40, 24)',
                'tab "Tab #2" (51, 58, 40, 24) selected',
                'link "euismod." (19, 159, 40, 10)',
            ],
            "click(39, 164)",
        ),
        # click-checkboxes (+ large, transfer): tick the wrong-state box, then Submit
        (
            "Select 9hx, rd and click Submit.",
            [
                'checkbox "9hx" (6, 55, 20, 14) checked',
                'checkbox "q" (6, 74, 20, 14) unchecked',
                'checkbox "rd" (6, 93, 20, 14) unchecked',
                SUBMIT,
            ],
            "click(16, 100)",
        ),
        (
            "Select nothing and click Submit.",
            ['checkbox "AU" (6, 55, 20, 14) checked', SUBMIT],
            "click(16, 62)",
        ),
        ("Select AU and click Submit.", ['checkbox "AU" (6, 55, 20, 14) checked', SUBMIT], "click(50, 115)"),
        # click-option: the same template over radio buttons
        (
            "Select GDKkQ and click Submit.",
            ['radio "USa" (7, 55, 20, 14) unchecked', 'radio "GDKkQ" (7, 73, 20, 14) unchecked', SUBMIT],
            "click(17, 80)",
        ),
        # choose-list: focus the dropdown, then type the option and Enter
        (
            "Select Bobine from the list and click Submit.",
            ['combobox "" (2, 57, 150, 20) value="Ann"', SUBMIT],
            "click(77, 67)",
        ),
        (
            "Select Bobine from the list and click Submit.",
            ['combobox "" (2, 57, 150, 20) value="Ann" focused', SUBMIT],
            'type("Bobine\\n")',
        ),
        (
            "Select Bobine from the list and click Submit.",
            ['combobox "" (2, 57, 150, 20) value="Bobine" focused', SUBMIT],
            "click(50, 115)",
        ),
        # use-slider: focus the handle, then arrow keys towards the value shown beside it
        (
            "Select -97 with the slider and hit Submit.",
            ['slider "" (8, 77, 14, 14)', 'text "-90" (28, 114, 14, 11)', SUBMIT],
            "click(15, 84)",
        ),
        (
            "Select -97 with the slider and hit Submit.",
            ['slider "" (8, 77, 14, 14) focused', 'text "-90" (28, 114, 14, 11)', SUBMIT],
            'key("ArrowLeft")',
        ),
        (
            "Select 16 with the slider and hit Submit.",
            ['slider "" (8, 77, 14, 14) focused', 'text "16" (28, 114, 14, 11)', SUBMIT],
            "click(50, 115)",
        ),
        # enter-text (+ dynamic), enter-text-2, enter-password
        (
            'Enter "Kasey" into the text field and press Submit.',
            ['textbox "" (5, 56, 128, 22) value="Kasey" focused', SUBMIT],
            "click(50, 115)",
        ),
        (
            'Enter "Kasey" into the text field and press Submit.',
            ['textbox "" (5, 56, 128, 22) value="Ka" focused', SUBMIT],
            'type("sey")',
        ),
        (
            'Type "JERALD" in all lower case letters in the text input and press Submit.',
            ['textbox "" (5, 56, 128, 22) value="" focused', SUBMIT],
            'type("jerald")',
        ),
        (
            'Enter the password "fU" into both text fields and press submit.',
            [
                'textbox "" (7, 78, 108, 22) value="**" password',
                'textbox "" (7, 130, 108, 22) value="" password',
                SUBMIT,
            ],
            "click(61, 141)",
        ),
        # focus-text, focus-text-2
        ("Focus into the textbox.", ['textbox "" (5, 82, 128, 22) value=""'], "click(69, 93)"),
        (
            "Focus into the 2nd input textbox.",
            ['textbox "" (9, 62, 128, 22) value=""', 'textbox "" (14, 103, 128, 22) value=""'],
            "click(78, 114)",
        ),
        # login-user (+ popup): username into the plain field, password into the masked one
        (
            'Enter the username "vina" and the password "US" into the text fields and press login.',
            [
                'textbox "" (7, 78, 128, 22) value="vina"',
                'textbox "" (7, 130, 108, 22) value="" password',
                'button "Login" (2, 166, 88, 30)',
            ],
            "click(61, 141)",
        ),
        (
            'Enter the username "vina" and the password "US" into the text fields and press login.',
            [
                'textbox "" (7, 78, 128, 22) value="vina"',
                'textbox "" (7, 130, 108, 22) value="**" password',
                'button "Login" (2, 166, 88, 30)',
            ],
            "click(46, 181)",
        ),
        (
            'Enter the username "vina" and the password "US" into the text fields and press login.',
            [
                'textbox "" (7, 78, 128, 22) value=""',
                'button "OK" (2, 160, 20, 20)',
                'button "Cancel" (40, 160, 40, 20)',
            ],
            "click(60, 170)",
        ),
        # click-dialog, click-dialog-2
        (
            'Close the dialog box by clicking the "x".',
            ['dialog "" (18, 76, 103, 104)', 'button "Close" (94, 80, 20, 20) focused'],
            "click(104, 90)",
        ),
        (
            'Click the button in the dialog box labeled "OK".',
            [
                'dialog "" (11, 57, 127, 124)',
                'button "Close" (111, 60, 20, 20)',
                'button "Cancel" (27, 147, 54, 22)',
                'button "OK" (85, 147, 36, 22)',
            ],
            "click(103, 158)",
        ),
        (
            'Click the button in the dialog box labeled "x".',
            [
                'dialog "" (11, 57, 127, 124)',
                'button "Close" (111, 60, 20, 20)',
                'button "OK" (85, 147, 36, 22)',
            ],
            "click(121, 70)",
        ),
        # multi-orderings / multi-layouts: fields named by the text before them
        (
            "Search for crime movies directed by Curry from year 1995.",
            [
                'text "Year" (9, 83, 40, 23)',
                'textbox "" (52, 84, 98, 22) value="1995"',
                'text "Genre" (9, 108, 40, 23)',
                'textbox "" (52, 109, 98, 22) value=""',
                'text "Director" (9, 133, 40, 23)',
                'textbox "" (52, 134, 98, 22) value=""',
                'text "Submit" (52, 163, 56, 18)',
            ],
            "click(101, 120)",
        ),
        (
            "Search for crime movies directed by Curry from year 1995.",
            [
                'text "Released Date" (12, 57, 136, 11)',
                'textbox "" (12, 68, 140, 22) value="1995"',
                'text "Director Name" (12, 97, 136, 11)',
                'textbox "" (12, 108, 140, 22) value="Curry"',
                'text "Movie Genre" (12, 137, 136, 11)',
                'textbox "" (12, 148, 140, 22) value="crime"',
                'button "Go!" (61, 174, 38, 22)',
            ],
            "click(80, 185)",
        ),
        # search-engine: search, then page 3 (results 7-9), then its first result
        (
            'Use the textbox to enter "Riley" and press "Search", then find and click the 7th search result.',
            ['textbox "" (4, 54, 88, 22) value="Riley" focused', 'button "Search" (95, 54, 58, 22)'],
            "click(124, 65)",
        ),
        (
            'Use the textbox to enter "Riley" and press "Search", then find and click the 7th search result.',
            [
                'textbox "" (4, 54, 88, 22) value="Riley"',
                'button "Search" (95, 54, 58, 22) focused',
                'link "Dolores" (4, 77, 38, 12)',
                'link "Cheree" (4, 110, 34, 12)',
                'link "Joye" (4, 143, 24, 12)',
                'link "1" (44, 191, 8, 18) selected',
                'link "2" (56, 191, 8, 18)',
                'link "3" (69, 191, 8, 18)',
                'link ">" (81, 191, 10, 18)',
            ],
            "click(73, 200)",
        ),
        (
            'Use the textbox to enter "Riley" and press "Search", then find and click the 7th search result.',
            [
                'textbox "" (4, 54, 88, 22) value="Riley"',
                'button "Search" (95, 54, 58, 22)',
                'link "Riley" (4, 77, 30, 12)',
                'link "Cheree" (4, 110, 34, 12)',
                'link "Joye" (4, 143, 24, 12)',
                'link "1" (44, 191, 8, 18)',
                'link "2" (56, 191, 8, 18)',
                'link "3" (69, 191, 8, 18) selected',
            ],
            "click(19, 83)",
        ),
        # drag-items: onto the item at the target position (a little past its middle)
        (
            "Drag Gerda to the 3rd position.",
            [
                'text "Willa" (27, 63, 112, 14)',
                'text "Gerda" (27, 91, 112, 14)',
                'text "Alvera" (27, 120, 112, 14)',
            ],
            "drag(83, 98, 83, 131)",
        ),
        (
            "Drag Alvera up by one position.",
            [
                'text "Willa" (27, 63, 112, 14)',
                'text "Gerda" (27, 91, 112, 14)',
                'text "Alvera" (27, 120, 112, 14)',
            ],
            "drag(83, 127, 83, 94)",
        ),
        # the page's terminal observation (only the window): an action that sends nothing
        ('Click on the "Ok" button.', [], "scroll(0, 0, 0)"),
    ],
)
def test_oracle_acts_on_real_utterance_templates(instruction: str, lines: list[str], action: str) -> None:
    assert _solve(instruction, *lines) == action


def test_synthetic_instructions_still_reach_the_synthetic_solvers() -> None:
    # the synthetic ClickCheckboxes quotes its labels: not the real template (which would read '"a"')
    lines = ['checkbox "a" (6, 55, 20, 14) unchecked', SUBMIT]
    assert _solve('Select "a" and click Submit.', *lines) == "click(16, 62)"
    field = 'textbox "" (5, 56, 128, 22) value="ab"'
    assert _solve('Enter "ab" in the text field and press Submit.', field, SUBMIT) == "click(50, 115)"


def test_real_task_utterance_templates_are_those_of_the_pages() -> None:
    """Each template the oracle parses is in its task's page (a miniwob that rewords one fails here)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("miniwob")
    if spec is None or spec.origin is None:
        pytest.skip("miniwob is not installed")
    html = Path(spec.origin).parent / "html" / "miniwob"
    fragments = {
        "click-button": "'Click on the \"' + correct_text + '\" button.'",
        "click-link": "'Click on the link \"' + correctText + '\".'",
        "click-checkboxes": "'Select ' + qstr + ' and click Submit.'",
        "click-option": "'Select ' + correctElement.query + ' and click Submit.'",
        "choose-list": "'Select ' + gt_txt + ' from the list and click Submit.'",
        "use-slider": "'Select ' + n + ' with the slider and hit Submit.'",
        "enter-password": "into both text fields and press submit.",
        "focus-text-2": "'Focus into the ' + POS[correctTextbox] + ' input textbox.'",
        "click-tab": "'Click on Tab #2.'",
        "click-dialog": 'Close the dialog box by clicking the "x".',
        "click-dialog-2": "'Click the button in the dialog box labeled \"' + expectedButton + '\".'",
        "multi-orderings": "movies directed by <b>' + eName + '</b> from year <b>'",
        "drag-items": "'Drag ' + ITEMS[ix-1] + ' ' + target_description",
    }
    for task, fragment in fragments.items():
        assert fragment in (html / f"{task}.html").read_text(), task


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
