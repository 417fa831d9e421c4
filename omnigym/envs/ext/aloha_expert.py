"""A scripted expert for gym-aloha's TransferCube (``omnigym/ext-aloha-TransferCube-v0``), in joint space.

``aloha_transfer_expert`` follows the ACT paper's scripted transfer (``PickAndTransferPolicy`` in
ACT's ``scripted_policy.py``): the right gripper goes above the cube, descends, closes, lifts
the cube to a meeting point above the table's centre; the left gripper approaches it rolled by
90 degrees, closes, the right opens and both retreat. ACT writes that script for an
end-effector env whose mocap bodies drag the arms; gym-aloha's env takes joint targets, so here
each step's two end-effector poses are turned into joint targets by damped-least-squares inverse
kinematics on the env's own MuJoCo model (``bimanual_viperx_transfer_cube.xml``), warm-started
from the previous step's solution so the arms take one continuous branch.

The end-effector pose is ACT's mocap frame: a point 13.47 cm ahead of ``gripper_link`` (between
the finger tips; the offset of the weld in ``bimanual_viperx_end_effector_transfer_cube.xml``) and
the ``gripper_link`` orientation, which the right arm's weld turns by 180 degrees about z. The
waypoints are ACT's, planned once per episode from its first observation (the cube's pose is in
the ``state`` observation, values 28 to 35, so no privileged key is needed); the script runs open
loop after that, as ACT's does. Measured with ``omnigym eval`` on seeds 0-99: every episode
succeeds, at step 213 (the left fingers touch the lifted cube while the right still holds it);
run on to step 400, the left gripper alone holds the cube off the table (measured on seeds 0-99).

``aloha_insertion_expert`` (:class:`AlohaInsertionExpert`) does the same for Insertion with ACT's
``InsertionPolicy`` (peg and socket poses: ``state`` values 28 to 35 and 35 to 42), its hands
ending 1 cm closer than ACT's (:data:`INSERT`): 100 of seeds 0-99 succeed, at step 332 or 333.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import PolicyConfig
from omnigym.core.types import Obs, PolicyStep
from omnigym.envs.manipulation.experts import ExpertConfig, ScriptedExpert
from omnigym.envs.manipulation.rendering import select_gl_backend

select_gl_backend()  # MuJoCo reads MUJOCO_GL once, at import: a later renderer in this process needs it set

import mujoco  # noqa: E402

TCP_OFFSET = np.array([0.134706, 0.0, -0.00205])
"""ACT's end-effector point in the ``gripper_link`` frame (the EE model's weld offset, m)."""
RIGHT_FLIP = np.array([0.0, 0.0, 0.0, 1.0])
"""The right arm's ``gripper_link`` orientation relative to its mocap frame (180 degrees about z)."""
MEET = np.array([0.0, 0.5, 0.25])
"""ACT's meeting point above the table's centre (m)."""
QPOS = {"left": slice(0, 6), "right": slice(8, 14)}
"""Each arm's six joints in the model's ``qpos`` (and ``qvel``; the fingers follow each arm)."""
STATE_DIM, CUBE = 35, slice(28, 31)
"""The TransferCube ``state`` length and the cube's position in it."""


def _axis_quat(axis: tuple[float, float, float], degrees: float) -> np.ndarray:
    """The quaternion of a turn of ``degrees`` about ``axis``."""
    quat = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quat, np.asarray(axis, dtype=np.float64), np.deg2rad(degrees))
    return quat


def _at(base: np.ndarray, dx: float, dy: float, dz: float) -> np.ndarray:
    """``base`` moved by ``(dx, dy, dz)`` metres (a waypoint offset, as ACT's script writes them)."""
    return base + np.array([dx, dy, dz])


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The quaternion product ``a * b``."""
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, a, b)
    return out


PICK = _mul(_axis_quat((0.0, 1.0, 0.0), -60.0), RIGHT_FLIP)
"""Right ``gripper_link`` orientation for the pick: ACT's mocap pitched 60 degrees down."""
LEFT_MEET = _axis_quat((1.0, 0.0, 0.0), 90.0)
"""Left ``gripper_link`` orientation at the meeting point: rolled 90 degrees (fingers close in z)."""
LEFT_LEVEL = np.array([1.0, 0.0, 0.0, 0.0])


@dataclass
class Waypoint:
    """An end-effector pose (ACT's point, ``gripper_link`` quaternion) and gripper opening at step ``t``."""

    t: int
    xyz: np.ndarray
    quat: np.ndarray
    gripper: float


def interpolate(path: list[Waypoint], t: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The pose and opening at step ``t``: linear between waypoints (quaternions normalised), held after."""
    if t >= path[-1].t:
        return path[-1].xyz, path[-1].quat, path[-1].gripper
    after = next(i for i, w in enumerate(path) if w.t > t)
    a, b = path[max(after - 1, 0)], path[after]
    s = float(np.clip((t - a.t) / max(b.t - a.t, 1), 0.0, 1.0))
    qb = b.quat if np.dot(a.quat, b.quat) >= 0 else -b.quat
    quat = (1 - s) * a.quat + s * qb
    return (1 - s) * a.xyz + s * b.xyz, quat / np.linalg.norm(quat), (1 - s) * a.gripper + s * b.gripper


@dataclass
class AlohaTransferExpertConfig(ExpertConfig):
    """``aloha_transfer_expert``; its noise is in radians of joint target (and of gripper opening)."""

    type: str = "aloha_transfer_expert"
    noise_std: float = 0.01


class ArmIK:
    """Damped-least-squares inverse kinematics of ACT's end-effector pose on the env's MuJoCo model.

    Kinematics only (``mj_kinematics``, ``mj_comPos``, ``mj_jac``) on a private ``MjData``, so the
    env's physics is never touched. Each arm is solved alone: its six joints, the other arm's fixed.

    Args:
        damping: the least-squares damping (keeps steps bounded near singular poses).
        iterations: most Gauss-Newton steps per solve.
        tolerance: largest error (m, rad) at which a solve stops early.
    """

    def __init__(self, damping: float = 0.02, iterations: int = 30, tolerance: float = 1e-4) -> None:
        from gym_aloha.constants import ASSETS_DIR  # imported on use, as the env imports it

        self.model = mujoco.MjModel.from_xml_path(str(ASSETS_DIR / "bimanual_viperx_transfer_cube.xml"))
        self.data = mujoco.MjData(self.model)
        self.damping, self.iterations, self.tolerance = damping, iterations, tolerance
        self._jacp, self._jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))

    def pose(self, arm: str, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Forward kinematics: ACT's end-effector point and ``gripper_link``'s quaternion at joints ``q``."""
        self.data.qpos[QPOS[arm]] = q
        mujoco.mj_kinematics(self.model, self.data)
        body = self.model.body(f"vx300s_{arm}/gripper_link").id
        point = self.data.xpos[body] + self.data.xmat[body].reshape(3, 3) @ TCP_OFFSET
        return point, self.data.xquat[body].copy()

    def solve(self, arm: str, xyz: np.ndarray, quat: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Joints (6) putting ``arm``'s end effector at ``xyz``, ``quat``, iterating from ``q``."""
        joints = QPOS[arm]
        low, high = self.model.jnt_range[joints].T
        body = self.model.body(f"vx300s_{arm}/gripper_link").id
        q = np.array(q, dtype=np.float64)
        for _ in range(self.iterations):
            point, current = self.pose(arm, q)
            turn, rot = np.zeros(4), np.zeros(3)
            conj = current * np.array([1.0, -1.0, -1.0, -1.0])
            mujoco.mju_mulQuat(turn, quat, conj)
            turn *= np.sign(turn[0]) or 1.0  # the short way round
            mujoco.mju_quat2Vel(rot, turn, 1.0)
            error = np.concatenate([xyz - point, rot])
            if np.abs(error).max() < self.tolerance:
                break
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jac(self.model, self.data, self._jacp, self._jacr, point, body)
            jac = np.vstack([self._jacp[:, joints], self._jacr[:, joints]])
            step = jac.T @ np.linalg.solve(jac @ jac.T + self.damping**2 * np.eye(6), error)
            q = np.clip(q + step, low, high)
        return q


class AlohaTransferCubeExpert(ScriptedExpert):
    """ACT's scripted cube transfer on ``omnigym/ext-aloha-TransferCube-v0`` (module docstring).

    Stateful: each batch row keeps its episode's step count, plan and last joint solutions, so
    :meth:`reset` must be called where episodes start (``omnigym eval`` and ``collect`` do); a row
    seen for the first time plans from the observation it is given.
    """

    name: ClassVar[str] = "aloha_transfer_expert"
    config_class: ClassVar[type[PolicyConfig]] = AlohaTransferExpertConfig
    state_dim: ClassVar[int] = STATE_DIM
    action_dim: ClassVar[int] = 14

    def __init__(
        self, config: ExpertConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        assert isinstance(action_space, spaces.Box)
        self._low, self._high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
        self.ik = ArmIK()
        self._rows: list[dict[str, Any] | None] = []

    def reset(self, done_mask: torch.Tensor | None = None) -> None:
        """Forget the episodes in progress (of the rows where ``done_mask``; all when None)."""
        if done_mask is None:
            self._rows = []
            return
        for i in torch.as_tensor(done_mask).nonzero().flatten().tolist():
            if i < len(self._rows):
                self._rows[i] = None

    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """Joint targets for a batch, with ``noise_std`` (rad) of noise unless ``deterministic``."""
        state = obs[self.state_key].detach().cpu().numpy().astype(np.float64)
        action = self.actions(state)
        if not deterministic and self.config.noise_std > 0:
            action = action + self.config.noise_std * torch.randn(action.shape).numpy()
        action = np.clip(action, self._low, self._high)
        batch = len(state)
        return PolicyStep(
            action=torch.from_numpy(action).float(),
            logprob=torch.zeros(batch, 1),
            mask=torch.ones(batch, 1, dtype=torch.bool),
        )

    def actions(self, state: np.ndarray) -> np.ndarray:
        """Noise-free joint targets (14) for states ``[B, state_dim]``, advancing each row's clock a step.

        A row whose state equals the one it was last given gets the same targets again and its clock
        stays: acting twice on one observation is one step (the Policy contract). While the script
        runs, the arms move every step, so consecutive observations differ.
        """
        while len(self._rows) < len(state):
            self._rows.append(None)
        out = np.zeros((len(state), 14))
        for i, row in enumerate(state):
            memory = self._rows[i]
            if memory is None:
                memory = self._rows[i] = self._plan(row)
            elif np.array_equal(row, memory["state"]):
                out[i] = memory["action"]
                continue
            out[i] = memory["action"] = self._step(memory)
            memory["state"] = row.copy()
            memory["t"] += 1
        return out

    def _plan(self, state: np.ndarray) -> dict[str, Any]:
        """ACT's waypoints for both arms from an episode's first ``state``, and the arms' joints."""
        joints = {"left": state[0:6].copy(), "right": state[7:13].copy()}
        (l_xyz, l_quat), (r_xyz, r_quat) = (self.ik.pose(arm, joints[arm]) for arm in ("left", "right"))
        cube = state[CUBE].copy()
        right = [
            Waypoint(0, r_xyz.copy(), r_quat.copy(), 0.0),  # start (gripper closed, as ACT's)
            Waypoint(90, _at(cube, 0, 0, 0.08), PICK, 1.0),  # above the cube, open
            Waypoint(130, _at(cube, 0, 0, -0.015), PICK, 1.0),  # down
            Waypoint(170, _at(cube, 0, 0, -0.015), PICK, 0.0),  # close
            Waypoint(200, _at(MEET, 0.05, 0, 0), PICK, 0.0),  # towards the meeting point
            Waypoint(220, MEET, PICK, 0.0),  # at the meeting point
            Waypoint(310, MEET, PICK, 1.0),  # open
            Waypoint(360, _at(MEET, 0.1, 0, 0), PICK, 1.0),  # away to the right
            Waypoint(400, _at(MEET, 0.1, 0, 0), PICK, 1.0),
        ]
        left = [
            Waypoint(0, l_xyz.copy(), l_quat.copy(), 0.0),
            Waypoint(100, _at(MEET, -0.1, 0, -0.02), LEFT_MEET, 1.0),  # beside the meeting point
            Waypoint(260, _at(MEET, 0.02, 0, -0.02), LEFT_MEET, 1.0),  # onto the cube
            Waypoint(310, _at(MEET, 0.02, 0, -0.02), LEFT_MEET, 0.0),  # close
            Waypoint(360, _at(MEET, -0.1, 0, -0.02), LEFT_LEVEL, 0.0),  # away to the left
            Waypoint(400, _at(MEET, -0.1, 0, -0.02), LEFT_LEVEL, 0.0),
        ]
        return {"t": 0, "left": left, "right": right, "q": joints, "state": None, "action": None}

    def _step(self, memory: dict[str, Any]) -> np.ndarray:
        """This step's 14 joint targets: each arm's interpolated pose solved for joints, and the grippers."""
        action = np.zeros(14)
        for arm, base in (("left", 0), ("right", 7)):
            xyz, quat, gripper = interpolate(memory[arm], memory["t"])
            memory["q"][arm] = self.ik.solve(arm, xyz, quat, memory["q"][arm])
            action[base : base + 6] = memory["q"][arm]
            action[base + 6] = gripper
        return action


INSERTION_STATE_DIM, PEG, SOCKET = 42, slice(28, 31), slice(35, 38)
"""The Insertion ``state`` length and the peg's and socket's positions in it (each pose is 7 values)."""
INSERTION_MEET = np.array([0.0, 0.5, 0.15])
"""ACT's meeting point for the insertion (m)."""
LIFT_RIGHT = 0.00715
"""ACT's height of the right (peg) hand above the left (socket) one at the meeting point (m)."""
INSERT = 0.04
"""How far each hand ends from the meeting point in x (m). ACT's 0.05 leaves the peg's tip just level
with the pin's end (the peg, 12 cm long, is held at its centre; the pin sits 1 cm inside the 12 cm
socket) and reached the pin in 15 of seeds 0-29 here; 1 cm closer, every seed of 0-99 succeeds."""
LEFT_PICK = _axis_quat((0.0, 1.0, 0.0), 60.0)
"""Left ``gripper_link`` orientation for the pick: pitched 60 degrees down (ACT's left pick quaternion)."""


@dataclass
class AlohaInsertionExpertConfig(AlohaTransferExpertConfig):
    """``aloha_insertion_expert``; its noise is in radians of joint target (and of gripper opening)."""

    type: str = "aloha_insertion_expert"


class AlohaInsertionExpert(AlohaTransferCubeExpert):
    """ACT's scripted insertion (``InsertionPolicy``) on ``omnigym/ext-aloha-Insertion-v0``.

    The left gripper picks the socket and the right the peg (both pitched 60 degrees down, above,
    down, close), both lift towards a meeting point at (0, 0.5, 0.15), 10 cm either side of it,
    then close in, pushing the peg into the socket onto its pin. ACT's waypoints and timings
    (but for :data:`INSERT`), solved for joints as :class:`AlohaTransferCubeExpert` does.
    """

    name: ClassVar[str] = "aloha_insertion_expert"
    config_class: ClassVar[type[PolicyConfig]] = AlohaInsertionExpertConfig
    state_dim: ClassVar[int] = INSERTION_STATE_DIM

    def _plan(self, state: np.ndarray) -> dict[str, Any]:
        """ACT's insertion waypoints from an episode's first ``state``, and the arms' joints."""
        joints = {"left": state[0:6].copy(), "right": state[7:13].copy()}
        (l_xyz, l_quat), (r_xyz, r_quat) = (self.ik.pose(arm, joints[arm]) for arm in ("left", "right"))
        peg, socket, meet = state[PEG].copy(), state[SOCKET].copy(), INSERTION_MEET
        left = [
            Waypoint(0, l_xyz.copy(), l_quat.copy(), 0.0),  # start
            Waypoint(120, _at(socket, 0, 0, 0.08), LEFT_PICK, 1.0),  # above the socket, open
            Waypoint(170, _at(socket, 0, 0, -0.03), LEFT_PICK, 1.0),  # down
            Waypoint(220, _at(socket, 0, 0, -0.03), LEFT_PICK, 0.0),  # close
            Waypoint(285, _at(meet, -0.1, 0, 0), LEFT_PICK, 0.0),  # towards the meeting point
            Waypoint(340, _at(meet, -INSERT, 0, 0), LEFT_PICK, 0.0),  # insertion
            Waypoint(400, _at(meet, -INSERT, 0, 0), LEFT_PICK, 0.0),  # stay
        ]
        right = [
            Waypoint(0, r_xyz.copy(), r_quat.copy(), 0.0),
            Waypoint(120, _at(peg, 0, 0, 0.08), PICK, 1.0),  # above the peg, open
            Waypoint(170, _at(peg, 0, 0, -0.03), PICK, 1.0),  # down
            Waypoint(220, _at(peg, 0, 0, -0.03), PICK, 0.0),  # close
            Waypoint(285, _at(meet, 0.1, 0, LIFT_RIGHT), PICK, 0.0),  # towards the meeting point
            Waypoint(340, _at(meet, INSERT, 0, LIFT_RIGHT), PICK, 0.0),  # insertion
            Waypoint(400, _at(meet, INSERT, 0, LIFT_RIGHT), PICK, 0.0),  # stay
        ]
        return {"t": 0, "left": left, "right": right, "q": joints, "state": None, "action": None}
