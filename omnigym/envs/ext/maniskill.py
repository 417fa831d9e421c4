"""ManiSkill3 (PyPI ``mani_skill``, SAPIEN) tabletop tasks under omnigym's conventions.

``omnigym/ext-maniskill-PickCube-v0`` and ``omnigym/ext-maniskill-PushCube-v0`` are ManiSkill3's
``PickCube-v1`` and ``PushCube-v1`` (Panda arm) run as one env on SAPIEN's CPU physics
(``sim_backend="cpu"``), so omnigym's figures on them stand beside ManiSkill's. What the adapter
changes, and nothing else:

* observations are a Dict: ``state`` = ManiSkill's flat ``obs_mode="state"`` vector as float32
  ``[D]`` (the batch axis of ManiSkill's torch tensors dropped); PickCube's 42 values are the arm's
  qpos (9) and qvel (9), ``is_grasped`` (1), the TCP pose (7: xyz, wxyz), the goal (3), the cube's
  pose (7), TCP-to-cube (3) and cube-to-goal (3) (:data:`PICK_CUBE_LAYOUT`);
* the action is ManiSkill's own normalised Box (``control_mode``, default ``pd_ee_delta_pos``: a
  [-1, 1] end-effector displacement of up to 10 cm per axis and the gripper, +1 open, -1 closed),
  a NaN or infinite action raises ``ValueError``;
* ``reward`` is ManiSkill's normalised dense reward in [0, 1], ``terminated`` is its success, and
  ``info`` carries ``is_success`` and ManiSkill's other flags as Python bools;
* ``reset(seed=None)`` draws ManiSkill's seed from the env's own generator, so episodes after a
  seeded reset are determined by that seed; a seeded reset rebuilds the SAPIEN scene
  (``reconfigure``, about 0.1 s), since PhysX carries contact and solver caches across a plain
  reset and the same seed after a different episode would otherwise diverge within a few steps.

Rendering: SAPIEN renders only on a Vulkan GPU (Mesa's CPU Vulkan, lavapipe, is rejected:
SAPIEN issue #269). Without one, ManiSkill still simulates with ``render_backend="none"``, but its
scene builders construct ``RenderMaterial`` objects that need a device;
:func:`patch_headless_materials` replaces that class by an inert stand-in (ManiSkill's builders
skip every visual shape when the scene cannot render, so nothing reads it). Pixels
(``obs_keys`` with ``image``, ``render_mode="rgb_array"``) then raise :class:`RuntimeError` saying so.

Install (no GPU needed): ``pip install --no-deps mani_skill==3.0.1 sapien==3.0.3 ...`` (the full
line is in docs/envs/peer-adapters.md; ``sapien`` pins ``opencv-python``, which would shadow
omnigym's ``opencv-python-headless``, hence ``--no-deps``).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.types import OBS_IMAGE, OBS_STATE

INSTALL_HINT = "see docs/envs/peer-adapters.md (pip install --no-deps mani_skill==3.0.1 sapien==3.0.3 ...)"
NO_RENDER_MESSAGE = (
    "ManiSkill3 pixels need a Vulkan GPU (SAPIEN has no CPU renderer); this machine has none, "
    "so only obs_keys=('state',) with render_mode=None works here"
)
PICK_CUBE_LAYOUT = {
    "qpos": slice(0, 9),
    "qvel": slice(9, 18),
    "is_grasped": slice(18, 19),
    "tcp_pose": slice(19, 26),
    "goal_pos": slice(26, 29),
    "obj_pose": slice(29, 36),
    "tcp_to_obj_pos": slice(36, 39),
    "obj_to_goal_pos": slice(39, 42),
}
"""Where each part of ``PickCube-v1``'s ``state`` lies (``pd_ee_delta_pos``; ManiSkill 3.0.1)."""


class _InertMaterial:
    """Stands in for ``sapien.render.RenderMaterial`` where no render device exists."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.base_color = kwargs.get("base_color", [1.0, 1.0, 1.0, 1.0])

    def __getattr__(self, name: str) -> Any:
        return None

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


def render_device_available() -> bool:
    """Whether SAPIEN finds a Vulkan device it can render with (it prints a warning when not)."""
    import sapien.render

    material = getattr(sapien.render, "_omnigym_original_material", sapien.render.RenderMaterial)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            material()  # the real class, also after patch_headless_materials
    except RuntimeError:
        return False
    return True


def patch_headless_materials() -> None:
    """Replace ``RenderMaterial`` everywhere SAPIEN and ManiSkill bound it by :class:`_InertMaterial`.

    Idempotent; only call it where :func:`render_device_available` is False (it makes every later
    material inert). The loaders import the class by name (``from sapien.render import
    RenderMaterial``), so each module's binding is replaced, not only ``sapien.render``'s.
    """
    import sapien.render

    original = getattr(sapien.render, "_omnigym_original_material", sapien.render.RenderMaterial)
    sapien.render._omnigym_original_material = original  # type: ignore[attr-defined]
    for module in list(sys.modules.values()):
        if getattr(module, "RenderMaterial", None) is original:
            module.RenderMaterial = _InertMaterial  # type: ignore[attr-defined,union-attr]


def _import_maniskill() -> bool:
    """Import ManiSkill (registers its ids); patch the materials when there is no render device.

    Returns:
        Whether SAPIEN can render here.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Failed to find system libvulkan", pkg_resources
            import mani_skill.envs  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"the ManiSkill3 envs need mani_skill and sapien ({exc}): {INSTALL_HINT}") from None
    can_render = render_device_available()
    if not can_render:
        patch_headless_materials()
    return can_render


def _to_numpy(value: Any) -> np.ndarray:
    """A ManiSkill value (torch tensor with a batch axis of 1) as a NumPy array without it."""
    array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    return array[0] if array.ndim > 0 and array.shape[0] == 1 else array


class ManiSkillEnv(gym.Env[dict[str, Any], np.ndarray]):
    """One ManiSkill3 task on the CPU simulator, with omnigym's Dict observations and ``is_success``.

    Args:
        task: ManiSkill3 env id (``PickCube-v1``).
        control_mode: ManiSkill controller (``pd_ee_delta_pos``, ``pd_joint_delta_pos``, ...).
        obs_keys: ``("state",)``, or with ``"image"`` (needs a Vulkan GPU): the base camera frame.
        render_mode: None, or ``"rgb_array"`` (needs a Vulkan GPU).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(
        self,
        task: str = "PickCube-v1",
        control_mode: str = "pd_ee_delta_pos",
        obs_keys: tuple[str, ...] | list[str] = (OBS_STATE,),
        render_mode: str | None = None,
    ) -> None:
        obs_keys = tuple(obs_keys)
        if not obs_keys or set(obs_keys) - {OBS_STATE, OBS_IMAGE}:
            raise ValueError(f"obs_keys must be a non-empty subset of ('state', 'image'), got {obs_keys}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        can_render = _import_maniskill()
        # Instance metadata: the conformance render check reads it, and it depends on the machine.
        self.metadata = {**self.metadata, "render_modes": ["rgb_array"] if can_render else []}
        wants_pixels = OBS_IMAGE in obs_keys or render_mode is not None
        if wants_pixels and not can_render:
            raise RuntimeError(NO_RENDER_MESSAGE)
        self.task, self.obs_keys, self.render_mode = task, obs_keys, render_mode
        make_kwargs: dict[str, Any] = {
            "obs_mode": "state_dict+rgb" if OBS_IMAGE in obs_keys else "state",
            "control_mode": control_mode,
            "sim_backend": "cpu",
            "render_backend": "cpu" if wants_pixels else "none",
            "render_mode": render_mode,
            "reward_mode": "normalized_dense",
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base: Any = gym.make(task, **make_kwargs).unwrapped  # BaseEnv; the episode limit is ours
        self._env: Any = base
        single = base.single_action_space
        self._low, self._high = np.asarray(single.low, np.float32), np.asarray(single.high, np.float32)
        self.action_space = spaces.Box(self._low, self._high, dtype=np.float32)
        keys: dict[str, spaces.Space] = {}
        first = self._raw_obs(self._env.reset(seed=0)[0])
        if OBS_IMAGE in obs_keys:
            keys[OBS_IMAGE] = spaces.Box(0, 255, first[OBS_IMAGE].shape, np.uint8)
        if OBS_STATE in obs_keys:
            keys[OBS_STATE] = spaces.Box(-np.inf, np.inf, first[OBS_STATE].shape, np.float32)
        self.observation_space = spaces.Dict(keys)

    def _raw_obs(self, raw: Any) -> dict[str, np.ndarray]:
        """ManiSkill's observation as ``state`` (and ``image``)."""
        if OBS_IMAGE not in self.obs_keys:
            return {OBS_STATE: _to_numpy(raw).astype(np.float32)}
        from mani_skill.utils import common

        state = common.flatten_state_dict({k: raw[k] for k in ("agent", "extra") if k in raw}, use_torch=True)
        camera = next(iter(raw["sensor_data"].values()))
        out = {OBS_IMAGE: np.ascontiguousarray(_to_numpy(camera["rgb"]), dtype=np.uint8)}
        if OBS_STATE in self.obs_keys:
            out[OBS_STATE] = _to_numpy(state).astype(np.float32)
        return out

    def _info(self, raw_info: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {"is_success": bool(_to_numpy(raw_info.get("success", False)))}
        for key, value in raw_info.items():
            array = _to_numpy(value)
            if key not in ("success", "reconfigure") and array.dtype == bool and array.size == 1:
                info[key] = bool(array)
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """ManiSkill's reset with ``seed`` (drawn from this env's generator when None; see the module)."""
        super().reset(seed=seed)
        options = dict(options or {})
        if seed is not None:  # rebuild the scene: PhysX keeps contacts and solver state across resets
            options.setdefault("reconfigure", True)
        else:
            seed = int(self.np_random.integers(2**31))
        raw, raw_info = self._env.reset(seed=seed, options=options)
        info = self._info(raw_info)
        info["is_success"] = False
        return self._raw_obs(raw), info

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """One ManiSkill control step (``sim_freq / control_freq`` physics steps)."""
        values = np.asarray(action, dtype=np.float32)
        if values.shape != self.action_space.shape:
            raise ValueError(f"ManiSkill {self.task} takes an action of shape {self.action_space.shape}")
        if not np.isfinite(values).all():
            raise ValueError(f"ManiSkill actions must be finite, got {values.tolist()}")
        values = np.clip(values, self._low, self._high)
        raw, reward, terminated, _, raw_info = self._env.step(values)
        info = self._info(raw_info)
        return self._raw_obs(raw), float(_to_numpy(reward)), bool(_to_numpy(terminated)), False, info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """ManiSkill's ``rgb_array`` frame (needs a Vulkan GPU)."""
        if self.render_mode != "rgb_array":
            return None
        return np.ascontiguousarray(_to_numpy(self._env.render()), dtype=np.uint8)

    def close(self) -> None:
        """Close ManiSkill's env (its SAPIEN scene)."""
        env = getattr(self, "_env", None)
        if env is not None:
            env.close()
            self._env = None
        super().close()


def pick_cube_action(state: np.ndarray) -> np.ndarray:
    """A scripted ``PickCube-v1`` action (``pd_ee_delta_pos``) from the ``state`` observation alone.

    Above the cube with the gripper open, then down to it, close, and carry it to the goal. Each
    action is a function of the current state (the phase is read from ``is_grasped`` and the TCP's
    offset from the cube), so the policy keeps no memory. Displacements are proportional (gain
    10: a 1 cm offset is a 0.1 action, 1 mm of motion) and clipped to [-1, 1].
    """
    layout = PICK_CUBE_LAYOUT
    tcp_to_obj = state[layout["tcp_to_obj_pos"]]
    obj_to_goal = state[layout["obj_to_goal_pos"]]
    grasped = state[layout["is_grasped"]][0] > 0.5
    horizontal = float(np.linalg.norm(tcp_to_obj[:2]))
    action = np.zeros(4, np.float32)
    if grasped:
        action[:3] = obj_to_goal * 10.0
        action[3] = -1.0
    elif horizontal > 0.01:  # line up above the cube
        action[:3] = (*tcp_to_obj[:2] * 10.0, (tcp_to_obj[2] + 0.05) * 10.0)
        action[3] = 1.0
    elif tcp_to_obj[2] < -0.005:  # descend onto it, open
        action[:3] = tcp_to_obj * 10.0
        action[3] = 1.0
    else:  # at the cube: close
        action[:3] = tcp_to_obj * 10.0
        action[3] = -1.0
    return np.clip(action, -1.0, 1.0)
