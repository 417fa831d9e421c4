"""Fixed sets of procedural scenes on disk, and the env's scene source.

:class:`SceneSet` saves and loads an ordered set of scenes (``index.json`` plus one ``.npz`` a
scene); :class:`SceneSource` serves scenes to the env by index, generating them lazily
(``scenes.generate_scene``) or reading a saved set, caching in memory and, optionally, on disk.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omnigym.envs.driving.scene import FORMAT_VERSION, Scene, load_scene, save_scene
from omnigym.envs.driving.scenes import (
    GENERATOR_VERSION,
    SceneConfig,
    generate_scene,
    split_scene_ids,
)

SCENE_SET_VERSION = 1
"""Version of a scene set's ``index.json`` layout."""


# --- scene sets -----------------------------------------------------------------------------------
class SceneSet:
    """An ordered collection of scenes, saved as ``index.json`` plus ``scenes/<id>.npz``."""

    def __init__(self, scenes: list[Scene], config: SceneConfig | None = None) -> None:
        self.scenes, self.config = list(scenes), config

    @classmethod
    def generate(cls, split: str, count: int, config: SceneConfig | None = None) -> SceneSet:
        """The first ``count`` scenes of ``split``."""
        config = config or SceneConfig()
        return cls([generate_scene(i, config) for i in split_scene_ids(split, count)], config)

    def __len__(self) -> int:
        return len(self.scenes)

    def __getitem__(self, index: int) -> Scene:
        return self.scenes[index]

    @property
    def ids(self) -> list[int]:
        """Scene ids, in order."""
        return [scene.scene_id for scene in self.scenes]

    def save(self, directory: str | Path) -> Path:
        """Write the set to ``directory`` (created if needed); returns the index path."""
        directory = Path(directory)
        entries = []
        for scene in self.scenes:
            file = f"scenes/{scene.scene_id}.npz"
            save_scene(scene, directory / file)
            entries.append({"id": scene.scene_id, "kind": scene.kind, "file": file})
        index = {
            "set_version": SCENE_SET_VERSION,
            "format_version": FORMAT_VERSION,
            "generator_version": GENERATOR_VERSION,
            "config": asdict(self.config) if self.config else None,
            "scenes": entries,
        }
        path = directory / "index.json"
        path.write_text(json.dumps(index, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> SceneSet:
        """Read a set written by :meth:`save` (or by hand: an index with scene files)."""
        directory, index = _read_index(directory)
        config = SceneConfig(**index["config"]) if index.get("config") else None
        return cls([load_scene(directory / entry["file"]) for entry in index["scenes"]], config)


def _read_index(directory: str | Path) -> tuple[Path, dict[str, Any]]:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no scene set directory at {directory}")
    path = directory / "index.json"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no index.json: not a scene set")
    try:
        index = json.loads(path.read_text())
        entries = index["scenes"]
        missing = [e["file"] for e in entries if not (directory / e["file"]).is_file()]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a scene set index: {exc!r}") from exc
    if index.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: scene format {index.get('format_version')}, this omnigym reads {FORMAT_VERSION}"
        )
    if missing:
        raise FileNotFoundError(f"{path} lists scene files that do not exist: {missing[:5]}")
    return directory, index


# --- the env's scene source -----------------------------------------------------------------------
SCENE_NOTICE_S = 10.0
"""Scenes expected to take longer than this to generate are announced on stderr, with an ETA."""


class SceneSource:
    """Scenes for the env by index: generated lazily (or read from a scene set), cached.

    Procedural: ``SceneSource(split, num_scenes, config, cache_dir=...)`` serves the first
    ``num_scenes`` ids of ``split``. With ``cache_dir``, generated scenes are also written to
    ``cache_dir/scenes-<key>/<id>.npz`` (``key`` hashes the config, the scene format and
    GENERATOR_VERSION) and read back by later runs. :meth:`from_directory` serves a saved set
    (``config`` is then the set's, or None). The in-memory cache keeps the ``memory_cache_size``
    most recently used scenes.
    """

    def __init__(
        self,
        split: str = "train",
        num_scenes: int = 1000,
        config: SceneConfig | None = None,
        *,
        cache_dir: str | Path | None = None,
        memory_cache_size: int = 256,
    ) -> None:
        procedural = config or SceneConfig()
        self.config: SceneConfig | None = procedural
        self._ids = split_scene_ids(split, num_scenes)
        self.cache_path = Path(cache_dir) / f"scenes-{procedural.key()}" if cache_dir is not None else None
        self._memory: OrderedDict[int, Scene] = OrderedDict()
        self._memory_size = memory_cache_size
        self._make: Callable[[int], Scene] = functools.partial(self._generate_or_read, config=procedural)

    @classmethod
    def from_directory(cls, directory: str | Path, *, memory_cache_size: int = 256) -> SceneSource:
        """Serve the scenes of a saved :class:`SceneSet`, in its order, loading each on first use."""
        directory, index = _read_index(directory)
        source = cls(num_scenes=0, memory_cache_size=memory_cache_size)
        source.config = SceneConfig(**index["config"]) if index.get("config") else None
        source._ids = [int(e["id"]) for e in index["scenes"]]
        files = {int(e["id"]): directory / e["file"] for e in index["scenes"]}
        source._make = lambda scene_id: load_scene(files[scene_id])
        return source

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[int]:
        """Scene ids, in index order."""
        return list(self._ids)

    def get(self, index: int) -> Scene:
        """Scene number ``index`` (0 <= index < len)."""
        if not 0 <= index < len(self._ids):
            raise IndexError(f"scene index {index} out of range for {len(self._ids)} scenes")
        scene_id = self._ids[index]
        if scene_id in self._memory:
            self._memory.move_to_end(scene_id)
            return self._memory[scene_id]
        scene = self._make(scene_id)
        self._memory[scene_id] = scene
        if len(self._memory) > self._memory_size:
            self._memory.popitem(last=False)
        return scene

    def get_many(self, indices: Sequence[int]) -> list[Scene]:
        """Scenes number ``indices``, showing progress when generating them takes a while.

        The first run on a split generates its scenes (about 0.3 s each on one core; later runs
        read them from ``cache_path``). On an interactive stderr a tqdm bar appears after 2 s;
        otherwise one line announces the scenes left and their ETA once that exceeds
        :data:`SCENE_NOTICE_S`.
        """
        isatty = getattr(sys.stderr, "isatty", None)
        bar = None
        if len(indices) > 1 and isatty is not None and isatty():
            from tqdm import tqdm

            bar = tqdm(
                total=len(indices),
                desc="driving scenes",
                unit="scene",
                delay=2.0,
                file=sys.stderr,
                leave=False,
            )
        start, announced = time.monotonic(), False
        scenes = []
        try:
            for done, index in enumerate(indices, start=1):
                scenes.append(self.get(index))
                if bar is not None:
                    bar.update()
                    continue
                eta = (time.monotonic() - start) / done * (len(indices) - done)
                if not announced and eta > SCENE_NOTICE_S:
                    where = f"; cached in {self.cache_path} for later runs" if self.cache_path else ""
                    left = len(indices) - done
                    print(
                        f"[omnigym] generating {left} more driving scenes (eta {eta:.0f} s{where})",
                        file=sys.stderr,
                        flush=True,
                    )
                    announced = True
        finally:
            if bar is not None:
                bar.close()
        return scenes

    def _generate_or_read(self, scene_id: int, config: SceneConfig) -> Scene:
        if self.cache_path is None:
            return generate_scene(scene_id, config)
        path = self.cache_path / f"{scene_id}.npz"
        if path.is_file():
            try:
                return load_scene(path)
            except (ValueError, OSError):
                pass  # a damaged cache file is regenerated below
        scene = generate_scene(scene_id, config)
        # a private temporary name, then an atomic rename: parallel workers never see half a file
        tmp = save_scene(scene, self.cache_path / f".{scene_id}.{os.getpid()}.{uuid.uuid4().hex}.npz")
        os.replace(tmp, path)
        return scene
