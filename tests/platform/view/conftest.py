"""Shared by the viewer's tests: small recordings written with the recording format, and a live server."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from omnigym.platform.episodes.format import EpisodeSteps, RecordingWriter

GUI_ENV = "omnigym/GUI-ClickButton-v0"


def image(seed: int, t: int) -> np.ndarray:
    """The recorded image of step ``t`` of the episode with ``seed``: distinct for every (seed, t)."""
    return np.random.default_rng(1000 * seed + t).integers(0, 256, size=(21, 16, 3), dtype=np.uint8)


def text(seed: int, t: int) -> str:
    return f'instruction: Click the button "B{seed}".\nelements:\n[1] button "B{seed}" ({t}, 2, 3, 4)'


def reply(seed: int, t: int) -> str:
    return "I think I should click it.\nclick(5, 6)" if t else f"garbage {seed}"


def write_text_recording(directory: Path, agent: str, seeds: list[int]) -> Path:
    """A GUI-like recording: image + text observations, text replies, reward components, infos.

    Each episode has 2 steps: an invalid reply (reward -0.1) and a valid click (reward 1).
    """
    writer = RecordingWriter(directory, env_id=GUI_ENV, agent=agent)
    for seed in seeds:
        steps = EpisodeSteps()
        steps.add_observation({"image": image(seed, 0), "text": text(seed, 0)})
        for t in range(2):
            valid = t == 1
            error = "" if valid else "expected one call such as click(x, y)"
            components = {"nc": 1.0, "ep": 0.25 * (t + 1) + seed}
            info = {"action_valid": valid, "action_error": error, "reward_components": components}
            steps.add_step(reply(seed, t), 1.0 if valid else -0.1, valid, False, info)
            steps.add_observation({"image": image(seed, t + 1), "text": text(seed, t + 1)})
        writer.write(steps, seed=seed, metrics={"is_success": 1.0, "pdms": 0.5 + seed / 10})
    return directory


def write_frame_recording(directory: Path) -> Path:
    """A recording of an env without an image observation: vector obs, array actions, rendered frames."""
    writer = RecordingWriter(directory, env_id="omnigym/Driving-v0", agent="pdm_closed")
    steps = EpisodeSteps()
    for t in range(4):
        frame = np.full((12, 10, 3), 20 * t, dtype=np.uint8)
        steps.add_observation({"state": np.arange(3, dtype=np.float32) + t}, frame)
        if t < 3:
            steps.add_step(np.array([0.5, -0.25 * t], dtype=np.float32), 0.9, False, t == 2, {})
    writer.write(steps, seed=7, metrics={"pdms": 0.9})
    return directory


@pytest.fixture(scope="session")
def recording_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("view-recordings")
    return {
        "a": write_text_recording(root / "agent_a", "agent_a", [0, 1, 2]),
        "b": write_text_recording(root / "agent_b", "agent_b", [2, 0, 5]),
        "frames": write_frame_recording(root / "driving"),
    }


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two runs: train/loss every line, eval/return_mean every 5th, an all-null metric, a torn last line."""
    root = tmp_path_factory.mktemp("view-runs")
    runs = []
    for name, scale in (("ppo", 1.0), ("sac", 2.0)):
        lines = [
            {"step": 100 * i, "wall_time": 0.1 * i, "train/loss": scale / (i + 1),
             **({"eval/return_mean": scale * i} if i % 5 == 0 else {}), "train/nan": None}
            for i in range(20)
        ]  # fmt: skip
        (root / name).mkdir()
        text_lines = "".join(json.dumps(line) + "\n" for line in lines)
        torn = '{"step": 2000, "train/lo'  # the last line of a killed run
        (root / name / "metrics.jsonl").write_text(text_lines + torn)
        runs.append(root / name)
    return runs


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields its base URL, stops it on exit."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the viewer's server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def request(url: str, body: Any = None, method: str | None = None) -> tuple[int, str, bytes]:
    """``(status, content type, body bytes)`` of a GET, or a POST of ``body`` as JSON."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def get_json(url: str, body: Any = None, method: str | None = None, status: int = 200) -> Any:
    """The JSON answer, asserting its HTTP status."""
    code, kind, content = request(url, body, method)
    assert code == status, (code, content[:300])
    assert kind.startswith("application/json"), kind
    return json.loads(content)


@pytest.fixture(scope="session")
def vh() -> SimpleNamespace:
    """The helpers above, for the test modules (``--import-mode=importlib`` cannot import conftest)."""
    return SimpleNamespace(
        GUI_ENV=GUI_ENV,
        image=image,
        text=text,
        reply=reply,
        serve=serve,
        request=request,
        get_json=get_json,
    )
