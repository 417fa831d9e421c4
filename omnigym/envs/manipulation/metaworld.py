"""Meta-World: a fix for its weld setup under MuJoCo >= 3.4, and task texts.

Meta-World 3.1 resets its mocap welds by assigning an 11-value row to ``model.eq_data[i]``. MuJoCo
grew ``eq_data`` to 12 columns (``mjNEQDATA``), so creating any Meta-World env fails with
``ValueError: could not broadcast input array from shape (11,) into shape (12,)``.
:func:`patch_weld_reset` writes the same 11 values into the first 11 columns, which hold the weld
fields (anchor, relative pose, torque scale) in every MuJoCo version.

Meta-World ids take the task as ``env_name``: ``gym.make("Meta-World/MT1", env_name="reach-v3")``.
Two more things keep its envs reproducible under omnigym's rule (deterministic given
``reset(seed=...)``): the benchmark ``seed``, which fixes the task set an env draws goals from, is
0 unless given (:data:`MAKE_DEFAULTS`), and :class:`SeedOnReset` passes ``reset``'s seed to
Meta-World's own ``seed()``, since its ``reset`` ignores the seed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# Meta-World's weld data: anchor (3), relative position (3), relative quaternion (4), torque scale.
_WELD_DATA = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 5.0])


MAKE_DEFAULTS = {"seed": 0}
"""``gym.make`` kwargs of Meta-World ids unless given: the benchmark seed (its task set)."""


def _reset_mocap_welds(self: Any) -> None:
    """Meta-World's ``SawyerMocapBase.reset_mocap_welds``, writing only the weld columns."""
    import mujoco

    model = self.model
    if model.nmocap > 0 and model.eq_data is not None:
        for i in range(model.eq_data.shape[0]):
            if model.eq_type[i] == mujoco.mjtEq.mjEQ_WELD:
                model.eq_data[i, : len(_WELD_DATA)] = _WELD_DATA


def patch_weld_reset() -> bool:
    """Install the fixed weld reset when MuJoCo's ``eq_data`` is wider than Meta-World expects.

    Returns whether the fixed version is (now) installed.
    """
    import mujoco
    from metaworld.sawyer_xyz_env import SawyerMocapBase

    if SawyerMocapBase.reset_mocap_welds is _reset_mocap_welds:
        return True
    if mujoco.mjNEQDATA == len(_WELD_DATA):
        return False
    SawyerMocapBase.reset_mocap_welds = _reset_mocap_welds  # type: ignore[method-assign]
    return True


def metaworld_instruction(env_name: str) -> str:
    """A text instruction from a Meta-World task name: ``"pick-place-v3"`` -> ``"pick place"``."""
    words = [word for word in env_name.split("-") if not (word.startswith("v") and word[1:].isdigit())]
    return " ".join(words)


class SeedOnReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """``reset(seed=s)`` seeds Meta-World's generator (``env.unwrapped.seed(s)``) first.

    Meta-World's ``reset`` ignores its seed, and its task-sampling wrapper draws the next task
    from that generator, so without this a seeded reset depends on the env's history.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Seed Meta-World when ``seed`` is given, then reset."""
        if seed is not None:
            self.env.unwrapped.seed(seed)  # type: ignore[attr-defined]
        return self.env.reset(seed=seed, options=options)
