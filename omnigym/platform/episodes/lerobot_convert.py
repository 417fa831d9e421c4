"""Minari datasets to LeRobot datasets and back, through LeRobot's own dataset classes.

LeRobot's format (v3.0: Parquet frames, ``meta/info.json``, ``meta/episodes``) is where robot
learning data lives. A LeRobot frame is one step: the observation, the action taken in it, and
``next.reward`` / ``next.done`` (``next.success`` where the env reports success); the instruction
is the frame's ``task``. Observations are named as LeRobot's policies expect them:

| omnigym | LeRobot feature |
| --- | --- |
| a vector observation, or a Dict's ``state`` / ``agent_pos`` | ``observation.state`` |
| an image (uint8, H x W x C), or a Dict's only image | ``observation.image`` (PNG in the Parquet) |
| a Dict's images when there are several | ``observation.images.<key>`` |
| a Dict's other arrays | ``observation.<key>`` |
| a Dict's text (the instruction) | the frame's ``task`` |

The frames hold no observation after the last step, so a dataset read back repeats the last
one there (what ends an episode is kept: ``next.done`` is the termination, an episode that ends
without it was truncated). ``meta/omnigym.json`` keeps what LeRobot has no field for: the env id
and options, each episode's reset seed and metadata. A LeRobot dataset made elsewhere reads back
given the env id whose spaces it fits.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from omnigym.envs.wrappers import is_image_space
from omnigym.platform.datasets import DatasetSummary, write_episodes_dataset
from omnigym.platform.episodes.format import PLAIN_OBS_KEY, json_value
from omnigym.platform.loggers import progress
from omnigym.platform.vec_env import make_env

if TYPE_CHECKING:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

SIDECAR = Path("meta") / "omnigym.json"
STATE_KEYS = ("state", "agent_pos")
"""Dict keys that LeRobot calls ``observation.state``."""
DEFAULT_FPS = 10


class LeRobotFormatError(ValueError):
    """A dataset that cannot go to or come from LeRobot's format; the message says why and what to do."""


def is_lerobot_dataset(path: str | Path) -> bool:
    """Whether ``path`` is a LeRobot dataset's root (it holds ``meta/info.json``)."""
    return (Path(path) / "meta" / "info.json").is_file()


def lerobot_dataset_class() -> type[LeRobotDataset]:
    """LeRobot's ``LeRobotDataset``, or one line saying how to get a Python where it loads."""
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except (ImportError, RuntimeError) as exc:  # torchvision's ops fail to register as RuntimeError
        raise LeRobotFormatError(
            f"the LeRobot format needs lerobot 0.4.4 and a torchvision that loads beside this torch "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); `bash scripts/setup-lerobot.sh` "
            "makes .venv-lerobot with both (docs/episodes.md)"
        ) from exc
    return LeRobotDataset


def observation_features(space: spaces.Space) -> dict[str, str]:
    """Each observation key's LeRobot feature name (``task`` for the text key)."""
    parts = _parts(space)
    images = [key for key, sub in parts.items() if is_image_space(sub)]
    texts = [key for key, sub in parts.items() if isinstance(sub, spaces.Text)]
    if len(texts) > 1:
        raise LeRobotFormatError(f"LeRobot frames hold one instruction (task); this env has texts {texts}")
    names = {}
    for key, sub in parts.items():
        if isinstance(sub, spaces.Text):
            names[key] = "task"
        elif key in images:
            names[key] = "observation.image" if len(images) == 1 else f"observation.images.{key}"
        elif isinstance(sub, spaces.Box):
            state = key in STATE_KEYS or not isinstance(space, spaces.Dict)
            names[key] = "observation.state" if state else f"observation.{key}"
        else:
            raise LeRobotFormatError(
                f"LeRobot features are arrays, images and an instruction; observation {key!r} is {sub}"
            )
    return names


def minari_to_lerobot(
    dataset_id: str, directory: str | Path, *, fps: int | None = None, task: str | None = None
) -> Path:
    """Write Minari dataset ``dataset_id`` as a LeRobot dataset rooted at ``directory`` (a new one).

    ``fps`` defaults to the env's ``render_fps`` (else 10). A frame's instruction is the
    observation's text where the env has one, else ``task`` (default: the env id).

    Raises:
        FileNotFoundError: no such Minari dataset.
        LeRobotFormatError: ``directory`` exists, the actions are not a Box, or an observation has
            no LeRobot feature, or lerobot does not load here.
    """
    import minari
    from minari.storage import get_dataset_path

    directory = Path(directory)
    if directory.exists():
        raise LeRobotFormatError(
            f"{directory} exists already; LeRobot datasets are written to a new directory"
        )
    if not get_dataset_path(dataset_id).exists():
        raise FileNotFoundError(
            f"no Minari dataset {dataset_id!r} under {get_dataset_path(dataset_id).parent} "
            "(MINARI_DATASETS_PATH sets where datasets live)"
        )
    dataset_class = lerobot_dataset_class()
    dataset = minari.load_dataset(dataset_id)
    if not isinstance(dataset.action_space, spaces.Box):
        raise LeRobotFormatError(
            f"LeRobot datasets hold continuous actions; {dataset_id}'s are {dataset.action_space} "
            "(the recording format keeps any action: --format recording)"
        )
    env_spec = dataset.spec.env_spec
    env_id = env_spec.id if env_spec is not None else dataset_id
    env_kwargs = dict(env_spec.kwargs) if env_spec is not None else {}
    names = observation_features(dataset.observation_space)
    parts = _parts(dataset.observation_space)
    metadata = list(dataset.storage.get_episode_metadata(dataset.episode_indices))
    has_success = all("is_success" in meta for meta in metadata)
    features = _features(parts, names, dataset.action_space, has_success)
    if fps is None:
        env = make_env(env_id, **env_kwargs)
        fps = int(env.metadata.get("render_fps") or DEFAULT_FPS)
        env.close()
    lerobot = dataset_class.create(
        dataset_id, fps=fps, features=features, root=directory, use_videos=False, robot_type=env_id
    )
    episodes = zip(metadata, dataset.iterate_episodes(), strict=True)
    seeds, kept_metadata = [], []
    try:
        with _quiet_datasets():
            for meta, episode in progress(episodes, len(metadata), "export to LeRobot", unit="episode"):
                for frame in _frames(episode, parts, names, task or env_id, has_success):
                    lerobot.add_frame(frame)
                lerobot.save_episode()
                seeds.append(None if meta.get("seed") is None else int(meta["seed"]))
                kept_metadata.append({k: json_value(v) for k, v in meta.items() if k not in ("id", "seed")})
            lerobot.finalize()
    except BaseException:  # Ctrl-C included: no half-written dataset is left behind
        shutil.rmtree(directory, ignore_errors=True)
        raise
    sidecar = {
        "env_id": env_id,
        "env_kwargs": json_value(env_kwargs),
        "source": f"minari:{dataset_id}",
        "seeds": seeds,
        "episode_metadata": kept_metadata,
    }
    (directory / SIDECAR).write_text(json.dumps(sidecar, indent=1) + "\n")
    return directory


def lerobot_to_minari(
    directory: str | Path,
    dataset_id: str,
    *,
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> DatasetSummary:
    """Write the LeRobot dataset rooted at ``directory`` as Minari dataset ``dataset_id``.

    The env (for the spaces) is the one ``meta/omnigym.json`` names, else ``env_id``, which a
    dataset made elsewhere needs; its features must be those :func:`observation_features` names.

    Raises:
        FileNotFoundError: ``directory`` is not a LeRobot dataset.
        LeRobotFormatError: no env id, a feature the env needs is missing, or lerobot does not load.
        ValueError: the Minari dataset exists already.
    """
    directory = Path(directory)
    if not is_lerobot_dataset(directory):
        raise FileNotFoundError(f"{directory} is not a LeRobot dataset (no meta/info.json)")
    sidecar = json.loads((directory / SIDECAR).read_text()) if (directory / SIDECAR).is_file() else {}
    env_id = env_id or sidecar.get("env_id")
    if not env_id:
        raise LeRobotFormatError(
            f"{directory} does not say which env it was recorded on; "
            "pass the env id whose spaces it fits (--env)"
        )
    env_kwargs = env_kwargs if env_kwargs is not None else sidecar.get("env_kwargs") or {}
    env = make_env(env_id, **env_kwargs)
    parts = _parts(env.observation_space)
    names = observation_features(env.observation_space)
    env.close()
    dataset_class = lerobot_dataset_class()
    lerobot = dataset_class(sidecar.get("source", "local/dataset").removeprefix("minari:"), root=directory)
    stored = set(lerobot.features)
    missing = sorted(
        name for key, name in names.items()
        if name != "task" and name not in stored and f"observation.images.{key}" not in stored
    )  # fmt: skip
    if missing:
        raise LeRobotFormatError(
            f"{directory} lacks the features {env_id} needs: {missing} (it has {sorted(lerobot.features)})"
        )
    for key, name in names.items():
        feature = lerobot.features.get(name) or lerobot.features.get(f"observation.images.{key}")
        if feature is not None and tuple(feature["shape"]) != parts[key].shape:
            raise LeRobotFormatError(
                f"{directory}'s {name} is {tuple(feature['shape'])}, {env_id}'s {key!r} is "
                f"{parts[key].shape}: pick the env (or its options) the data was recorded with"
            )
    _check_video_decodes(lerobot, directory)
    seeds = sidecar.get("seeds") or []
    episodes = []
    for index, rows in enumerate(_episode_rows(lerobot)):
        episode = _minari_episode(rows, parts, names)
        episode["seed"] = seeds[index] if index < len(seeds) else None
        episodes.append(episode)
    label = str((sidecar.get("episode_metadata") or [{}])[0].get("policy", "lerobot"))
    return write_episodes_dataset(
        episodes, env_id, dataset_id, label=label, env_kwargs=env_kwargs,
        description=f"converted from the LeRobot dataset {directory.name}",
    )  # fmt: skip


def _parts(space: spaces.Space) -> dict[str, spaces.Space]:
    return dict(space.spaces) if isinstance(space, spaces.Dict) else {PLAIN_OBS_KEY: space}


def _features(
    parts: dict[str, spaces.Space], names: dict[str, str], action_space: spaces.Box, success: bool
) -> dict[str, dict[str, Any]]:
    """LeRobot's feature specs for these observations and actions."""
    features: dict[str, dict[str, Any]] = {}
    for key, sub in parts.items():
        if names[key] == "task":
            continue
        assert isinstance(sub, spaces.Box)  # observation_features refused the rest
        if is_image_space(sub):
            features[names[key]] = {
                "dtype": "image",
                "shape": sub.shape,
                "names": ["height", "width", "channels"],
            }
        else:
            features[names[key]] = {"dtype": "float32", "shape": sub.shape, "names": None}
    features["action"] = {"dtype": "float32", "shape": action_space.shape, "names": None}
    features["next.reward"] = {"dtype": "float32", "shape": (1,), "names": None}
    features["next.done"] = {"dtype": "bool", "shape": (1,), "names": None}
    if success:
        features["next.success"] = {"dtype": "bool", "shape": (1,), "names": None}
    return features


def _frames(
    episode: Any, parts: dict[str, spaces.Space], names: dict[str, str], task: str, success: bool
) -> Iterator[dict[str, Any]]:
    """A Minari episode's steps as LeRobot frames."""
    observations = episode.observations
    successes = np.asarray(episode.infos.get("is_success", [])) if success else None
    for t in range(len(episode.rewards)):
        frame: dict[str, Any] = {}
        for key, name in names.items():
            value = observations[key][t] if isinstance(observations, dict) else observations[t]
            if name == "task":
                frame["task"] = str(value)
            else:
                frame[name] = np.asarray(value, dtype=np.uint8 if is_image_space(parts[key]) else np.float32)
        frame.setdefault("task", task)
        frame["action"] = np.asarray(episode.actions[t], dtype=np.float32)
        frame["next.reward"] = np.array([episode.rewards[t]], dtype=np.float32)
        frame["next.done"] = np.array([bool(episode.terminations[t])])
        if successes is not None:
            frame["next.success"] = np.array([bool(successes[t + 1])])
        yield frame


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Without Hugging Face datasets' bar for every saved episode (the export shows its own progress)."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _check_video_decodes(lerobot: LeRobotDataset, directory: Path) -> None:
    """One line, not a traceback, where the dataset stores video that lerobot cannot decode here."""
    if not lerobot.meta.video_keys or not len(lerobot):
        return
    try:
        lerobot[0]
    except (AttributeError, ImportError, RuntimeError, OSError) as exc:
        raise LeRobotFormatError(
            f"{directory} stores {lerobot.meta.video_keys} as video, which lerobot cannot decode here "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:100]}); it decodes with torchcodec "
            "or torchvision's VideoReader, which this torchvision lacks: install a torchcodec matching torch"
        ) from exc


def _episode_rows(lerobot: LeRobotDataset) -> Iterator[list[dict[str, Any]]]:
    """Each episode's frames, read through the dataset (images decoded as LeRobot serves them)."""
    for episode in lerobot.meta.episodes:
        start, stop = int(episode["dataset_from_index"]), int(episode["dataset_to_index"])
        yield [lerobot[index] for index in range(start, stop)]


def _minari_episode(
    rows: list[dict[str, Any]], parts: dict[str, spaces.Space], names: dict[str, str]
) -> dict[str, Any]:
    """LeRobot frames as a Minari episode, the last observation repeated after the last step."""
    observations: dict[str, Any] = {}
    for key, name in names.items():
        convert = _image_from_lerobot if is_image_space(parts[key]) else _array_from_lerobot(parts[key])
        values = [row[name] if name == "task" else convert(_feature(row, name, key)) for row in rows]
        values.append(values[-1])
        observations[key] = values if name == "task" else np.stack(values)
    done = [bool(_scalar(row["next.done"])) for row in rows]
    return {
        "observations": observations if len(parts) > 1 or PLAIN_OBS_KEY not in parts
        else observations[PLAIN_OBS_KEY],
        "actions": np.stack([row["action"].numpy().astype(np.float32) for row in rows]),
        "rewards": [float(_scalar(row["next.reward"])) for row in rows],
        "terminations": done,
        "truncations": [i == len(rows) - 1 and not d for i, d in enumerate(done)],
    }  # fmt: skip


def _feature(row: dict[str, Any], name: str, key: str) -> Any:
    """A frame's value for ``name``; a lone image may also be stored as ``observation.images.<key>``."""
    if name in row or name != "observation.image":
        return row[name]
    return row[f"observation.images.{key}"]


def _image_from_lerobot(value: Any) -> np.ndarray:
    """LeRobot serves images as float C x H x W in [0, 1]; back to the uint8 H x W x C they were."""
    return np.rint(value.numpy().transpose(1, 2, 0) * 255.0).astype(np.uint8)


def _array_from_lerobot(space: spaces.Space) -> Callable[[Any], np.ndarray]:
    dtype = space.dtype if space.dtype is not None else np.float32
    return lambda value: value.numpy().astype(dtype).reshape(space.shape)


def _scalar(value: Any) -> float:
    return float(np.asarray(value).reshape(-1)[0])
