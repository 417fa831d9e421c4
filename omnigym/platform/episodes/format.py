"""The episode recording format: one directory, a JSON manifest, one Parquet file per episode.

A recording is what ``omnigym eval --record``, ``eval-agent --record`` and ``collect --record``
write and what ``omnigym view`` replays (``docs/episodes.md`` documents it for other tools)::

    DIR/recording.json          manifest: format version, env, agent, column kinds, episodes
    DIR/episode_000000.parquet  one row per step, T+1 rows (the last holds the final observation)

Row ``t`` holds the observation the agent saw at step ``t``, the action it took, the reward and
flags that came back, and that step's scalar ``info`` values. The extra last row holds only the
final observation (its action is null), so every frame of the episode is there to look at, as in
Minari's ``observations`` ``[T+1, ...]``.

Column names and encodings (``kind`` in the manifest):

- ``obs/<key>``: ``image`` (uint8 ``[H, W, C]`` as PNG bytes, lossless), ``text`` (string) or
  ``array`` (flattened float64 list; ``shape`` and ``dtype`` in the manifest restore it);
- ``frame``: the env's ``render()`` as PNG, for envs whose observation has no image;
- ``action``: ``text`` (the agent's full reply, exactly as sent to the env) or ``array``;
- ``reward`` (float64), ``terminated``, ``truncated`` (bool);
- ``reward/<name>``: ``info["reward_components"]`` of the step (e.g. PDMS sub-scores);
- ``info/<key>``: the step's scalar ``info`` values (bool, number or string, e.g.
  ``action_valid`` and ``action_error``).

Episode-level figures (return, length, seed, the final-step metrics such as ``pdms`` or
``is_success``) are in the manifest, so a table of episodes needs no Parquet read. Parquet keeps
the columns typed and compressed and is read by pandas, polars, DuckDB and Hugging Face datasets.
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_NAME = "omnigym-episodes"
FORMAT_VERSION = 1
MANIFEST = "recording.json"
FINAL_ROW_ACTION = None
"""The action of the last row of an episode: there is none after the final observation."""

KIND_IMAGE, KIND_TEXT, KIND_ARRAY = "image", "text", "array"
PLAIN_OBS_KEY = "state"
"""The column key of an env whose observation is one array rather than a dict."""


class RecordingError(ValueError):
    """A recording that cannot be written or read: the message names the path and the fix."""


def encode_png(image: np.ndarray) -> bytes:
    """``image`` (uint8 ``[H, W]``, ``[H, W, 1|3|4]``) as lossless PNG bytes."""
    from PIL import Image

    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise RecordingError(f"images are recorded as uint8, got {array.dtype}")
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", compress_level=1)  # 1: fast, still lossless
    return buffer.getvalue()


def decode_png(data: bytes) -> np.ndarray:
    """The uint8 array stored by :func:`encode_png`."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)))


def value_kind(value: Any) -> str:
    """How a value is stored: ``image`` for uint8 ``[H, W, C]``, ``text`` for str, else ``array``."""
    if isinstance(value, str):
        return KIND_TEXT
    array = np.asarray(value)
    if array.dtype == np.uint8 and array.ndim == 3 and array.shape[-1] in (1, 3, 4):
        return KIND_IMAGE
    if array.dtype.kind not in "biuf":
        raise RecordingError(f"cannot record a value of dtype {array.dtype} (numbers, images or text only)")
    return KIND_ARRAY


@dataclass
class ColumnSpec:
    """How one recorded value is encoded and restored."""

    kind: str
    shape: list[int] = field(default_factory=list)
    dtype: str = ""

    @classmethod
    def of(cls, value: Any) -> ColumnSpec:
        """The spec of ``value``, the first value recorded in its column."""
        kind = value_kind(value)
        if kind == KIND_TEXT:
            return cls(kind)
        array = np.asarray(value)
        return cls(kind, list(array.shape), str(array.dtype))

    def encode(self, value: Any) -> Any:
        """``value`` as stored in its Parquet column."""
        if value is None:
            return None
        if self.kind == KIND_TEXT:
            return str(value)
        if self.kind == KIND_IMAGE:
            return encode_png(np.asarray(value))
        return np.asarray(value, dtype=np.float64).ravel().tolist()

    def decode(self, stored: Any) -> Any:
        """The value :meth:`encode` stored (arrays in their own shape and dtype)."""
        if stored is None or self.kind == KIND_TEXT:
            return stored
        if self.kind == KIND_IMAGE:
            return decode_png(stored)
        return np.asarray(stored, dtype=np.float64).astype(self.dtype).reshape(self.shape)


@dataclass
class EpisodeSummary:
    """One episode's entry in the manifest."""

    index: int
    file: str
    seed: int | None
    length: int
    episode_return: float
    metrics: dict[str, float] = field(default_factory=dict)
    agent: str = ""

    def to_json(self) -> dict[str, Any]:
        """The manifest entry (NaN metrics as null: JSON has no NaN)."""
        return {
            "index": self.index, "file": self.file, "seed": self.seed, "length": self.length,
            "return": self.episode_return, "agent": self.agent,
            "metrics": {k: (None if math.isnan(v) else v) for k, v in self.metrics.items()},
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpisodeSummary:
        """The entry written by :meth:`to_json`."""
        metrics = {k: float("nan") if v is None else float(v) for k, v in data.get("metrics", {}).items()}
        return cls(
            index=int(data["index"]), file=str(data["file"]), seed=data.get("seed"),
            length=int(data["length"]), episode_return=float(data["return"]), metrics=metrics,
            agent=str(data.get("agent", "")),
        )  # fmt: skip


@dataclass
class Episode:
    """One recorded episode, decoded: ``length`` steps and ``length + 1`` observations."""

    summary: EpisodeSummary
    observations: dict[str, list[Any]]
    """``key -> [T+1]`` values (images as uint8 arrays, text as str)."""
    actions: list[Any]
    """``[T]`` actions: the agent's reply text, or arrays."""
    rewards: np.ndarray
    """``[T]`` float64."""
    terminated: np.ndarray
    truncated: np.ndarray
    reward_components: dict[str, np.ndarray]
    """``name -> [T]`` (NaN where a step did not report it)."""
    infos: dict[str, list[Any]]
    """``key -> [T]`` scalar info values (None where a step did not report it)."""
    frames: list[np.ndarray] | None = None
    """``[T+1]`` rendered frames, for envs whose observation has no image."""

    @property
    def length(self) -> int:
        """Steps in the episode."""
        return len(self.actions)


class RecordingWriter:
    """Writes episodes into a new recording directory, one Parquet file as each episode ends.

    The manifest is rewritten (atomically) after every episode, so an interrupted run leaves a
    readable recording of the episodes that finished. An existing recording is never overwritten.
    """

    def __init__(
        self, directory: str | Path, *, env_id: str, env_kwargs: Mapping[str, Any] | None = None,
        agent: str = "", source: str = "",
    ) -> None:  # fmt: skip
        self.directory = Path(directory)
        if (self.directory / MANIFEST).exists():
            raise RecordingError(
                f"{self.directory} already holds a recording; pick a new directory (nothing is overwritten)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.manifest: dict[str, Any] = {
            "format": FORMAT_NAME, "version": FORMAT_VERSION, "env_id": env_id,
            "env_kwargs": json_value(dict(env_kwargs or {})), "agent": agent, "source": source,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "columns": {}, "episodes": [],
        }  # fmt: skip
        self.columns: dict[str, ColumnSpec] = {}

    def write(
        self, steps: EpisodeSteps, *, seed: int | None, metrics: Mapping[str, float], agent: str = "",
        index: int | None = None,
    ) -> Path:  # fmt: skip
        """Write one finished episode; returns its Parquet file.

        Args:
            steps: the episode.
            seed: its reset seed (None: unknown).
            metrics: its final-step figures (``pdms``, ``is_success``, ...).
            agent: who acted, when it differs from the recording's agent.
            index: its place in the recording (episodes of a batch finish out of order);
                default: after the last.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        taken = {e["index"] for e in self.manifest["episodes"]}
        index = (max(taken) + 1 if taken else 0) if index is None else index
        if index in taken:
            raise RecordingError(f"{self.directory}: episode {index} is recorded already")
        name = f"episode_{index:06d}.parquet"
        table = pa.table(self._columns(steps))
        pq.write_table(table, self.directory / name, compression="zstd")
        summary = EpisodeSummary(
            index=index, file=name, seed=seed, length=steps.length,
            episode_return=float(np.sum(steps.rewards)), metrics={k: float(v) for k, v in metrics.items()},
            agent=agent or self.manifest["agent"],
        )  # fmt: skip
        self.manifest["episodes"] = sorted(
            [*self.manifest["episodes"], summary.to_json()], key=lambda e: e["index"]
        )
        self.manifest["columns"] = {name: vars(spec) for name, spec in self.columns.items()}
        self.manifest["dict_observations"] = steps.dict_obs
        _write_json_atomic(self.directory / MANIFEST, self.manifest)
        return self.directory / name

    def _columns(self, steps: EpisodeSteps) -> dict[str, list[Any]]:
        rows = steps.length + 1
        columns: dict[str, list[Any]] = {"step": list(range(rows))}
        for key, values in steps.observations.items():
            columns[f"obs/{key}"] = self._encode(f"obs/{key}", values)
        if steps.frames:
            columns["frame"] = self._encode("frame", steps.frames)
        pad: list[Any] = [FINAL_ROW_ACTION]
        columns["action"] = self._encode("action", [*steps.actions, *pad])
        columns["reward"] = [*map(float, steps.rewards), None]
        columns["terminated"] = [*map(bool, steps.terminated), None]
        columns["truncated"] = [*map(bool, steps.truncated), None]
        for name, values in steps.reward_components.items():
            columns[f"reward/{name}"] = [*(None if v is None else float(v) for v in values), None]
        for key, values in steps.infos.items():
            stored = [_info_value(v) for v in values]
            if len({type(v) for v in stored if v is not None}) > 1:  # Arrow columns have one type
                stored = [None if v is None else str(v) for v in stored]
            columns[f"info/{key}"] = [*stored, None]
        return columns

    def _encode(self, name: str, values: Sequence[Any]) -> list[Any]:
        first = next((v for v in values if v is not None), None)
        if first is None:
            return [None] * len(values)
        spec = self.columns.setdefault(name, ColumnSpec.of(first))
        return [spec.encode(v) for v in values]


@dataclass
class EpisodeSteps:
    """An episode being recorded, in the writer's layout (``T+1`` observations, ``T`` of the rest)."""

    observations: dict[str, list[Any]] = field(default_factory=dict)
    actions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    reward_components: dict[str, list[float | None]] = field(default_factory=dict)
    infos: dict[str, list[Any]] = field(default_factory=dict)
    frames: list[np.ndarray] = field(default_factory=list)
    dict_obs: bool = True
    """Whether the env's observations are dicts (else one array, recorded as ``obs/state``)."""

    @property
    def length(self) -> int:
        """Steps recorded so far."""
        return len(self.actions)

    def add_observation(self, obs: Mapping[str, Any] | np.ndarray, frame: np.ndarray | None = None) -> None:
        """The observation before the next step (the reset's first); ``frame`` its rendering."""
        self.dict_obs = isinstance(obs, Mapping)
        items = obs.items() if isinstance(obs, Mapping) else [(PLAIN_OBS_KEY, obs)]
        for key, value in items:
            self.observations.setdefault(key, []).append(value)
        if frame is not None:
            self.frames.append(np.asarray(frame))

    def add_step(
        self, action: Any, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        """One step's action and what came back (its next observation goes to :meth:`add_observation`)."""
        step = self.length
        self.actions.append(action if isinstance(action, str) else np.asarray(action))
        self.rewards.append(float(reward))
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))
        for name, value in (info.get("reward_components") or {}).items():
            self.reward_components.setdefault(name, [None] * step).append(_number(value))
        for key, value in info.items():
            if _info_value(value) is not None:
                self.infos.setdefault(key, [None] * step).append(value)
        for values in (*self.reward_components.values(), *self.infos.values()):
            values.extend([None] * (step + 1 - len(values)))  # keys this step did not report


class Recording:
    """A recording directory opened for reading: the manifest at once, episodes on demand."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        path = self.directory / MANIFEST
        if not path.is_file():
            raise RecordingError(
                f"{self.directory} is not an episode recording (no {MANIFEST}); record one with `omnigym "
                "eval --record DIR` or convert a Minari dataset with `omnigym datasets export ID --out DIR`"
            )
        try:
            self.manifest = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise RecordingError(f"{path} is not valid JSON ({exc}); the recording is damaged") from exc
        if self.manifest.get("format") != FORMAT_NAME:
            raise RecordingError(
                f"{path} is not an omnigym episode recording (format {self.manifest.get('format')!r})"
            )
        if int(self.manifest.get("version", 0)) > FORMAT_VERSION:
            raise RecordingError(
                f"{path} has format version {self.manifest['version']}; this omnigym reads up to "
                f"{FORMAT_VERSION}: upgrade omnigym"
            )
        self.columns = {name: ColumnSpec(**spec) for name, spec in self.manifest["columns"].items()}
        self.episodes = [EpisodeSummary.from_json(e) for e in self.manifest["episodes"]]

    @property
    def env_id(self) -> str:
        """The Gymnasium id the episodes were recorded on."""
        return str(self.manifest["env_id"])

    @property
    def dict_observations(self) -> bool:
        """Whether the env's observations were dicts (else the one array is ``obs/state``)."""
        return bool(self.manifest.get("dict_observations", True))

    def __len__(self) -> int:
        return len(self.episodes)

    def __iter__(self) -> Iterator[Episode]:
        return (self.episode(i) for i in range(len(self)))

    def episode(self, index: int) -> Episode:
        """Episode ``index``, decoded."""
        import pyarrow.parquet as pq

        if not 0 <= index < len(self.episodes):
            raise RecordingError(f"{self.directory} has episodes 0..{len(self.episodes) - 1}, not {index}")
        summary = self.episodes[index]
        try:
            table = pq.read_table(self.directory / summary.file).to_pydict()
        except (OSError, ValueError) as exc:
            raise RecordingError(f"{self.directory / summary.file}: cannot read ({exc})") from exc
        length = summary.length
        decode = {name: spec.decode for name, spec in self.columns.items()}
        observations = {
            name.removeprefix("obs/"): [decode[name](v) for v in values]
            for name, values in table.items() if name.startswith("obs/")
        }  # fmt: skip
        frames = [decode["frame"](v) for v in table["frame"]] if "frame" in table else None
        return Episode(
            summary=summary,
            observations=observations,
            actions=[decode["action"](v) for v in table["action"][:length]],
            rewards=np.asarray(table["reward"][:length], dtype=np.float64),
            terminated=np.asarray(table["terminated"][:length], dtype=bool),
            truncated=np.asarray(table["truncated"][:length], dtype=bool),
            reward_components={
                name.removeprefix("reward/"): np.asarray(
                    [np.nan if v is None else v for v in values[:length]], dtype=np.float64
                )
                for name, values in table.items()
                if name.startswith("reward/")
            },
            infos={
                name.removeprefix("info/"): v[:length]
                for name, v in table.items()
                if name.startswith("info/")
            },
            frames=frames,
        )


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _info_value(value: Any) -> bool | float | str | None:
    """A scalar info value as stored (bool, float, str); None for anything else (arrays, dicts)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, str):
        return value
    return None


def json_value(value: Any) -> Any:
    """``value`` as JSON holds it (NumPy values as numbers and lists, NaN as null, the rest as repr).

    Manifests, the viewer's responses and LeRobot's side file all go through it.
    """
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_value(value.tolist())
    if isinstance(value, np.generic):
        return json_value(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int)):
        return value
    return repr(value)


def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
