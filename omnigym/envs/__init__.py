"""Where agents act. Every omnigym env is a Gymnasium env registered as ``omnigym/Name-vN``.

Registration uses string entry points, so importing this package imports no env family.
"""

from __future__ import annotations

import gymnasium as gym

# (id, entry point, kwargs for gym.register). Env families add their lines here.
_OMNIGYM_ENVS: list[tuple[str, str, dict]] = []


def register_envs() -> None:
    """Register every omnigym env with Gymnasium's registry (idempotent)."""
    for env_id, entry_point, kwargs in _OMNIGYM_ENVS:
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, **kwargs)


def omnigym_env_ids() -> list[str]:
    """The ids of all omnigym envs."""
    return [env_id for env_id, _, _ in _OMNIGYM_ENVS]
