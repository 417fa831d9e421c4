"""Batched MuJoCo tasks: ``num_envs`` copies of a task stepped as one ``gym.vector.VectorEnv``.

``gym.make_vec("omnigym/PushT-v0", num_envs=64, vectorization_mode="vector_entry_point")`` (or
``EnvConfig(vectorization="vector")``) builds one. The env holds one task env per copy, each with
its own ``MjModel`` (randomisation changes model parameters per episode) and ``MjData``, and uses
their hooks, so each task has one implementation. What it changes is how a step runs:

* the physics of all copies runs in one call, :meth:`BatchPhysics.step`: each thread of a pool
  steps a contiguous chunk of copies with ``mj_step(nstep=frame_skip)``, which releases the GIL,
  so the copies' physics runs on as many cores as there are threads;
* the Python around it is done once per batch, not once per copy: action checks and clipping,
  the time limit, stacking observations, and building the info arrays with their ``_key`` masks.

Every copy computes exactly what a single env does with the same seed and actions, so the
batched env equals a ``SyncVectorEnv`` of single envs bit for bit (``reset(seed=s)`` seeds copy
``i`` with ``s + i``; ``tests/envs/manipulation/test_vector.py``). MuJoCo's ``rollout`` module
was the other candidate: it steps many states in C++ threads, but takes the solver's warm start
in without giving it back and copies whole states in and out, so trajectories would drift from
the single env's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from omnigym.envs.manipulation.base import OBS_KEYS, ManipulationEnv
from omnigym.envs.manipulation.cube import PickPlaceEnv, PushCubeEnv
from omnigym.envs.manipulation.pusht import PushTEnv
from omnigym.envs.manipulation.reach import ReachEnv
from omnigym.envs.manipulation.rendering import mujoco
from omnigym.envs.manipulation.two_stage import PushCubeTwoStageEnv


def default_num_threads(num_envs: int) -> int:
    """Physics threads for ``num_envs`` copies: one per usable core, at most one per copy."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(num_envs, cores))


class BatchPhysics:
    """Advances many ``(MjModel, MjData)`` pairs by ``frame_skip`` physics steps in one call.

    Args:
        pairs: the model and data of each copy; each pair is only ever stepped by one thread.
        frame_skip: physics steps per call.
        num_threads: threads that share the copies (the calling thread is one of them).
    """

    def __init__(self, pairs: Sequence[tuple[Any, Any]], frame_skip: int, num_threads: int) -> None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.pairs = list(pairs)
        self.frame_skip = frame_skip
        self.num_threads = num_threads
        self._pool = ThreadPoolExecutor(num_threads - 1, "mujoco-step") if num_threads > 1 else None

    def step(self, indices: Sequence[int] | np.ndarray) -> None:
        """Step the copies ``indices``, split into one contiguous chunk per thread."""
        chunks = [chunk for chunk in np.array_split(np.asarray(indices), self.num_threads) if len(chunk)]
        if self._pool is None or len(chunks) < 2:
            for chunk in chunks:
                self._step_chunk(chunk)
            return
        futures = [self._pool.submit(self._step_chunk, chunk) for chunk in chunks[1:]]
        try:
            self._step_chunk(chunks[0])
        finally:
            for future in futures:
                future.result()

    def _step_chunk(self, chunk: np.ndarray) -> None:
        pairs, nstep = self.pairs, self.frame_skip
        for index in chunk.tolist():
            model, data = pairs[index]
            mujoco.mj_step(model, data, nstep=nstep)

    def close(self) -> None:
        """Stop the thread pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class ManipulationVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a MuJoCo task (``env_class``) stepped together; see the module doc.

    Spaces, rewards, ``info`` (``is_success`` and the task's metrics, each with its ``_key`` mask),
    termination on success and truncation at ``max_episode_steps`` are those of a
    ``SyncVectorEnv`` of the single env under ``gym.make``. Observations: ``state`` float32
    ``[N, state_dim]``, ``image`` uint8 ``[N, H, W, 3]``, ``text`` a tuple of ``N`` strings.

    Args:
        num_envs: copies of the task.
        render_mode: None or ``rgb_array``; :meth:`render` returns one frame per copy.
        autoreset_mode: Gymnasium's autoreset mode (same-step by default, as omnigym's
            ``EnvConfig``). Same-step puts the ended episodes' last observations and infos in
            ``info["final_obs"]`` and ``info["final_info"]``; next-step resets a copy at the step
            after its episode ended (reward 0); disabled needs ``reset(options={"reset_mask": m})``.
        max_episode_steps: truncate episodes after this many steps (None: never); ``gym.make_vec``
            passes the registered limit.
        num_threads: physics threads; None takes one per usable core (at most ``num_envs``).
        **kwargs: the task's options (``TaskConfig`` and its subclasses), as for ``gym.make``.
    """

    env_class: ClassVar[type[ManipulationEnv]]
    """The task each copy runs."""
    metadata: dict[str, Any] = {  # noqa: RUF012  (gymnasium's instance attribute)
        "render_modes": ["rgb_array"],
        "autoreset_mode": AutoresetMode.SAME_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        *,
        render_mode: str | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
        max_episode_steps: int | None = None,
        num_threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1 or None, got {max_episode_steps}")
        self.envs = [self.env_class(render_mode, **kwargs) for _ in range(num_envs)]
        """The task env of each copy (their ``model``, ``data`` and hooks)."""
        first = self.envs[0]
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.max_episode_steps = max_episode_steps
        self.metadata = {
            **self.metadata,
            "render_fps": first.metadata["render_fps"],
            "autoreset_mode": self.autoreset_mode,
        }
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.physics = BatchPhysics(
            [(env.model, env.data) for env in self.envs],
            first.frame_skip,
            default_num_threads(num_envs) if num_threads is None else num_threads,
        )
        self.text_actions = isinstance(self.single_action_space, spaces.Text)
        """Written skills (``action_space="text"``): each copy runs its own skill, one after another
        (a skill's physics steps depend on the copy's state, so copies cannot share one call)."""
        self._obs_keys = tuple(key for key in OBS_KEYS if key in first.config.obs_keys)
        self._rows: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        """The latest observation of each copy (what a reset with a mask leaves in place)."""
        self._elapsed = np.zeros(num_envs, np.int64)
        self._ended = np.zeros(num_envs, bool)
        """Copies whose episode ended at the last step (next-step and disabled modes reset them)."""
        self._started = False

    # --- reset ------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start episodes in every copy, or in those of ``options["reset_mask"]`` (bool ``[N]``).

        ``seed``: an int ``s`` seeds copy ``i`` with ``s + i``; a list gives one seed per copy.
        """
        seeds = _per_env_seeds(seed, self.num_envs)
        options = dict(options or {})
        mask = np.asarray(options.pop("reset_mask", np.ones(self.num_envs, bool)))
        if mask.shape != (self.num_envs,) or mask.dtype != np.bool_ or not mask.any():
            raise ValueError(
                f"options['reset_mask'] must be a bool array [{self.num_envs}] with a True value"
            )
        infos: list[dict[str, Any] | None] = [None] * self.num_envs
        for index in np.flatnonzero(mask).tolist():
            infos[index] = self._reset_copy(index, seeds[index], options or None)
        self._ended[mask] = False
        self._started = True
        return self._stack(self._rows), _batch_info(infos, self.num_envs)

    def _reset_copy(
        self, index: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Start a new episode in copy ``index``; its observation goes to ``_rows``."""
        self._rows[index], info = self.envs[index].reset(seed=seed, options=options)
        self._elapsed[index] = 0
        return info

    # --- step -------------------------------------------------------------------------------------
    def step(self, actions: Any) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Apply one action ``[N, action_dim]`` per copy (text actions: ``N`` strings).

        Returns:
            Observations, rewards (float64 ``[N]``), terminated and truncated (bool ``[N]``) and
            the info dict, as ``SyncVectorEnv`` gives them.

        Raises:
            ValueError: the actions have the wrong shape or hold NaN or infinity.
            gymnasium.error.ResetNeeded: before the first reset, or (disabled autoreset) when a
                copy whose episode ended was not reset.
        """
        if not self._started:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self.text_actions:
            texts, clipped = self._check_texts(actions), np.empty((0, 0))
        else:
            texts, clipped = [], self._check_actions(actions)
        resetting = self._ended & (self.autoreset_mode == AutoresetMode.NEXT_STEP)
        if self.autoreset_mode == AutoresetMode.DISABLED and self._ended.any():
            raise gym.error.ResetNeeded(
                f"envs {np.flatnonzero(self._ended).tolist()} ended; reset them with "
                "reset(options={'reset_mask': mask}) (autoreset is disabled)"
            )
        stepping = np.flatnonzero(~resetting)
        truncated = np.zeros(self.num_envs, bool)
        if self.text_actions:
            rewards, terminated, infos = self._advance_skills(stepping, texts, truncated)
        else:
            rewards, terminated, infos = self._advance(stepping, clipped)
        truncated |= self._truncated(stepping)
        for index in np.flatnonzero(resetting).tolist():
            infos[index] = self._reset_copy(index)
        self._ended = terminated | truncated
        info = self._same_step_autoreset(infos) if self.autoreset_mode == AutoresetMode.SAME_STEP else {}
        info.update(_batch_info(infos, self.num_envs))
        return self._stack(self._rows), rewards, terminated, truncated, info

    def _advance(
        self, stepping: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any] | None]]:
        """Run the copies ``stepping`` for one action: the tasks' hooks around one physics call.

        Returns:
            Rewards and terminated ``[N]`` (0 and False for the other copies), and the copies'
            infos (None for the others). Their observations go to ``_rows``.
        """
        envs = self.envs
        indices = stepping.tolist()
        for index in indices:
            envs[index]._apply_action(actions[index])
        self.physics.step(stepping)
        rewards = np.zeros(self.num_envs, np.float64)
        terminated = np.zeros(self.num_envs, bool)
        infos: list[dict[str, Any] | None] = [None] * self.num_envs
        for index in indices:
            self._rows[index], rewards[index], terminated[index], infos[index] = envs[index]._finish_step()
        self._elapsed[stepping] += 1
        return rewards, terminated, infos

    def _advance_skills(
        self, stepping: np.ndarray, texts: list[Any], truncated: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any] | None]]:
        """:meth:`_advance` for written skills: each copy in ``stepping`` runs its own ``step``.

        ``truncated`` ``[N]`` gets the copies whose skills used up ``max_control_steps``.
        """
        rewards = np.zeros(self.num_envs, np.float64)
        terminated = np.zeros(self.num_envs, bool)
        infos: list[dict[str, Any] | None] = [None] * self.num_envs
        for index in stepping.tolist():
            row, rewards[index], terminated[index], truncated[index], infos[index] = self.envs[index].step(
                texts[index]
            )
            self._rows[index] = row
        self._elapsed[stepping] += 1
        return rewards, terminated, infos

    def _check_texts(self, actions: Any) -> list[Any]:
        """One text action per copy (any content: a reply that does not parse is the copy's to answer)."""
        texts = list(actions) if isinstance(actions, (list, tuple, np.ndarray)) else None
        if texts is None or len(texts) != self.num_envs:
            raise ValueError(
                f"{self.env_class.__name__} x {self.num_envs} takes {self.num_envs} text actions, "
                f"got {actions!r:.80}"
            )
        return texts

    def _check_actions(self, actions: Any) -> np.ndarray:
        """The actions as float64 ``[N, action_dim]`` clipped to [-1, 1], after checking them."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.shape != self.action_space.shape:
            raise ValueError(
                f"{self.env_class.__name__} x {self.num_envs} takes actions of shape "
                f"{self.action_space.shape}, got {actions.shape}"
            )
        finite = np.isfinite(actions).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite).tolist()
            raise ValueError(f"{self.env_class.__name__} actions of envs {bad} contain NaN or inf")
        return np.minimum(np.maximum(actions, -1.0), 1.0)  # as the single env clips, bit for bit

    def _truncated(self, stepping: np.ndarray) -> np.ndarray:
        """The copies in ``stepping`` that reached the time limit (as ``TimeLimit`` decides)."""
        truncated = np.zeros(self.num_envs, bool)
        if self.max_episode_steps is not None:
            truncated[stepping] = self._elapsed[stepping] >= self.max_episode_steps
        return truncated

    def _same_step_autoreset(self, infos: list[dict[str, Any] | None]) -> dict[str, Any]:
        """Reset the copies that ended now; their last observations and infos, as ``final_*``.

        ``infos`` of the reset copies becomes their reset info (the top-level info, as in
        ``SyncVectorEnv``).
        """
        ended = self._ended
        if not ended.any():
            return {}
        final_obs = np.full(self.num_envs, None, dtype=object)
        final_infos: list[dict[str, Any] | None] = [None] * self.num_envs
        for index in np.flatnonzero(ended).tolist():
            final_obs[index], final_infos[index] = self._rows[index], infos[index]
            infos[index] = self._reset_copy(index)
        self._ended = np.zeros(self.num_envs, bool)
        return {
            "final_obs": final_obs,
            "_final_obs": ended.copy(),
            "final_info": _batch_info(final_infos, self.num_envs),
            "_final_info": ended.copy(),
        }

    def _stack(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """One batched observation from the copies' observations (text as a tuple of strings)."""
        return {
            key: tuple(row[key] for row in rows) if key == "text" else np.stack([row[key] for row in rows])
            for key in self._obs_keys
        }

    # --- rendering and closing --------------------------------------------------------------------
    def render(self) -> tuple[Any, ...]:
        """One ``render_size`` frame per copy (``render_mode="rgb_array"``), as ``SyncVectorEnv``."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the physics threads and free the copies' renderers."""
        self.physics.close()
        for env in self.envs:
            env.close()


def _per_env_seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """One seed per copy, as ``SyncVectorEnv`` spreads them (``s + i`` from an int)."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"got {len(seeds)} seeds for {num_envs} envs")
    return seeds


def _batch_info(infos: Sequence[dict[str, Any] | None], num_envs: int) -> dict[str, Any]:
    """The copies' info dicts as Gymnasium's vector info: ``key -> [N]`` array plus ``_key`` mask.

    Array types follow ``VectorEnv._add_info`` (a Python or NumPy number gives its own dtype,
    an array a stacked array, anything else an object array), so the result equals a
    ``SyncVectorEnv``'s; ``None`` marks a copy without info this step.
    """
    out: dict[str, Any] = {}
    keys = dict.fromkeys(key for info in infos if info is not None for key in info)
    for key in keys:
        rows = [i for i, info in enumerate(infos) if info is not None and key in info]
        first = infos[rows[0]][key]  # type: ignore[index]
        if isinstance(first, np.ndarray):
            array = np.zeros((num_envs, *first.shape), first.dtype)
        elif type(first) in (int, float, bool) or isinstance(first, np.number):
            array = np.zeros(num_envs, type(first))
        else:
            array = np.full(num_envs, None, dtype=object)
        for i in rows:
            array[i] = infos[i][key]  # type: ignore[index]
        mask = np.zeros(num_envs, bool)
        mask[rows] = True
        out[key], out[f"_{key}"] = array, mask
    return out


class PushTVectorEnv(ManipulationVectorEnv):
    """Batched :class:`~omnigym.envs.manipulation.pusht.PushTEnv` (``omnigym/PushT*-v0``)."""

    env_class: ClassVar[type[ManipulationEnv]] = PushTEnv


class ReachVectorEnv(ManipulationVectorEnv):
    """Batched :class:`~omnigym.envs.manipulation.reach.ReachEnv` (``omnigym/Reach*-v0``)."""

    env_class: ClassVar[type[ManipulationEnv]] = ReachEnv


class PushCubeVectorEnv(ManipulationVectorEnv):
    """Batched :class:`~omnigym.envs.manipulation.cube.PushCubeEnv` (``omnigym/PushCube*-v0``)."""

    env_class: ClassVar[type[ManipulationEnv]] = PushCubeEnv


class PickPlaceVectorEnv(ManipulationVectorEnv):
    """Batched :class:`~omnigym.envs.manipulation.cube.PickPlaceEnv` (``omnigym/PickPlace*-v0``)."""

    env_class: ClassVar[type[ManipulationEnv]] = PickPlaceEnv


class PushCubeTwoStageVectorEnv(ManipulationVectorEnv):
    """Batched :class:`~omnigym.envs.manipulation.two_stage.PushCubeTwoStageEnv`.

    ``omnigym/PushCubeTwoStage*-v0``.
    """

    env_class: ClassVar[type[ManipulationEnv]] = PushCubeTwoStageEnv
