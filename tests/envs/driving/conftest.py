"""Shared fixtures of the driving env tests: one on-disk scene cache for the whole session."""

import pytest

NUM_SCENES = 4
"""Scenes of the test split the env tests drive (each is generated once per session)."""


@pytest.fixture(scope="session")
def scene_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A session-wide ``cache_dir``: procedural scenes are generated once, then read back."""
    return str(tmp_path_factory.mktemp("driving-scene-cache"))


@pytest.fixture
def driving_kwargs(scene_cache: str) -> dict:
    """Env keyword arguments for a few cached test-split scenes (copy before changing)."""
    return {"split": "test", "num_scenes": NUM_SCENES, "cache_dir": scene_cache}
