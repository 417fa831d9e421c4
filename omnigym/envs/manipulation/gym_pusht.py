"""LeRobot's PushT (PyPI ``gym-pusht``, pymunk) under omnigym's conventions, and its geometry.

``omnigym/GymPushT-v0`` is the env LeRobot and the Diffusion Policy paper report PushT on, so
omnigym's figures on it stand beside theirs (omnigym's own ``omnigym/PushT-v0`` is a MuJoCo port
of the same task with other dynamics). What the adapter changes, and nothing else:

* observations are a Dict: ``obs_type="state"`` gives ``state`` = gym-pusht's 5 values (agent x,
  y, block x, y, block angle; pixels and radians); ``obs_type="pixels"`` gives ``image`` (the
  ``image_size`` square RGB frame, 96 by default) and ``state`` = the agent's position (2 values),
  gym-pusht's ``pixels_agent_pos``, what LeRobot's image Diffusion Policy reads;
  ``obs_type="keypoints"`` gives ``state`` = the 8 corners of the T (x, y each, pixels) then the
  agent's position: 18 values, gym-pusht's ``environment_state_agent_pos``, the low-dimensional
  observation of the Diffusion Policy paper's state runs (the 5-value state's block angle wraps
  from 2 pi to 0, which keypoints avoid);
* the action is omnigym's [-1, 1] Box, scaled to gym-pusht's absolute agent target in [0, 512]²
  (``256 + 256 a``); a NaN or infinite action raises ``ValueError``;
* ``info`` carries ``is_success`` (coverage above 95 %, when gym-pusht also ends the episode),
  ``coverage`` and the episode's ``max_coverage`` so far (the per-episode figure LeRobot and the
  Diffusion Policy paper average);
* ``privileged=["expert_state"]`` adds the state a scripted expert needs (:data:`EXPERT_STATE`).

The episode limit is gym-pusht's 300 steps (10 Hz control, 10 physics steps of 10 ms each).

gym-pusht pins ``pygame`` while highway-env (a bench peer) needs ``pygame-ce``, which provides the
same module, so it is installed without its dependencies (``scripts/setup.sh``):
``pip install 'omnigym[pusht]' && pip install --no-deps gym-pusht==0.1.8``.
"""

from __future__ import annotations

import math
import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from omnigym.core.types import OBS_IMAGE, OBS_STATE
from omnigym.envs.manipulation import pusht

RAW_OBS_TYPES = {"state": "state", "pixels": "pixels_agent_pos", "keypoints": "environment_state_agent_pos"}
"""gym-pusht's ``obs_type`` behind each of the adapter's."""
OBS_TYPES = tuple(RAW_OBS_TYPES)
NUM_KEYPOINTS = 8
"""Corners of the T (two rectangles of four) in the ``keypoints`` observation."""
EXPERT_STATE = "expert_state"
"""Privileged key: agent x, y, vx, vy; block x, y, angle; goal x, y, angle (pixels, pixels/s, rad)."""
EXPERT_STATE_DIM = 10
INSTALL_HINT = "pip install 'omnigym[pusht]' && pip install --no-deps gym-pusht==0.1.8"

# gym-pusht 0.1.8's constants (envs/pusht.py)
CENTRE_PX = 256.0
"""Centre of the 512 x 512 workspace, and of the action's [0, 512] range."""
PX_PER_M = 600.0
"""Scale of the MuJoCo port: the T's unit of 30 px is 50 mm (``tblock``)."""
PD_GAINS = (100.0, 20.0)
"""The agent's PD controller: ``acc = kp (target - x) - kv v``."""
PHYSICS_DT, PHYSICS_STEPS = 0.01, 10
"""Per action: 10 physics steps of 10 ms (10 Hz control)."""
T_CENTRE_PX = (0.0, (3600.0 * 15.0 + 2700.0 * 75.0) / 6300.0)
"""Centre of area of the T in gym-pusht's body frame (bar 120 x 30 at y in [0, 30], stem 30 x 90
above it): the origin of ``tblock``'s frame, whose +y points the other way (stem to bar)."""
BLOCK_RHO2 = 2.0 * (120.0**2 + 30.0**2) / 12.0 / PX_PER_M**2
"""Moment of inertia over mass of the block (m²): gym-pusht gives the unit-mass body twice the
bar's moment. With no velocity kept between physics steps (``space.damping = 0``) and frictionless
contacts, a push moves the block quasi-statically by impulses, so this is ``PushPlanner``'s ratio.
(The block turns about its centre of gravity, (0, 45) in the body frame, 4.3 px from the centre
of area the planner assumes; its ``position`` is the frame's origin, the bar's outer edge.)"""


def _rotate(angle: float, x: float, y: float) -> tuple[float, float]:
    c, s = math.cos(angle), math.sin(angle)
    return c * x - s * y, s * x + c * y


def planner_state(expert_state: np.ndarray) -> np.ndarray:
    """One :data:`EXPERT_STATE` row as the MuJoCo PushT ``state`` (``pusht.STATE_DIM``, metres).

    Positions move to the T's centre of area and the workspace centre, scale by
    :data:`PX_PER_M`; yaws turn by pi (``tblock``'s +y runs from the stem to the bar). The block's
    velocities are left 0 (the planner does not read them).
    """
    ax, ay, avx, avy, bx, by, b_angle, gx, gy, g_angle = (float(v) for v in expert_state)
    block = np.add((bx, by), _rotate(b_angle, *T_CENTRE_PX))  # positions are the frames' origins
    goal = np.add((gx, gy), _rotate(g_angle, *T_CENTRE_PX))
    state = np.zeros(pusht.STATE_DIM)
    state[0:2] = (np.array([ax, ay]) - CENTRE_PX) / PX_PER_M
    state[2:4] = np.array([avx, avy]) / PX_PER_M
    state[4:6] = (block - CENTRE_PX) / PX_PER_M
    state[6:8] = math.cos(b_angle + math.pi), math.sin(b_angle + math.pi)
    state[11:13] = (goal - CENTRE_PX) / PX_PER_M
    state[13:15] = math.cos(g_angle + math.pi), math.sin(g_angle + math.pi)
    return state


def _pd_response() -> tuple[float, float, float]:
    """``(a_x, a_v, b)``: the agent's position after one action is ``a_x x + a_v v + b u`` (per axis).

    gym-pusht integrates ``v += (kp (u - x) - kv v) dt`` then ``x += v dt``, :data:`PHYSICS_STEPS`
    times, and the agent is kinematic (contacts never change its motion), so this is exact.
    """
    kp, kv = PD_GAINS
    dt = PHYSICS_DT
    step = np.array([[1 - kp * dt * dt, dt - kv * dt * dt], [-kp * dt, 1 - kv * dt]])
    drive = np.array([kp * dt * dt, kp * dt])
    state, gain = np.eye(2), np.zeros(2)
    for _ in range(PHYSICS_STEPS):
        state, gain = step @ state, step @ gain + drive
    return float(state[0, 0]), float(state[0, 1]), float(gain[0])


PD_RESPONSE = _pd_response()


def action_to_reach(target_px: np.ndarray, agent_px: np.ndarray, velocity_px: np.ndarray) -> np.ndarray:
    """The [-1, 1] action that puts the agent at ``target_px`` after one step (clipped to the range).

    The PD controller covers about 30 % of the way to its target in one action from rest, so
    acting with the wanted position itself would lag; this inverts :data:`PD_RESPONSE` instead.
    """
    a_x, a_v, b = PD_RESPONSE
    command = (np.asarray(target_px) - a_x * np.asarray(agent_px) - a_v * np.asarray(velocity_px)) / b
    return np.clip((command - CENTRE_PX) / CENTRE_PX, -1.0, 1.0)


def _import_gym_pusht() -> type:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # pygame's banner on stdout
    try:
        from gym_pusht.envs.pusht import PushTEnv
    except ImportError as exc:
        raise ImportError(f"omnigym/GymPushT-v0 needs LeRobot's gym-pusht ({exc}): {INSTALL_HINT}") from None
    return PushTEnv


class GymPushTEnv(gym.Env[dict[str, Any], np.ndarray]):
    """gym-pusht's ``PushTEnv`` with Dict observations, a [-1, 1] action and coverage in ``info``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012  (gymnasium's attribute)

    def __init__(
        self,
        render_mode: str | None = None,
        obs_type: str = "state",
        image_size: int = 96,
        render_size: int = 256,
        privileged: tuple[str, ...] | list[str] = (),
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type must be one of {OBS_TYPES}, got {obs_type!r}")
        if image_size < 8 or render_size < 8:
            raise ValueError(f"image_size and render_size must be >= 8, got {image_size}, {render_size}")
        unknown = [key for key in privileged if key != EXPERT_STATE]
        if unknown:
            raise ValueError(f"privileged keys {unknown} unknown; choose from ['{EXPERT_STATE}']")
        self.render_mode = render_mode
        self.obs_type = obs_type
        self.privileged = tuple(privileged)
        self._env = _import_gym_pusht()(
            obs_type=RAW_OBS_TYPES[obs_type],
            render_mode="rgb_array",
            observation_width=image_size,
            observation_height=image_size,
            visualization_width=render_size,
            visualization_height=render_size,
        )
        keys: dict[str, spaces.Space] = {}
        if obs_type == "state":
            # kinematic agent: its PD can carry it past the walls, so positions are not bounded
            low = np.array([-np.inf] * 4 + [0.0], np.float32)
            high = np.array([np.inf] * 4 + [2 * np.pi], np.float32)
            keys[OBS_STATE] = spaces.Box(low, high, dtype=np.float32)
        elif obs_type == "keypoints":
            keys[OBS_STATE] = spaces.Box(-np.inf, np.inf, (2 * NUM_KEYPOINTS + 2,), np.float32)
        else:
            keys[OBS_IMAGE] = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
            keys[OBS_STATE] = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        if EXPERT_STATE in self.privileged:
            keys[EXPERT_STATE] = spaces.Box(-np.inf, np.inf, (EXPERT_STATE_DIM,), np.float32)
        self.observation_space = spaces.Dict(keys)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._max_coverage = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """gym-pusht's reset (its RNG draws the agent's and the block's start); coverage in ``info``."""
        super().reset(seed=seed)
        raw, _ = self._env.reset(seed=seed, options=options)
        coverage = float(self._env._get_coverage())  # gym-pusht reports it only after a step
        self._max_coverage = 0.0  # as LeRobot's per-step rewards: the start does not count
        return self._observation(raw), {"is_success": False, "coverage": coverage, "max_coverage": 0.0}

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Move the agent's target to ``256 + 256 * clip(action)``; one control step of gym-pusht."""
        values = np.asarray(action, dtype=np.float64)
        if values.shape != (2,):
            raise ValueError(f"GymPushT takes an action of shape (2,), got {values.shape}")
        if not np.isfinite(values).all():
            raise ValueError(f"GymPushT actions must be finite, got {values.tolist()}")
        target = CENTRE_PX + CENTRE_PX * np.clip(values, -1.0, 1.0)
        raw, reward, terminated, truncated, raw_info = self._env.step(target)
        coverage = float(raw_info["coverage"])
        self._max_coverage = max(self._max_coverage, coverage)
        info = {
            "is_success": bool(raw_info["is_success"]),
            "coverage": coverage,
            "max_coverage": self._max_coverage,
        }
        return self._observation(raw), float(reward), bool(terminated), bool(truncated), info

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """A ``render_size`` square RGB frame with the agent's target marked (gym-pusht's view)."""
        return self._env.render() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        """Close gym-pusht's env."""
        self._env.close()

    def _observation(self, raw: Any) -> dict[str, Any]:
        if self.obs_type == "state":
            obs: dict[str, Any] = {OBS_STATE: np.asarray(raw, dtype=np.float32)}
        elif self.obs_type == "keypoints":
            state = np.concatenate([raw["environment_state"], raw["agent_pos"]])
            obs = {OBS_STATE: state.astype(np.float32)}
        else:
            obs = {
                OBS_IMAGE: np.ascontiguousarray(raw["pixels"], dtype=np.uint8),
                OBS_STATE: np.asarray(raw["agent_pos"], dtype=np.float32),
            }
        if EXPERT_STATE in self.privileged:
            env = self._env
            obs[EXPERT_STATE] = np.array(
                [*env.agent.position, *env.agent.velocity, *env.block.position, env.block.angle,
                 *env.goal_pose],
                dtype=np.float32,
            )  # fmt: skip
        return obs
