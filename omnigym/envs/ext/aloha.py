"""LeRobot's gym-aloha (PyPI ``gym-aloha``, dm_control + MuJoCo) under omnigym's conventions.

``omnigym/ext-aloha-TransferCube-v0`` and ``omnigym/ext-aloha-Insertion-v0`` are the two bimanual
ALOHA tasks of the ACT paper and LeRobot (``gym_aloha/AlohaTransferCube-v0``,
``AlohaInsertion-v0``), with ``...Pixels-v0`` twins. What the adapter changes, and nothing else:

* observations are a Dict: ``state`` = gym-aloha's ``qpos`` (14: per arm 6 joint angles and the
  normalised gripper opening), ``qvel`` (14) and ``env_state`` (the cube's pose, 7; Insertion:
  peg and socket, 14) as float32; the Pixels ids add ``image`` = the ``top`` camera at
  ``image_size`` (uint8 ``[H, W, 3]``, 240 x 320 by default; gym-aloha's is 480 x 640);
* the dm_control task renders only what is asked: gym-aloha renders three 480 x 640 cameras on
  every step (about 0.5 s a step on a 2-core CPU), so the state ids render nothing and run the
  physics alone;
* the action is gym-aloha's: 14 absolute joint targets (radians) and normalised gripper openings,
  in a Box bounded by the actuators' control ranges and [0, 1] for the grippers (gym-aloha declares
  [-1, 1], which its own start pose leaves); a NaN or infinite action raises ``ValueError``;
* ``reward`` is gym-aloha's staged reward (0 to 4: touched, lifted, transfer attempted, done),
  ``terminated`` at 4, and ``info["is_success"]`` then; ``info["stage"]`` is the reward;
* a step whose physics diverges (dm_control's ``PhysicsError``, e.g. MuJoCo's ``BADQACC`` after a
  jump across a joint's whole range) ends the episode: ``truncated``, reward 0, the last valid
  observation and ``info["physics_error"]``;
* ``reset(seed=None)`` draws the seed from the env's generator (gym-aloha samples the objects'
  poses from ``RandomState(seed)``; unseeded, they would not be reproducible).

dm_control 1.0.41 is written against MuJoCo 3.x and omnigym uses MuJoCo 4.0, which removed 15
array fields (``flex_bandwidth``, ``flexvert_J``, ``qM``, ...). :func:`patch_dm_control_sizes` drops
the names MuJoCo no longer has from dm_control's table of array sizes (idempotent), the only
change gym-aloha's physics needs here.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.types import OBS_IMAGE, OBS_STATE

# Imported first: it picks the headless OpenGL backend (MUJOCO_GL), which MuJoCo reads once, at import.
from omnigym.envs.manipulation.rendering import FrameRenderer, select_gl_backend

INSTALL_HINT = (
    "pip install --no-deps gym-aloha==0.1.5 dm_control==1.0.41 dm-env dm-tree labmaze wrapt (omnigym keeps "
    "MuJoCo 4; see docs/envs/peer-adapters.md)"
)
TASKS = ("transfer_cube", "insertion")
ARM_ACTUATORS = (*range(0, 6), *range(8, 14))
"""Indices of the 12 arm joints among the 16 actuators (each gripper has two finger actuators)."""
GRIPPERS = (6, 13)
"""Indices of the two normalised gripper openings in the 14-value action."""


def patch_dm_control_sizes() -> list[str]:
    """Drop the MJ struct fields installed MuJoCo lacks from dm_control's ``sizes.array_sizes``.

    Returns:
        The ``struct.field`` names dropped (none after the first call).
    """
    import mujoco
    from dm_control.mujoco.wrapper.mjbindings import sizes

    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    probes = {"mjmodel": model, "mjdata": mujoco.MjData(model)}
    dropped = []
    for struct, probe in probes.items():
        for field in [f for f in sizes.array_sizes[struct] if not hasattr(probe, f)]:
            del sizes.array_sizes[struct][field]
            dropped.append(f"{struct}.{field}")
    return dropped


class AlohaEnv(gym.Env[dict[str, Any], np.ndarray]):
    """One gym-aloha task with omnigym's Dict observations, a bounded joint Box and ``is_success``.

    Args:
        task: ``transfer_cube`` or ``insertion``.
        obs_keys: ``("state",)`` or ``("image", "state")``.
        image_size: ``(H, W)`` of ``image`` and of ``render()``.
        render_mode: None or ``"rgb_array"`` (the ``top`` camera).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(
        self,
        task: str = "transfer_cube",
        obs_keys: tuple[str, ...] | list[str] = (OBS_STATE,),
        image_size: tuple[int, int] | list[int] = (240, 320),
        render_mode: str | None = None,
    ) -> None:
        obs_keys = tuple(obs_keys)
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if not obs_keys or set(obs_keys) - {OBS_STATE, OBS_IMAGE}:
            raise ValueError(f"obs_keys must be a non-empty subset of ('state', 'image'), got {obs_keys}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        select_gl_backend()  # dm_control reads MUJOCO_GL at import
        try:
            patch_dm_control_sizes()
            from gym_aloha import env as aloha_env
            from gym_aloha import utils as aloha_utils
        except ImportError as exc:
            raise ImportError(
                f"the ALOHA envs need gym-aloha and dm_control ({exc}): {INSTALL_HINT}"
            ) from None
        self.task, self.obs_keys, self.render_mode = task, obs_keys, render_mode
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self._aloha, self._utils = aloha_env, aloha_utils
        self._env: Any = aloha_env.AlohaEnv(task, obs_type="pixels_agent_pos")._env  # dm_control env
        self._env.task.get_observation = self._task_observation  # no 3-camera render per step
        physics = self._env.physics
        ranges = np.asarray(physics.model.actuator_ctrlrange, dtype=np.float32)[list(ARM_ACTUATORS)]
        low, high = np.zeros(14, np.float32), np.ones(14, np.float32)
        arm = [i for i in range(14) if i not in GRIPPERS]
        low[arm], high[arm] = ranges[:, 0], ranges[:, 1]
        self._low, self._high = low, high
        self.action_space = spaces.Box(low, high, dtype=np.float32)
        state_dim = 28 + (7 if task == "transfer_cube" else 14)
        keys: dict[str, spaces.Space] = {}
        if OBS_IMAGE in obs_keys:
            keys[OBS_IMAGE] = spaces.Box(0, 255, (*self.image_size, 3), np.uint8)
        if OBS_STATE in obs_keys:
            keys[OBS_STATE] = spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)
        self.observation_space = spaces.Dict(keys)
        self._last: dict[str, Any] = {}
        self._renderer: Any = None

    def _task_observation(self, physics: Any) -> dict[str, Any]:
        """The dm_control task's observation: state always, the ``top`` camera only when asked."""
        task = self._env.task
        obs: dict[str, Any] = {
            OBS_STATE: np.concatenate(
                [task.get_qpos(physics), task.get_qvel(physics), task.get_env_state(physics)]
            ).astype(np.float32)
        }
        if OBS_IMAGE in self.obs_keys:
            obs[OBS_IMAGE] = self._render_top()
        return obs

    def _render_top(self) -> np.ndarray:
        # omnigym's MuJoCo renderer on dm_control's raw model and data: once dm_control has made
        # its own (EGL) context, MuJoCo's renderer cannot make one in the process (gladLoadGL error)
        physics = self._env.physics
        if self._renderer is None:
            self._renderer = FrameRenderer(physics.model.ptr, self.image_size, "top")
        return self._renderer.render(physics.data.ptr)

    def _observation(self, raw: dict[str, Any]) -> dict[str, Any]:
        return {key: raw[key] for key in self.obs_keys}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """gym-aloha's reset: the objects' poses from ``RandomState(seed)`` (drawn here when None)."""
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        self._env.task.random.seed(seed)
        if self.task == "transfer_cube":
            self._aloha.BOX_POSE[0] = self._utils.sample_box_pose(seed)
        else:
            self._aloha.BOX_POSE[0] = np.concatenate(self._utils.sample_insertion_pose(seed))
        timestep = self._env.reset()
        self._last = self._observation(timestep.observation)
        return self._last, {"is_success": False, "stage": 0}

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """One 20 ms control step (joint targets held by the position actuators)."""
        values = np.asarray(action, dtype=np.float64)
        if values.shape != (14,):
            raise ValueError(f"ALOHA takes an action of shape (14,), got {values.shape}")
        if not np.isfinite(values).all():
            raise ValueError(f"ALOHA actions must be finite, got {values.tolist()}")
        values = np.clip(values, self._low, self._high)
        from dm_control.rl.control import PhysicsError

        try:
            timestep = self._env.step(values)
        except PhysicsError as exc:  # diverged (e.g. a jump across a joint's range): end the episode
            info = {"is_success": False, "stage": 0, "physics_error": str(exc)}
            return self._last, 0.0, False, True, info
        stage = int(timestep.reward or 0)
        success = stage == self._env.task.max_reward
        info = {"is_success": success, "stage": stage}
        self._last = self._observation(timestep.observation)
        return self._last, float(stage), success, False, info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The ``top`` camera at ``image_size`` (``rgb_array``)."""
        return self._render_top() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        """Free dm_control's physics and its rendering context."""
        renderer = getattr(self, "_renderer", None)
        if renderer is not None:
            renderer.close()
            self._renderer = None
        env = getattr(self, "_env", None)
        if env is not None:
            env.physics.free()
            self._env = None
        super().close()
