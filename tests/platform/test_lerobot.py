"""LeRobot's dataset format through LeRobot's own classes: a manipulation dataset with images out and back.

LeRobot's dataset module loads only where a torchvision matching torch does, which the project's
CPU-only torch has none of: `scripts/test.sh` runs this file again in `.venv-lerobot`
(`scripts/setup-lerobot.sh`). In the main environment the one-line error is what is checked.
"""

from __future__ import annotations

import json

import minari
import numpy as np
import pytest

from omnigym.core.policy import Policy
from omnigym.platform.cli import main
from omnigym.platform.episodes.lerobot_convert import (
    SIDECAR,
    LeRobotFormatError,
    lerobot_dataset_class,
    observation_features,
)
from omnigym.policies.flow.policy import FlowPolicy

ENV = "omnigym/PushCubePixels-v0"


def _lerobot_loads() -> bool:
    try:
        lerobot_dataset_class()
    except LeRobotFormatError:
        return False
    return True


LEROBOT = _lerobot_loads()
needs_lerobot = pytest.mark.skipif(
    not LEROBOT, reason="lerobot does not load beside this torch (scripts/test.sh runs it in .venv-lerobot)"
)


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def _collect(dataset_id: str, episodes: int = 2) -> None:
    argv = ["collect", "--policy", "pushcube_expert", "--env", ENV, "--dataset-id", dataset_id]
    assert main([*argv, "--episodes", str(episodes), "--env-kwargs", '{"image_size": 32}']) == 0


def test_feature_names_follow_lerobots_conventions():
    import gymnasium as gym

    from omnigym.platform.vec_env import make_env

    env = make_env(ENV, image_size=32)
    assert observation_features(env.observation_space) == {
        "image": "observation.image",
        "state": "observation.state",
        "text": "task",
    }
    env.close()
    two_cameras = gym.spaces.Dict(
        {
            "top": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "wrist": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "agent_pos": gym.spaces.Box(-1, 1, (2,), np.float32),
            "goal": gym.spaces.Box(-1, 1, (3,), np.float32),
        }
    )
    assert observation_features(two_cameras) == {
        "top": "observation.images.top",
        "wrist": "observation.images.wrist",
        "agent_pos": "observation.state",
        "goal": "observation.goal",
    }
    assert observation_features(gym.spaces.Box(-1, 1, (4,), np.float32)) == {"state": "observation.state"}
    with pytest.raises(LeRobotFormatError, match="arrays, images and an instruction"):
        observation_features(gym.spaces.Dict({"mode": gym.spaces.Discrete(3)}))


@pytest.mark.skipif(LEROBOT, reason="lerobot loads here; the round trip below runs instead")
def test_without_lerobot_the_cli_says_how_to_get_it(tmp_path, minari_root, capsys):
    minari_root.mkdir()
    assert (
        main(["datasets", "export", "omnigym/none-v0", "--format", "lerobot", "--out", str(tmp_path / "x")])
        == 2
    )
    assert "no Minari dataset" in capsys.readouterr().err
    _collect("omnigym/pc-v0", episodes=1)
    assert (
        main(["datasets", "export", "omnigym/pc-v0", "--format", "lerobot", "--out", str(tmp_path / "x")])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "scripts/setup-lerobot.sh" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()


@needs_lerobot
def test_round_trip_through_lerobots_classes(tmp_path, minari_root, capsys):
    _collect("omnigym/pc-v0")
    out = tmp_path / "lerobot"
    assert main(["datasets", "export", "omnigym/pc-v0", "--format", "lerobot", "--out", str(out)]) == 0
    assert "as a LeRobot dataset" in capsys.readouterr().out
    original = minari.load_dataset("omnigym/pc-v0")
    episodes = list(original.iterate_episodes())

    # LeRobot reads it as its own: features, fps, tasks, frames.
    lerobot = lerobot_dataset_class()("omnigym/pc-v0", root=out)
    assert lerobot.num_episodes == 2 and lerobot.num_frames == original.total_steps
    assert lerobot.fps == 25  # the env's render_fps
    assert lerobot.meta.features["observation.image"]["dtype"] == "image"
    assert {"observation.state", "action", "next.reward", "next.done", "next.success"} <= set(
        lerobot.features
    )
    first = lerobot[0]
    assert first["task"] == str(episodes[0].observations["text"][0])  # the instruction
    np.testing.assert_array_equal(
        np.rint(first["observation.image"].numpy().transpose(1, 2, 0) * 255),
        episodes[0].observations["image"][0],
    )
    last = lerobot[len(episodes[0].rewards) - 1]
    assert bool(last["next.done"]) and bool(last["next.success"])  # the expert pushed the cube home
    assert json.loads((out / SIDECAR).read_text())["seeds"] == [0, 1]

    # And back: everything a LeRobot frame holds is exact; the final observation repeats the last.
    assert main(["datasets", "import", str(out), "--dataset-id", "omnigym/pc-back-v0"]) == 0
    back = minari.load_dataset("omnigym/pc-back-v0")
    assert back.spec.env_spec.id == ENV and back.spec.env_spec.kwargs["image_size"] == 32
    back_episodes = list(back.iterate_episodes())
    for a, b in zip(episodes, back_episodes, strict=True):
        assert b.id == a.id and len(b.rewards) == len(a.rewards)
        for key in ("image", "state"):
            np.testing.assert_array_equal(b.observations[key][:-1], a.observations[key][:-1])
            np.testing.assert_array_equal(b.observations[key][-1], a.observations[key][-2])
        assert list(b.observations["text"][:-1]) == list(a.observations["text"][:-1])
        np.testing.assert_array_equal(b.actions, a.actions)
        np.testing.assert_array_equal(b.rewards, a.rewards.astype(np.float32))
        np.testing.assert_array_equal(b.terminations, a.terminations)
        np.testing.assert_array_equal(b.truncations, a.truncations)
    seeds = [m["seed"] for m in back.storage.get_episode_metadata(back.episode_indices)]
    assert seeds == [0, 1]

    # bc trains from the LeRobot dataset as from the Minari one.
    tiny = ["down_dims=[16,32]", "state_hidden_sizes=[32]", "num_inference_steps=2", "obs_keys=[state]"]
    argv = ["bc", "--dataset", str(out), "--policy", "flow", "--out", str(tmp_path / "p"), "--steps", "2"]
    assert main([*argv, *tiny]) == 0
    policy = Policy.from_pretrained(tmp_path / "p")
    assert isinstance(policy, FlowPolicy) and int(policy.ema_step) == 2
    np.testing.assert_allclose(
        policy.action_normalizer.low.numpy(),
        np.concatenate([e.actions for e in episodes]).min(axis=0),
        rtol=1e-6,
    )

    # Mistakes are one line: an existing target, a dataset with no env named, one that does not fit.
    capsys.readouterr()
    assert main(["datasets", "export", "omnigym/pc-v0", "--format", "lerobot", "--out", str(out)]) == 2
    assert "exists already" in capsys.readouterr().err
    (out / SIDECAR).unlink()  # as a dataset made outside omnigym
    assert main(["datasets", "import", str(out), "--dataset-id", "omnigym/x-v0"]) == 2
    assert "--env" in capsys.readouterr().err
    argv = ["datasets", "import", str(out), "--dataset-id", "omnigym/x-v0", "--env", ENV]
    assert main(argv) == 2  # the env's default images are 96 x 96, these 32 x 32
    assert "(32, 32, 3)" in capsys.readouterr().err
    argv = ["datasets", "import", str(out), "--dataset-id", "omnigym/y-v0", "--env", "Pendulum-v1"]
    assert main(argv) == 2
    assert "observation.state is (23,), Pendulum-v1's 'state' is (3,)" in capsys.readouterr().err


@needs_lerobot
def test_video_that_cannot_be_decoded_here_is_one_line(tmp_path, minari_root, capsys):
    """LeRobot's own datasets often store video; where lerobot cannot decode it, import says so."""
    features = {
        "observation.image": {
            "dtype": "video",
            "shape": (96, 96, 3),
            "names": ["height", "width", "channels"],
        },
        "observation.state": {"dtype": "float32", "shape": (23,), "names": None},
        "action": {"dtype": "float32", "shape": (4,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    root = tmp_path / "video"
    dataset = lerobot_dataset_class().create("someone/pushcube", fps=25, features=features, root=root)
    rng = np.random.default_rng(0)
    for t in range(3):
        frame = {
            "observation.image": rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
            "observation.state": rng.normal(size=23).astype(np.float32),
            "action": rng.uniform(-1, 1, 4).astype(np.float32),
            "next.reward": np.array([0.0], np.float32),
            "next.done": np.array([t == 2]),
            "task": "push the cube to the target",
        }
        dataset.add_frame(frame)
    dataset.save_episode()
    dataset.finalize()
    capsys.readouterr()
    argv = ["datasets", "import", str(root), "--dataset-id", "omnigym/video-v0", "--env", ENV]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "as video, which lerobot cannot decode here" in err and len(err.splitlines()) == 1
