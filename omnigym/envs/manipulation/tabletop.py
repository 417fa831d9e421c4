"""The tabletop tasks' shared part: a Cartesian parallel gripper over a table, and a goal point.

The gripper (``assets/tabletop.xml``) moves on world x, y, z slide joints under position servos.
An action ``(dx, dy, dz, grip)`` in [-1, 1] sets the servo target to the current tool centre
point (TCP, the point between the finger pads) plus ``MAX_STEP`` m times ``(dx, dy, dz)``, clipped
to the workspace (as Gymnasium-Robotics' Fetch moves its mocap), and the fingers' target opening
to ``(grip + 1) / 2`` of fully open (-1 closes, +1 opens).

``state`` starts with the same ``GRIPPER_STATE_DIM`` values in every tabletop task: TCP position
(0:3), TCP velocity (3:6), gap between the finger pads (6), goal position (7:10).

With ``action_space="text"`` an action is one written skill (``skills.py``: ``move_to(x, y, z)``,
``push(dx, dy)``, ``grasp``, ``release``, centimetres in the table frame), which a scripted
controller carries out over up to ``max_skill_steps`` control steps of the actions above; the
step's reward is the sum over them, and a success or the end of the time budget inside a skill
ends it. The ``text`` observation then also holds the gripper's, the objects' and the goal's
positions in the same units and the skill grammar, so a language model can act from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from omnigym.core.text_actions import ActionParseError
from omnigym.envs.manipulation import skills
from omnigym.envs.manipulation.base import ManipulationEnv, TaskConfig
from omnigym.envs.manipulation.rendering import mujoco

MAX_STEP = 0.05
"""TCP target offset per action at full scale (m)."""
FINGER_OPEN = 0.04
"""Each finger pad's distance from the centre line when fully open (m); closed is 0."""
TCP_LOW = np.array([-0.25, -0.25, 0.012])
TCP_HIGH = np.array([0.25, 0.25, 0.3])
"""The workspace the TCP target is clipped to (m); at the lowest, the pads clear the table."""
HOME = np.array([0.0, 0.0, 0.15])
"""TCP position at the start of an episode (m)."""
GRIPPER_STATE_DIM = 10
TCP, TCP_VEL, GAP, GOAL = slice(0, 3), slice(3, 6), 6, slice(7, 10)
"""Indices of the ``state`` vector shared by the tabletop tasks."""
# qpos/qvel of tabletop.xml: gripper x, y, z, finger left, finger right (then any objects).
_GRIPPER, _FINGERS = slice(0, 3), slice(3, 5)
SKILL_TOLERANCE = 0.003
"""A ``move_to`` or ``push`` is done once the TCP is this close to its target (m) ..."""
SKILL_SETTLED_SPEED = 0.05
"""... and slower than this (m/s)."""
PUSH_SPEED = 0.3
"""``push`` moves at this fraction of ``MAX_STEP`` per step (1.5 cm): slow enough that a pushed
cube stops with the gripper (the text PushCube expert: 100 of 100 episodes at 0.3, 99 at 0.6,
the Box expert's speed; docs/envs/manipulation.md)."""
FINGERS_SETTLED = 0.0005
"""A ``grasp`` or ``release`` is done when the pad gap changed less than this in a step (m)."""
TEXT_OBS_MAX_LENGTH = 1024
TEXT_OBS_CHARSET = "".join(chr(c) for c in range(32, 127)) + "\n"


def move_action(tcp: np.ndarray, target: np.ndarray, speed: float = 1.0) -> np.ndarray:
    """Position part of an action that sends the TCP towards ``target``, at most ``speed``.

    The motion primitive of the scripted experts and of the text skills' controller.
    """
    return np.clip((target - tcp) / MAX_STEP, -speed, speed)


@dataclass
class TabletopConfig(TaskConfig):
    """Options of the tabletop tasks (and those of :class:`TaskConfig`)."""

    goal_xy_range: float = 0.15
    """Goal x and y: uniform in +-this square around the table centre (m)."""
    goal_z_range: tuple[float, float] = (0.03, 0.25)
    """Goal height above the table: uniform in this range (m)."""
    success_distance: float = 0.03
    """Distance to the goal (m) within which the task is solved."""
    min_goal_distance: float = 0.06
    """Goals are drawn again until this far from where the task starts (the TCP for Reach, the
    cube for the cube tasks), so no episode starts solved (m)."""
    max_skill_steps: int = 25
    """Text actions: most control steps one skill runs (25 = 1 s at the default rate)."""
    max_control_steps: int | None = None
    """Text actions: end the episode (``truncated``) once its skills have run this many control
    steps in all, inside a skill if need be; None: only the registered limit, which counts skills."""

    def __post_init__(self) -> None:
        super().__post_init__()
        low, high = self.goal_z_range
        self.goal_z_range = (float(low), float(high))
        if not 0 <= self.goal_xy_range <= 0.25 or not 0 < low <= high <= TCP_HIGH[2]:
            raise ValueError("goal_xy_range must be in [0, 0.25] and goal_z_range within (0, 0.3]")
        if not 0 < self.success_distance < self.min_goal_distance:
            raise ValueError(
                f"need 0 < success_distance < min_goal_distance, got {self.success_distance} "
                f"and {self.min_goal_distance}"
            )
        if self.max_skill_steps < 1:
            raise ValueError(f"max_skill_steps must be >= 1, got {self.max_skill_steps}")
        if self.max_control_steps is not None and self.max_control_steps < 1:
            raise ValueError(f"max_control_steps must be >= 1 or None, got {self.max_control_steps}")


class TabletopEnv(ManipulationEnv):
    """Base of Reach, PushCube and PickPlace: gripper actions, the gripper's state, the goal.

    Actions: ``(dx, dy, dz, grip)`` in [-1, 1] (see the module docstring). 25 actions per second
    by default (``frame_skip=20``).
    """

    config: TabletopConfig
    default_frame_skip: ClassVar[int] = 20
    default_camera: ClassVar[str] = "front"
    action_dim: ClassVar[int] = 4
    has_text_actions: ClassVar[bool] = True

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        super().__init__(render_mode, **kwargs)
        self.goal = np.zeros(3)
        """The goal point of the episode (m)."""
        self._goal_site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "goal")
        self.model.site_size[self._goal_site, 0] = self.config.success_distance
        self.text_actions = self.config.action_space == "text"
        """Whether actions are written skills (``action_space="text"``)."""
        self.control_steps = 0
        """Control steps the episode's skills have run (text actions)."""
        if self.text_actions:
            self.action_space = skills.action_space()  # type: ignore[assignment]

    def _observation_space(self) -> spaces.Dict:
        space = super()._observation_space()
        if self.config.action_space == "text" and "text" in space.spaces:
            space["text"] = spaces.Text(TEXT_OBS_MAX_LENGTH, min_length=1, charset=TEXT_OBS_CHARSET)
        return space

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode (see :meth:`ManipulationEnv.reset`); text actions add their info keys."""
        self.control_steps = 0
        obs, info = super().reset(seed=seed, options=options)
        if self.text_actions:
            info.update(action_valid=True, action_error="", skill_steps=0)
        return obs, info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Apply a Box action (see :meth:`ManipulationEnv.step`) or run one written skill.

        A reply that does not parse never raises: the gripper holds still for one control step,
        the reward gets ``invalid_action_penalty``, ``info["action_valid"]`` is False and
        ``info["action_error"]`` says why. ``info["skill_steps"]`` counts the control steps run.
        """
        if not self.text_actions:
            return super().step(action)
        try:
            skill, error = skills.parse_skill(action, TCP_LOW, TCP_HIGH), ""
        except ActionParseError as exc:
            skill, error = skills.NO_OP, str(exc)
        obs, reward, terminated, truncated, info = self._run_skill(skill)
        if error:
            reward += self.config.invalid_action_penalty
        info.update(action_valid=not error, action_error=error)
        return obs, reward, terminated, truncated, info

    def _run_skill(self, skill: skills.Skill) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Step the physics under ``skill``'s controller until it is done, capped, or the episode ends."""
        limit = self.config.max_control_steps
        reward, terminated, truncated, steps = 0.0, False, False, 0
        for action in self._skill_actions(skill):
            self._apply_action(action)
            mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
            state, step_reward, terminated, info = self._step_outcome()
            reward, steps = reward + step_reward, steps + 1
            self.control_steps += 1
            truncated = limit is not None and self.control_steps >= limit
            if terminated or truncated or steps >= self.config.max_skill_steps:
                break
        info["skill_steps"] = steps
        return self._observation(state), reward, terminated, truncated, info

    def _skill_actions(self, skill: skills.Skill) -> Iterator[np.ndarray]:
        """The [-1, 1] actions that carry ``skill`` out, one per control step.

        A generator: it reads the physics state after each step it yielded to decide the next one,
        and returns when the skill is done (the first action is always yielded).
        """
        qpos = self.data.qpos
        start = qpos[_GRIPPER].copy()
        grip = float(self.data.ctrl[3]) / (0.5 * FINGER_OPEN) - 1.0  # the fingers' current target
        if skill.name in ("grasp", "release"):
            grip = -1.0 if skill.name == "grasp" else 1.0
            gap = qpos[3] + qpos[4]
            while True:
                yield np.array([*move_action(qpos[_GRIPPER], start), grip])
                gap, before = qpos[3] + qpos[4], gap
                if abs(gap - before) < FINGERS_SETTLED:
                    return
        if skill.name == skills.NO_OP.name:
            yield np.array([0.0, 0.0, 0.0, grip])
            return
        speed = 1.0
        if skill.name == "move_to":
            target = np.asarray(skill.args) * skills.CM
        else:  # push
            target, speed = start + np.array([*skill.args, 0.0]) * skills.CM, PUSH_SPEED
        target = np.minimum(np.maximum(target, TCP_LOW), TCP_HIGH)
        while True:
            yield np.array([*move_action(qpos[_GRIPPER], target, speed), grip])
            close = np.linalg.norm(qpos[_GRIPPER] - target) < SKILL_TOLERANCE
            if close and np.linalg.norm(self.data.qvel[_GRIPPER]) < SKILL_SETTLED_SPEED:
                return

    def _observation(self, state: np.ndarray) -> dict[str, Any]:
        obs = super()._observation(state)
        if self.text_actions and "text" in obs:
            obs["text"] = self.scene_text()
        return obs

    def scene_text(self) -> str:
        """The ``text`` observation of text actions: the task, positions (cm) and the skills."""
        qpos = self.data.qpos
        gap = (qpos[3] + qpos[4]) / skills.CM
        fingers = "open" if gap >= 7.5 else "closed" if gap <= 0.5 else "partly closed"
        lines = [
            f"Task: {self.instruction}",
            f"Gripper: {point_text(qpos[_GRIPPER])} cm, fingers {fingers} (gap {gap:.1f} cm).",
            *self._object_lines(),
            f"Target: {point_text(self.goal)} cm.",
            skills.describe_skills(TCP_LOW, TCP_HIGH),
        ]
        return "\n".join(lines)

    def _object_lines(self) -> list[str]:
        """Lines of :meth:`scene_text` on the task's objects (none by default)."""
        return []

    def _reset_gripper(self) -> None:
        qpos, ctrl = self.data.qpos, self.data.ctrl
        qpos[_GRIPPER] = ctrl[_GRIPPER] = HOME
        qpos[_FINGERS] = ctrl[_FINGERS] = FINGER_OPEN

    def _reset_goal(self, rng: np.random.Generator, start: np.ndarray) -> None:
        """Draw the goal from the configured ranges, ``min_goal_distance`` from ``start``."""
        cfg = self.config
        for _ in range(1000):
            xy = rng.uniform(-cfg.goal_xy_range, cfg.goal_xy_range, 2)
            goal = np.array([xy[0], xy[1], rng.uniform(*cfg.goal_z_range)])
            if np.linalg.norm(goal - start) >= cfg.min_goal_distance:
                break
        else:
            raise ValueError("no goal in the goal ranges is min_goal_distance from the start; widen them")
        self.goal[:] = goal
        self.model.site_pos[self._goal_site] = goal

    def _apply_action(self, action: np.ndarray) -> None:
        ctrl = self.data.ctrl
        target = self.data.qpos[_GRIPPER] + action[:3] * MAX_STEP
        ctrl[_GRIPPER] = np.minimum(np.maximum(target, TCP_LOW), TCP_HIGH)  # np.clip costs 3x more
        ctrl[_FINGERS] = (action[3] + 1.0) * (0.5 * FINGER_OPEN)

    def _gripper_state(self) -> tuple[Any, ...]:
        """The shared leading part of ``state``, as parts for one ``np.concatenate``."""
        qpos = self.data.qpos
        return qpos[_GRIPPER], self.data.qvel[_GRIPPER], (qpos[3] + qpos[4],), self.goal

    def _tcp_distance(self, point: np.ndarray) -> float:
        """Distance from the TCP to ``point`` (m)."""
        qpos = self.data.qpos
        return math.dist((qpos[0], qpos[1], qpos[2]), (point[0], point[1], point[2]))


def point_text(point: np.ndarray) -> str:
    """``(x, y, z)`` of a point in metres, written in centimetres with 1 decimal (text observations)."""
    values = [f"{value / skills.CM:.1f}" for value in point]
    return "(" + ", ".join("0.0" if v == "-0.0" else v for v in values) + ")"
