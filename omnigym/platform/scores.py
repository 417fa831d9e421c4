"""D4RL normalised scores: a return as a percentage between a random and an expert policy's.

``score = 100 * (return - random) / (expert - random)``, with the reference returns of D4RL's
``-v2`` locomotion datasets (D4RL, Fu et al., 2020; docs/algorithms/offline.md). The references were
measured on Gym's ``-v2`` MuJoCo envs; omnigym's datasets come from Gymnasium's ``-v5`` ones, whose
dynamics and rewards are close but not identical, so scores compare across omnigym runs exactly
and with published D4RL tables only approximately.
"""

from __future__ import annotations

import re

D4RL_REFERENCE_RETURNS: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
}
"""Task -> (random policy's return, expert policy's return)."""


def reference_task(env_id: str) -> str | None:
    """The D4RL task an env id belongs to (``HalfCheetah-v5`` -> ``halfcheetah``), else None."""
    name = re.sub(r"-v\d+$", "", env_id.split("/")[-1]).lower().replace("_", "")
    return name if name in D4RL_REFERENCE_RETURNS else None


def normalized_score(task: str, episode_return: float) -> float:
    """D4RL normalised score of ``episode_return`` on ``task`` (0: random, 100: expert).

    Raises:
        KeyError: a task without reference returns.
    """
    if task not in D4RL_REFERENCE_RETURNS:
        raise KeyError(f"no D4RL reference returns for {task!r}; known: {sorted(D4RL_REFERENCE_RETURNS)}")
    random_return, expert_return = D4RL_REFERENCE_RETURNS[task]
    return 100.0 * (episode_return - random_return) / (expert_return - random_return)
