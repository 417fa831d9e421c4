"""Any Gymnasium env by id under omnigym's observation conventions.

Gymnasium's MuJoCo suite, Gymnasium-Robotics (Fetch, Shadow hand, Adroit, mazes, Franka kitchen) and
Meta-World are made by their own ids, with three extra keyword arguments that any config may set
in ``env.kwargs`` (omnigym's own ``omnigym/...`` envs take them as constructor arguments instead):

* ``obs_keys``: which well-known keys to emit, from ``state``, ``image``, ``text`` (default
  ``[state]``);
* ``image_size``: ``image`` frames from the env's ``rgb_array`` render, ``H`` or ``[H, W]``
  (default 84);
* ``instruction``: the ``text`` observation (default: a task text for Fetch and Meta-World ids).

:func:`make_adapted_env` also imports the package that provides an id (naming the omnigym extra
to install when it is missing) and applies the small documented fixes those packages need with
NumPy 2 and MuJoCo 4 (``fetch.py``, ``metaworld.py``).
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT, WELL_KNOWN_OBS_KEYS
from omnigym.envs.manipulation.fetch import fetch_instruction, patch_joint_helpers
from omnigym.envs.manipulation.metaworld import (
    MAKE_DEFAULTS,
    SeedOnReset,
    metaworld_instruction,
    patch_weld_reset,
)

ADAPTER_KWARGS = ("obs_keys", "image_size", "instruction")
"""``env.kwargs`` keys the adapter takes for non-omnigym envs (never passed to ``gym.make``)."""
DEFAULT_IMAGE_SIZE = 84
TEXT_CHARSET = string.ascii_letters + string.digits + " .,;:!?'\"-_()/"
TEXT_MAX_LENGTH = 256
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
"""The keys of a goal-conditioned (Gymnasium-Robotics ``GoalEnv``) observation."""


@dataclass(frozen=True)
class Provider:
    """A package that registers Gymnasium ids when imported."""

    name: str
    """Shown in error messages."""
    module: str
    """Imported to register the ids."""
    extra: str
    """The omnigym extra that installs it."""
    id_prefixes: tuple[str, ...]
    """Ids it provides start with one of these."""
    patch: Callable[[], bool]
    """The fix it needs here, applied before its envs are made (idempotent)."""
    make_defaults: dict[str, Any] = field(default_factory=dict)
    """``gym.make`` kwargs its envs get unless given."""
    wrap: Callable[[gym.Env], gym.Env] | None = None
    """A wrapper its envs need (inside the observation adapter)."""


PROVIDERS = (
    Provider(
        "Gymnasium-Robotics",
        "gymnasium_robotics",
        "robotics",
        ("Fetch", "HandReach", "HandManipulate", "AdroitHand", "FrankaKitchen", "PointMaze", "AntMaze"),
        patch_joint_helpers,
    ),
    Provider(
        "Meta-World", "metaworld", "metaworld", ("Meta-World/",), patch_weld_reset, MAKE_DEFAULTS, SeedOnReset
    ),
)


def _entry_module(env_id: str) -> str:
    """The module of a registered id's entry point ("" when the id is not registered)."""
    spec = gym.registry.get(env_id)
    if spec is None:
        return ""
    entry = spec.entry_point
    return entry.split(":")[0] if isinstance(entry, str) else str(getattr(entry, "__module__", ""))


def find_provider(env_id: str) -> Provider | None:
    """The package behind ``env_id``: by its registered entry point, else by the id's prefix."""
    module = _entry_module(env_id).split(".")[0]
    for provider in PROVIDERS:
        if module == provider.module or (not module and env_id.startswith(provider.id_prefixes)):
            return provider
    return None


def prepare_provider(env_id: str) -> Provider | None:
    """Import the package that provides ``env_id`` and apply its fix; None for other ids.

    Raises:
        ImportError: the package is not installed (the message names the omnigym extra).
    """
    provider = find_provider(env_id)
    if provider is None:
        return None
    if env_id not in gym.registry:
        try:
            __import__(provider.module)  # registers the provider's ids
        except ImportError as exc:
            raise ImportError(
                f"{env_id} is a {provider.name} env, which is not installed: "
                f"pip install 'omnigym[{provider.extra}]' (docs/envs/manipulation-adapters.md)"
            ) from exc
    provider.patch()
    return provider


@dataclass(frozen=True)
class ObsOptions:
    """What the adapter emits: the well-known keys, the image size and the instruction."""

    obs_keys: tuple[str, ...] = (OBS_STATE,)
    image_size: tuple[int, int] = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    instruction: str | None = None


def _image_size(value: int | Sequence[int]) -> tuple[int, int]:
    size = (value, value) if isinstance(value, int) else tuple(value)
    if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
        raise ValueError(f"image_size must be a positive int or [height, width], got {value!r}")
    return size[0], size[1]


def split_adapter_kwargs(env_id: str, kwargs: dict[str, Any]) -> tuple[dict[str, Any], ObsOptions | None]:
    """Separate the adapter's keyword arguments from those for ``gym.make``.

    omnigym's own envs (``omnigym/...`` ids, and ids such as ``miniwob/<task>-v1`` whose entry point
    is an omnigym class) take ``obs_keys`` and friends themselves, so their kwargs pass unchanged.

    Returns:
        The ``gym.make`` kwargs and the adapter options (None when none were given).
    """
    if _omnigym_class(env_id) or not any(key in kwargs for key in ADAPTER_KWARGS):
        return kwargs, None
    make_kwargs = {k: v for k, v in kwargs.items() if k not in ADAPTER_KWARGS}
    obs_keys = tuple(kwargs.get("obs_keys") or (OBS_STATE,))
    unknown = [key for key in obs_keys if key not in WELL_KNOWN_OBS_KEYS]
    if unknown:
        raise ValueError(f"obs_keys {unknown} are not among the well-known keys {list(WELL_KNOWN_OBS_KEYS)}")
    options = ObsOptions(
        obs_keys=obs_keys,
        image_size=_image_size(kwargs.get("image_size", DEFAULT_IMAGE_SIZE)),
        instruction=kwargs.get("instruction"),
    )
    return make_kwargs, options


def _omnigym_class(env_id: str) -> bool:
    """Whether ``env_id`` is made by one of omnigym's own env classes."""
    if env_id.startswith("omnigym/"):
        return True
    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error:
        return False
    return isinstance(entry_point, str) and entry_point.startswith("omnigym.")


def default_instruction(env_id: str, make_kwargs: dict[str, Any]) -> str | None:
    """The task text of a Fetch or Meta-World env (None for other envs)."""
    if env_id.startswith("Meta-World/") and isinstance(make_kwargs.get("env_name"), str):
        return metaworld_instruction(make_kwargs["env_name"])
    return fetch_instruction(env_id)


def _render_kwargs(env_id: str, make_kwargs: dict[str, Any], size: tuple[int, int]) -> dict[str, Any]:
    """``gym.make`` kwargs that make the env render ``rgb_array`` frames (of ``size`` for MuJoCo envs)."""
    if make_kwargs.get("render_mode") not in (None, "rgb_array"):
        raise ValueError(
            f"the image observation needs render_mode='rgb_array', got {make_kwargs['render_mode']!r}"
        )
    out = {**make_kwargs, "render_mode": "rgb_array"}
    # MuJoCo envs (Gymnasium's, Gymnasium-Robotics', Meta-World's) render at the asked size;
    # other envs render at their own size and the frame is resized.
    if _entry_module(env_id).startswith(("gymnasium.envs.mujoco", "gymnasium_robotics", "metaworld")):
        out.setdefault("height", size[0])
        out.setdefault("width", size[1])
    return out


def make_adapted_env(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gym.make(env_id)``, wrapped by :class:`ObservationAdapter` where needed (the ``real`` env backend).

    Envs from Gymnasium-Robotics and Meta-World are always adapted (goal dicts, ``is_success``,
    float32 state); others only when ``kwargs`` holds adapter options, and are returned as made
    otherwise (a plain ``Box`` observation is wrapped later, once per vector env).
    """
    make_kwargs, options = split_adapter_kwargs(env_id, kwargs)
    provider = prepare_provider(env_id)
    if options is None and provider is None:
        return gym.make(env_id, **make_kwargs)
    options = options or ObsOptions()
    if provider is not None:
        make_kwargs = {**provider.make_defaults, **make_kwargs}
    if OBS_IMAGE in options.obs_keys:
        make_kwargs = _render_kwargs(env_id, make_kwargs, options.image_size)
    env = gym.make(env_id, **make_kwargs)
    if provider is not None and provider.wrap is not None:
        env = provider.wrap(env)
    instruction = options.instruction
    if instruction is None and OBS_TEXT in options.obs_keys:
        instruction = default_instruction(env_id, make_kwargs)
    return ObservationAdapter(
        env, obs_keys=options.obs_keys, image_size=options.image_size, instruction=instruction
    )


def make_adapted_vec_env(
    env_id: str, num_envs: int, autoreset_mode: gym.vector.AutoresetMode, kwargs: dict[str, Any]
) -> gym.vector.VectorEnv:
    """``env_id``'s own batched implementation (its ``vector_entry_point``): the ``real_vector`` env backend.

    Another package's id is imported (and fixed) first; the adapter's options adapt single envs
    only, so they are an error here.
    """
    prepare_provider(env_id)
    if split_adapter_kwargs(env_id, kwargs)[1] is not None:
        raise ValueError(
            f"obs_keys/image_size/instruction adapt single {env_id} envs: use env.vectorization sync or async"
        )
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="vector_entry_point",
        autoreset_mode=autoreset_mode,
        **kwargs,
    )


def _is_goal_space(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Dict) and set(GOAL_KEYS) <= set(space.spaces)


def _vector(shape: tuple[int, ...]) -> spaces.Box:
    """An unbounded float32 vector.

    Adapted states have no single meaningful bound, and Meta-World's declared bounds do not hold
    its observations.
    """
    return spaces.Box(-np.inf, np.inf, shape, np.float32)


class ObservationAdapter(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Any ``Box`` or goal-conditioned env as a ``Dict`` of omnigym's well-known keys.

    * ``state``: the flattened observation as float32; for a goal-conditioned observation
      (``observation``/``achieved_goal``/``desired_goal``), ``observation`` then ``desired_goal``.
      Goal-conditioned envs also keep ``achieved_goal`` and ``desired_goal`` as keys (for
      hindsight relabelling and success checks).
    * ``image``: the env's ``rgb_array`` frame, uint8 ``[H, W, 3]``, resized when it differs.
    * ``text``: the constant task instruction.

    ``info["is_success"]`` is passed through, or derived from Meta-World's ``info["success"]``.

    Args:
        env: the env; it must render ``rgb_array`` when ``image`` is asked for.
        obs_keys: the well-known keys to emit.
        image_size: ``(H, W)`` of ``image``.
        instruction: the ``text`` observation (required when ``text`` is asked for).
    """

    def __init__(
        self,
        env: gym.Env,
        obs_keys: Sequence[str] = (OBS_STATE,),
        image_size: Sequence[int] = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE),
        instruction: str | None = None,
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, obs_keys=tuple(obs_keys), image_size=tuple(image_size), instruction=instruction
        )
        gym.ObservationWrapper.__init__(self, env)
        self.obs_keys = tuple(obs_keys)
        self.image_size = _image_size(list(image_size))
        self.instruction = instruction
        self._goal = _is_goal_space(env.observation_space)
        self.observation_space = spaces.Dict(self._spaces(env))

    def _spaces(self, env: gym.Env) -> dict[str, spaces.Space]:
        raw = env.observation_space
        name = env.spec.id if env.spec else type(env.unwrapped).__name__
        if not self._goal and not isinstance(raw, spaces.Box):
            raise TypeError(f"cannot adapt {name}: its observation space is {raw}, not a Box or a goal dict")
        out: dict[str, spaces.Space] = {}
        parts = [raw["observation"], raw["desired_goal"]] if isinstance(raw, spaces.Dict) else [raw]
        if OBS_STATE in self.obs_keys:
            out[OBS_STATE] = _vector((sum(math.prod(part.shape or ()) for part in parts),))
        if isinstance(raw, spaces.Dict):
            out.update({key: _vector(raw[key].shape or ()) for key in GOAL_KEYS[1:]})
        if OBS_IMAGE in self.obs_keys:
            if env.render_mode != "rgb_array":
                raise ValueError(f"the image observation of {name} needs render_mode='rgb_array'")
            out[OBS_IMAGE] = spaces.Box(0, 255, (*self.image_size, 3), np.uint8)
        if OBS_TEXT in self.obs_keys:
            out[OBS_TEXT] = self._text_space(name)
        return out

    def _text_space(self, name: str) -> spaces.Text:
        if self.instruction is None:
            raise ValueError(
                f"obs_keys asks for text, but {name} has no default instruction: set `instruction`"
            )
        text = spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET)
        if not text.contains(self.instruction):
            raise ValueError(
                f"instruction {self.instruction!r} must be 1-{TEXT_MAX_LENGTH} characters "
                f"from {TEXT_CHARSET!r}"
            )
        return text

    def _state(self, observation: Any) -> np.ndarray:
        if self._goal:
            parts = (observation["observation"], observation["desired_goal"])
            return np.concatenate([np.asarray(p, np.float32).reshape(-1) for p in parts])
        return np.asarray(observation, np.float32).reshape(-1)

    def _frame(self) -> np.ndarray:
        frame = self.env.render()
        if frame is None:
            raise ValueError("render() returned None: the image observation needs render_mode='rgb_array'")
        frame = np.asarray(frame, dtype=np.uint8)[..., :3]
        if frame.shape[:2] != self.image_size:
            import cv2

            height, width = self.image_size
            frame = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(frame)

    def observation(self, observation: Any) -> dict[str, Any]:
        """The raw observation under the well-known keys."""
        out: dict[str, Any] = {}
        if OBS_STATE in self.obs_keys:
            out[OBS_STATE] = self._state(observation)
        if self._goal:
            out.update({key: np.asarray(observation[key], np.float32) for key in GOAL_KEYS[1:]})
        if OBS_IMAGE in self.obs_keys:
            out[OBS_IMAGE] = self._frame()
        if OBS_TEXT in self.obs_keys:
            out[OBS_TEXT] = self.instruction
        return out

    def step(self, action: Any) -> tuple[dict[str, Any], Any, bool, bool, dict[str, Any]]:
        """Step the env; ``info["is_success"]`` is added where the env reports ``success``."""
        obs, reward, terminated, truncated, info = super().step(action)
        if "is_success" not in info and "success" in info:
            info = {**info, "is_success": float(info["success"])}
        return obs, reward, terminated, truncated, info
