"""Reach: move the gripper's tool centre point to a goal point in the air.

Success: the TCP within ``success_distance`` (3 cm) of the goal. Reward: minus the distance in
metres (dense) or 1 on success (sparse).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from omnigym.envs.manipulation.base import TaskConfig
from omnigym.envs.manipulation.tabletop import GRIPPER_STATE_DIM, HOME, TabletopConfig, TabletopEnv


class ReachEnv(TabletopEnv):
    """Reach the red sphere; see ``tabletop.py`` for actions and ``docs/envs/manipulation.md``.

    Observation keys: ``state`` (``GRIPPER_STATE_DIM`` values, the tabletop layout), ``image``
    (``front`` camera), ``text``. Info: ``is_success``, ``distance`` (TCP to goal, m).
    """

    config_class: ClassVar[type[TaskConfig]] = TabletopConfig
    xml_file: ClassVar[str] = "tabletop.xml"
    instruction: ClassVar[str] = "Move the gripper to the red sphere."
    state_dim: ClassVar[int] = GRIPPER_STATE_DIM
    object_geoms: ClassVar[tuple[str, ...]] = ("palm", "pad_left", "pad_right")

    def _reset_task(self, rng: np.random.Generator) -> None:
        self._reset_gripper()
        self._reset_goal(rng, HOME)

    def _state(self) -> np.ndarray:
        return np.concatenate(self._gripper_state(), dtype=np.float32)

    def _score(self, state: np.ndarray) -> tuple[bool, float, dict[str, Any]]:
        distance = self._tcp_distance(self.goal)
        return distance < self.config.success_distance, -distance, {"distance": distance}
