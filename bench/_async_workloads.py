"""The pieces of ``bench/async_vs_sync.py``'s workloads: a GUI task, envs on threads, VLM replies.

* :class:`ClickSlots`: ``omnigym/GUI-ClickButton-v0`` (click the instructed button among 2-6
  scattered ones; a wrong click fails, 5 steps) read into a vector (per button slot: present,
  position, width, whether its label is the instructed one) with one discrete action per slot
  (``click(x, y)`` at its centre). No pixels: the comparison is about the runtimes.
* :class:`ThreadVectorEnv`: ``N`` envs stepped on ``N`` threads, so their latencies overlap (what a
  careful user does for envs that wait).
* :class:`ReplyLengths`: a ``transformers`` logits processor that ends each generated reply at a
  length drawn from a long-tailed distribution (EOS forced there, never earlier), so a tiny random
  model's replies vary as a real agent's do (4 tokens or 200).

A module of its own so that the bench script stays readable; worker processes import it from
``bench/`` (on their ``sys.path``), and the bench registers it to travel by value to Ray actors.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

ENV_ID = "omnigym_bench/GUIClickSlots-v0"
SLOTS = 6
"""ClickButton shows 2-6 buttons."""
BUTTON = re.compile(r'^\[\d+\] button "(?P<label>[^"]*)" \((?P<x>\d+), (?P<y>\d+), (?P<w>\d+), (?P<h>\d+)\)$')
TARGET = re.compile(r'Click the button "(?P<label>[^"]*)"')


class ClickSlots(gym.Wrapper):
    """ClickButton as a vector observation and ``Discrete(6)`` slot actions (see the module docstring).

    Observation ``state`` [6 * 5]: per slot ``present, x / W, y / H, w / W, is_target``, slots in
    the accessibility tree's order. Action ``i``: click the centre of slot ``i`` (a missing slot's
    click lands on the empty window: no effect, reward 0).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.width, self.height = env.unwrapped.config.width, env.unwrapped.config.height
        self.observation_space = spaces.Dict({"state": spaces.Box(-1.0, 2.0, (SLOTS * 5,), np.float32)})
        self.action_space = spaces.Discrete(SLOTS)
        self._centres: list[tuple[int, int]] = []

    def reset(self, **kwargs: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the GUI env and read its text."""
        obs, info = self.env.reset(**kwargs)
        return self._read(obs["text"]), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Click the slot's centre."""
        slot = int(action)
        x, y = self._centres[slot] if slot < len(self._centres) else (1, 1)
        obs, reward, terminated, truncated, info = self.env.step(f"click({x}, {y})")
        return self._read(obs["text"]), float(reward), terminated, truncated, info

    def _read(self, text: str) -> dict[str, np.ndarray]:
        target = TARGET.search(text)
        buttons = [m for m in (BUTTON.match(line.strip()) for line in text.splitlines()) if m]
        state = np.zeros((SLOTS, 5), np.float32)
        self._centres = []
        for i, b in enumerate(buttons[:SLOTS]):
            x, y, w, h = (int(b[k]) for k in "xywh")
            self._centres.append((x + w // 2, y + h // 2))
            is_target = float(target is not None and b["label"] == target["label"])
            state[i] = (1.0, x / self.width, y / self.height, w / self.width, is_target)
        return {"state": state.reshape(-1)}


def make_click_slots(**kwargs: Any) -> gym.Env:
    """The adapted ClickButton env; ``kwargs`` go to the GUI env (``latency``, ...)."""
    import omnigym.envs  # noqa: F401  (registers the GUI ids)

    return ClickSlots(gym.make("omnigym/GUI-ClickButton-v0", obs_keys=["text"], **kwargs))


class ThreadVectorEnv(gym.vector.VectorEnv):
    """``N`` envs stepped on ``N`` threads (same-step autoreset).

    The latencies overlap, as in an ``AsyncVectorEnv``, without processes: for envs whose steps
    wait (sleep, I/O) and so release the GIL.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}  # noqa: RUF012

    def __init__(self, envs: list[gym.Env]) -> None:
        self.envs = envs
        self.num_envs = len(envs)
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._pool = ThreadPoolExecutor(self.num_envs, thread_name_prefix="bench-vec-env")

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env (sub-env ``i`` with ``seed + i``)."""
        seeds = (
            seed
            if isinstance(seed, list)
            else [None if seed is None else seed + i for i in range(self.num_envs)]
        )
        results = list(self._pool.map(lambda e, s: e.reset(seed=s), self.envs, seeds))
        infos: dict[str, Any] = {}
        for i, (_, info) in enumerate(results):
            infos = self._add_info(infos, info, i)
        return self._batch([obs for obs, _ in results]), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env on its thread; finished ones reset in the same step."""
        results = list(self._pool.map(self._step_one, self.envs, list(actions)))
        infos: dict[str, Any] = {}
        for i, (_, _, _, _, info, final) in enumerate(results):
            if final is not None:
                infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
            infos = self._add_info(infos, info, i)
        return (
            self._batch([r[0] for r in results]),
            np.array([r[1] for r in results], np.float64),
            np.array([r[2] for r in results], bool),
            np.array([r[3] for r in results], bool),
            infos,
        )

    @staticmethod
    def _step_one(env: gym.Env, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any], Any]:
        obs, reward, terminated, truncated, info = env.step(action)
        final = None
        if terminated or truncated:
            final = (obs, info)
            obs, info = env.reset()
        return obs, reward, terminated, truncated, info, final

    def _batch(self, observations: list[Any]) -> Any:
        out = create_empty_array(self.single_observation_space, self.num_envs)
        return concatenate(self.single_observation_space, observations, out)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the envs and the threads."""
        for env in self.envs:
            env.close()
        self._pool.shutdown()


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make_click_slots)


class ReplyLengths:
    """Ends reply ``i`` of each generated batch after a drawn number of tokens (a logits processor).

    Lengths are log-normal: ``round(median * exp(sigma * z))``, clipped to ``[1, max_tokens]``,
    drawn per row when a new generation starts (the input is shorter than at the last call). Before
    its length a row cannot end (EOS masked); at it, EOS is the only choice.

    Args:
        eos_token_id: the model's end-of-reply token.
        median: median length in tokens.
        sigma: log-space deviation.
        max_tokens: the cap (the policy's ``max_new_tokens``).
        seed: the draws' generator.
    """

    def __init__(
        self, eos_token_id: int, median: float, sigma: float, max_tokens: int, seed: int = 0
    ) -> None:
        self.eos, self.median, self.sigma, self.max_tokens = eos_token_id, median, sigma, max_tokens
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._owner = (os.getpid(), threading.get_ident())
        self._start = 0
        self._last = -1
        self._lengths = torch.zeros(0, dtype=torch.long)

    def draw(self, count: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """``count`` reply lengths (from ``rng``, else this processor's own generator)."""
        lengths = np.round(self.median * np.exp(self.sigma * (rng or self.rng).standard_normal(count)))
        return np.clip(lengths, 1, self.max_tokens).astype(np.int64)

    def expected_max(self, n: int, draws: int = 20_000) -> float:
        """The expected longest of ``n`` replies generated together (a Monte Carlo estimate)."""
        sample = self.draw(draws * n, np.random.default_rng(12345)).reshape(draws, n)
        return float(sample.max(axis=1).mean())

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Mask EOS before each row's length; force it at the length."""
        owner = (os.getpid(), threading.get_ident())
        if owner != self._owner:  # a worker's copy (thread or process): lengths of its own
            self._owner, self.rng = owner, np.random.default_rng((self.seed, *owner))
        length = input_ids.shape[1]
        if length <= self._last or len(self._lengths) != len(input_ids):  # a new generation
            self._start = length
            self._lengths = torch.from_numpy(self.draw(len(input_ids)))
        self._last = length
        generated = length - self._start  # tokens so far; this call picks token number generated + 1
        ending = self._lengths <= generated + 1
        scores = scores.clone()
        scores[~ending, self.eos] = -torch.inf
        forced = torch.full_like(scores[ending], -torch.inf)
        forced[:, self.eos] = 0.0
        scores[ending] = forced
        return scores


VLM_ENV_ID = "omnigym/GUI-ClickButton-v0"
_TINY_MODEL: list[Path] = []


def reply_lengths(setting: dict[str, Any], eos: int) -> ReplyLengths:
    """The VLM setting's reply-length processor."""
    return ReplyLengths(eos, setting["reply_median"], setting["reply_sigma"], setting["max_new_tokens"])


def tiny_model() -> Path:
    """A tiny random Qwen2 language model, built once per run (offline, from a config)."""
    if not _TINY_MODEL:
        from omnigym.policies.vlm.tiny import make_tiny

        _TINY_MODEL.append(make_tiny("qwen2", Path(tempfile.mkdtemp(prefix="omnigym-bench-tiny-lm-"))))
    return _TINY_MODEL[0]


def latency_option(setting: dict[str, Any]) -> Any:
    """The env's ``latency`` option of a setting (a list for a range, a dict for a distribution)."""
    latency = setting["latency"]
    if isinstance(latency, dict):
        return dict(latency)
    return list(latency) if isinstance(latency, (tuple, list)) else float(latency)


def overlap_bound(setting: dict[str, Any], local: dict[str, Any]) -> float:
    """The best async/sync ratio the setting allows: ``(C + U) / max(C_async, U)``.

    ``C`` and ``U`` are the local loop's collect and update time. ``C_async`` is ``C`` less the
    latency a worker's batch of ``n = N / K`` envs no longer waits for: each step of the local loop
    waits for the slowest of ``N`` latencies, a worker's for the slowest of ``n``.
    """
    from omnigym.envs.latency import LatencyModel

    n_all, n_worker = setting["num_envs"], setting["num_envs"] // setting["num_workers"]
    collect, update = local["collect_s"], local["update_s"]
    if setting.get("kind") == "vlm":  # a batch generates until its longest reply ends
        lengths = reply_lengths(setting, eos=0)
        collect_async = collect * lengths.expected_max(n_worker) / lengths.expected_max(n_all)
    else:
        model = LatencyModel.parse(latency_option(setting))
        steps = local["samples"] / n_all
        collect_async = collect - steps * (model.expected_max(n_all) - model.expected_max(n_worker))
    return (collect + update) / max(collect_async, update, 1e-9)
