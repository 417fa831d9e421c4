"""Vector envs for omnigym: one function builds them, with the autoreset mode chosen explicitly.

The concrete backends (other packages' envs through omnigym's adapter, Isaac Lab, a world model
standing in for the env) are found by name in :data:`~omnigym.core.registry.ENV_BACKENDS`: this
module imports no env family and no world model (``tests/test_layers.py``).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import dataclasses
import difflib
import functools
import inspect
import multiprocessing
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from omnigym.core.registry import ENV_BACKENDS
from omnigym.core.vector import TorchVectorEnv
from omnigym.envs.wrappers import VectorObservationDict, as_omnigym_env

AutoresetName = Literal["same_step", "next_step", "disabled"]
AUTORESET_MODES: dict[str, AutoresetMode] = {
    "same_step": AutoresetMode.SAME_STEP,
    "next_step": AutoresetMode.NEXT_STEP,
    "disabled": AutoresetMode.DISABLED,
}
LIVE = "live"
"""``world_model.start_states`` value: start every episode from a fresh reset of the real env."""
Source = Literal["learned", "known"]
"""Where a world-model env's rewards or terminations come from: the model, or the env's exact function."""


@dataclass
class WorldModelEnvConfig:
    """A world model standing in for the real env (``env.backend: world_model``).

    It is built by :class:`~omnigym.world_models.env.WorldModelVectorEnv` (``from_config``).
    """

    model: str = ""
    """Folder of a saved world model (``WorldModel.save_pretrained``)."""
    start_states: str = LIVE
    """A Minari dataset id whose observations are sampled as start states, or ``live``: reset
    a real copy of the env (with the reset's seeds) and start from its first observation."""
    horizon: int | None = None
    """Truncate an episode after this many model steps. None: ``env.max_episode_steps``, else
    the real env's time limit."""
    reward: Source = "learned"
    """``learned``: the model's reward; ``known``: the env's exact reward function (known.py)."""
    termination: Source = "learned"
    """``learned``: the model's termination; ``known``: the env's exact one (known.py)."""
    uncertainty_penalty: float = 0.0
    """MOPO's lambda: every reward becomes ``reward - lambda * uncertainty``."""
    max_uncertainty: float | None = None
    """Truncate (not terminate) a row whose step uncertainty exceeds this."""
    report_uncertainty: bool = False
    """Put the model's uncertainty in every step's info even when neither setting above needs it.
    Off by default: an ensemble then runs only the member each row uses, several times faster."""
    device: str = "cpu"
    """Where the model runs (``auto`` prefers CUDA)."""

    def __post_init__(self) -> None:
        if self.horizon is not None and self.horizon < 1:
            raise ValueError(f"world_model.horizon must be >= 1, got {self.horizon}")
        if self.uncertainty_penalty < 0:
            raise ValueError(f"world_model.uncertainty_penalty must be >= 0, got {self.uncertainty_penalty}")
        if self.max_uncertainty is not None and self.max_uncertainty <= 0:
            raise ValueError(f"world_model.max_uncertainty must be > 0, got {self.max_uncertainty}")


@dataclass
class EnvConfig:
    """Which env to run and how it is vectorised."""

    id: str = "CartPole-v1"
    """A Gymnasium id (``omnigym/...`` for omnigym's envs)."""
    num_envs: int = 8
    """Parallel copies of the env."""
    vectorization: Literal["sync", "async", "vector"] = "sync"
    """``sync``: all copies in this process (fastest for cheap envs); ``async``: one process each;
    ``vector``: the env's own batched implementation (its ``vector_entry_point``)."""
    autoreset_mode: AutoresetName = "same_step"
    """Gymnasium's autoreset mode. Collection handles all three; same_step wastes no steps."""
    start_method: Literal["forkserver", "spawn", "fork"] = "forkserver"
    """How ``async`` starts its workers. ``forkserver`` (``spawn`` where it does not exist): a
    worker forked from a process that has drawn MuJoCo frames hangs when it makes its own OpenGL
    context. Start-up of 4 Reach workers on 2 cores: ``fork`` 0.2 s, ``forkserver`` 1.7 s for the
    first vector env of a process and 0.65 s for later ones, ``spawn`` 4.5 s. The main script
    needs an ``if __name__ == "__main__":`` guard, as with any start but ``fork``."""
    max_episode_steps: int | None = None
    """Override the env's time limit (truncation)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``gym.make``. For envs from other packages, ``obs_keys`` (``[state,
    image, text]``), ``image_size`` and ``instruction`` configure omnigym's observation adapter
    instead (docs/envs/manipulation-adapters.md); ``omnigym/...`` envs take them themselves."""
    backend: Literal["real", "world_model"] = "real"
    """``real``: the env ``id`` itself; ``world_model``: a trained world model of it stands in
    (``world_model``), batched in one process whatever ``vectorization`` says."""
    world_model: WorldModelEnvConfig = field(default_factory=WorldModelEnvConfig)
    """The world model, its start states, horizon and rewards (used with ``backend: world_model``)."""


ADAPTER_KWARG_NAMES = ("obs_keys", "image_size", "instruction")
"""Keyword arguments omnigym's observation adapter takes for envs of other packages."""
_UNEXPECTED_KWARG = re.compile(r"(\w[\w.]*)\(\) got an unexpected keyword argument '(\w+)'")


class EnvArgumentError(ValueError):
    """An env id Gymnasium does not know, or a keyword argument the env does not take.

    The message names the config key that fixes it (``env.id``, ``env.kwargs.<name>``);
    :meth:`describe` words it for other flags (``--env``, ``--env-kwargs``).

    Attributes:
        env_id: the id asked for.
        kwarg: the keyword argument the env does not take (None: the id is unknown).
        accepted: the keyword arguments the env takes (for ``kwarg``).
        matches: close matches of the id or of ``kwarg``.
    """

    def __init__(
        self,
        env_id: str,
        *,
        kwarg: str | None = None,
        accepted: Sequence[str] = (),
        matches: Sequence[str] = (),
    ) -> None:
        self.env_id, self.kwarg = env_id, kwarg
        self.accepted, self.matches = tuple(accepted), tuple(matches)
        super().__init__(self.describe())

    def describe(self, id_flag: str = "env.id", kwargs_flag: str = "env.kwargs") -> str:
        """The one-line message, naming ``id_flag`` or ``kwargs_flag`` as the fix."""
        close = f" (did you mean {' or '.join(repr(m) for m in self.matches)}?)" if self.matches else ""
        if self.kwarg is None:
            return (
                f"{id_flag}: unknown env id {self.env_id!r}{close}; "
                "`omnigym list --all-envs` lists every registered id"
            )
        where = kwargs_flag if kwargs_flag.startswith("-") else f"{kwargs_flag}.{self.kwarg}"
        accepted = ", ".join(self.accepted) if self.accepted else "(none)"
        return (
            f"{where}: {self.env_id} takes no keyword argument {self.kwarg!r}{close}; it accepts: {accepted}"
        )


def env_kwarg_names(env_id: str, owner: str | None = None) -> list[str]:
    """The keyword arguments ``gym.make(env_id, ...)`` accepts, read from its entry point.

    Most omnigym envs take ``**kwargs`` into a config dataclass: its fields count, found as the
    class's ``config_class`` or, by ``owner`` (the name in Python's "unexpected keyword" message,
    e.g. ``DrivingConfig.__init__``), in the entry point's module. Empty when it cannot be read.
    """
    from gymnasium.envs.registration import load_env_creator

    try:
        spec = gym.spec(env_id)
        entry = spec.entry_point
        creator = entry if callable(entry) else load_env_creator(str(entry))
        params = inspect.signature(creator).parameters
    except (gym.error.Error, ImportError, AttributeError, TypeError, ValueError):
        return []
    names = set(spec.kwargs)
    names.update(n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        module = sys.modules.get(getattr(creator, "__module__", ""), None)
        owner_cls = getattr(module, owner.split(".")[0], None) if owner else None
        for candidate in (getattr(creator, "config_class", None), owner_cls):
            if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
                names.update(f.name for f in dataclasses.fields(candidate) if f.init)
    if not env_id.startswith("omnigym/"):
        names.update(ADAPTER_KWARG_NAMES)
    names.discard("self")
    return sorted(names)


def close_env_ids(env_id: str, n: int = 3) -> list[str]:
    """Registered env ids close to ``env_id`` (case-insensitive)."""
    ids = {key.lower(): key for key in gym.registry}
    return [ids[m] for m in difflib.get_close_matches(env_id.lower(), list(ids), n=n, cutoff=0.6)]


@contextlib.contextmanager
def explain_env_errors(env_id: str, kwargs: Mapping[str, Any]) -> Iterator[None]:
    """Turn Gymnasium's "doesn't exist" and Python's "unexpected keyword" into an :class:`EnvArgumentError`.

    Only a keyword the caller passed in ``kwargs`` counts; other errors pass unchanged.
    """
    try:
        yield
    except gym.error.UnregisteredEnv:
        raise EnvArgumentError(env_id, matches=close_env_ids(env_id)) from None
    except TypeError as exc:
        match = _UNEXPECTED_KWARG.search(str(exc))
        if match is None or match.group(2) not in kwargs:
            raise
        owner, kwarg = match.groups()
        accepted = env_kwarg_names(env_id, owner)
        matches = difflib.get_close_matches(kwarg, accepted, n=2)
        raise EnvArgumentError(env_id, kwarg=kwarg, accepted=accepted, matches=matches) from None


def make_env(
    env_id: str,
    *,
    render_mode: str | None = None,
    max_episode_steps: int | None = None,
    **kwargs: Any,
) -> gym.Env:
    """One env with a ``Dict`` observation space (plain boxes become ``{"state"}``/``{"image"}``).

    Envs of other packages go through omnigym's adapter (the ``real`` env backend,
    ``omnigym.envs.manipulation.adapters``).

    Raises:
        EnvArgumentError: an unknown id, or a keyword argument the env does not take.
        ValueError: ``num_envs`` was passed (copies are :func:`make_vec_env`'s job).
    """
    if "num_envs" in kwargs:  # the driving env takes it internally, but batching is make_vec_env's job
        raise ValueError(
            f"make_env builds one {env_id}; for {kwargs['num_envs']} copies use "
            "make_vec_env(EnvConfig(id=..., num_envs=N)) (config key env.num_envs)"
        )
    make_kwargs = _gym_make_kwargs(render_mode, max_episode_steps, kwargs)
    with explain_env_errors(env_id, kwargs):
        return as_omnigym_env(_make_single(env_id, make_kwargs))


def _make_single(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gym.make``, through the adapter where the env needs one (module level: picklable)."""
    env: gym.Env = ENV_BACKENDS.build("real", env_id, kwargs)
    return env


def _gym_make_kwargs(render_mode: str | None, max_episode_steps: int | None, kwargs: dict) -> dict:
    """``gym.make`` keyword arguments; prepares headless rendering and the omnigym ids first."""
    set_headless_rendering()
    import omnigym.envs  # noqa: F401  (registers the omnigym ids)

    make_kwargs = dict(kwargs)
    if max_episode_steps is not None:
        make_kwargs["max_episode_steps"] = max_episode_steps
    if render_mode is not None:  # only when set: not every env accepts render_mode
        make_kwargs["render_mode"] = render_mode
    return make_kwargs


def make_vec_env(
    config: EnvConfig, *, render_mode: str | None = None, copy_observations: bool = True
) -> gym.vector.VectorEnv:
    """The vector env a config describes. The only place an autoreset mode is chosen.

    Batched torch envs (Isaac Lab tasks ``Isaac-...``; ``omnigym/TorchReach-v0`` with
    ``vectorization: vector``) come back as a :class:`TorchVectorEnv`; ``backend: world_model``
    as a :class:`~omnigym.world_models.env.WorldModelVectorEnv` (NumPy, same-step autoreset).

    Args:
        config: which env and how many copies.
        render_mode: passed to every copy.
        copy_observations: return fresh observation arrays from every step. False reuses one
            buffer, overwritten by the next step: cheaper, for callers that copy what they keep
            (the rollout collector does).
    """
    if config.num_envs < 1:
        raise ValueError(f"env.num_envs must be >= 1, got {config.num_envs}")
    if config.backend == "world_model":
        return _make_world_model(config)
    if config.id.startswith("Isaac-"):
        return _make_isaaclab(config, render_mode)
    kwargs = _gym_make_kwargs(render_mode, config.max_episode_steps, config.kwargs)
    with explain_env_errors(config.id, config.kwargs):
        envs = _make_numpy_vec_env(config, kwargs, copy_observations)
    if isinstance(envs.single_observation_space, spaces.Dict):  # TorchVectorEnvs too
        return envs
    if isinstance(envs.single_observation_space, spaces.Box):
        return VectorObservationDict(envs)  # one wrap per step rather than one per sub-env
    envs.close()
    raise TypeError(
        f"omnigym needs Dict or Box observations; {config.id} has {envs.single_observation_space}"
    )


def _make_numpy_vec_env(
    config: EnvConfig, kwargs: dict[str, Any], copy_observations: bool
) -> gym.vector.VectorEnv:
    """The sync, async or batched (``vector``) env of ``config``, as Gymnasium makes it."""
    mode = AUTORESET_MODES[config.autoreset_mode]
    if config.vectorization == "vector":
        envs = ENV_BACKENDS.build("real_vector", config.id, config.num_envs, mode, kwargs)
    elif config.vectorization == "async":
        envs = _make_async(config, kwargs, mode, copy_observations)
    else:
        fns = [functools.partial(_make_single, config.id, kwargs)] * config.num_envs
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode, copy=copy_observations)
    return envs


def _make_world_model(config: EnvConfig) -> gym.vector.VectorEnv:
    """A world model of ``config.id`` standing in for it (``backend: world_model``)."""
    if config.autoreset_mode != "same_step":
        raise ValueError(
            "env.backend world_model resets finished rows itself: set env.autoreset_mode same_step"
        )
    envs: gym.vector.VectorEnv = ENV_BACKENDS.build(
        "world_model",
        config.world_model,
        config.num_envs,
        env_id=config.id,
        env_kwargs=config.kwargs,
        max_episode_steps=config.max_episode_steps,
    )
    return envs


def _make_async(
    config: EnvConfig, kwargs: dict[str, Any], mode: AutoresetMode, copy_observations: bool
) -> gym.vector.AsyncVectorEnv:
    """One worker process per copy, started with ``config.start_method``.

    Observations come back through shared memory unless the space holds a ``Text``: Gymnasium's
    shared memory reads text once, at construction, so every later observation was a run of
    ``"a"`` (the charset's first character); pipes carry the real strings.
    """
    make_fn = functools.partial(_make_worker_env, config.id, kwargs)
    # AsyncVectorEnv builds its spaces' env from this: built once, here, as a plain env.
    probe = _FirstEnv(make_fn, functools.partial(_make_single, config.id, kwargs))
    space = probe.observation_space()
    return gym.vector.AsyncVectorEnv(
        [probe, *[make_fn] * (config.num_envs - 1)],
        autoreset_mode=mode,
        copy=copy_observations,
        shared_memory=not contains_text(space),
        context=_start_method(config.start_method),
    )


class _FirstEnv:
    """An env factory whose first call in this process returns an env it built beforehand.

    It lets :func:`_make_async` read the observation space before choosing how observations
    travel, without building one more env: ``AsyncVectorEnv`` takes the prebuilt env to read its
    spaces (and closes it). A worker process gets the factory without the env (pickled, or
    forked after the env was handed over).
    """

    def __init__(self, make_fn: Callable[[], gym.Env], make_here: Callable[[], gym.Env]) -> None:
        self.make_fn, self.make_here = make_fn, make_here
        self._env: gym.Env | None = None

    def observation_space(self) -> spaces.Space:
        """The env's observation space (building, in this process, the env the next call returns)."""
        if self._env is None:
            self._env = self.make_here()
        return self._env.observation_space

    def __call__(self) -> gym.Env:
        env, self._env = self._env, None
        return env if env is not None else self.make_fn()

    def __getstate__(self) -> dict[str, Any]:
        return {"make_fn": self.make_fn, "make_here": self.make_here, "_env": None}


def _make_worker_env(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """An env in an async worker process, which leaves Ctrl-C to the parent.

    A terminal's Ctrl-C reaches every process of the foreground group; a worker that took it would
    die mid-step and break the vector env, while the parent is finishing its update to checkpoint
    (:mod:`omnigym.platform.interrupts`). The parent closes its workers itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return _make_single(env_id, kwargs)


def _start_method(name: str) -> str:
    """``name``, or ``spawn`` where the platform has no ``forkserver`` (Windows).

    ``forkserver`` preloads this module in its server process, so each worker starts with torch
    and Gymnasium imported rather than importing them itself (about half the start-up).
    """
    if name == "forkserver":
        if name not in multiprocessing.get_all_start_methods():
            return "spawn"
        # Python's default preload is ["__main__"]; it applies when the server first starts.
        multiprocessing.get_context(name).set_forkserver_preload(["__main__", __name__])
    return name


def contains_text(space: spaces.Space) -> bool:
    """Whether ``space`` is, or nests (in a Dict or Tuple), a ``Text`` space."""
    if isinstance(space, spaces.Text):
        return True
    if isinstance(space, spaces.Dict):
        return any(contains_text(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return any(contains_text(s) for s in space.spaces)
    return False


def _make_isaaclab(config: EnvConfig, render_mode: str | None) -> TorchVectorEnv:
    """An Isaac Lab task (``Isaac-...``): always batched, resetting finished envs itself."""
    if config.vectorization != "vector" or config.autoreset_mode != "same_step":
        raise ValueError(
            f"{config.id} is an Isaac Lab task, batched and resetting finished envs itself: "
            "set env.vectorization: vector and env.autoreset_mode: same_step"
        )
    if config.max_episode_steps is not None:
        raise ValueError(f"{config.id}: set the episode length in the task config (episode_length_s)")
    kwargs = {**config.kwargs, **({"render_mode": render_mode} if render_mode else {})}
    envs: TorchVectorEnv = ENV_BACKENDS.build("isaaclab", config.id, num_envs=config.num_envs, **kwargs)
    return envs


def autoreset_mode(envs: gym.vector.VectorEnv) -> AutoresetMode:
    """The autoreset mode a vector env was built with."""
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)


def to_env_action(space: spaces.Space, action: np.ndarray) -> np.ndarray:
    """A policy's raw action in the form ``space`` accepts.

    Gaussian samples are clipped to the box, indices cast to int. Non-finite values are an
    error, never passed on.
    """
    if isinstance(action, np.ndarray) and action.dtype.kind == "f" and not np.all(np.isfinite(action)):
        raise ValueError("policy produced a non-finite action (NaN or inf)")
    if isinstance(space, spaces.Box):
        return np.clip(action, space.low, space.high).astype(space.dtype, copy=False)
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.asarray(action).astype(space.dtype, copy=False)
    return action


def to_torch_env_action(space: spaces.Space, action: torch.Tensor, device: torch.device) -> torch.Tensor:
    """:func:`to_env_action` for a :class:`TorchVectorEnv`: on ``device``, clipped to a bounded box.

    Non-finite values are an error, never passed on (the check costs one host sync).
    """
    action = action.to(device)
    if action.is_floating_point() and not bool(torch.isfinite(action).all()):
        raise ValueError("policy produced a non-finite action (NaN or inf)")
    if isinstance(space, spaces.Box) and space.is_bounded("both"):
        low = torch.as_tensor(space.low, device=device)
        high = torch.as_tensor(space.high, device=device)
        return torch.clamp(action.to(low.dtype), low, high)
    return action


def set_headless_rendering() -> None:
    """Pick offscreen rendering backends when there is no display and the user chose none.

    MuJoCo reads ``MUJOCO_GL`` once, at import, so this runs before any env is made. EGL (Mesa's
    software EGL works without a GPU) is preferred; OSMesa needs Debian's ``libosmesa6``.
    pygame (classic-control rendering) gets SDL's dummy video driver.
    """
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    if "MUJOCO_GL" not in os.environ:
        os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "osmesa"
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
