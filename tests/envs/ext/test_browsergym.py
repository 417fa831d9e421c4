"""BrowserGym's MiniWoB click-button under omnigym's GUI conventions, driven by a scripted click."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip(
    "browsergym.miniwob", reason="browsergym-miniwob not installed (docs/envs/peer-adapters.md)"
)

from omnigym.envs.ext.browsergym import (
    BrowserGymMiniWoBEnv,
    to_browsergym_action,
)
from omnigym.envs.ext_ids import chromium_path
from omnigym.envs.gui.actions import parse_action
from omnigym.envs.gui.oracle import solve

pytestmark = pytest.mark.skipif(
    chromium_path() is None, reason="no Chromium on PATH (apt-get install chromium)"
)


def test_grammar_translates_to_browsergym_calls() -> None:
    cases = {
        "click(12, 30)": "mouse_click(12, 30)",
        'type("a \\"b\\"")': 'keyboard_type("a \\"b\\"")',
        'key("enter")': 'keyboard_press("Enter")',
        "scroll(5, 6, -40)": "scroll_at(5, 6, 0, -40)",
        "drag(1, 2, 3, 4)": "mouse_drag_and_drop(1, 2, 3, 4)",
        "double_click(7, 8)": "mouse_dblclick(7, 8)",
    }
    for text, call in cases.items():
        assert to_browsergym_action(parse_action(text)) == call


@pytest.fixture(scope="module")
def env() -> BrowserGymMiniWoBEnv:
    env = BrowserGymMiniWoBEnv("click-button", pre_observation_delay=0.1)
    yield env
    env.close()


def test_invalid_actions_then_the_oracle_solve_click_button(env: BrowserGymMiniWoBEnv) -> None:
    """One episode (BrowserGym relaunches Chromium on every reset, about 4 s): malformed and
    off-screen actions change nothing, then ``gui_oracle``'s click succeeds. The slow test measures 10."""
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (321, 498, 3) and obs["image"].dtype == np.uint8
    assert obs["image"].std() > 5 and obs in env.observation_space
    assert obs["text"].startswith('instruction: Click on the "') and "] button " in obs["text"]
    for bad in ("click(", "click(9999, 5)", "press(1)"):
        again, reward, terminated, _, info = env.step(bad)
        assert not info["action_valid"] and info["action_error"] and reward == -0.1 and not terminated
        assert again["text"] == obs["text"]
    obs, reward, terminated, _truncated, info = env.step(solve(obs["text"]))
    assert info["action_valid"] and info["is_success"] and terminated and reward == 1.0


@pytest.mark.slow
def test_oracle_success_rate_over_ten_seeds(env: BrowserGymMiniWoBEnv) -> None:
    successes = []
    for seed in range(10):
        obs, _ = env.reset(seed=100 + seed)
        info = env.step(solve(obs["text"]))[-1]
        successes.append(info["is_success"])
    assert np.mean(successes) == 1.0, successes
