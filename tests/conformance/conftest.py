"""Shared parametrization and helpers for the conformance tests.

The conformance tests run over *every* registered env, policy and algorithm, so a new one is
covered without editing them: a test that takes an ``env_id``, ``policy_name`` or ``algo_name``
argument is parametrized here over the registries (pytest ids are the names).

The policy tests generate their own cases (policy x the spaces it acts in, ``test_policies.py``).
A policy whose default config cannot act on the policy tests' spaces (a VLM needs a model) gets
its config from :data:`POLICY_CONFIGS` (fixture ``policy_config_hooks``); a policy that reads one
env family's observation texts gets them from :data:`POLICY_TEXTS` (fixture ``text_observations``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from omnigym.core.config import list_options, load_yaml
from omnigym.core.registry import ALGORITHMS, POLICIES
from omnigym.envs import ACTION_SPACE_VARIANTS, omnigym_env_ids
from omnigym.envs.ext_ids import SLOW_EXT_ENV_IDS
from omnigym.platform.experiment import config_dir


def config_env_ids() -> list[str]:
    """The env ids the YAML files in ``configs/env`` use."""
    root = config_dir() / "env"
    return [load_yaml(root / f"{name}.yaml")["id"] for name in list_options(config_dir(), "env")]


def conformance_env_ids() -> list[str]:
    """Every omnigym env plus every env a config uses, each once, in a stable order."""
    return list(dict.fromkeys([*omnigym_env_ids(), *config_env_ids()]))


ROM_FAMILY_SAMPLE = ("omnigym/Atari-Pong-v0", "omnigym/Atari-Breakout-v0")
"""The Atari ids the ``env_class`` checks run on. The 26 ``omnigym/Atari-<Game>-v0`` ids are one env
class (``AtariEnv``) over 26 ROMs, and a seeded ALE reset reloads the ROM (~0.2 s), so Gymnasium's
``check_env``, the determinism and the group-reset checks (the class's own code) run on two games;
the per-game checks (spaces and keys, seeds, NaN, invalid actions, rendering) run on all 26."""


SLOW_ENV_IDS = (
    frozenset({"omnigym.policies.hierarchical.planner_env:omnigym/PickPlaceSubgoals-v0"}) | SLOW_EXT_ENV_IDS
)
"""Envs whose every step runs a learned controller for several task steps (about 0.3 s a step on a
2-core CPU, a few minutes for the checks' thousand-odd steps): their checks run in the slow tier. The
peer suites' slow ids (a browser per reset, rendered frames) are listed in ``omnigym.envs.ext_ids``."""


def env_class_ids() -> list[str]:
    """:func:`conformance_env_ids` with the Atari ROM family narrowed to :data:`ROM_FAMILY_SAMPLE`."""
    return [
        env_id
        for env_id in conformance_env_ids()
        if not env_id.startswith("omnigym/Atari-") or env_id in ROM_FAMILY_SAMPLE
    ]


def env_variants() -> list[str]:
    """``"<id> action_space=<mode>"`` for each env's other action spaces (``ACTION_SPACE_VARIANTS``;
    the Atari ROM family's text mode, the class's own code, on :data:`ROM_FAMILY_SAMPLE`)."""
    return [
        f"{env_id} action_space={mode}"
        for env_id, modes in ACTION_SPACE_VARIANTS.items()
        if not env_id.startswith("omnigym/Atari-") or env_id in ROM_FAMILY_SAMPLE
        for mode in modes
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``env_id``, ``policy_name`` and ``algo_name`` over the registries (``env_id`` over
    :func:`env_class_ids` for tests marked ``env_class``)."""
    per_class = metafunc.definition.get_closest_marker("env_class") is not None
    sources = {
        "env_id": env_class_ids if per_class else conformance_env_ids,
        "env_variant": env_variants,
        "policy_name": POLICIES.names,
        "algo_name": ALGORITHMS.names,
    }
    for argname, names in sources.items():
        if argname in metafunc.fixturenames:
            values = names()
            params = [
                pytest.param(value, id=value, marks=pytest.mark.slow)
                if argname == "env_id" and value in SLOW_ENV_IDS
                else pytest.param(value, id=value)
                for value in values
            ]
            metafunc.parametrize(argname, params)


@pytest.fixture(autouse=True)
def _run_in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test in its own directory: MuJoCo writes MUJOCO_LOG.TXT into the cwd."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def restore_mujoco_gl() -> Iterator[None]:
    """Restore ``MUJOCO_GL`` (or its absence) after the test: make_env may set it for rendering."""
    saved = os.environ.get("MUJOCO_GL")
    yield
    if saved is None:
        os.environ.pop("MUJOCO_GL", None)
    else:
        os.environ["MUJOCO_GL"] = saved


@cache
def _mujoco_gl_works(backend: str) -> bool:
    code = "import mujoco; ctx = mujoco.GLContext(8, 8); ctx.make_current(); ctx.free()"
    env = {**os.environ, "MUJOCO_GL": backend}
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


@pytest.fixture(scope="session")
def mujoco_gl_works() -> Callable[[str], bool]:
    """``mujoco_gl_works(backend)``: whether MuJoCo can make an offscreen OpenGL context with
    ``MUJOCO_GL=backend``. Probed once per backend in a fresh interpreter, because the backend
    is fixed when ``mujoco`` is first imported."""
    return _mujoco_gl_works


# --- policies that need more than their default config ------------------------------------------
class TinyModelDirs:
    """Tiny random Hugging Face models (``omnigym.policies.vlm.tiny``), each built offline on first
    use (a few seconds) and kept for the session. ``dirs[arch]`` skips the test when
    ``transformers`` or ``peft`` is missing."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._dirs: dict[str, Path] = {}

    def __getitem__(self, arch: str) -> Path:
        pytest.importorskip("transformers")
        pytest.importorskip("peft")
        if arch not in self._dirs:
            from omnigym.policies.vlm.tiny import make_tiny

            self._dirs[arch] = make_tiny(arch, self._factory.mktemp(f"tiny_{arch}"))
        return self._dirs[arch]


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> TinyModelDirs:
    return TinyModelDirs(tmp_path_factory)


def vlm_config(obs_kind: str, action_kind: str, tiny_model_dirs: TinyModelDirs) -> Any:
    """A tiny VLM (image + text) or text-only LM (text) writing text actions; None elsewhere (the
    policy tests check it only there: ``POLICY_KINDS``)."""
    if action_kind != "text":
        return None
    if obs_kind == "image_text":
        arch, obs_keys = "idefics3", ("image", "text")
    elif obs_kind == "text":
        arch, obs_keys = "qwen2", ("text",)
    else:
        return None
    model = tiny_model_dirs[arch]
    from omnigym.policies.vlm.policy import VLMPolicyConfig

    return VLMPolicyConfig(model=str(model), obs_keys=obs_keys, max_new_tokens=8, max_prompt_tokens=160)


SMALL_CHUNK_NETWORK = {
    "n_action_steps": 1,
    "down_dims": (16, 32),
    "state_hidden_sizes": (16,),
    "image_widths": (8, 16),
}
"""A chunk policy that re-plans every step, with a small U-Net and encoders."""


def replanning_chunk_config(policy_name: str) -> PolicyConfigHook:
    """An action-chunk policy (``diffusion``, ``flow``, ``meanflow``) that re-plans every step.

    With its default ``n_action_steps`` such a policy returns the next action of its queued chunk
    on each call, so two calls on one observation differ by design; re-planning every step makes
    ``act`` a function of the observation history, which is what the contract checks. Chunk
    execution itself is tested in ``tests/policies/diffusion``. The networks are small (the
    contract does not depend on their width; the default U-Net made each test take 10-20 s).
    """

    def hook(obs_kind: str, action_kind: str, tiny_model_dirs: TinyModelDirs) -> Any:
        return POLICIES.get(policy_name).config_class(**SMALL_CHUNK_NETWORK)

    return hook


def steering_config(obs_kind: str, action_kind: str, tiny_model_dirs: TinyModelDirs) -> Any:
    """``noise_steering`` over a small fresh ``flow`` generator that re-plans every step (as above)."""
    base = {
        key: list(value) if isinstance(value, tuple) else value for key, value in SMALL_CHUNK_NETWORK.items()
    }
    return POLICIES.get("noise_steering").config_class(base_config=base)  # YAML-shaped: lists


PolicyConfigHook = Callable[[str, str, TinyModelDirs], Any]
POLICY_CONFIGS: dict[str, PolicyConfigHook] = {
    "vlm": vlm_config,
    **{name: replanning_chunk_config(name) for name in ("diffusion", "flow", "meanflow")},
    "noise_steering": steering_config,
}
"""Policy name -> ``hook(obs_kind, action_kind, tiny_model_dirs)``: the config the policy tests
build that policy with for those spaces (kinds as in ``test_policies.py``; a hook giving None for
a case the tests generate fails it). Policies not listed are built with their default config."""


def game_texts(batch: int) -> list[str]:
    """``batch`` different NumberLine states in the game envs' text format (``game_solver`` solves
    them; a VLM reads them as any text)."""
    return [
        f"game: NumberLine\nactions: - | +\nrange: 0..5\ntarget: {i % 6}\ncurrent: {(5 * i + 3) % 6}"
        for i in range(batch)
    ]


def gui_texts(batch: int) -> list[str]:
    """``batch`` different GUI screens (instruction + accessibility tree) that ``gui_oracle`` solves."""
    names = ["OK", "Next", "Back", "Submit", "Close", "Open"]
    texts = []
    for i in range(batch):
        name = names[i % len(names)]
        texts.append(
            f'instruction: Click the button "{name}".\nelements:\n[0] window "" (0, 0, 160, 210)\n'
            f'[1] button "Cancel" (100, 180, 44, 21)\n[2] button "{name}" ({10 + 20 * i % 120}, '
            f"{40 + 30 * i % 140}, 31, 21)"
        )
    return texts


POLICY_TEXTS: dict[str, Callable[[int], list[str]]] = {"gui_oracle": gui_texts}
"""Policy name -> ``texts(batch)``: the ``text`` observations the policy tests give a policy that
reads one env family's text format. Others get :func:`game_texts`."""


@pytest.fixture(scope="session")
def policy_config_hooks() -> dict[str, PolicyConfigHook]:
    """:data:`POLICY_CONFIGS`, for the policy tests."""
    return POLICY_CONFIGS


@pytest.fixture(scope="session")
def text_observations() -> Callable[[str, int], list[str]]:
    """``text_observations(policy_name, batch)``: the ``text`` observations for that policy's tests."""
    return lambda policy_name, batch: POLICY_TEXTS.get(policy_name, game_texts)(batch)
