"""Recorded episodes as the viewer shows them: episode tables, one step's view, image bytes, pairs by seed.

A step's view is read from the episode's Parquet table as stored: images are served as the PNG
bytes the recording holds (no decode and re-encode), text and arrays are decoded with the
manifest's column specs. A few episode tables stay in memory, so moving the slider reads nothing.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from omnigym.platform.episodes.format import KIND_IMAGE, KIND_TEXT, Recording, json_value

CACHED_EPISODES = 6
"""Episode tables kept in memory per recording (a 160-step driving episode is a few MB of PNGs)."""
MAX_ARRAY_VALUES = 256
"""Values of an array observation or action sent to the page (the shape says how many there are)."""


class NotFoundError(LookupError):
    """A recording, episode, step, image, run or live session that does not exist (HTTP 404)."""


class Replay:
    """One recording opened for the viewer, under the name the page shows."""

    def __init__(self, recording: Recording, name: str) -> None:
        self.recording = recording
        self.name = name
        self._tables: OrderedDict[int, dict[str, list[Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def summary(self) -> dict[str, Any]:
        """The recording's header and its episodes table (from the manifest: no Parquet read)."""
        manifest = self.recording.manifest
        return {
            "name": self.name, "path": str(self.recording.directory), "env_id": self.recording.env_id,
            "env_kwargs": manifest.get("env_kwargs") or {}, "agent": manifest.get("agent", ""),
            "source": manifest.get("source", ""), "created": manifest.get("created", ""),
            "columns": {name: spec.kind for name, spec in self.recording.columns.items()},
            "episodes": [json_value(e.to_json()) for e in self.recording.episodes],
        }  # fmt: skip

    def episode(self, index: int) -> dict[str, Any]:
        """Episode ``index``'s summary, its per-step rewards and which image columns it has."""
        summary = self._summary(index)
        table = self._table(index)
        return {
            **json_value(summary.to_json()), "recording": self.name, "env_id": self.recording.env_id,
            "rewards": [_float(r) for r in table["reward"][: summary.length]],
            "images": self._image_columns(table), "steps": summary.length + 1,
        }  # fmt: skip

    def step(self, index: int, t: int) -> dict[str, Any]:
        """What the page shows at step ``t`` of episode ``index`` (``0..length``; the last has no action).

        ``images`` lists the step's image columns with their sizes; the app adds each one's URL.
        """
        summary = self._summary(index)
        if not 0 <= t <= summary.length:
            raise NotFoundError(f"episode {index} of {self.name} has steps 0..{summary.length}, not {t}")
        table = self._table(index)
        images = [{"column": c, **self._image_size(c)} for c in self._image_columns(table)]
        view = step_view(
            t=t, length=summary.length, observations=self._observations(table, t), images=images,
            action=self._decode("action", table["action"][t]),
            reward=table["reward"][t], terminated=table["terminated"][t], truncated=table["truncated"][t],
            components={n.removeprefix("reward/"): v[t] for n, v in table.items() if n.startswith("reward/")},
            infos={n.removeprefix("info/"): v[t] for n, v in table.items() if n.startswith("info/")},
        )  # fmt: skip
        rewards = [r for r in table["reward"][:t] if r is not None]
        return {**view, "return_so_far": float(sum(rewards)), "seed": summary.seed, "agent": summary.agent}

    def image(self, index: int, t: int, column: str) -> bytes:
        """The PNG bytes of image column ``column`` (``obs/<key>`` or ``frame``) at step ``t``."""
        summary = self._summary(index)
        table = self._table(index)
        if column not in self._image_columns(table) or not 0 <= t <= summary.length:
            raise NotFoundError(f"{self.name} episode {index} has no image {column!r} at step {t}")
        data = table[column][t]
        if data is None:
            raise NotFoundError(f"{self.name} episode {index}: image {column!r} is empty at step {t}")
        return bytes(data)

    def _summary(self, index: int) -> Any:
        if not 0 <= index < len(self.recording.episodes):
            last = len(self.recording.episodes) - 1
            raise NotFoundError(f"{self.name} has episodes 0..{last}, not {index}")
        return self.recording.episodes[index]

    def _table(self, index: int) -> dict[str, list[Any]]:
        """Episode ``index``'s columns as stored, from the cache or read once."""
        import pyarrow.parquet as pq

        with self._lock:
            if index in self._tables:
                self._tables.move_to_end(index)
                return self._tables[index]
        path = self.recording.directory / self._summary(index).file
        try:
            table = pq.read_table(path).to_pydict()
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read ({' '.join(str(exc).split())})") from exc
        with self._lock:
            self._tables[index] = table
            while len(self._tables) > CACHED_EPISODES:
                self._tables.popitem(last=False)
        return table

    def _image_columns(self, table: dict[str, list[Any]]) -> list[str]:
        columns = self.recording.columns
        image_like = [n for n in table if n.startswith("obs/") or n == "frame"]
        return [n for n in image_like if _kind(columns, n) == KIND_IMAGE]

    def _image_size(self, column: str) -> dict[str, int]:
        shape = self.recording.columns[column].shape
        return {"width": int(shape[1]), "height": int(shape[0])} if len(shape) >= 2 else {}

    def _observations(self, table: dict[str, list[Any]], t: int) -> dict[str, Any]:
        columns = self.recording.columns
        return {
            n.removeprefix("obs/"): self._decode(n, v[t])
            for n, v in table.items() if n.startswith("obs/") and _kind(columns, n) != KIND_IMAGE
        }  # fmt: skip

    def _decode(self, column: str, stored: Any) -> Any:
        spec = self.recording.columns.get(column)
        return stored if spec is None else spec.decode(stored)


def step_view(
    *, t: int, length: int | None, observations: dict[str, Any], images: list[dict[str, Any]], action: Any,
    reward: Any, terminated: Any, truncated: Any, components: dict[str, Any], infos: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """One step as JSON for the page, shared by replay and live sessions.

    Text observations go to ``texts``, arrays (at most :data:`MAX_ARRAY_VALUES` values, with
    their shape) to ``arrays``; ``action`` is the reply text or an array; ``reward``, the flags,
    the reward components and infos are those the step returned (None after the final observation).
    """
    texts = {k: v for k, v in observations.items() if isinstance(v, str)}
    arrays = {k: array_view(v) for k, v in observations.items() if not isinstance(v, str) and v is not None}
    return {
        "step": t, "length": length, "images": images, "texts": texts, "arrays": arrays,
        "action": action if action is None or isinstance(action, str) else array_view(action),
        "reward": _float(reward), "terminated": _flag(terminated), "truncated": _flag(truncated),
        "reward_components": {k: _float(v) for k, v in components.items() if _float(v) is not None},
        "infos": {k: json_value(v) for k, v in infos.items() if v is not None},
    }  # fmt: skip


def array_view(value: Any) -> dict[str, Any]:
    """An array as ``{"shape", "values"}``: flattened, rounded to 6 significant digits, capped in length."""
    array = np.asarray(value)
    flat = array.ravel()[:MAX_ARRAY_VALUES]
    values = [_round(v) if array.dtype.kind in "fc" else json_value(v) for v in flat.tolist()]
    return {"shape": list(array.shape), "values": values, "truncated": array.size > MAX_ARRAY_VALUES}


def pairs_by_seed(a: Replay, b: Replay) -> dict[str, Any]:
    """Episodes of ``a`` and ``b`` with the same reset seed, for side-by-side replay.

    The k-th episode of a seed in ``a`` pairs with the k-th of that seed in ``b``; episodes with no
    seed or no partner are listed apart.
    """

    def by_seed(replay: Replay) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {}
        for episode in replay.recording.episodes:
            if episode.seed is not None:
                found.setdefault(int(episode.seed), []).append(episode.index)
        return found

    seeds_a, seeds_b = by_seed(a), by_seed(b)
    pairs = [
        {"seed": seed, "a": ia, "b": ib}
        for seed in sorted(set(seeds_a) & set(seeds_b))
        for ia, ib in zip(seeds_a[seed], seeds_b[seed], strict=False)
    ]  # fmt: skip
    paired_a, paired_b = {p["a"] for p in pairs}, {p["b"] for p in pairs}
    return {
        "a": a.name, "b": b.name, "pairs": pairs,
        "only_a": [e.index for e in a.recording.episodes if e.index not in paired_a],
        "only_b": [e.index for e in b.recording.episodes if e.index not in paired_b],
    }  # fmt: skip


def open_recordings(paths: Sequence[str | Path], names: Sequence[str | None] = ()) -> list[Replay]:
    """The recordings at ``paths``, named by their directory (with the parent's name when two clash).

    Args:
        paths: recording directories.
        names: a name to show for each path instead (None, or a shorter list: the directory's).

    Raises:
        RecordingError: a path that is not a recording (the message says how to make one).
    """
    recordings = [Recording(Path(p).expanduser()) for p in paths]
    found = [r.directory.resolve().name for r in recordings]
    given = [*names, *[None] * (len(paths) - len(names))]
    return [
        Replay(
            r, chosen or (name if found.count(name) == 1 else f"{r.directory.resolve().parent.name}/{name}")
        )
        for r, name, chosen in zip(recordings, found, given, strict=True)
    ]


def _kind(columns: dict[str, Any], name: str) -> str:
    spec = columns.get(name)
    return str(spec.kind) if spec is not None else KIND_TEXT


def _float(value: Any) -> float | None:
    """A finite float, or None (JSON has no NaN)."""
    if value is None or isinstance(value, str):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _round(value: float) -> float | None:
    """``value`` to 6 significant digits (what a person reads), None when not finite."""
    number = _float(value)
    return None if number is None else float(f"{number:.6g}")


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)
