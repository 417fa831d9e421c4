"""The viewer's JSON API, served by uvicorn in a thread (no httpx): replay, pairs, curves, live, errors."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from omnigym.platform.view.app import LIVE_OFF, create_app
from omnigym.platform.view.curves import open_runs
from omnigym.platform.view.replay import open_recordings

GUI_ENV = "omnigym/GUI-ClickButton-v0"


@pytest.fixture(scope="module")
def base(vh, recording_dirs: dict[str, Path], run_dirs: list[Path]):
    recordings = open_recordings([recording_dirs["a"], recording_dirs["b"], recording_dirs["frames"]])
    with vh.serve(create_app(recordings, open_runs(run_dirs), live=True)) as url:
        yield url


def png(vh, url: str) -> np.ndarray:
    status, kind, content = vh.request(url)
    assert status == 200 and kind == "image/png", (status, kind)
    return np.asarray(Image.open(io.BytesIO(content)))


def test_info_lists_recordings_and_their_episodes(vh, base):
    info = vh.get_json(f"{base}/api/info")
    assert [r["name"] for r in info["recordings"]] == ["agent_a", "agent_b", "driving"]
    assert info["live"] is True and info["runs"] == ["ppo", "sac"]
    episodes = info["recordings"][1]["episodes"]
    assert [e["seed"] for e in episodes] == [2, 0, 5]
    assert [e["agent"] for e in episodes] == ["agent_b"] * 3
    assert episodes[0]["return"] == pytest.approx(0.9) and episodes[0]["length"] == 2
    assert episodes[0]["metrics"] == {"is_success": 1.0, "pdms": pytest.approx(0.7)}


def test_step_shows_text_reply_reward_components_and_infos(vh, base):
    view = vh.get_json(f"{base}/api/recordings/0/episodes/1/steps/0")
    assert view["texts"] == {"text": vh.text(1, 0)}
    assert view["action"] == vh.reply(1, 0) == "garbage 1"
    assert view["reward"] == pytest.approx(-0.1) and view["terminated"] is False
    assert view["reward_components"] == {"nc": 1.0, "ep": pytest.approx(1.25)}
    assert view["infos"]["action_valid"] is False
    assert view["infos"]["action_error"] == "expected one call such as click(x, y)"
    view = vh.get_json(f"{base}/api/recordings/0/episodes/1/steps/1")
    assert view["action"] == "I think I should click it.\nclick(5, 6)"  # the full reply, newline kept
    assert view["reward"] == 1.0 and view["terminated"] is True and view["infos"]["action_valid"] is True
    assert view["return_so_far"] == pytest.approx(-0.1) and view["seed"] == 1
    final = vh.get_json(f"{base}/api/recordings/0/episodes/1/steps/2")  # the final observation: no action
    assert final["texts"]["text"] == vh.text(1, 2) and final["action"] is None and final["reward"] is None
    episode = vh.get_json(f"{base}/api/recordings/0/episodes/1")
    assert episode["rewards"] == [pytest.approx(-0.1), 1.0] and episode["images"] == ["obs/image"]
    assert episode["metrics"]["pdms"] == pytest.approx(0.6)


def test_step_images_are_the_recorded_pngs(vh, base):
    for t in range(3):
        view = vh.get_json(f"{base}/api/recordings/1/episodes/2/steps/{t}")  # seed 5
        [entry] = view["images"]
        assert (entry["column"], entry["width"], entry["height"]) == ("obs/image", 16, 21)
        np.testing.assert_array_equal(png(vh, base + entry["url"]), vh.image(5, t))
    view = vh.get_json(f"{base}/api/recordings/2/episodes/0/steps/3")  # no image obs: the rendered frame
    assert [i["column"] for i in view["images"]] == ["frame"]
    assert view["arrays"]["state"] == {"shape": [3], "values": [3, 4, 5], "truncated": False}
    frame = png(vh, base + view["images"][0]["url"])
    assert frame.shape == (12, 10, 3) and np.all(frame == 60)
    action = vh.get_json(f"{base}/api/recordings/2/episodes/0/steps/2")["action"]
    assert action == {"shape": [2], "values": [0.5, -0.5], "truncated": False}


def test_side_by_side_pairs_episodes_by_seed(vh, base):
    pairs = vh.get_json(f"{base}/api/pairs?a=0&b=1")
    assert pairs["pairs"] == [{"seed": 0, "a": 0, "b": 1}, {"seed": 2, "a": 2, "b": 0}]
    assert pairs["only_a"] == [1] and pairs["only_b"] == [2]
    a = vh.get_json(f"{base}/api/recordings/0/episodes/2/steps/0")
    b = vh.get_json(f"{base}/api/recordings/1/episodes/0/steps/0")
    assert a["seed"] == b["seed"] == 2 and a["texts"] == b["texts"]


def test_curves_from_metrics_jsonl(vh, base):
    runs = vh.get_json(f"{base}/api/runs")
    assert [r["name"] for r in runs] == ["ppo", "sac"]
    assert runs[0]["metrics"] == ["train/loss", "eval/return_mean"]  # wall_time and all-null metrics left out
    assert runs[0]["lines"] == 20 and runs[0]["last_step"] == 1900  # the torn last line skipped
    data = vh.get_json(f"{base}/api/curves?metric=eval/return_mean&metric=train/loss")
    sac = data["runs"][1]
    assert sac["name"] == "sac"
    assert sac["curves"]["eval/return_mean"] == [[0, 0], [500, 10], [1000, 20], [1500, 30]]
    assert sac["curves"]["train/loss"][:2] == [[0, 2], [100, 1]] and len(sac["curves"]["train/loss"]) == 20
    assert "error" in vh.get_json(f"{base}/api/curves", status=400)


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/api/recordings/7", 404, "no recording 7"),
        ("/api/recordings/0/episodes/9", 404, "episodes 0..2, not 9"),
        ("/api/recordings/0/episodes/0/steps/3", 404, "steps 0..2, not 3"),
        ("/api/recordings/0/episodes/0/steps/0/image/frame", 404, "no image 'frame'"),
        ("/api/recordings/x/episodes/0", 422, "rec: Input should be a valid integer"),
        ("/api/nothing", 404, "no page or endpoint /api/nothing"),
        ("/api/live/s999", 404, "no live session 's999'"),
    ],
)
def test_errors_are_one_json_line(vh, base, path, status, words):
    error = vh.get_json(base + path, status=status)["error"]
    assert words in error and "\n" not in error and "Traceback" not in error


def _back_button_click(observation: str) -> str:
    """The click an oracle would make: the centre of the button the instruction names."""
    label = re.search(r'Click the button "([^"]+)"', observation).group(1)
    box = re.search(rf'button "{label}" \((\d+), (\d+), (\d+), (\d+)\)', observation)
    x, y, w, h = map(int, box.groups())
    return f"click({x + w // 2}, {y + h // 2})"


def test_live_play_a_gui_env_with_typed_text(vh, base):
    body = {"env_id": GUI_ENV, "env_kwargs": {"accessibility_tree": True}, "seed": 3}
    view = vh.get_json(f"{base}/api/live", body)
    sid, observation = view["id"], view["texts"]["text"]
    assert view["action_space"] == {"kind": "text", "max_length": 256} and view["policy"] == ""
    assert view["step"] == 0 and view["seed"] == 3 and "instruction: Click the button" in observation
    screen = png(vh, base + view["images"][0]["url"])
    assert screen.shape == (view["images"][0]["height"], view["images"][0]["width"], 3) == (210, 160, 3)
    bad = vh.get_json(f"{base}/api/live/{sid}/step", {"action": "push the button please"})
    assert bad["infos"]["action_valid"] is False and bad["infos"]["action_error"]
    assert bad["reward"] == pytest.approx(-0.1) and bad["done"] is False
    assert bad["action"] == "push the button please"  # the reply as typed
    good = vh.get_json(f"{base}/api/live/{sid}/step", {"action": _back_button_click(observation)})
    assert good["infos"]["action_valid"] is True and good["infos"]["is_success"] is True
    assert good["reward"] == 1.0 and good["done"] is True and good["return_so_far"] == pytest.approx(0.9)
    over = vh.get_json(f"{base}/api/live/{sid}/step", {"action": "click(1, 1)"}, status=400)["error"]
    assert "episode is over" in over
    again = vh.get_json(f"{base}/api/live/{sid}/reset", {})
    assert again["seed"] == 4 and again["step"] == 0 and again["reward"] is None
    assert vh.get_json(f"{base}/api/live/{sid}", method="DELETE") == {"closed": sid}
    assert vh.get_json(f"{base}/api/live/{sid}", status=404)["error"].startswith("no live session")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"env_id": "omnigym/GUI-ClickButon-v0"}, "unknown env id 'omnigym/GUI-ClickButon-v0' (did you mean"),
        ({"env_id": GUI_ENV, "env_kwargs": {"colour": 1}}, "env kwargs.colour: omnigym/GUI-ClickButton-v0"),
        ({"env_id": GUI_ENV, "policy": "mlp"}, "has Text actions"),
        ({"env_id": GUI_ENV, "policy": "no_such_policy"}, "unknown policy 'no_such_policy'"),
        ({"env_id": "CartPole-v1", "policy": "gui_oracle"}, "policy gui_oracle does not fit CartPole-v1"),
        ({"policy": "random"}, "env_id: Field required"),
    ],
)
def test_live_errors_for_a_bad_env_or_a_policy_that_does_not_fit(vh, base, body, words):
    status, _, content = vh.request(f"{base}/api/live", body)
    error = json.loads(content)["error"]
    assert status in (400, 422) and words in error and "\n" not in error, error


def test_live_malformed_discrete_and_box_actions(vh, base):
    sid = vh.get_json(f"{base}/api/live", {"env_id": "CartPole-v1"})["id"]
    wrong = [(7, "Discrete(2) takes a whole number 0..1"), ("left", "not a number"), (0.5, "whole")]
    for action, words in wrong:
        assert words in vh.get_json(f"{base}/api/live/{sid}/step", {"action": action}, status=400)["error"]
    assert "no action given" in vh.get_json(f"{base}/api/live/{sid}/step", {}, status=400)["error"]
    view = vh.get_json(f"{base}/api/live/{sid}/step", {"action": "1"})
    assert view["step"] == 1 and view["action"]["values"] == [1] and view["reward"] == 1.0
    sid = vh.get_json(f"{base}/api/live", {"env_id": "Pendulum-v1"})["id"]
    shape = vh.get_json(f"{base}/api/live/{sid}/step", {"action": [0.1, 0.2]}, status=400)["error"]
    assert "shape [2]; Box takes a JSON list of shape [1] within [-2, 2]" in shape
    assert "outside" in vh.get_json(f"{base}/api/live/{sid}/step", {"action": "[9]"}, status=400)["error"]
    assert vh.get_json(f"{base}/api/live/{sid}/step", {"action": "[1.5]"})["action"]["values"] == [1.5]


def test_live_off_without_the_flag(vh, recording_dirs):
    with vh.serve(create_app(open_recordings([recording_dirs["a"]]), live=False)) as url:
        status, _, content = vh.request(f"{url}/api/live", {"env_id": GUI_ENV})
        assert status == 403 and LIVE_OFF in content.decode()
        assert vh.get_json(f"{url}/api/info")["live"] is False


def test_cli_rejects_what_is_not_a_recording(vh, tmp_path, run_dirs, capsys):
    from omnigym.platform.cli import main

    assert main(["view", str(tmp_path / "missing")]) == 2
    assert main(["view", str(run_dirs[0])]) == 2
    assert main(["view", "--run", str(tmp_path)]) == 2
    assert main(["view"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("omnigym view: error: ") for line in lines)
    assert "is not an episode recording (no recording.json)" in lines[0]
    assert f"is a training run, not an episode recording; plot it with --run {run_dirs[0]}" in lines[1]
    assert "not a run directory (no metrics.jsonl in it)" in lines[2]
    assert "give a recording DIR, --minari ID, --run RUN_DIR or --live" in lines[3]


def test_cli_serves_a_minari_dataset_converted_into_a_temporary_recording(vh, tmp_path, monkeypatch, capsys):
    import uvicorn

    from omnigym.platform.cli import main
    from omnigym.platform.episodes.minari_convert import recording_to_minari
    from omnigym.platform.evaluate import evaluate_policy
    from omnigym.platform.view import app as view_app

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    evaluate_policy(
        lambda obs: ["click(1, 1)"] * len(obs["text"]), vh.GUI_ENV, episodes=2, record_dir=tmp_path / "rec"
    )
    recording_to_minari(tmp_path / "rec", "omnigym/viewtest-v0")
    served = {}

    def capture(recordings, runs=(), **kwargs):
        served["recordings"] = [(r.name, r.recording.directory, len(r.recording)) for r in recordings]
        return create(recordings, runs, **kwargs)

    create = view_app.create_app
    monkeypatch.setattr(view_app, "create_app", capture)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: None)  # served and stopped at once
    assert main(["view", "--minari", "omnigym/viewtest-v0", "--port", "0"]) == 0
    [(name, directory, episodes)] = served["recordings"]
    assert name == "minari:omnigym/viewtest-v0" and episodes == 2
    assert not directory.exists()  # the temporary copy is gone when the viewer stops
    assert "omnigym view: stopped" in capsys.readouterr().out
