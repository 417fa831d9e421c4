"""Which peer env suites (ManiSkill3, BrowserGym's MiniWoB, LeRobot's gym-aloha) are registered, as what.

Each peer has one module in :mod:`omnigym.envs.ext` with an adapter (a Gymnasium env giving
omnigym's Dict observations, its action conventions and ``info["is_success"]``). Its ids,
``omnigym/ext-<peer>-<Task>-v0``, are registered only when the peer's packages are installed
(:func:`ext_envs` asks :func:`importlib.util.find_spec`, which imports nothing heavy), so
``import omnigym`` stays light and an env whose package is missing is never listed. (Gymnasium
ids allow one ``/``: the namespace is ``omnigym``, ``ext-`` marks the peer suites.)
docs/envs/peer-adapters.md lists what each one does.
"""

from __future__ import annotations

import shutil
from importlib.util import find_spec

_EXT = "omnigym.envs.ext"

MANISKILL_TASKS = {"PickCube": ("PickCube-v1", 50), "PushCube": ("PushCube-v1", 50)}
"""omnigym task name -> (ManiSkill3 id, ManiSkill3's episode limit)."""
MINIWOB_TASKS = {"ClickButton": ("click-button", 10)}
"""omnigym task name -> (BrowserGym's MiniWoB task, step limit)."""
ALOHA_TASKS = {"TransferCube": ("transfer_cube", 400), "Insertion": ("insertion", 400)}
"""omnigym task name -> (gym-aloha task, gym-aloha's 400-step limit)."""


def _installed(*modules: str) -> bool:
    """Whether every top-level module can be imported (found on the path; nothing is imported)."""
    try:
        return all(find_spec(name) is not None for name in modules)
    except (ImportError, ValueError):
        return False


def chromium_path() -> str | None:
    """The Chromium binary on ``PATH`` (Debian's ``chromium``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def ext_envs() -> list[tuple[str, str, dict]]:
    """``(id, entry point, gym.register kwargs)`` of the peer envs whose packages are installed.

    ManiSkill3 needs ``mani_skill`` and ``sapien``; BrowserGym needs ``browsergym`` (with its
    ``miniwob`` tasks), the ``miniwob`` package (the task pages) and a Chromium binary;
    gym-aloha needs ``gym_aloha`` and ``dm_control``.
    """
    envs: list[tuple[str, str, dict]] = []
    if _installed("mani_skill", "sapien", "torch"):
        for name, (task, steps) in MANISKILL_TASKS.items():
            kwargs = {"kwargs": {"task": task}, "max_episode_steps": steps}
            envs.append((f"omnigym/ext-maniskill-{name}-v0", f"{_EXT}.maniskill:ManiSkillEnv", kwargs))
    if (
        _installed("browsergym", "playwright", "miniwob")
        and _installed("browsergym.miniwob")
        and chromium_path()
    ):
        for name, (task, steps) in MINIWOB_TASKS.items():
            kwargs = {"kwargs": {"task": task}, "max_episode_steps": steps}
            envs.append(
                (f"omnigym/ext-browsergym-{name}-v0", f"{_EXT}.browsergym:BrowserGymMiniWoBEnv", kwargs)
            )
    if _installed("gym_aloha", "dm_control"):
        for name, (task, steps) in ALOHA_TASKS.items():
            entry = f"{_EXT}.aloha:AlohaEnv"
            envs.append(
                (
                    f"omnigym/ext-aloha-{name}-v0",
                    entry,
                    {"kwargs": {"task": task}, "max_episode_steps": steps},
                )
            )
            pixels = {"kwargs": {"task": task, "obs_keys": ("image", "state")}, "max_episode_steps": steps}
            envs.append((f"omnigym/ext-aloha-{name}Pixels-v0", entry, pixels))
    return envs


SLOW_EXT_ENV_IDS = frozenset(
    {f"omnigym/ext-browsergym-{name}-v0" for name in MINIWOB_TASKS}
    | {f"omnigym/ext-aloha-{name}Pixels-v0" for name in ALOHA_TASKS}
    | {f"omnigym/ext-maniskill-{name}-v0" for name in MANISKILL_TASKS}
)
"""Peer ids whose conformance checks take a minute or more on a 2-core CPU (a browser relaunched on
every reset; a rendered 480x640 frame every step; a ManiSkill scene rebuilt on every seeded reset):
the conformance suite runs them in the slow tier (``tests/envs/ext/`` checks each adapter's spaces,
seeding and scripted policy in the default run)."""
