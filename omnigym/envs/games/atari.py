"""Atari 2600 games through ale-py under the standard preprocessing (Machado et al., 2018).

``omnigym/Atari-<Game>-v0`` is Gymnasium's own pipeline, used as is:
``gym.make("ALE/<Game>-v5", frameskip=1, ...)`` for the emulator (sticky actions live inside ALE),
then :class:`gymnasium.wrappers.AtariPreprocessing` (no-op starts, frame skip with max-pooling of the
last two frames, resize, greyscale, optional termination on a life loss) and
:class:`gymnasium.wrappers.FrameStackObservation`. This module only reshapes what that pipeline
returns into omnigym's ``Dict`` observation and adds text actions and a text observation:

- ``frames``: uint8 ``[S, S, frame_stack]`` (greyscale) or ``[S, S, 3 * frame_stack]`` (colour,
  frame-major: RGB of the oldest frame first), channels-last as omnigym's CNN policies read image
  keys; the newest frame is the last channel (group);
- ``image``: uint8 ``[image_size, image_size, 3]``, the current RGB screen resized with
  ``cv2.INTER_AREA`` (native ``210x160`` with ``image_size=None``), for VLMs and pixel world models;
- ``text``: ``game: Atari-<Game>``, ``rules: ...``, ``actions: ...`` (as every omnigym game) then
  ``lives: N``, ``score: S`` (the episode's raw score so far) and ``frame: F`` (the episode's
  emulator frame number: the no-op starts make it differ by seed even in games whose screen is
  still static then, as Pong's and Breakout's are for their first frames).

Actions are ``Discrete(n)`` over the game's minimal ALE action set (or the full 18 with
``full_action_space``), or, with ``action_space="text"``, the lower-cased ALE action names
(``noop``, ``fire``, ``up``, ``upright``, ...; ``up right``/``up-right`` also read). A text answer
that does not parse does *not* step the emulator: the previous observation comes back with
``invalid_action_penalty`` and ``info["action_valid"] = False``. It does not advance game time, but
it still counts as a step toward the registered ``TimeLimit`` (27,000 steps).

``info`` always holds ``is_success`` (always ``False``: Atari games have no success flag, only a
score), ``action_valid``, ``action_error``, ``lives``, ``episode_frame_number`` and ``raw_reward``
(the game's reward before ``clip_rewards``).

Seeding: ``reset(seed=s)`` seeds ALE's own generator (sticky actions) and the no-op count through
ale-py's ``reset(seed=...)``, so the same seed and actions give the same frames; ``reset()`` without
a seed carries on from the previous generator state.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

import cv2
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from omnigym.core.text_actions import (
    ACTION_TEXT_CHARSET,
    ACTION_TEXT_MAX_LENGTH,
    ActionParseError,
    WordGrammar,
)
from omnigym.core.types import OBS_IMAGE, OBS_TEXT
from omnigym.envs.games.base import TEXT_CHARSET, TEXT_MAX_LENGTH

try:
    import ale_py
except ImportError as exc:  # pragma: no cover - ale-py is a dependency of omnigym[games]
    raise ImportError("the Atari envs need ale-py: install omnigym[games]") from exc

gym.register_envs(ale_py)

OBS_FRAMES = "frames"
"""The stacked, preprocessed frames: uint8 ``[S, S, C]`` (what Atari CNN agents read)."""
ATARI_OBS_KEYS = (OBS_FRAMES, OBS_IMAGE, OBS_TEXT)
"""The observation keys an Atari env can emit, in the order they appear."""
ATARI_100K_AGENT_STEPS = 100_000
"""The Atari 100k interaction budget (Kaiser et al., 2020): 100k agent steps = 400k frames at
frame skip 4 (about two hours of play), for configs of sample-efficient runs."""

_GENERIC_RULES = "Atari 2600 {game}: play to maximise the game score."
GAME_RULES: dict[str, str] = {
    "Alien": "Run through the ship's corridors destroying alien eggs for points; escape the aliens.",
    "Amidar": "Move along the grid painting its lines and filling boxes for points; avoid the enemies.",
    "Assault": "Move the cannon at the bottom and shoot the alien ships; firing too much overheats it.",
    "Asterix": "Move between lanes collecting potions and objects for points; dodge the lyres.",
    "BankHeist": "Drive through the maze robbing banks for points; avoid the police and watch your fuel.",
    "BattleZone": "Drive a tank, destroy enemy tanks and aircraft for points and dodge their shots.",
    "Boxing": "Box the computer seen from above: each punch that lands scores; 100 is a knockout.",
    "Breakout": "Bounce the ball off the paddle into the bricks for points; a miss costs a life; fire serves",
    "ChopperCommand": "Fly a helicopter guarding the trucks; shoot enemy aircraft and avoid their fire.",
    "CrazyClimber": "Climb the skyscraper, avoiding closing windows and falling objects; climbing scores.",
    "DemonAttack": "Move the cannon along the bottom and shoot the demons attacking from above.",
    "Freeway": "Move the chicken up across ten lanes of traffic; each crossing scores; cars push you back.",
    "Frostbite": "Jump between ice floes to build an igloo, then enter it to score; avoid the creatures.",
    "Gopher": "Protect the carrots: move the farmer, fill the gopher's tunnels and bonk it for points.",
    "Hero": "Fly down mine shafts, shooting creatures and blasting walls, to rescue trapped miners.",
    "Jamesbond": "Drive the agent's car, jump craters and shoot enemies in the air and water.",
    "Kangaroo": "Climb the ladders to the baby kangaroo at the top, punching monkeys and dodging apples.",
    "Krull": "Fight through the stages of Krull: defeat the Slayers and rescue the princess.",
    "KungFuMaster": "Walk through the temple punching and kicking attackers to rescue the captive.",
    "MsPacman": "Eat all the pellets in the maze while escaping the ghosts; power pills make ghosts edible.",
    "Pong": "Move your paddle (right side) to return the ball; right moves it up, left down; 21 wins.",
    "PrivateEye": "Drive and jump through the city as a detective, finding clues and items in time.",
    "Qbert": "Hop around the pyramid turning every cube top to the target colour; avoid the enemies.",
    "RoadRunner": "Run left eating birdseed for points while escaping the coyote and the trucks.",
    "Seaquest": "Pilot the submarine, shoot sharks and subs, rescue divers, surface before oxygen runs out.",
    "UpNDown": "Drive the winding roads, jumping onto other cars to destroy them, and collect flags.",
}
"""One line of rules per Atari 100k game for the ``text`` observation (others get a generic line)."""

_DIRECTION_PARTS = ("UP", "DOWN", "RIGHT", "LEFT", "FIRE")


@dataclass
class AtariConfig:
    """Options of an Atari env (``gym.make`` keyword arguments); defaults follow Machado et al. (2018)."""

    game: str
    """ALE game name as in ``ALE/<Game>-v5`` (case-insensitive: ``"Pong"``, ``"MsPacman"``)."""
    frame_skip: int = 4
    """Emulator frames per agent step (the action repeats; the last two frames are max-pooled)."""
    noop_max: int = 30
    """At reset, play a random number in ``[1, noop_max]`` of no-ops (0 turns it off)."""
    sticky_action_prob: float = 0.25
    """ALE's ``repeat_action_probability``: each frame repeats the previous action with this chance."""
    screen_size: int = 84
    """Side of the square ``frames`` (each frame resized with ``cv2.INTER_AREA``)."""
    grayscale: bool = True
    """Greyscale ``frames`` (1 channel per frame), else RGB (3 per frame)."""
    frame_stack: int = 4
    """How many of the latest frames ``frames`` stacks (oldest first)."""
    terminal_on_life_loss: bool = False
    """"Episodic life": end the episode (``terminated``) when a life is lost. Gymnasium's version:
    the next ``reset()`` restarts the whole game. Not recommended for evaluation (Machado et al.)."""
    full_action_space: bool = False
    """All 18 ALE actions instead of the game's minimal set."""
    clip_rewards: bool = False
    """Reward = sign of the game's reward (DQN's clipping); the raw one is in ``info["raw_reward"]``."""
    obs_keys: tuple[str, ...] = (OBS_FRAMES, OBS_TEXT)
    """Keys to emit: any of ``frames``, ``image`` and ``text``."""
    action_space: str = "discrete"
    """``"discrete"``: ``Discrete(n)``; ``"text"``: a ``Text`` space read as ALE action names."""
    invalid_action_penalty: float = -0.1
    """Reward of a text answer that does not parse (text mode only; the emulator does not step)."""
    image_size: int | None = 84
    """Side of the square ``image`` key; ``None`` keeps the native 210x160 screen."""
    instructions: bool = True
    """Start the ``text`` observation with the rules and the action vocabulary (a prompt)."""

    def __post_init__(self) -> None:
        self.obs_keys = tuple(self.obs_keys)
        for name, low in (("frame_skip", 1), ("noop_max", 0), ("screen_size", 1), ("frame_stack", 1)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {self.sticky_action_prob}")
        if self.image_size is not None and (isinstance(self.image_size, bool) or self.image_size < 1):
            raise ValueError(f"image_size must be None or an integer >= 1, got {self.image_size!r}")
        if self.action_space not in ("discrete", "text"):
            raise ValueError(f"action_space must be 'discrete' or 'text', got {self.action_space!r}")
        if not self.obs_keys or set(self.obs_keys) - set(ATARI_OBS_KEYS):
            raise ValueError(f"obs_keys must be a non-empty subset of {ATARI_OBS_KEYS}, got {self.obs_keys}")
        if not math.isfinite(self.invalid_action_penalty):
            raise ValueError(f"invalid_action_penalty must be finite, got {self.invalid_action_penalty}")
        self.game = resolve_game(self.game)


def ale_games() -> list[str]:
    """The game names ALE registers (``ALE/<Game>-v5``), sorted."""
    return sorted(
        env_id[4:-3] for env_id in gym.registry if env_id.startswith("ALE/") and env_id.endswith("-v5")
    )


def resolve_game(game: str) -> str:
    """The canonical ALE name of ``game`` (``"pong"`` -> ``"Pong"``).

    Raises:
        ValueError: ALE has no such game; the message lists close names and how to list all.
    """
    names = ale_games()
    by_lower = {name.lower(): name for name in names}
    if isinstance(game, str) and game.lower() in by_lower:
        return by_lower[game.lower()]
    close = difflib.get_close_matches(str(game), names, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"unknown Atari game {game!r}.{hint} Valid names are those of ALE's 'ALE/<Game>-v5' ids; "
        "list them with omnigym.envs.games.atari.ale_games()."
    )


def action_grammar(meanings: list[str]) -> WordGrammar:
    """Text actions over ALE action meanings: ``"UPRIGHTFIRE"`` -> ``upright``, also ``up right fire``."""
    words = [meaning.lower() for meaning in meanings]
    aliases = {"no-op": "noop", "no op": "noop"}
    for meaning, word in zip(meanings, words, strict=True):
        parts = _split_meaning(meaning)
        if len(parts) > 1:
            for separator in (" ", "-", "_", "+"):
                aliases[separator.join(parts)] = word
    return WordGrammar(words, aliases=aliases)


def _split_meaning(meaning: str) -> list[str]:
    """``"UPRIGHTFIRE"`` -> ``["up", "right", "fire"]`` (``["noop"]`` stays one part)."""
    parts, rest = [], meaning
    while rest:
        part = next((p for p in _DIRECTION_PARTS if rest.startswith(p)), None)
        if part is None:
            return [meaning.lower()]
        parts.append(part.lower())
        rest = rest[len(part) :]
    return parts


def _format_score(score: float) -> str:
    return str(int(score)) if float(score).is_integer() else f"{score:.2f}"


class AtariEnv(gym.Env[dict[str, Any], Any]):
    """An ALE game under Gymnasium's Atari preprocessing, with omnigym's observation keys.

    Args:
        render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns the native RGB screen).
        **kwargs: :class:`AtariConfig` fields.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}  # noqa: RUF012  (gymnasium's)

    def __init__(self, render_mode: str | None = None, **kwargs: Any) -> None:
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.config = config = AtariConfig(**kwargs)
        self.game = f"Atari-{config.game}"
        self._env = self._make_pipeline(config, render_mode)
        self._ale = self._env.unwrapped.ale  # type: ignore[attr-defined]
        self.grammar = action_grammar(self._env.unwrapped.get_action_meanings())  # type: ignore[attr-defined]
        self._text_actions = config.action_space == "text"
        self.action_space: spaces.Space[Any] = (
            spaces.Text(max_length=ACTION_TEXT_MAX_LENGTH, min_length=0, charset=ACTION_TEXT_CHARSET)
            if self._text_actions
            else spaces.Discrete(self.grammar.num_actions)
        )
        self._emit = tuple(key for key in ATARI_OBS_KEYS if key in config.obs_keys)
        self.observation_space = spaces.Dict({key: self._space(key) for key in self._emit})
        header = [f"game: {self.game}"]
        if config.instructions:
            rules = GAME_RULES.get(config.game, _GENERIC_RULES.format(game=config.game))
            header += [f"rules: {rules}", f"actions: {self.grammar.describe()}"]
        self._text_header = "\n".join(header) + "\n"
        self._score = 0.0
        self._last_obs: dict[str, Any] | None = None

    @staticmethod
    def _make_pipeline(config: AtariConfig, render_mode: str | None) -> gym.Env:
        """ALE with frame skip 1 -> ``AtariPreprocessing`` -> ``FrameStackObservation``."""
        ale = gym.make(
            f"ALE/{config.game}-v5",
            frameskip=1,
            repeat_action_probability=config.sticky_action_prob,
            full_action_space=config.full_action_space,
            render_mode=render_mode,
        )
        preprocessed = AtariPreprocessing(
            ale,
            noop_max=config.noop_max,
            frame_skip=config.frame_skip,
            screen_size=config.screen_size,
            terminal_on_life_loss=config.terminal_on_life_loss,
            grayscale_obs=config.grayscale,
        )
        return FrameStackObservation(preprocessed, config.frame_stack)

    def _space(self, key: str) -> spaces.Space:
        config = self.config
        if key == OBS_FRAMES:
            channels = config.frame_stack * (1 if config.grayscale else 3)
            return spaces.Box(0, 255, (config.screen_size, config.screen_size, channels), np.uint8)
        if key == OBS_IMAGE:
            side = config.image_size
            return spaces.Box(0, 255, (210, 160, 3) if side is None else (side, side, 3), np.uint8)
        return spaces.Text(max_length=TEXT_MAX_LENGTH, min_length=1, charset=TEXT_CHARSET)

    # --- the Gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start a game: ALE reset (seeded when ``seed`` is given), then the random no-ops."""
        super().reset(seed=seed)
        stacked, _ = self._env.reset(seed=seed, options=options)
        self._score = 0.0
        self._last_obs = self._observation(stacked)
        return self._last_obs, self._info(True, "", 0.0)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Play one agent step (``frame_skip`` frames).

        A text answer that does not parse changes nothing and costs ``invalid_action_penalty``;
        an index outside the discrete space raises ``ValueError``.
        """
        if self._last_obs is None:
            raise RuntimeError("call reset() before step()")
        index, error = self._action_index(action)
        if error:
            previous = {
                key: value if key == OBS_TEXT else value.copy() for key, value in self._last_obs.items()
            }
            return (
                previous,
                float(self.config.invalid_action_penalty),
                False,
                False,
                self._info(False, error, 0.0),
            )
        stacked, raw_reward, terminated, truncated, _ = self._env.step(index)
        raw = float(raw_reward)
        self._score += raw
        self._last_obs = self._observation(stacked)
        reward = float(np.sign(raw)) if self.config.clip_rewards else raw
        return self._last_obs, reward, bool(terminated), bool(truncated), self._info(True, "", raw)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """``rgb_array``: the current RGB screen, uint8 ``[210, 160, 3]``."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        return self._ale.getScreenRGB()

    def close(self) -> None:
        """Close the emulator."""
        self._env.close()

    # --- helpers ---------------------------------------------------------------------------------
    def _action_index(self, action: Any) -> tuple[int, str]:
        if self._text_actions:
            try:
                return self.grammar.parse(action)[0], ""
            except ActionParseError as exc:
                return 0, str(exc)
        index = int(np.asarray(action).reshape(()))
        if not 0 <= index < self.grammar.num_actions:
            raise ValueError(f"{self.game}: action {index} is outside Discrete({self.grammar.num_actions})")
        return index, ""

    def _observation(self, stacked: np.ndarray) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        for key in self._emit:
            if key == OBS_FRAMES:
                obs[key] = self._channels_last(stacked)
            elif key == OBS_IMAGE:
                obs[key] = self._image()
            else:
                obs[key] = self.text()
        return obs

    def _channels_last(self, stacked: np.ndarray) -> np.ndarray:
        """``[k, S, S]`` -> ``[S, S, k]``; colour ``[k, S, S, 3]`` -> ``[S, S, 3k]`` (frame-major)."""
        # cv2.merge interleaves the channels with SIMD: ~6x faster than a strided numpy transpose.
        merged = cv2.merge(list(stacked))
        return merged if merged.ndim == 3 else merged[:, :, None]

    def _image(self) -> np.ndarray:
        screen = self._ale.getScreenRGB()
        side = self.config.image_size
        return screen if side is None else cv2.resize(screen, (side, side), interpolation=cv2.INTER_AREA)

    def text(self) -> str:
        """The ``text`` observation: header (game, rules, actions), lives, episode score, frame number."""
        ale = self._ale
        score = _format_score(self._score)
        return (
            f"{self._text_header}lives: {ale.lives()}\nscore: {score}\nframe: {ale.getEpisodeFrameNumber()}"
        )

    def _info(self, valid: bool, error: str, raw_reward: float) -> dict[str, Any]:
        return {
            "is_success": False,
            "action_valid": valid,
            "action_error": error,
            "lives": int(self._ale.lives()),
            "episode_frame_number": int(self._ale.getEpisodeFrameNumber()),
            "raw_reward": raw_reward,
        }

    def action_word(self, index: int) -> str:
        """The text of discrete action ``index`` (``"fire"``, ``"upright"``)."""
        return self.grammar.word(index)
