"""The GUI envs: seeded tasks, screenshots, rewards, invalid actions and latency."""

from __future__ import annotations

import time

import numpy as np
import pytest

from omnigym.envs.gui.containers import AppWindow, TabStrip
from omnigym.envs.gui.env import GUIEnv
from omnigym.envs.gui.families import FAMILIES
from omnigym.envs.gui.layers import Dropdown
from omnigym.envs.gui.oracle import parse_observation, solve
from omnigym.envs.gui.render import Theme
from omnigym.envs.gui.widgets import Rect, Slider
from omnigym.platform.vec_env import make_env

FAMILY_NAMES = list(FAMILIES)
SIZES = [(160, 210), (512, 512), (320, 240), (160, 160)]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_registered_id_makes_the_family(family: str) -> None:
    env = make_env(f"omnigym/GUI-{family}-v0")
    assert env.unwrapped.config.task == family
    assert env.spec is not None and env.spec.max_episode_steps == FAMILIES[family].max_steps
    env.close()


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_same_seed_same_task_and_screenshot(family: str) -> None:
    first, second = GUIEnv(task=family), GUIEnv(task=family)
    a, _ = first.reset(seed=11)
    first.reset(seed=3)
    b, _ = second.reset(seed=11)
    c, _ = first.reset(seed=11)
    for other in (b, c):
        assert a["text"] == other["text"]
        np.testing.assert_array_equal(a["image"], other["image"])
    texts = {GUIEnv(task=family).reset(seed=seed)[0]["text"] for seed in range(10)}
    assert len(texts) >= 5, "seeds should draw different tasks"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_tasks_fit_the_screen_at_every_size(family: str, size: tuple[int, int]) -> None:
    width, height = size
    env = GUIEnv(task=family, width=width, height=height, obs_keys=("text",))
    theme = Theme(width, height)
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        instruction, _ = parse_observation(obs["text"])
        lines = theme.wrap(instruction, width - 2 * theme.pad)
        assert theme.pad + len(lines) * theme.line_height <= theme.instruction_height, instruction
        assert env.screen is not None
        for rect in [w.rect for w in env.screen.widgets[1:]]:
            assert rect.x >= 0 and rect.y >= theme.instruction_height
            assert rect.x + rect.w <= width and rect.y + rect.h <= height
        # a tab strip contains its tabs: they lie inside it, and everything else is disjoint
        strips = [w for w in env.screen.window.walk() if isinstance(w, TabStrip)]
        # overlapping windows: each one's widgets are disjoint and lie inside it, below its title
        windows = [w for w in env.screen.window.children if isinstance(w, AppWindow)]
        in_windows = {id(w) for window in windows for w in window.walk()}
        for window in windows:
            inner = [w.rect for w in window.walk()][1:]
            assert_disjoint(inner)
            assert all(
                window.rect.contains(r.x, r.y + 1 - theme.line_height - theme.pad)
                and window.rect.contains(r.x + r.w - 1, r.y + r.h - 1)
                for r in inner
            )
        assert_disjoint(
            [w.rect for w in env.screen.window.walk() if w not in strips and id(w) not in in_windows][1:]
        )
        for strip in strips:
            assert all(strip.rect.contains(t.rect.x, t.rect.y) for t in strip.tabs)
            assert all(
                strip.rect.contains(t.rect.x + t.rect.w - 1, t.rect.y + t.rect.h - 1) for t in strip.tabs
            )
        for layer in env.screen.layers:  # a dialog covers the page; its own widgets lie inside it
            inner = [w.rect for w in layer.walk()][1:]
            assert_disjoint(inner)
            assert all(
                layer.rect.contains(r.x, r.y) and layer.rect.contains(r.x + r.w - 1, r.y + r.h - 1)
                for r in inner
            )


def assert_disjoint(boxes: list[Rect]) -> None:
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y


def test_screenshot_shows_the_state_and_render_matches_it() -> None:
    env = GUIEnv(task="ClickCheckboxes", render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (210, 160, 3) and obs["image"].dtype == np.uint8
    np.testing.assert_array_equal(env.render(), obs["image"])
    assert env.screen is not None
    box = next(w for w in env.screen.widgets if w.role == "checkbox")
    after, *_ = env.step(f"click({box.rect.x + 2}, {box.rect.center[1]})")
    changed = np.argwhere((after["image"] != obs["image"]).any(axis=-1))
    assert len(changed) > 0, "ticking a box must change the screenshot"
    r = box.rect
    assert (changed[:, 0] >= r.y).all() and (changed[:, 0] < r.y + r.h).all()
    assert (changed[:, 1] >= r.x).all() and (changed[:, 1] < r.x + r.w).all()


def test_typed_text_is_painted() -> None:
    env = GUIEnv(task="EnterText")
    obs, _ = env.reset(seed=0)
    for _ in range(2):
        obs, *_ = env.step(solve(obs["text"]))  # focus the field, then type the word
    field = env.screen["field"] if env.screen else None
    assert field is not None and field.value
    r = field.rect
    inside = obs["image"][r.y + 3 : r.y + r.h - 3, r.x + 3 : r.x + r.w - 3]
    assert (inside.mean(axis=-1) < 100).sum() > 10, "dark text pixels inside the field"


def test_wrong_button_fails_and_right_button_succeeds() -> None:
    env = GUIEnv(task="ClickButton", obs_keys=("text",))
    obs, _ = env.reset(seed=4)
    right = solve(obs["text"])
    _, elements = parse_observation(obs["text"])
    wrong = next(
        e for e in elements if e.role == "button" and f"click({e.center[0]}, {e.center[1]})" != right
    )
    _, reward, terminated, truncated, info = env.step(f"click({wrong.center[0]}, {wrong.center[1]})")
    assert (reward, terminated, truncated, info["is_success"]) == (-1.0, True, False, False)
    env.reset(seed=4)
    _, reward, terminated, _, info = env.step(right)
    assert (reward, terminated, info["is_success"], info["action_valid"]) == (1.0, True, True, True)


@pytest.mark.parametrize(
    "action",
    ["", "click(1)", "hello", "click(-1, 5)", "click(160, 5)", "drag(1, 1, 1, 999)", "😀" * 10_000, None, 7],
)
def test_invalid_actions_are_penalised_never_raised(action: object) -> None:
    env = GUIEnv(task="ClickButton", invalid_action_penalty=-0.25)
    obs, _ = env.reset(seed=0)
    after, reward, terminated, truncated, info = env.step(action)  # type: ignore[arg-type]
    assert info["action_valid"] is False and info["action_error"]
    assert (reward, terminated, truncated) == (-0.25, False, False)
    assert after["text"] == obs["text"]
    np.testing.assert_array_equal(after["image"], obs["image"])


def test_off_screen_points_are_invalid_not_clipped() -> None:
    env = GUIEnv(task="ClickButton", obs_keys=("text",))
    env.reset(seed=0)
    _, _, _, _, info = env.step("click(159, 209)")
    assert info["action_valid"]
    _, _, _, _, info = env.step("click(159, 210)")
    assert not info["action_valid"] and "off the 160x210 screen" in info["action_error"]


def test_latency_sleeps_and_never_changes_observations() -> None:
    plain = GUIEnv(task="LoginUser")
    slow = GUIEnv(task="LoginUser", latency=(0.01, 0.03))
    a, _ = plain.reset(seed=2)
    b, _ = slow.reset(seed=2)
    start = time.perf_counter()
    delays = []
    for _ in range(5):
        action = solve(a["text"])
        a, *_ = plain.step(action)
        b, _, _, _, info = slow.step(action)
        delays.append(info["latency_s"])
        assert a["text"] == b["text"]
        np.testing.assert_array_equal(a["image"], b["image"])
    assert time.perf_counter() - start >= sum(delays)
    assert all(0.01 <= d <= 0.03 for d in delays) and len(set(delays)) > 1
    slow.reset(seed=2)
    again = [slow.step('key("Tab")')[4]["latency_s"] for _ in range(5)]
    assert again == delays, "delays are drawn from the seed"
    fixed = GUIEnv(task="ClickButton", latency=0.02)
    fixed.reset(seed=0)
    assert fixed.step('key("Tab")')[4]["latency_s"] == 0.02


@pytest.mark.parametrize(
    "kwargs",
    [{"task": "Nope"}, {"obs_keys": ("state",)}, {"obs_keys": ()}, {"latency": -1.0}, {"latency": (0.2, 0.1)},
     {"width": 10}, {"height": 159}],
)  # fmt: skip
def test_bad_options_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        GUIEnv(**kwargs)


def test_text_only_env_paints_nothing() -> None:
    env = GUIEnv(task="EnterText", obs_keys=("text",))
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"text"}
    env.step(solve(obs["text"]))
    assert env.renderer._cached is None


def center_of(obs: dict, role: str, label: str | None = None) -> str:
    _, elements = parse_observation(obs["text"])
    e = next(e for e in elements if e.role == role and (label is None or e.label == label))
    return f"{e.center[0]}, {e.center[1]}"


def first_seed(family: str, wanted: type) -> tuple[GUIEnv, dict]:
    """A SelectOption episode with a dropdown (or a radio group)."""
    env = GUIEnv(task=family)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        assert env.screen is not None
        if any(isinstance(w, wanted) for w in env.screen.widgets):
            return env, obs
    raise AssertionError(f"no {wanted.__name__} in 20 seeds")


def test_select_option_dropdown_list_is_painted_and_a_wrong_choice_fails() -> None:
    env, obs = first_seed("SelectOption", Dropdown)
    assert env.screen is not None
    dropdown = env.screen["dropdown"]
    assert isinstance(dropdown, Dropdown)
    opened, reward, *_ = env.step(f"click({center_of(obs, 'combobox')})")
    added = len(opened["text"].splitlines()) - len(obs["text"].splitlines())
    assert reward == 0.0 and added == 1 + len(dropdown.options)  # the listbox and its options
    assert dropdown.popup is not None
    r = dropdown.popup.rect
    changed = (opened["image"] != obs["image"]).any(axis=-1)
    assert changed[r.y : r.y + r.h, r.x : r.x + r.w].mean() > 0.2, "the list is painted"
    instruction, _ = parse_observation(obs["text"])
    wrong = next(o for o in dropdown.options if f'"{o}"' not in instruction)
    obs, *_ = env.step(f"click({center_of(opened, 'option', wrong)})")
    _, reward, terminated, _, info = env.step(f"click({center_of(obs, 'button', 'Submit')})")
    assert (reward, terminated, info["is_success"]) == (-1.0, True, False)


def test_use_slider_by_drag_string_and_keys() -> None:
    env, obs = first_seed("UseSlider", Slider)
    assert env.screen is not None
    slider = env.screen["slider"]
    assert isinstance(slider, Slider)
    y = slider.rect.center[1]
    obs, reward, _, _, info = env.step(
        f"drag({slider.x_of(slider.value)}, {y}, {slider.x_of(slider.maximum)}, {y})"
    )
    assert info["action_valid"] and reward == 0.0 and slider.value == slider.maximum
    obs, *_ = env.step('key("Home")')
    assert slider.value == 0 and 'value="0"' in obs["text"]


def test_close_dialog_blocks_the_target_until_closed() -> None:
    env = GUIEnv(task="CloseDialog", obs_keys=("text",))
    obs, _ = env.reset(seed=0)
    instruction, _ = parse_observation(obs["text"])
    target = instruction.split('"')[1]
    for _ in range(3):  # the page button does not answer while the dialog is open
        obs, reward, terminated, *_ = env.step(f"click({center_of(obs, 'button', target)})")
        assert (reward, terminated) == (0.0, False) and "] dialog " in obs["text"]
    obs, *_ = env.step('key("Escape")')
    assert "] dialog " not in obs["text"]
    _, reward, terminated, _, info = env.step(f"click({center_of(obs, 'button', target)})")
    assert (reward, terminated, info["is_success"]) == (1.0, True, True)


def test_navigate_tabs_hides_other_pages_and_a_decoy_on_the_shown_page_fails() -> None:
    env = GUIEnv(task="NavigateTabs", obs_keys=("text",))
    for seed in range(50):  # an episode with the target's label also on the shown (wrong) page
        obs, _ = env.reset(seed=seed)
        instruction, elements = parse_observation(obs["text"])
        tab_label, button_label = instruction.split('"')[1], instruction.split('"')[3]
        tab = next(e for e in elements if e.role == "tab" and e.label == tab_label)
        decoys = [e for e in elements if e.role == "button" and e.label == button_label]
        if "unselected" in tab.states and decoys:
            break
    else:
        raise AssertionError("no episode with a decoy on the shown page")
    assert env.screen is not None
    shown = {w.name for w in env.screen.widgets}
    strip = env.screen["tabs"]
    assert isinstance(strip, TabStrip)
    hidden = [w for p, page in enumerate(strip.pages) if p != strip.selected for w in page]
    assert hidden and not any(w.name in shown for w in hidden)
    _, reward, terminated, _, info = env.step(f"click({decoys[0].center[0]}, {decoys[0].center[1]})")
    assert terminated and not info["is_success"] and reward == -1.0


def test_drag_item_ends_when_an_item_lands_in_an_area() -> None:
    env = GUIEnv(task="DragItem", obs_keys=("text",))
    obs, _ = env.reset(seed=2)
    instruction, elements = parse_observation(obs["text"])
    item_label, zone_label = instruction.split('"')[1], instruction.split('"')[3]
    item = next(e for e in elements if e.role == "draggable" and e.label == item_label)
    zone = next(e for e in elements if e.role == "region" and e.label == zone_label)
    other = next(e for e in elements if e.role == "region" and e.label != zone_label)
    (x, y), (zx, zy) = item.center, zone.center
    _, reward, terminated, _, _ = env.step(f"drag({x}, {y}, {zx}, {zone.box[1] - 30})")  # not in
    assert not terminated and reward == 0.0
    obs, _ = env.reset(seed=2)
    _, reward, terminated, _, info = env.step(f"drag({x}, {y}, {other.center[0]}, {other.center[1]})")
    assert terminated and not info["is_success"] and reward == -1.0
    obs, _ = env.reset(seed=2)
    _, reward, terminated, _, info = env.step(f"drag({x}, {y}, {zx}, {zy})")
    assert terminated and info["is_success"] and reward == 1.0
