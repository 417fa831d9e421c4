"""WorldModelEnv: a trained world model as a drop-in Gymnasium env.

:class:`WorldModelVectorEnv` steps ``num_envs`` copies through the model in one batched call
and looks, from outside, like the real env's NumPy vector env: the same single spaces, NumPy
observations ``key -> [N, ...]``, same-step autoreset with ``info["final_obs"]``. Any trainer or
collector that runs on the real env therefore runs on the model (one config line,
``env.backend: world_model``), which is the idea of DIAMOND's ``WorldModelEnv`` and TorchRL's
model-based envs.

Each episode starts from a real observation (``start_states``: a Minari dataset's observations,
live resets of the real env, or an array given directly) and is truncated after ``horizon``
model steps. The reward and the termination come from the model, or from the env's closed-form
functions (:mod:`omnigym.world_models.known`). MOPO's uncertainty-penalised MDP (Yu et al. 2020,
Sec. 4) subtracts ``uncertainty_penalty * uncertainty`` from every reward; ``max_uncertainty``
cuts a row's episode where the model stops trusting itself.

Decisions, and why:

* Box actions are clipped to the space's bounds before the model sees them, as
  :func:`~omnigym.platform.vec_env.to_env_action` does for real envs (Pendulum clips itself,
  MuJoCo clamps controls to their ctrlrange): the model was trained on in-bounds actions only.
  NaN/inf or a wrong shape is a ``ValueError``.
* A row whose uncertainty exceeds ``max_uncertainty`` is *truncated*, not terminated: the real
  MDP has not ended there, only the model's competence has. ``terminated`` would tell a learner
  the state is absorbing with value 0, which on negative-reward tasks (Pendulum) makes uncertain
  regions attractive; truncation bootstraps from the critic, and pessimism stays the penalty's
  job. ``info["uncertainty_truncated"]`` marks these rows.
* As Gymnasium's ``TimeLimit``, a row can be both terminated and truncated at the horizon.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from torch import Tensor

from omnigym.core.types import OBS_STATE, Obs
from omnigym.platform.runtime import resolve_device
from omnigym.platform.vec_env import LIVE, Source, WorldModelEnvConfig, make_env
from omnigym.world_models.base import WorldModel
from omnigym.world_models.known import KnownFn, known_reward, known_termination
from omnigym.world_models.start_states import LiveStartStates, StartStatesArg, load_start_states

_SEED_BOUND = 2**31
_AUTORESET_STREAM = 0x5EED
"""Entropy mixed into the seed of the generator that draws autoreset seeds, so its stream
differs from the reset rows' own (which use the seeds ``seed + i``)."""


def check_spaces(model: WorldModel, real_env: gym.Env, env_id: str) -> None:
    """Raise unless the model was trained on exactly ``real_env``'s spaces.

    Raises:
        ValueError: a space differs; the message shows both.
    """
    for what, ours, theirs in (
        ("observation", model.observation_space, real_env.observation_space),
        ("action", model.action_space, real_env.action_space),
    ):
        if ours != theirs:
            raise ValueError(
                f"the world model was trained on {what} space {ours}, but {env_id} has {theirs}: "
                "train a model on this env (with the same env kwargs)"
            )


def _model_spaces(model: WorldModel) -> tuple[spaces.Dict, spaces.Box | spaces.Discrete]:
    """The model's spaces, if simulable here: ``Box`` observation keys, a ``Box`` or ``Discrete`` action.

    Raises:
        TypeError: other spaces.
    """
    obs_space, action_space = model.observation_space, model.action_space
    if not all(isinstance(s, spaces.Box) for s in obs_space.spaces.values()):
        raise TypeError(f"WorldModelEnv simulates Dict observations of Box keys, got {obs_space}")
    if not isinstance(action_space, (spaces.Box, spaces.Discrete)):
        raise TypeError(f"WorldModelEnv takes Box or Discrete actions, got {action_space}")
    return obs_space, action_space


def _scatter_rows(state: Any, fresh: Any, rows: Tensor) -> Any:
    """``state`` with rows ``rows`` replaced by ``fresh`` (a state of ``len(rows)`` rows).

    A model state is a tensor ``[B, ...]`` or a dict/list/tuple of them; the leaves are copied,
    never written in place (the model may share them with the observations it returned).
    """
    if isinstance(state, Tensor):
        out = state.clone()
        out[rows] = fresh.to(out.dtype)
        return out
    if isinstance(state, Mapping):
        return {k: _scatter_rows(v, fresh[k], rows) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_scatter_rows(s, f, rows) for s, f in zip(state, fresh, strict=True))
    raise TypeError(
        f"cannot reset single rows of a world-model state of type {type(state).__name__}: "
        "a state must be tensors [B, ...], or dicts, lists or tuples of them"
    )


def _obs_to_numpy(obs: Obs, space: spaces.Dict) -> dict[str, np.ndarray]:
    """Tensors ``key -> [N, ...]`` as NumPy arrays of the space's dtypes (fresh copies)."""
    return {k: obs[k].detach().cpu().numpy().astype(sub.dtype) for k, sub in space.spaces.items()}


class WorldModelVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a world model's simulated env, stepped in one batched model call.

    NumPy in and out like a Gymnasium vector env, with same-step autoreset: the step that ends
    a row's episode returns that row's next start state as its observation, and ``info`` holds,
    as Gymnasium 1.x's ``SyncVectorEnv`` does, ``"final_obs"`` (object array ``[N]``: the true
    final observation dict of each finished row, None elsewhere) and ``"final_info"`` (the step's
    info of the finished rows), each with its ``"_key"`` mask, plus ``"episode"`` (``r``, ``l``,
    ``t``) as ``RecordEpisodeStatistics`` reports it. Every step's ``info`` has
    ``"uncertainty"`` (float32 ``[N]``) when ``uncertainty_penalty``, ``max_uncertainty`` or
    ``report_uncertainty`` asks for it (only then is the model asked to compute it: see
    ``WorldModel.step``'s ``with_uncertainty``) and ``"uncertainty_truncated"`` (bool ``[N]``)
    when ``max_uncertainty`` is set; the top-level info is the step's for every row (a model's
    reset has no info to report).

    ``reset(seed=s)`` seeds everything random: row ``i`` starts from seed ``s + i`` (a list of
    seeds gives each row its own), and the model's draws and later autoresets come from
    generators seeded by ``s``; the same seed and actions give identical trajectories.

    Args:
        model: a world model, or the folder of a saved one.
        num_envs: N, rows stepped together.
        start_states: a Minari dataset id, ``"live"`` (resets of the real env ``env_id``), or
            observations ``[M, ...]`` given directly (module docstring).
        env_id: the real env. When given, its spaces must equal the model's, and it supplies
            ``live`` start states, the default horizon and the known functions.
        env_kwargs: ``make_env`` keyword arguments of the real env.
        horizon: steps per episode (truncation); default the real env's time limit.
        reward: ``learned`` (the model's) or ``known`` (``known.py``'s for ``env_id``).
        termination: ``learned`` or ``known``, as ``reward``.
        uncertainty_penalty: MOPO's lambda; needs a model that reports ``uncertainty``.
        max_uncertainty: truncate rows whose step uncertainty exceeds it.
        report_uncertainty: report the uncertainty in ``info`` even when neither setting above
            needs it (costs an ensemble all its members' compute on every step).
        device: where the model runs.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}  # noqa: RUF012  (gymnasium's instance attribute)

    def __init__(
        self,
        model: WorldModel | str | Path,
        num_envs: int = 1,
        *,
        start_states: StartStatesArg = LIVE,
        env_id: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        horizon: int | None = None,
        reward: Source = "learned",
        termination: Source = "learned",
        uncertainty_penalty: float = 0.0,
        max_uncertainty: float | None = None,
        report_uncertainty: bool = False,
        device: str | torch.device = "cpu",
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        WorldModelEnvConfig(
            horizon=horizon, uncertainty_penalty=uncertainty_penalty, max_uncertainty=max_uncertainty
        )  # the same range checks as a config
        self.device = resolve_device(device) if isinstance(device, str) else device
        self.model = _load_model(model, self.device)
        self.num_envs = num_envs
        self.env_id = env_id
        self._space, self._box = _model_spaces(self.model)
        self.single_observation_space, self.single_action_space = self._space, self._box
        self.observation_space = batch_space(self._space, num_envs)
        self.action_space = batch_space(self._box, num_envs)
        self.reward_fn = _known_fn(reward, "reward", env_id, env_kwargs, self._space)
        self.termination_fn = _known_fn(termination, "termination", env_id, env_kwargs, self._space)
        self.uncertainty_penalty = uncertainty_penalty
        self.max_uncertainty = max_uncertainty
        self.report_uncertainty = report_uncertainty
        real_env = _real_env(self.model, env_id, env_kwargs)
        try:
            self.horizon = _horizon(horizon, real_env)
            self.start_states = load_start_states(start_states, self._space, real_env)
        except Exception:
            if real_env is not None:
                real_env.close()
            raise
        if real_env is not None and not isinstance(self.start_states, LiveStartStates):
            real_env.close()  # only needed for its spaces and time limit
        self.render_mode = None
        self._np_rng: np.random.Generator | None = None
        self._torch_rng = torch.Generator(device=self.device)
        self._state: Any = None
        self._obs: Obs = {}
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._starts = np.zeros(num_envs, dtype=np.float64)
        # Discrete actions are range-checked in _checked_action; the clip below then changes nothing.
        box = self._box if isinstance(self._box, spaces.Box) else spaces.Box(0, np.inf, (1,), np.float32)
        self._low = torch.as_tensor(box.low, device=self.device)
        self._high = torch.as_tensor(box.high, device=self.device)

    @classmethod
    def from_config(
        cls,
        config: WorldModelEnvConfig,
        num_envs: int,
        *,
        env_id: str | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        max_episode_steps: int | None = None,
    ) -> WorldModelVectorEnv:
        """The env a config describes (``max_episode_steps``: the horizon when the config sets none)."""
        if not config.model:
            raise ValueError("env.world_model.model: give the folder of a saved world model")
        return cls(
            config.model,
            num_envs,
            start_states=config.start_states,
            env_id=env_id,
            env_kwargs=env_kwargs,
            horizon=config.horizon if config.horizon is not None else max_episode_steps,
            reward=config.reward,
            termination=config.termination,
            uncertainty_penalty=config.uncertainty_penalty,
            max_uncertainty=config.max_uncertainty,
            report_uncertainty=config.report_uncertainty,
            device=config.device,
        )

    # --- the vector env API ---------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start every row from a new start state; ``options`` are accepted and unused."""
        if seed is None and self._np_rng is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0] % _SEED_BOUND)
        if seed is not None:
            row_seeds = self._seed(seed)
        else:
            assert self._np_rng is not None
            row_seeds = self._np_rng.integers(_SEED_BOUND, size=self.num_envs).tolist()
        self._obs = self._to_torch(self.start_states.draw(row_seeds))
        with torch.no_grad():
            self._state = self.model.reset(self._obs)
        self._elapsed[:], self._returns[:], self._starts[:] = 0, 0.0, time.perf_counter()
        return _obs_to_numpy(self._obs, self._space), {}

    def step(
        self, actions: Any
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One model step of every row; finished rows restart in the same step (class docstring).

        Returns observations ``key -> [N, ...]``, rewards float32 ``[N]``, terminated and
        truncated bool ``[N]`` and the info dict.

        Raises:
            ValueError: actions of the wrong shape, or NaN/inf.
            RuntimeError: ``reset`` was not called first.
        """
        if self._np_rng is None:
            raise RuntimeError("call reset() before step()")
        action = self._checked_action(actions)
        with torch.no_grad():
            self._state, next_obs, reward, terminated, model_info = self.model.step(
                self._state, action, generator=self._torch_rng, with_uncertainty=self.wants_uncertainty
            )
        self._check_model_output(next_obs, reward, terminated)
        uncertainty = self._uncertainty(model_info)
        reward = self._reward(reward, action, next_obs, uncertainty)
        if self.termination_fn is not None:
            terminated = self.termination_fn(self._obs[OBS_STATE], action, next_obs[OBS_STATE])
        self._elapsed += 1
        info = self._step_info(uncertainty)
        truncated = (self._elapsed >= self.horizon) | info.get("uncertainty_truncated", False)
        rewards = reward.cpu().numpy().astype(np.float32)
        terminations = terminated.cpu().numpy().astype(bool)
        self._returns += rewards
        self._obs = {k: next_obs[k] for k in self._space.spaces}
        obs = _obs_to_numpy(self._obs, self._space)
        done = terminations | truncated
        if done.any():
            info = self._autoreset(done, obs, info)
        return obs, rewards, terminations, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Close the real env that ``live`` start states reset."""
        self.start_states.close()

    # --- pieces of a step -----------------------------------------------------------------
    def _seed(self, seed: int | list[int]) -> list[int]:
        """Seed both generators; returns the rows' start seeds (``seed + i``, or the list)."""
        if isinstance(seed, (list, tuple)):
            if len(seed) != self.num_envs:
                raise ValueError(f"reset got {len(seed)} seeds for {self.num_envs} envs")
            row_seeds = [int(s) for s in seed]
            base = int(np.random.SeedSequence(row_seeds).generate_state(1)[0])
        else:
            base = int(seed)
            row_seeds = [base + i for i in range(self.num_envs)]
        self._np_rng = np.random.default_rng([base, _AUTORESET_STREAM])
        self._torch_rng.manual_seed(base)
        return row_seeds

    def _to_torch(self, obs: Mapping[str, np.ndarray]) -> Obs:
        return {k: torch.as_tensor(v, device=self.device) for k, v in obs.items()}

    def _checked_action(self, actions: Any) -> Tensor:
        """The actions as a float tensor ``[N, A]`` on the model's device, clipped to the box."""
        if isinstance(actions, Tensor):
            actions = actions.detach().cpu().numpy()
        array = np.asarray(actions)
        expected = (self.num_envs, *(self._box.shape or ()))
        if array.shape != expected:
            raise ValueError(
                f"actions must have shape {expected} (num_envs, *action shape), got {array.shape}"
            )
        if array.dtype.kind not in "fiu":
            raise ValueError(f"actions must be numbers, got dtype {array.dtype}")
        if not np.isfinite(array).all():
            raise ValueError("actions must be finite; got NaN or inf")
        if isinstance(self._box, spaces.Discrete):
            n = int(self._box.n)
            if (array != np.round(array)).any() or array.min() < 0 or array.max() >= n:
                raise ValueError(f"discrete actions must be integers in [0, {n}), got {array.tolist()}")
        action = torch.as_tensor(array, dtype=self._low.dtype, device=self.device)
        # Clipped as the real env would (module docstring): the model never saw out-of-bounds actions.
        return torch.clamp(action, self._low, self._high).reshape(self.num_envs, -1)

    def _check_model_output(self, next_obs: Obs, reward: Tensor, terminated: Tensor) -> None:
        """Fail clearly on a model that breaks the ``WorldModel.step`` contract."""
        name = type(self.model).__name__
        for key, sub in self._space.spaces.items():
            if key not in next_obs or tuple(next_obs[key].shape) != (self.num_envs, *(sub.shape or ())):
                got = tuple(next_obs[key].shape) if key in next_obs else "nothing"
                raise RuntimeError(f"{name}.step returned next_obs[{key!r}] of shape {got}")
        for what, value in (("reward", reward), ("terminated", terminated)):
            if tuple(value.shape) != (self.num_envs,):
                raise RuntimeError(f"{name}.step returned {what} of shape {tuple(value.shape)}, not [N]")

    @property
    def wants_uncertainty(self) -> bool:
        """Whether steps need the model's uncertainty: for the penalty, the cut-off or the info.

        Read on every step, so changing ``uncertainty_penalty`` (a schedule) takes effect at once.
        """
        return self.uncertainty_penalty > 0 or self.max_uncertainty is not None or self.report_uncertainty

    def _uncertainty(self, model_info: Mapping[str, Any]) -> Tensor | None:
        """The model's per-row uncertainty ``[N]`` when wanted, else None.

        None even where the model reports it anyway, so the info's keys follow the settings, not
        the model; an error when it is wanted and absent.
        """
        if not self.wants_uncertainty:
            return None
        uncertainty = model_info.get("uncertainty")
        if uncertainty is None:
            raise RuntimeError(
                f"{type(self.model).__name__} reports no uncertainty, which uncertainty_penalty, "
                "max_uncertainty and report_uncertainty need"
            )
        return uncertainty.detach().float()

    def _reward(self, reward: Tensor, action: Tensor, next_obs: Obs, uncertainty: Tensor | None) -> Tensor:
        """The learned or known reward, less MOPO's ``lambda * uncertainty`` (Yu et al. 2020, Sec. 4)."""
        if self.reward_fn is not None:
            reward = self.reward_fn(self._obs[OBS_STATE], action, next_obs[OBS_STATE])
        reward = reward.float()
        if self.uncertainty_penalty > 0:
            assert uncertainty is not None
            reward = reward - self.uncertainty_penalty * uncertainty
        return reward

    def _step_info(self, uncertainty: Tensor | None) -> dict[str, Any]:
        """Every row's ``uncertainty`` and ``uncertainty_truncated`` (where they apply), with masks."""
        info: dict[str, Any] = {}
        if uncertainty is not None:
            info["uncertainty"] = uncertainty.cpu().numpy().astype(np.float32)
        if self.max_uncertainty is not None:
            assert uncertainty is not None  # _uncertainty demands it
            info["uncertainty_truncated"] = (uncertainty > self.max_uncertainty).cpu().numpy()
        for key in list(info):
            info[f"_{key}"] = np.ones(self.num_envs, dtype=bool)
        return info

    def _autoreset(
        self, done: np.ndarray, obs: dict[str, np.ndarray], info: dict[str, Any]
    ) -> dict[str, Any]:
        """Restart the finished rows, in ``obs`` (in place) and in the model state.

        Returns the info with the finished rows' true final observations, final step info and
        episode statistics.
        """
        assert self._np_rng is not None
        rows = np.flatnonzero(done)
        final_obs = np.full(self.num_envs, None, dtype=object)
        for i in rows:
            final_obs[i] = {k: v[i].copy() for k, v in obs.items()}
        final_info: dict[str, Any] = {}
        for key in [k for k in info if not k.startswith("_")]:
            final_info[key], final_info[f"_{key}"] = info[key].copy(), done.copy()
        now = time.perf_counter()
        episode = {
            "r": np.where(done, self._returns, 0.0),
            "l": np.where(done, self._elapsed, 0),
            "t": np.where(done, np.round(now - self._starts, 6), 0.0),
        }
        fresh = self.start_states.draw(self._np_rng.integers(_SEED_BOUND, size=len(rows)).tolist())
        fresh_obs = self._to_torch(fresh)
        index = torch.as_tensor(rows, device=self.device)
        with torch.no_grad():
            self._state = _scatter_rows(self._state, self.model.reset(fresh_obs), index)
        self._obs = {k: _scatter_rows(v, fresh_obs[k], index) for k, v in self._obs.items()}
        for key, value in fresh.items():
            obs[key][rows] = value
        self._elapsed[rows], self._returns[rows], self._starts[rows] = 0, 0.0, now
        return {
            **info,
            "final_obs": final_obs,
            "_final_obs": done.copy(),
            "final_info": final_info,
            "_final_info": done.copy(),
            "episode": episode,
            "_episode": done.copy(),
        }


def _load_model(model: WorldModel | str | Path, device: torch.device) -> WorldModel:
    """The model itself (moved to ``device``, in eval mode), or the one saved at a path."""
    loaded = WorldModel.from_pretrained(model, device) if isinstance(model, (str, Path)) else model.to(device)
    return loaded.eval()


def _real_env(model: WorldModel, env_id: str | None, env_kwargs: Mapping[str, Any] | None) -> gym.Env | None:
    """A real copy of ``env_id`` (None without an id), its spaces checked against the model's."""
    if env_id is None:
        return None
    env = make_env(env_id, **dict(env_kwargs or {}))
    try:
        check_spaces(model, env, env_id)
    except ValueError:
        env.close()
        raise
    return env


def _horizon(horizon: int | None, real_env: gym.Env | None) -> int:
    """The horizon given, else the real env's time limit."""
    if horizon is not None:
        return horizon
    limit = real_env.spec.max_episode_steps if real_env is not None and real_env.spec is not None else None
    if limit is None:
        raise ValueError("set the world-model env's horizon: there is no real env time limit to take it from")
    return int(limit)


def _known_fn(
    source: Source, what: str, env_id: str | None, env_kwargs: Mapping[str, Any] | None, space: spaces.Dict
) -> KnownFn | None:
    """The known reward/termination function ``source`` asks for, or None for the learned one.

    Raises:
        ValueError: ``known`` without an env id, with env kwargs (the functions assume the
            defaults), for a non-flat observation, or for an env without one.
    """
    if source == "learned":
        return None
    if env_id is None:
        raise ValueError(f"{what}: known needs the real env's id")
    if env_kwargs:
        raise ValueError(
            f"{what}: known functions assume {env_id}'s default arguments, got env kwargs {dict(env_kwargs)}"
        )
    if set(space.spaces) != {OBS_STATE}:
        raise ValueError(f"{what}: known functions read a flat 'state' observation, got {space}")
    return known_reward(env_id) if what == "reward" else known_termination(env_id)


class WorldModelEnv(gym.Env):
    """A single world-model env for ``gym.make``-style use: :class:`WorldModelVectorEnv` with one row.

    ``step`` returns the true final observation when an episode ends (call ``reset`` next, as
    with any Gymnasium env); ``info`` holds the row's ``uncertainty`` as a float when the
    settings ask for it (``report_uncertainty``, ``uncertainty_penalty``, ``max_uncertainty``).

    Args:
        model: a world model, or the folder of a saved one.
        **kwargs: :class:`WorldModelVectorEnv`'s keyword arguments.
    """

    metadata = {"render_modes": []}  # noqa: RUF012  (gymnasium's instance attribute)

    def __init__(self, model: WorldModel | str | Path, **kwargs: Any) -> None:
        self.vector_env = WorldModelVectorEnv(model, 1, **kwargs)
        self.observation_space = self.vector_env._space
        self.action_space = self.vector_env._box

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start a new episode (from a new start state)."""
        super().reset(seed=seed)
        obs, _ = self.vector_env.reset(seed=seed, options=options)
        return {k: v[0] for k, v in obs.items()}, {}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """One model step; the final observation (not the next start) when the episode ends."""
        obs, rewards, terminated, truncated, info = self.vector_env.step(np.asarray(action)[None])
        done = bool(terminated[0] or truncated[0])
        row: dict[str, np.ndarray] = info["final_obs"][0] if done else {k: v[0] for k, v in obs.items()}
        step_info: dict[str, Any] = {
            k: info[k][0].item() for k in ("uncertainty", "uncertainty_truncated") if k in info
        }
        return row, float(rewards[0]), bool(terminated[0]), bool(truncated[0]), step_info

    def close(self) -> None:
        """Close the vector env (and its real env, if any)."""
        self.vector_env.close()


def make_world_model_vec_env(
    config: WorldModelEnvConfig,
    num_envs: int,
    *,
    env_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    max_episode_steps: int | None = None,
) -> WorldModelVectorEnv:
    """The ``world_model`` env backend (``env.backend: world_model``): ``WorldModelVectorEnv.from_config``."""
    return WorldModelVectorEnv.from_config(
        config, num_envs, env_id=env_id, env_kwargs=env_kwargs, max_episode_steps=max_episode_steps
    )
