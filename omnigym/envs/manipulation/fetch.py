"""Gymnasium-Robotics (Fetch and the other robotics tasks): a fix for its joint helpers, and task texts.

Gymnasium-Robotics 1.4.2 reads and writes joint states through four helpers in
``gymnasium_robotics.utils.mujoco_utils`` that check the joint type with
``joint_type in (mjtJoint.mjJNT_HINGE, mjtJoint.mjJNT_SLIDE)``. ``joint_type`` comes from
``model.jnt_type``, a NumPy integer; ``in`` compares ``mjJNT_HINGE == numpy.int32(...)`` with the
enum on the left, and recent MuJoCo bindings (pybind11 enums) answer False for a NumPy integer
there. The assertion then fails with a bare ``AssertionError`` when a Fetch env is created. Pinning
MuJoCo 3.x does not help. :func:`patch_joint_helpers` replaces exactly those four helpers with
versions that compare plain ints; everything else in Gymnasium-Robotics is left as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Width of one joint's slice of qpos / qvel, by mjtJoint value (free, ball, slide, hinge).
_QPOS_WIDTH = {0: 7, 1: 4, 2: 1, 3: 1}
_QVEL_WIDTH = {0: 6, 1: 3, 2: 1, 3: 1}

FETCH_INSTRUCTIONS = {
    "FetchReach": "move the gripper to the red target",
    "FetchPush": "push the block to the red target",
    "FetchSlide": "slide the puck to the red target",
    "FetchPickAndPlace": "pick up the block and place it at the red target",
}
"""Default ``text`` observations of the Fetch tasks, by the id's task name."""


def fetch_instruction(env_id: str) -> str | None:
    """The default instruction for a Fetch id (``FetchPush-v4`` -> "push the block ..."), or None."""
    task = env_id.rsplit("/", 1)[-1].split("-")[0].removesuffix("Dense")
    return FETCH_INSTRUCTIONS.get(task)


def _joint(model: Any, name: str, widths: dict[int, int], address: np.ndarray) -> slice:
    """The slice of qpos (or qvel) that joint ``name`` occupies."""
    import mujoco

    joint_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
    if joint_id == -1:
        raise ValueError(f"joint {name!r} is not part of the model")
    start = int(address[joint_id])
    return slice(start, start + widths[int(model.jnt_type[joint_id])])


def _set(target: np.ndarray, where: slice, name: str, value: Any) -> None:
    value = np.asarray(value)
    width = where.stop - where.start
    if width > 1 and value.shape != (width,):
        raise ValueError(f"joint {name!r} takes {width} values, got shape {value.shape}")
    target[where] = value


def get_joint_qpos(model: Any, data: Any, name: str) -> np.ndarray:
    """Joint ``name``'s position (7 values for a free joint, 4 for a ball, else 1)."""
    return data.qpos[_joint(model, name, _QPOS_WIDTH, model.jnt_qposadr)].copy()


def get_joint_qvel(model: Any, data: Any, name: str) -> np.ndarray:
    """Joint ``name``'s velocity (6 values for a free joint, 3 for a ball, else 1)."""
    return data.qvel[_joint(model, name, _QVEL_WIDTH, model.jnt_dofadr)].copy()


def set_joint_qpos(model: Any, data: Any, name: str, value: Any) -> None:
    """Set joint ``name``'s position."""
    _set(data.qpos, _joint(model, name, _QPOS_WIDTH, model.jnt_qposadr), name, value)


def set_joint_qvel(model: Any, data: Any, name: str, value: Any) -> None:
    """Set joint ``name``'s velocity."""
    _set(data.qvel, _joint(model, name, _QVEL_WIDTH, model.jnt_dofadr), name, value)


def joint_helpers_broken() -> bool:
    """Whether Gymnasium-Robotics' joint-type check rejects NumPy joint types with this MuJoCo."""
    import mujoco

    slide = np.int32(int(mujoco.mjtJoint.mjJNT_SLIDE))
    return slide not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)


def patch_joint_helpers() -> bool:
    """Replace Gymnasium-Robotics' four joint helpers when they are broken here (idempotent).

    The envs call them as ``self._utils.set_joint_qpos(...)`` with ``_utils`` the module itself,
    and ``robot_get_obs`` looks them up in the module, so replacing the module attributes is
    enough. Returns whether the helpers are (now) the fixed ones.
    """
    from gymnasium_robotics.utils import mujoco_utils

    if mujoco_utils.set_joint_qpos is set_joint_qpos:
        return True
    if not joint_helpers_broken():
        return False
    mujoco_utils.get_joint_qpos = get_joint_qpos
    mujoco_utils.get_joint_qvel = get_joint_qvel
    mujoco_utils.set_joint_qpos = set_joint_qpos
    mujoco_utils.set_joint_qvel = set_joint_qvel
    return True
