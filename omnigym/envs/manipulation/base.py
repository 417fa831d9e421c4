"""What every omnigym MuJoCo task shares: options, spaces, stepping, observations, randomisation.

A task subclass names its MJCF file and fills in four hooks: ``_reset_task`` (initial state and
goal), ``_apply_action`` (a [-1, 1] action to actuator controls), ``_state`` (the ``state``
vector) and ``_score`` (success, dense reward and info metrics). The step loop itself is one
``mj_step`` call with ``nstep=frame_skip`` plus a few NumPy operations, so a state-only step costs
little more than the physics (``docs/envs/manipulation.md`` has the measured ratio).
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.envs.manipulation.rendering import FrameRenderer, check_camera, frame_shape, mujoco

ASSETS = Path(__file__).resolve().parent / "assets"
OBS_KEYS = ("image", "state", "text")
"""The observation keys a task can emit (the well-known keys of ``omnigym.core.types``)."""
TEXT_CHARSET = string.ascii_letters + string.digits + " .,-"
TEXT_MAX_LENGTH = 128
ImageSize = int | tuple[int, int]


@dataclass
class TaskConfig:
    """Options every manipulation task takes as ``gym.make`` keyword arguments."""

    obs_keys: tuple[str, ...] = ("state",)
    """Observation keys to emit, any of ``image``, ``state``, ``text``."""
    reward_type: Literal["dense", "sparse"] = "dense"
    """``dense``: the task's shaped reward; ``sparse``: 1 on success, else 0."""
    frame_skip: int | None = None
    """Physics steps (2 ms each) per action; None takes the task's default control rate."""
    image_size: ImageSize = 96
    """Size of the ``image`` observation: one int (square) or ``(height, width)``."""
    camera: str | None = None
    """Camera of the ``image`` observation and of ``render()``; None takes the task's default."""
    render_size: ImageSize = 256
    """Size of ``render()`` frames (``render_mode="rgb_array"``)."""
    friction_range: tuple[float, float] | None = None
    """Domain randomisation: each reset scales the objects' friction by a factor drawn from this
    range (PushT: also the table's drag on the block). None keeps the model's values."""
    randomize_colors: bool = False
    """Domain randomisation: each reset draws new object and table colours."""
    terminate_on_success: bool = True
    """End the episode (``terminated``) on the first successful step."""
    action_space: Literal["box", "text"] = "box"
    """``box``: the task's [-1, 1] actions; ``text`` (tabletop tasks): one written skill per step,
    such as ``move_to(3.0, -5.5, 2.0)``, for language-model policies (``skills.py``)."""
    invalid_action_penalty: float = -1.0
    """Text actions: added to the reward of a reply that does not parse (the gripper then holds
    still for one control step). As large as the worst dense control step (PushCube's lie in
    [-1, 0]; Reach's and PickPlace's cost a few tenths), as the driving env's penalty."""

    def __post_init__(self) -> None:
        if self.action_space not in ("box", "text"):
            raise ValueError(f"action_space must be 'box' or 'text', got {self.action_space!r}")
        if not math.isfinite(self.invalid_action_penalty):
            raise ValueError(f"invalid_action_penalty must be finite, got {self.invalid_action_penalty}")
        self.obs_keys = tuple(self.obs_keys)
        unknown = set(self.obs_keys) - set(OBS_KEYS)
        if unknown or not self.obs_keys:
            raise ValueError(f"obs_keys must be a non-empty subset of {OBS_KEYS}, got {self.obs_keys}")
        if self.reward_type not in ("dense", "sparse"):
            raise ValueError(f"reward_type must be 'dense' or 'sparse', got {self.reward_type!r}")
        if self.frame_skip is not None and self.frame_skip < 1:
            raise ValueError(f"frame_skip must be >= 1, got {self.frame_skip}")
        if self.friction_range is not None:
            low, high = self.friction_range
            if not 0 < low <= high:
                raise ValueError(f"friction_range must satisfy 0 < low <= high, got {self.friction_range}")
            self.friction_range = (float(low), float(high))
        frame_shape(self.image_size)  # validates
        frame_shape(self.render_size)


class ManipulationEnv(gym.Env[dict[str, Any], np.ndarray]):
    """Base of the MuJoCo tasks: a Dict observation, a [-1, 1] Box action, ``info["is_success"]``.

    Actions are validated (a NaN or infinite value raises ``ValueError``), clipped to [-1, 1] and
    scaled by the task. ``reset(seed=s)`` fixes everything the episode draws (initial poses, goal,
    randomised friction and colours), so equal seeds and actions give equal trajectories.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012  (gymnasium's attribute)

    config_class: ClassVar[type[TaskConfig]] = TaskConfig
    xml_file: ClassVar[str] = ""
    """The task's MJCF file in ``assets/``."""
    instruction: ClassVar[str] = ""
    """The ``text`` observation."""
    default_frame_skip: ClassVar[int] = 1
    default_camera: ClassVar[str] = ""
    state_dim: ClassVar[int] = 0
    action_dim: ClassVar[int] = 0
    object_geoms: ClassVar[tuple[str, ...]] = ()
    """Geoms whose friction and colour the randomisation options change."""
    table_geom: ClassVar[str] = "table"
    has_text_actions: ClassVar[bool] = False
    """Whether the task takes ``action_space="text"`` (written skills)."""

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.config = self.config_class(**kwargs)
        if self.config.action_space == "text" and not self.has_text_actions:
            raise ValueError(
                f"{type(self).__name__} has no text actions; leave action_space='box' (the tabletop "
                "tasks Reach, PushCube and PickPlace take action_space='text')"
            )
        self.render_mode = render_mode
        self.model = mujoco.MjModel.from_xml_path(str(ASSETS / self.xml_file))
        self.data = mujoco.MjData(self.model)
        self.frame_skip = self.config.frame_skip or self.default_frame_skip
        self.dt = float(self.model.opt.timestep) * self.frame_skip
        """Seconds per action."""
        self.metadata = {**self.metadata, "render_fps": max(1, round(1.0 / self.dt))}
        self.camera = self.config.camera or self.default_camera
        self._image_shape = frame_shape(self.config.image_size)
        self._render_shape = frame_shape(self.config.render_size)
        self.action_space = spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        self.observation_space = self._observation_space()
        self._emit = {key: key in self.config.obs_keys for key in OBS_KEYS}
        self._object_geoms = np.array([self._geom_id(name) for name in self.object_geoms], np.int64)
        self._table_geom = self._geom_id(self.table_geom)
        self._base_friction = self.model.geom_friction[self._object_geoms, 0].copy()
        # Made at the first frame, not here: an OpenGL context in a process that later forks
        # (AsyncVectorEnv makes one env in the parent) hangs the children's contexts.
        self._renderers: dict[tuple[tuple[int, int], str], FrameRenderer] = {}
        check_camera(self.model, self.camera)

    # --- spaces -----------------------------------------------------------------------------------
    def _observation_space(self) -> spaces.Dict:
        height, width = self._image_shape
        every: dict[str, spaces.Space] = {
            "image": spaces.Box(0, 255, (height, width, 3), np.uint8),
            "state": spaces.Box(-np.inf, np.inf, (self.state_dim,), np.float32),
            "text": spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET),
        }
        return spaces.Dict({key: every[key] for key in OBS_KEYS if key in self.config.obs_keys})

    def _geom_id(self, name: str) -> int:
        index = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, name)
        if index < 0:
            raise ValueError(f"{self.xml_file} has no geom {name!r}")
        return int(index)

    # --- episode ----------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: initial poses and goal from the task's ranges, then randomisation.

        Poses are drawn first, so switching a randomisation option on leaves a seed's poses as
        they were.
        """
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        self._reset_task(self.np_random)
        self._randomize_model(self.np_random)
        mujoco.mj_forward(self.model, self.data)
        state = self._state()
        success, _, info = self._score(state)
        info["is_success"] = success
        return self._observation(state), info

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Apply ``action`` for ``frame_skip`` physics steps.

        Raises:
            ValueError: when the action has the wrong shape or holds NaN or infinity.
        """
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self.action_space.shape:
            raise ValueError(
                f"{type(self).__name__} takes actions of shape {self.action_space.shape}, got {action.shape}"
            )
        if not np.isfinite(action).all():
            raise ValueError(f"{type(self).__name__} action contains NaN or inf: {action}")
        self._apply_action(np.minimum(np.maximum(action, -1.0), 1.0))
        mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        obs, reward, terminated, info = self._finish_step()
        return obs, reward, terminated, False, info

    def _finish_step(self) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        """``(obs, reward, terminated, info)`` once the physics has run an action.

        The part of :meth:`step` after ``mj_step``, apart so that the batched env
        (``vector.py``), which steps the physics of many envs in one call, shares it.
        """
        state, reward, terminated, info = self._step_outcome()
        return self._observation(state), reward, terminated, info

    def _step_outcome(self) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        """``(state, reward, terminated, info)`` of the physics state.

        :meth:`_finish_step` without the observation, which a text skill builds once, after its
        last control step.
        """
        state = self._state()
        success, dense, info = self._score(state)
        info["is_success"] = success
        reward = dense if self.config.reward_type == "dense" else float(success)
        terminated = success and self.config.terminate_on_success
        return state, reward, terminated, info

    def _observation(self, state: np.ndarray) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        if self._emit["image"]:
            obs["image"] = self._frame(self._image_shape)
        if self._emit["state"]:
            obs["state"] = state
        if self._emit["text"]:
            obs["text"] = self.instruction
        return obs

    # --- rendering --------------------------------------------------------------------------------
    def render(self) -> np.ndarray | None:
        """An RGB frame ``[H, W, 3]`` of ``render_size`` from the env's camera (``rgb_array``)."""
        if self.render_mode != "rgb_array":
            return None
        return self._frame(self._render_shape)

    def _renderer(self, size: tuple[int, int]) -> FrameRenderer:
        key = (size, self.camera)
        if key not in self._renderers:
            self._renderers[key] = FrameRenderer(self.model, size, self.camera)
        return self._renderers[key]

    def _frame(self, size: tuple[int, int]) -> np.ndarray:
        # Bring body and camera poses up to the last physics step (mj_step computes them before it
        # integrates). Position-only stages, all recomputed by the next mj_step: the trajectory
        # does not depend on whether frames are drawn.
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)
        mujoco.mj_camlight(self.model, self.data)
        return self._renderer(size).render(self.data)

    def close(self) -> None:
        """Free the renderers' OpenGL contexts."""
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state without the renderers (OpenGL contexts), remade at the next frame.

        MuJoCo's model and data pickle with their values, so a checkpoint's env snapshot
        (``platform/env_state.py``) resumes an episode exactly, randomised parameters included.
        """
        state = self.__dict__.copy()
        state["_renderers"] = {}
        return state

    # --- randomisation ----------------------------------------------------------------------------
    def _randomize_model(self, rng: np.random.Generator) -> None:
        """Friction and colours for this episode, when their options are on."""
        if self.config.friction_range is not None:
            scale = float(rng.uniform(*self.config.friction_range))
            self.model.geom_friction[self._object_geoms, 0] = self._base_friction * scale
            self._scale_drag(scale)
        if self.config.randomize_colors:
            self.model.geom_rgba[self._object_geoms, :3] = rng.uniform(0.05, 0.95, 3)
            grey = rng.uniform(0.55, 1.0)
            self.model.geom_rgba[self._table_geom, :3] = grey * rng.uniform(0.85, 1.0, 3)

    def _scale_drag(self, scale: float) -> None:
        """Scale friction that is not a contact's (PushT's table drag); none by default."""

    # --- task hooks -------------------------------------------------------------------------------
    def _reset_task(self, rng: np.random.Generator) -> None:
        """Set ``data.qpos``, ``data.ctrl`` and the goal for a new episode."""
        raise NotImplementedError

    def _apply_action(self, action: np.ndarray) -> None:
        """Set ``data.ctrl`` from a clipped action in [-1, 1]."""
        raise NotImplementedError

    def _state(self) -> np.ndarray:
        """The float32 ``state`` vector ``[state_dim]`` of the current physics state."""
        raise NotImplementedError

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        """``(success, dense_reward, info)`` of ``state``."""
        raise NotImplementedError
