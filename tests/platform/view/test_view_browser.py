"""The viewer's episode page in headless Chromium (marker ``browser``): slider, buttons, keys, step view.

A real GUI episode is recorded (an invalid reply, then the click that solves the task), served by
uvicorn in a thread, and stepped through in the page; the DOM must show that step's instruction,
the agent's full reply, its validity and reward, and the step's screenshot at its recorded size.
Set ``OMNIGYM_VIEWER_SCREENSHOT=path.png`` to keep a screenshot of the page (docs/images/viewer.png).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from omnigym.platform.episodes.format import EpisodeSteps, RecordingWriter

GUI_ENV = "omnigym/GUI-ClickButton-v0"
SCREENSHOT_ENV_VAR = "OMNIGYM_VIEWER_SCREENSHOT"


def browser_unavailable_reason() -> str | None:
    """Why headless Chromium cannot be driven here (None when it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    for name, var in (("chromium", "MINIWOB_CHROME_BINARY"), ("chromedriver", "MINIWOB_CHROMEDRIVER")):
        if not _executable(name, var):
            return f"no {name} (set {var} or apt-get install chromium chromium-driver)"
    return None


def _executable(name: str, var: str) -> str | None:
    path = (
        os.environ.get(var)
        or shutil.which(name)
        or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    )
    return path if path and os.access(path, os.X_OK) else None


_REASON = browser_unavailable_reason()


def needs_browser(test):
    """Marks ``test`` ``browser`` and skips it, saying why, where Chromium or selenium is missing."""
    skip = pytest.mark.skipif(_REASON is not None, reason=f"headless Chromium unavailable: {_REASON}")
    return pytest.mark.browser(skip(test))


def _record_gui_episode(directory: Path) -> tuple[str, str, tuple[int, int]]:
    """Play one GUI episode (a malformed reply, then the right click) into a recording.

    Returns:
        The instruction line, the valid reply and the screenshot's (width, height).
    """
    from omnigym.platform.vec_env import make_env

    env = make_env(GUI_ENV, accessibility_tree=True)
    writer = RecordingWriter(
        directory, env_id=GUI_ENV, env_kwargs={"accessibility_tree": True}, agent="scripted"
    )
    steps = EpisodeSteps()
    obs, _ = env.reset(seed=0)
    steps.add_observation(obs)
    instruction = obs["text"].splitlines()[0]
    label = re.search(r'Click the button "([^"]+)"', instruction).group(1)
    box = re.search(rf'button "{label}" \((\d+), (\d+), (\d+), (\d+)\)', obs["text"])
    x, y, w, h = map(int, box.groups())
    click = f"click({x + w // 2}, {y + h // 2})"
    for reply in ("I will press the button.", click):
        obs, reward, terminated, truncated, info = env.step(reply)
        steps.add_step(reply, reward, terminated, truncated, info)
        steps.add_observation(obs)
    assert terminated and info["is_success"]
    writer.write(steps, seed=0, metrics={"is_success": 1.0})
    env.close()
    height, width = obs["image"].shape[:2]
    return instruction, click, (width, height)


def _chrome():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    options.binary_location = _executable("chromium", "MINIWOB_CHROME_BINARY")
    return webdriver.Chrome(
        options=options, service=Service(_executable("chromedriver", "MINIWOB_CHROMEDRIVER"))
    )


def _wait(driver, condition, timeout: float = 10.0):
    """Poll ``condition(driver)`` until it is truthy; its value (the page re-renders: stale nodes retry)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition(driver)
        except (NoSuchElementException, StaleElementReferenceException):
            value = None
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@needs_browser
def test_episode_page_steps_through_a_recorded_gui_episode(vh, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from omnigym.platform.view.app import create_app
    from omnigym.platform.view.replay import open_recordings

    instruction, click, (width, height) = _record_gui_episode(tmp_path / "gui")

    def text(driver, css: str) -> str:
        return driver.find_element(By.CSS_SELECTOR, css).text

    def loaded(driver) -> int:
        """The step image's naturalWidth once it has loaded (0 before)."""
        image = driver.find_element(By.CSS_SELECTOR, "#panel-0 img.step-image")
        return driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image)

    with vh.serve(create_app(open_recordings([tmp_path / "gui"]))) as url:
        driver = _chrome()
        try:
            driver.get(f"{url}/#/episode/0/0")
            assert _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#panel-0 .step-action"))
            assert text(driver, "#step-label") == "0 / 2"
            assert text(driver, "#panel-0 .step-text").splitlines()[0] == instruction
            assert text(driver, "#panel-0 .step-action") == "I will press the button."
            assert text(driver, "#panel-0 .step-valid").startswith("action_valid: false")
            assert text(driver, "#panel-0 .step-reward") == "-0.1"

            driver.find_element(By.ID, "next").click()  # step 1: the click that solves it
            assert _wait(driver, lambda d: text(d, "#panel-0 .step-number") == "step 1 / 2")
            assert text(driver, "#panel-0 .step-action") == click
            assert text(driver, "#panel-0 .step-valid") == "action_valid: true"
            assert text(driver, "#panel-0 .step-reward") == "1"
            image = driver.find_element(By.CSS_SELECTOR, "#panel-0 img.step-image")
            assert _wait(driver, loaded) == width
            image = driver.find_element(By.CSS_SELECTOR, "#panel-0 img.step-image")
            assert driver.execute_script("return arguments[0].naturalHeight", image) == height

            slider = driver.find_element(By.ID, "slider")
            slider.send_keys(Keys.END)  # the slider to the final observation
            assert _wait(driver, lambda d: text(d, "#panel-0 .step-number") == "step 2 / 2")
            assert text(driver, "#panel-0 .step-action") == "(none: the final observation)"
            driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)  # keyboard: back to step 1
            assert _wait(driver, lambda d: text(d, "#step-label") == "1 / 2")
            assert _wait(driver, lambda d: text(d, "#panel-0 .step-action") == click)
            assert _wait(driver, loaded) == width
            assert driver.find_element(By.ID, "error").get_attribute("hidden") is not None  # no error shown
            shots = [
                tmp_path / "viewer.png",
                *([Path(os.environ[SCREENSHOT_ENV_VAR])] if os.environ.get(SCREENSHOT_ENV_VAR) else []),
            ]
            for shot in shots:
                shot.parent.mkdir(parents=True, exist_ok=True)
                assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        finally:
            driver.quit()
