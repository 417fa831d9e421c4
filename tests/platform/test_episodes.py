"""The episode recording format: exact round trips, what eval records, Minari both ways, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from omnigym.platform.cli import main
from omnigym.platform.episodes import EpisodeSteps, Recording, RecordingError, RecordingWriter
from omnigym.platform.episodes.format import MANIFEST, decode_png, encode_png

GUI_ENV = "omnigym/GUI-ClickButton-v0"


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def crafted_episode(rng: np.random.Generator) -> EpisodeSteps:
    """Three steps: an image, a text and a float32 array observation; text actions; uneven infos."""
    steps = EpisodeSteps()
    for t in range(4):
        obs = {
            "image": rng.integers(0, 256, (6, 5, 3), dtype=np.uint8),
            "text": f"instruction {t}: Click \u201cOK\u201d",
            "state": rng.normal(size=(2, 3)).astype(np.float32),
        }
        steps.add_observation(obs)
        if t < 3:
            info = {
                "action_valid": t != 1,
                "action_error": "" if t != 1 else "no such verb",
                "latency_s": 0.5 * t,
            }
            if t == 2:
                info["reward_components"] = {"nc": 1.0, "ep": 0.25}
                info["new_key"] = 7
            steps.add_step(
                f"click({t}, {t + 1})", reward=0.1 * t, terminated=t == 2, truncated=False, info=info
            )
    return steps


def test_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    steps = crafted_episode(rng)
    writer = RecordingWriter(tmp_path / "rec", env_id="omnigym/Test-v0", env_kwargs={"size": 3}, agent="me")
    writer.write(steps, seed=11, metrics={"is_success": 1.0, "pdms": float("nan")})
    recording = Recording(tmp_path / "rec")
    assert recording.env_id == "omnigym/Test-v0" and len(recording) == 1
    episode = recording.episode(0)
    assert episode.length == 3 and episode.summary.seed == 11 and episode.summary.agent == "me"
    assert episode.summary.episode_return == pytest.approx(0.0 + 0.1 + 0.2)
    assert episode.summary.metrics["is_success"] == 1.0 and math.isnan(episode.summary.metrics["pdms"])
    for t in range(4):
        np.testing.assert_array_equal(episode.observations["image"][t], steps.observations["image"][t])
        assert episode.observations["text"][t] == steps.observations["text"][t]
        state = episode.observations["state"][t]
        assert state.dtype == np.float32 and state.shape == (2, 3)
        np.testing.assert_array_equal(state, steps.observations["state"][t])
    assert episode.actions == ["click(0, 1)", "click(1, 2)", "click(2, 3)"]
    np.testing.assert_allclose(episode.rewards, [0.0, 0.1, 0.2])
    assert episode.terminated.tolist() == [False, False, True] and not episode.truncated.any()
    assert episode.infos["action_valid"] == [True, False, True]
    assert episode.infos["action_error"] == ["", "no such verb", ""]
    assert episode.infos["new_key"] == [None, None, 7.0]  # keys a step did not report are None
    np.testing.assert_allclose(episode.reward_components["ep"], [np.nan, np.nan, 0.25])
    assert "reward_components" not in episode.infos  # a dict is not a scalar info
    assert episode.frames is None


def test_plain_array_observations_and_frames(tmp_path):
    steps = EpisodeSteps()
    frames = [np.full((4, 4, 3), t, dtype=np.uint8) for t in range(3)]
    steps.add_observation(np.arange(3, dtype=np.float64), frames[0])
    for t in (1, 2):
        steps.add_step(np.array([0.5, -0.5], dtype=np.float32), 1.0, False, t == 2, {})
        steps.add_observation(np.arange(3, dtype=np.float64) + t, frames[t])
    writer = RecordingWriter(tmp_path / "rec", env_id="Pendulum-v1")
    writer.write(steps, seed=None, metrics={})
    recording = Recording(tmp_path / "rec")
    episode = recording.episode(0)
    assert not recording.dict_observations
    np.testing.assert_array_equal(episode.observations["state"][2], [2.0, 3.0, 4.0])
    assert episode.actions[1].dtype == np.float32 and episode.actions[1].tolist() == [0.5, -0.5]
    assert [int(f[0, 0, 0]) for f in episode.frames or []] == [0, 1, 2]


def test_episodes_finishing_out_of_order_keep_their_index(tmp_path):
    writer = RecordingWriter(tmp_path / "rec", env_id="omnigym/Test-v0")
    for index in (2, 0, 1):
        steps = EpisodeSteps()
        steps.add_observation({"x": np.zeros(1)})
        steps.add_step(np.zeros(1), float(index), True, False, {})
        steps.add_observation({"x": np.ones(1)})
        writer.write(steps, seed=100 + index, metrics={}, index=index)
    recording = Recording(tmp_path / "rec")
    assert [e.seed for e in recording.episodes] == [100, 101, 102]
    assert [float(recording.episode(i).rewards[0]) for i in range(3)] == [0.0, 1.0, 2.0]
    with pytest.raises(RecordingError, match="episode 1 is recorded already"):
        writer.write(steps, seed=0, metrics={}, index=1)


def test_existing_recording_is_never_overwritten_and_damage_is_one_line(tmp_path):
    RecordingWriter(tmp_path / "rec", env_id="omnigym/Test-v0").write(
        crafted_episode(np.random.default_rng(1)), seed=0, metrics={}
    )
    before = (tmp_path / "rec" / MANIFEST).read_text()
    with pytest.raises(RecordingError, match="already holds a recording"):
        RecordingWriter(tmp_path / "rec", env_id="omnigym/Test-v0")
    assert (tmp_path / "rec" / MANIFEST).read_text() == before
    with pytest.raises(RecordingError, match="not an episode recording"):
        Recording(tmp_path)
    (tmp_path / "rec" / "episode_000000.parquet").write_bytes(b"not parquet")
    with pytest.raises(RecordingError, match="cannot read"):
        Recording(tmp_path / "rec").episode(0)
    (tmp_path / "rec" / MANIFEST).write_text("{")
    with pytest.raises(RecordingError, match="not valid JSON"):
        Recording(tmp_path / "rec")


def test_png_is_lossless():
    image = np.random.default_rng(2).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    np.testing.assert_array_equal(decode_png(encode_png(image)), image)
    with pytest.raises(RecordingError, match="uint8"):
        encode_png(image.astype(np.float32))


def test_eval_records_what_the_agent_saw_and_did(tmp_path):
    from omnigym.platform.agent_eval import oracle_agent
    from omnigym.platform.evaluate import evaluate_policy
    from omnigym.platform.vec_env import make_env

    result = evaluate_policy(
        oracle_agent(GUI_ENV, {}), GUI_ENV, episodes=3, seed=5, num_envs=2, record_dir=tmp_path / "rec",
        agent_name="gui_oracle",
    )  # fmt: skip
    recording = Recording(tmp_path / "rec")
    assert [e.seed for e in recording.episodes] == [5, 6, 7]
    assert [e.episode_return for e in recording.episodes] == result.returns
    assert [e.metrics["is_success"] for e in recording.episodes] == result.metrics["is_success"]
    env = make_env(GUI_ENV)
    for summary in recording.episodes:
        episode = recording.episode(summary.index)
        obs, _ = env.reset(seed=summary.seed)  # the same seed shows the same screen
        np.testing.assert_array_equal(episode.observations["image"][0], obs["image"])
        assert episode.observations["text"][0] == obs["text"]
        _, reward, *_ = env.step(episode.actions[0])  # the recorded reply replays to the same reward
        assert reward == episode.rewards[0]
        assert episode.infos["action_valid"] == [True] * episode.length
    env.close()


def test_eval_records_rendered_frames_and_reward_components_for_vector_envs(tmp_path):
    from omnigym.platform.cli.policy_spec import resolve_policy
    from omnigym.platform.evaluate import evaluate_policy

    env_id = "omnigym/Driving-v0"
    result = evaluate_policy(
        resolve_policy("pdm_closed", env_id, {}), env_id, episodes=1, max_episode_steps=4,
        record_dir=tmp_path / "rec",
    )  # fmt: skip
    episode = Recording(tmp_path / "rec").episode(0)
    assert episode.length == 4 and episode.frames is not None and len(episode.frames) == 5
    assert episode.frames[0].dtype == np.uint8 and episode.frames[0].ndim == 3
    assert "image" not in episode.observations and episode.observations["state"][0].shape == (12,)
    for name, total in (
        (k.removeprefix("reward/"), v[0]) for k, v in result.metrics.items() if k.startswith("reward/")
    ):
        assert episode.reward_components[name].sum() == pytest.approx(total)
    assert result.metrics and episode.summary.metrics.keys() == result.metrics.keys()
    for key, values in result.metrics.items():
        assert episode.summary.metrics[key] == pytest.approx(values[0], nan_ok=True)


def test_minari_round_trip_and_cli(tmp_path, minari_root, capsys):
    record = ["eval", "--policy", "gui_oracle", "--env", GUI_ENV, "--episodes", "2", "--record"]
    assert main([*record, str(tmp_path / "rec")]) == 0
    assert "episodes recorded in" in capsys.readouterr().out
    assert main([*record, str(tmp_path / "rec")]) == 2
    assert "already holds a recording" in capsys.readouterr().err

    assert main(["datasets", "import", str(tmp_path / "rec"), "--dataset-id", "omnigym/rec-test-v0"]) == 0
    assert "2 episodes" in capsys.readouterr().out
    assert main(["datasets", "export", "omnigym/rec-test-v0", "--out", str(tmp_path / "back")]) == 0
    original, back = Recording(tmp_path / "rec"), Recording(tmp_path / "back")
    assert back.env_id == GUI_ENV and len(back) == 2
    assert [e.seed for e in back.episodes] == [e.seed for e in original.episodes] == [0, 1]
    for a, b in zip(original, back, strict=True):
        assert b.actions == a.actions
        np.testing.assert_array_equal(b.rewards, a.rewards)
        for key in ("image", "text"):
            for x, y in zip(a.observations[key], b.observations[key], strict=True):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert b.summary.metrics["return"] == pytest.approx(a.summary.episode_return)
    manifest = json.loads((tmp_path / "back" / MANIFEST).read_text())
    assert manifest["source"] == "minari:omnigym/rec-test-v0"
    assert main(["datasets", "export", "omnigym/no-such-v0", "--out", str(tmp_path / "x")]) == 2
    assert "no Minari dataset" in capsys.readouterr().err


def test_world_model_replay_refuses_what_is_not_a_model(tmp_path, capsys):
    assert main(["world-model", "replay", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "is not a saved world model (no config.json)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
