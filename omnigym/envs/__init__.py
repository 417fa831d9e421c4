"""Where agents act. Every omnigym env is a Gymnasium env registered as ``omnigym/Name-vN``.

Registration uses string entry points, so importing this package imports no env family.
"""

from __future__ import annotations

import gymnasium as gym

# (id, entry point, kwargs for gym.register). Env families add their lines here.
_DRIVING = "omnigym.envs.driving.env:DrivingEnv"
_DRIVING_VECTOR = "omnigym.envs.driving.env:DrivingVectorEnv"


def _driving(**kwargs: object) -> dict:
    return {"kwargs": kwargs, "vector_entry_point": _DRIVING_VECTOR}


_OMNIGYM_ENVS: list[tuple[str, str, dict]] = [
    # driving pseudo-simulator (docs/envs/driving.md): direct control / NAVSIM-style plans
    ("omnigym/Driving-v0", _DRIVING, _driving(action_mode="control")),
    ("omnigym/DrivingPlan-v0", _DRIVING, _driving(action_mode="plan")),
    ("omnigym/DrivingReactive-v0", _DRIVING, _driving(action_mode="control", traffic="idm")),
    ("omnigym/DrivingPlanReactive-v0", _DRIVING, _driving(action_mode="plan", traffic="idm")),
    (
        "omnigym/DrivingVLM-v0",
        _DRIVING,
        _driving(action_mode="plan", obs_keys=("state", "image", "text"), image_size=128),
    ),
]


def register_envs() -> None:
    """Register every omnigym env with Gymnasium's registry (idempotent)."""
    for env_id, entry_point, kwargs in _OMNIGYM_ENVS:
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, **kwargs)


def omnigym_env_ids() -> list[str]:
    """The ids of all omnigym envs."""
    return [env_id for env_id, _, _ in _OMNIGYM_ENVS]
