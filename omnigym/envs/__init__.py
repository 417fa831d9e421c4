"""Where agents act. Every omnigym env is a Gymnasium env registered as ``omnigym/Name-vN``.

Registration uses string entry points, so importing this package imports no env family.
"""

from __future__ import annotations

import gymnasium as gym

from omnigym.envs.ext_ids import ext_envs
from omnigym.envs.miniwob_ids import register_miniwob_ids

# (id, entry point, kwargs for gym.register). Env families add their lines here.
_DRIVING = "omnigym.envs.driving.env:DrivingEnv"
_DRIVING_VECTOR = "omnigym.envs.driving.env:DrivingVectorEnv"
_GUI = "omnigym.envs.gui.env:GUIEnv"
_GYM_PUSHT = "omnigym.envs.manipulation.gym_pusht:GymPushTEnv"
_GAMES = "omnigym.envs.games"
ATARI_100K_GAMES = (
    "Alien", "Amidar", "Assault", "Asterix", "BankHeist", "BattleZone", "Boxing", "Breakout",
    "ChopperCommand", "CrazyClimber", "DemonAttack", "Freeway", "Frostbite", "Gopher", "Hero",
    "Jamesbond", "Kangaroo", "Krull", "KungFuMaster", "MsPacman", "Pong", "PrivateEye", "Qbert",
    "RoadRunner", "Seaquest", "UpNDown",
)  # fmt: skip
"""The 26 games of the Atari 100k benchmark, registered as ``omnigym/Atari-<Game>-v0``."""
ATARI_MAX_EPISODE_STEPS = 27_000
"""108,000 frames at frame skip 4: the usual cap on an Atari episode."""


def _driving(**kwargs: object) -> dict:
    return {"kwargs": kwargs, "vector_entry_point": _DRIVING_VECTOR}


def _manipulation(name: str, entry: str, max_episode_steps: int) -> list[tuple[str, str, dict]]:
    """``omnigym/<name>-v0`` (state) and ``omnigym/<name>Pixels-v0`` (image, state, text).

    Both have the batched ``vector.<name>VectorEnv`` as their ``vector_entry_point``.
    """
    entry_point = f"omnigym.envs.manipulation.{entry}"
    common = {
        "max_episode_steps": max_episode_steps,
        "vector_entry_point": f"omnigym.envs.manipulation.vector:{name}VectorEnv",
    }
    pixels = {"obs_keys": ("image", "state", "text")}
    return [
        (f"omnigym/{name}-v0", entry_point, common),
        (f"omnigym/{name}Pixels-v0", entry_point, {**common, "kwargs": pixels}),
    ]


def _gui(family: str, max_episode_steps: int) -> tuple[str, str, dict]:
    """``omnigym/GUI-<family>-v0``: one synthetic GUI task family (text actions)."""
    kwargs = {"task": family}
    return (f"omnigym/GUI-{family}-v0", _GUI, {"kwargs": kwargs, "max_episode_steps": max_episode_steps})


def _game(name: str, entry: str, max_episode_steps: int) -> tuple[str, str, dict]:
    """``omnigym/<name>-v0``: one game (docs/envs/games.md)."""
    return (f"omnigym/{name}-v0", f"{_GAMES}.{entry}", {"max_episode_steps": max_episode_steps})


def _atari(game: str) -> tuple[str, str, dict]:
    """``omnigym/Atari-<game>-v0``: an ALE game under the standard preprocessing (ale-py)."""
    kwargs = {"kwargs": {"game": game}, "max_episode_steps": ATARI_MAX_EPISODE_STEPS}
    return (f"omnigym/Atari-{game}-v0", f"{_GAMES}.atari:AtariEnv", kwargs)


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
    # MuJoCo manipulation tasks (docs/envs/manipulation.md): state only / camera image + state + text
    *_manipulation("PushT", "pusht:PushTEnv", max_episode_steps=300),
    *_manipulation("Reach", "reach:ReachEnv", max_episode_steps=50),
    *_manipulation("PushCube", "cube:PushCubeEnv", max_episode_steps=100),
    *_manipulation("PickPlace", "cube:PickPlaceEnv", max_episode_steps=150),
    *_manipulation("PushCubeTwoStage", "two_stage:PushCubeTwoStageEnv", max_episode_steps=150),
    # LeRobot's gym-pusht (pymunk) under omnigym's conventions (docs/envs/manipulation-adapters.md)
    ("omnigym/GymPushT-v0", _GYM_PUSHT, {"max_episode_steps": 300}),
    ("omnigym/GymPushTPixels-v0", _GYM_PUSHT, {"max_episode_steps": 300, "kwargs": {"obs_type": "pixels"}}),
    (
        "omnigym/GymPushTKeypoints-v0",
        _GYM_PUSHT,
        {"max_episode_steps": 300, "kwargs": {"obs_type": "keypoints"}},
    ),
    # batched torch reach in Isaac Lab's conventions (docs/envs/manipulation-adapters.md):
    # vectorization `vector` gives the torch env that stays on its device, `sync` NumPy copies
    (
        "omnigym/TorchReach-v0",
        "omnigym.envs.manipulation.torch_reach:TorchReachEnv",
        {"vector_entry_point": "omnigym.envs.manipulation.torch_reach:make_torch_reach_vec_env"},
    ),
    # synthetic GUI tasks (docs/envs/gui.md): screenshot + instruction/accessibility tree, text actions;
    # the step limits are the families' Task.max_steps
    _gui("ClickButton", max_episode_steps=5),
    _gui("ClickCheckboxes", max_episode_steps=12),
    _gui("EnterText", max_episode_steps=10),
    _gui("LoginUser", max_episode_steps=15),
    _gui("SelectOption", max_episode_steps=8),
    _gui("UseSlider", max_episode_steps=10),
    _gui("CloseDialog", max_episode_steps=6),
    _gui("FillForm", max_episode_steps=20),
    _gui("SearchAndClick", max_episode_steps=10),
    _gui("NavigateTabs", max_episode_steps=6),
    _gui("DragItem", max_episode_steps=6),
    _gui("MultiWindow", max_episode_steps=15),
    # games (docs/envs/games.md): image + text observations, discrete or text actions
    _game("Sokoban", "sokoban:SokobanEnv", max_episode_steps=100),
    _game("Maze", "maze:MazeEnv", max_episode_steps=100),
    _game("FrozenLake", "frozenlake:FrozenLakeEnv", max_episode_steps=100),
    _game("NumberLine", "cards:NumberLineEnv", max_episode_steps=20),
    _game("EZPoints", "cards:EZPointsEnv", max_episode_steps=50),
    _game("Points24", "cards:Points24Env", max_episode_steps=50),
    _game("Blackjack", "blackjack:BlackjackEnv", max_episode_steps=20),
    *(_atari(game) for game in ATARI_100K_GAMES),
]
# peer suites (docs/envs/peer-adapters.md): ManiSkill3, BrowserGym MiniWoB, gym-aloha, where installed
_OMNIGYM_ENVS += ext_envs()


ACTION_SPACE_VARIANTS: dict[str, tuple[str, ...]] = {
    **{env_id: ("text",) for env_id, entry, _ in _OMNIGYM_ENVS if entry.startswith(_GAMES)},
    **{env_id: ("structured",) for env_id, entry, _ in _OMNIGYM_ENVS if entry == _GUI},
    **dict.fromkeys(
        ("omnigym/DrivingPlan-v0", "omnigym/DrivingPlanReactive-v0", "omnigym/DrivingVLM-v0"), ("text",)
    ),
    **dict.fromkeys(
        (
            f"omnigym/{task}{kind}-v0"
            for task in ("Reach", "PushCube", "PickPlace", "PushCubeTwoStage")
            for kind in ("", "Pixels")
        ),
        ("text",),
    ),
}
"""Each env id's other values of its ``action_space`` keyword argument (games: ``discrete`` by
default, ``text``; GUI: ``text``, ``structured``; driving plan envs and the tabletop manipulation
tasks: ``box``, ``text``). The conformance tests check every env in each of them."""


def register_envs() -> None:
    """Register every omnigym env with Gymnasium's registry (idempotent)."""
    for env_id, entry_point, kwargs in _OMNIGYM_ENVS:
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, **kwargs)
    # real MiniWoB++ tasks in headless Chromium (docs/envs/gui.md): omnigym/MiniWoB-<Task>-v0 for the
    # suite, miniwob/<task>-v1 for every task; kept out of omnigym_env_ids(), as each needs a browser
    register_miniwob_ids()


def omnigym_env_ids() -> list[str]:
    """The ids of all omnigym envs."""
    return [env_id for env_id, _, _ in _OMNIGYM_ENVS]
