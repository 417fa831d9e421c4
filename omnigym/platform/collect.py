"""Rollouts from Gymnasium vector envs, correct under every autoreset mode.

Gymnasium 1.x can reset a finished sub-env in three ways, and each needs its own bookkeeping:

* ``same_step``: the step that ends an episode already returns the next episode's first
  observation; the true final observation is in ``info["final_obs"]``. Every step is a
  transition; truncated episodes bootstrap from the stored final observation.
* ``next_step``: the step after the end ignores the action and returns the reset observation with
  zero reward. That step is stored with ``valid=False`` and excluded from every loss; the final
  observation is the next stored observation, so bootstrapping needs nothing extra.
* ``disabled``: the collector resets finished sub-envs itself (``reset_mask``), keeping the final
  observation, which makes it behave like ``same_step``.

Batched torch envs (:class:`~omnigym.platform.vec_env.TorchVectorEnv`: Isaac Lab tasks) reset
finished sub-envs inside ``step`` like ``same_step``; :class:`TorchRolloutCollector` keeps their
tensors on the env's device, with no NumPy round trip.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from torch import Tensor, nn

from omnigym.core.policy import Policy, PolicyConfig, obs_to_torch
from omnigym.core.text_obs import storable_obs, text_width
from omnigym.core.types import EpisodeStats, PolicyStep, Rollout
from omnigym.platform.memory import check_fits
from omnigym.platform.vec_env import (
    EnvConfig,
    TorchVectorEnv,
    autoreset_mode,
    make_env,
    to_env_action,
    to_torch_env_action,
)

REWARD_COMPONENTS = "reward_components"
PER_STEP_BOOKKEEPING = 4 * 7 + 3
"""Bytes a rollout stores per step besides observations and actions: float32 reward, logprob,
value, advantage, return, policy version and proximal log-prob; bool terminated, truncated, valid."""


def group_seeds(seed: int, num_envs: int, group_size: int) -> list[int]:
    """Per-env reset seeds that start ``group_size`` consecutive envs from the same state.

    GRPO-style algorithms compare ``G`` rollouts from one start: envs ``[g*G, (g+1)*G)`` share
    seed ``seed + g``. Needs deterministic ``reset(seed=...)``, which conformance tests check.
    """
    if group_size < 1 or num_envs % group_size:
        raise ValueError(f"num_envs ({num_envs}) must be a positive multiple of group_size ({group_size})")
    return [seed + i // group_size for i in range(num_envs)]


def component_names(info: dict[str, Any]) -> tuple[str, ...] | None:
    """The sorted names of the reward components a vector step reports, or None.

    Looks in ``final_info`` too: under same-step autoreset an env that just finished reports its
    step's info there, and every env may have finished.
    """
    for source in (info, info.get("final_info") or {}):
        if isinstance(source, dict) and REWARD_COMPONENTS in source:
            return tuple(sorted(k for k in source[REWARD_COMPONENTS] if not k.startswith("_")))
    return None


def _env_info(info: dict[str, Any], index: int, key: str) -> Any:
    """Sub-env ``index``'s value of ``key`` in a vector info dict, or None."""
    if (
        key not in info
        or isinstance(info[key], dict)
        or not info.get(f"_{key}", np.ones(index + 1, bool))[index]
    ):
        return None
    return info[key][index]


def action_tensor(step: PolicyStep) -> Tensor:
    """The action to store in a rollout: the policy's tensor, or a placeholder for text actions.

    Text actions are lists of strings; what a text policy generated lives in its step's extras
    (token ids), so the rollout keeps zeros ``[B]`` in their place.
    """
    if isinstance(step.action, Tensor):
        return step.action
    return torch.zeros(len(step.action), dtype=torch.long)


def env_action(space: gym.Space, step: PolicyStep) -> Any:
    """The step's action in the form the vector env takes (text actions pass as a tuple)."""
    if isinstance(step.action, Tensor):
        return to_env_action(space, step.action.cpu().numpy())
    return tuple(str(a) for a in step.action)


def _stack_steps(
    steps: list[PolicyStep], device: torch.device
) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
    """Actions, logprobs, masks and extras of ``T`` policy steps, stacked to ``[T, N, ...]`` on ``device``."""
    actions = torch.stack([action_tensor(s) for s in steps]).to(device)
    logprob = torch.stack([s.logprob for s in steps]).to(device)
    mask = torch.stack([s.mask for s in steps]).to(device)
    extras = {k: torch.stack([s.extras[k] for s in steps]).to(device) for k in steps[0].extras}
    return actions, logprob, mask, extras


def _space_bytes(space: spaces.Space) -> int:
    """Bytes one observation or action of ``space`` takes in a rollout (as stored, see ``storable_obs``)."""
    if isinstance(space, spaces.Dict):
        return sum(_space_bytes(s) for s in space.spaces.values())
    if isinstance(space, spaces.Tuple):
        return sum(_space_bytes(s) for s in space.spaces)
    if isinstance(space, spaces.Text):
        return text_width(space)
    if isinstance(space, spaces.Box):
        return math.prod(space.shape) * space.dtype.itemsize
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return 8 * max(1, math.prod(space.shape or ()))  # int64 tensors
    return 8


def rollout_bytes(
    num_steps: int,
    num_envs: int,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    activation_width: int = 0,
) -> int:
    """A lower bound on the memory of one ``[num_steps, num_envs]`` rollout and its processing.

    Observations (twice: the collector's NumPy buffers and the tensors the algorithm trains on),
    actions and the per-step bookkeeping; with ``activation_width``, two float32 activations of
    that width per step, held by a forward pass over the whole rollout (PPO's values).
    """
    per_step = (
        2 * _space_bytes(observation_space)
        + _space_bytes(action_space)
        + PER_STEP_BOOKKEEPING
        + 2 * 4 * activation_width
    )
    return int(num_steps) * int(num_envs) * per_step


def activation_width(policy: nn.Module | PolicyConfig | None) -> int:
    """The widest layer of a policy (its ``nn.Linear`` outputs) or of a config's ``hidden_sizes``."""
    if isinstance(policy, nn.Module):
        return max((m.out_features for m in policy.modules() if isinstance(m, nn.Linear)), default=0)
    sizes = [*(getattr(policy, "hidden_sizes", None) or ()), getattr(policy, "feature_size", 0) or 0]
    return max(int(s) for s in sizes)


def check_rollout_memory(
    num_steps: int,
    num_envs: int,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    activation_width: int = 0,
) -> None:
    """Refuse a rollout that cannot fit in memory, before anything of it is allocated.

    Raises:
        InsufficientMemoryError: names ``algo.num_steps`` and ``env.num_envs``, the estimate and
            the memory available.
    """
    check_fits(
        rollout_bytes(num_steps, num_envs, observation_space, action_space, activation_width),
        what=f"a rollout of algo.num_steps={num_steps} x env.num_envs={num_envs} steps",
        fix="lower env.num_envs or algo.num_steps",
    )


PREFLIGHT_MIN_ENVS = 64
"""Above this many env copies a trainer checks the rollout's memory before building them."""


def preflight_rollout_memory(env: EnvConfig, num_steps: int, policy: PolicyConfig | None = None) -> None:
    """:func:`check_rollout_memory` before the vector env is built, from one probe env's spaces.

    Building ``env.num_envs`` copies of an env is itself slow and memory-hungry, so a trainer
    calls this first; it costs one env, so it probes only beyond ``PREFLIGHT_MIN_ENVS`` copies
    (fewer are cheap to build, and the collector's own check then refuses an oversized rollout).
    World-model and Isaac Lab backends are not probed.

    Args:
        env: the env config (id, kwargs, num_envs).
        num_steps: steps per env per rollout (``algo.num_steps``).
        policy: the policy config, whose ``hidden_sizes`` size the forward pass over the rollout.

    Raises:
        InsufficientMemoryError: the rollout of ``num_steps`` x ``env.num_envs`` cannot fit.
    """
    if env.backend != "real" or env.id.startswith("Isaac-") or env.num_envs <= PREFLIGHT_MIN_ENVS:
        return
    probe = make_env(env.id, **env.kwargs)
    try:
        check_rollout_memory(
            num_steps, env.num_envs, probe.observation_space, probe.action_space, activation_width(policy)
        )
    finally:
        probe.close()


class RolloutCollector:
    """Steps ``N`` vector envs with a policy for ``num_steps`` at a time.

    Keeps the current observation and per-env episode accumulators between calls, so
    consecutive rollouts continue the same episodes.

    Args:
        envs: the vector env (any autoreset mode).
        policy: acts on ``obs_to_torch`` observations.
        num_steps: T, steps per env per rollout.
        device: where the policy runs.
    """

    def __init__(
        self, envs: gym.vector.VectorEnv, policy: Policy, num_steps: int, device: torch.device | str = "cpu"
    ) -> None:
        check_rollout_memory(
            num_steps, envs.num_envs, envs.single_observation_space, envs.single_action_space,
            activation_width(policy),
        )  # fmt: skip
        self.envs, self.policy, self.num_steps = envs, policy, num_steps
        self.device = torch.device(device)
        self.mode = autoreset_mode(envs)
        self.num_envs = envs.num_envs
        self.policy_version = 0
        self.obs: dict[str, np.ndarray] | None = None
        self._pending_reset = np.zeros(self.num_envs, dtype=bool)  # next_step mode: the next step resets
        self._episode_return = np.zeros(self.num_envs)
        self._episode_length = np.zeros(self.num_envs, dtype=np.int64)
        self._component_names: tuple[str, ...] | None = None

    def reset(self, seed: int | list[int] | None = None) -> None:
        """Start fresh episodes in every sub-env (``seed`` as in ``VectorEnv.reset``)."""
        # A list seeds each sub-env (Gymnasium accepts it; its annotation says int).
        obs, _ = self.envs.reset(seed=seed)  # type: ignore[arg-type]
        self.obs = obs
        self._pending_reset[:] = False
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        self.policy.reset()

    def state_dict(self) -> dict[str, Any]:
        """The current observation and episode accumulators, for a checkpoint."""
        return {
            "obs": self.obs,
            "pending_reset": self._pending_reset,
            "episode_return": self._episode_return,
            "episode_length": self._episode_length,
            "policy_version": self.policy_version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s output (the envs must be restored alongside)."""
        self.obs = state["obs"]
        self._pending_reset = state["pending_reset"]
        self._episode_return = state["episode_return"]
        self._episode_length = state["episode_length"]
        self.policy_version = state["policy_version"]

    def collect(self) -> tuple[Rollout, EpisodeStats]:
        """One rollout ``[T, N]`` and the statistics of the episodes that ended in it."""
        if self.obs is None:
            self.reset()
        assert self.obs is not None
        T, N = self.num_steps, self.num_envs
        first = storable_obs(self.obs, self.envs.single_observation_space)
        obs_buf = {k: np.empty((T, *v.shape), dtype=v.dtype) for k, v in first.items()}
        rewards = np.zeros((T, N), dtype=np.float32)
        terminated = np.zeros((T, N), dtype=bool)
        truncated = np.zeros((T, N), dtype=bool)
        valid = np.ones((T, N), dtype=bool)
        components: np.ndarray | None = None
        steps: list[PolicyStep] = []  # stacked once at the end: cheaper than T indexed writes
        final_rows: list[tuple[int, int, dict[str, np.ndarray]]] = []
        stats = EpisodeStats()
        next_step_mode = self.mode == AutoresetMode.NEXT_STEP

        for t in range(T):
            step, next_obs, reward, term, trunc, info = self._act_and_step(t, obs_buf)
            steps.append(step)

            if next_step_mode:
                valid[t] = ~self._pending_reset
                self._episode_return += np.where(valid[t], reward, 0.0)
            else:
                self._episode_return += reward
            self._episode_length += valid[t]
            rewards[t], terminated[t], truncated[t] = reward, term, trunc
            done = term | trunc
            components = self._record_components(components, t, info, done)
            if done.any():
                next_obs = self._end_episodes(t, done, trunc & ~term, next_obs, info, final_rows, stats)
            if next_step_mode:
                self._pending_reset = done
            self.obs = next_obs

        actions, logprob, mask, extras = _stack_steps(steps, torch.device("cpu"))
        names = self._component_names or ()
        return (
            Rollout(
                obs={k: torch.from_numpy(v) for k, v in obs_buf.items()},
                actions=actions,
                rewards=torch.from_numpy(rewards),
                reward_components=torch.from_numpy(
                    components if components is not None else np.zeros((T, N, 0), dtype=np.float32)
                ),
                terminated=torch.from_numpy(terminated),
                truncated=torch.from_numpy(truncated),
                valid=torch.from_numpy(valid),
                logprob=logprob,
                mask=mask,
                policy_version=torch.full((T, N), self.policy_version, dtype=torch.int64),
                extras=extras,
                next_obs={
                    k: torch.from_numpy(np.array(v))
                    for k, v in storable_obs(self.obs, self.envs.single_observation_space).items()
                },
                final_obs={
                    k: torch.from_numpy(
                        np.stack([row[2][k] for row in final_rows])
                        if final_rows
                        else obs_buf[k][0, :0].copy()
                    )
                    for k in obs_buf
                },
                final_index=torch.tensor([[t, n] for t, n, _ in final_rows], dtype=torch.int64).reshape(
                    -1, 2
                ),
                reward_component_names=names,
            ),
            stats,
        )

    def _act_and_step(
        self, t: int, obs_buf: dict[str, np.ndarray]
    ) -> tuple[PolicyStep, Any, Any, Any, Any, Any]:
        """Store the current observation as row ``t``, act on it, step the envs.

        Returns the policy's step and the vector env's ``(obs, reward, terminated, truncated, info)``.
        """
        assert self.obs is not None
        stored = storable_obs(self.obs, self.envs.single_observation_space)
        for key, buffer in obs_buf.items():
            buffer[t] = stored[key]
        with torch.inference_mode():
            step = self.policy.act(obs_to_torch(self.obs, self.device))
        return (step, *self.envs.step(env_action(self.envs.single_action_space, step)))

    def _record_components(
        self, components: np.ndarray | None, t: int, info: dict[str, Any], done: np.ndarray
    ) -> np.ndarray | None:
        """This step's named reward components into ``components[t]``.

        The ``[T, N, K]`` buffer is made at the first step that reports any (None until then).
        """
        if components is None and self._component_names is None:
            self._component_names = component_names(info)
        if self._component_names:
            if components is None:
                components = np.zeros((self.num_steps, self.num_envs, len(self._component_names)), np.float32)
            self._store_components(components[t], info, done)
        return components

    def _end_episodes(
        self,
        t: int,
        done: np.ndarray,
        bootstrap: np.ndarray,
        next_obs: dict[str, np.ndarray],
        info: dict[str, Any],
        final_rows: list[tuple[int, int, dict[str, np.ndarray]]],
        stats: EpisodeStats,
    ) -> dict[str, np.ndarray]:
        """Record finished episodes and keep final observations where the mode hides them."""
        step_info = info.get("final_info", info) if self.mode == AutoresetMode.SAME_STEP else info
        for i in np.flatnonzero(done).tolist():
            stats.returns.append(float(self._episode_return[i]))
            stats.lengths.append(int(self._episode_length[i]))
            for key in step_info:
                v = _env_info(step_info, i, key) if not key.startswith("_") else None
                if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
                    stats.metrics.setdefault(key, []).append(float(v))
            if bootstrap[i] and self.mode == AutoresetMode.SAME_STEP:
                final_rows.append((t, int(i), self._stored_row(info["final_obs"][i])))
            elif bootstrap[i] and self.mode == AutoresetMode.DISABLED:
                final_rows.append((t, int(i), self._stored_row({k: v[i] for k, v in next_obs.items()})))
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0
        self.policy.reset(torch.from_numpy(done))
        if self.mode == AutoresetMode.DISABLED:
            next_obs, _ = self.envs.reset(options={"reset_mask": done})
        return next_obs

    def _stored_row(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        """One env's observation as a rollout stores it (texts encoded)."""
        batch = {
            k: np.array([v], dtype=object) if isinstance(v, str) else np.asarray(v)[None]
            for k, v in obs.items()
        }
        return {k: v[0] for k, v in storable_obs(batch, self.envs.single_observation_space).items()}

    def _store_components(self, out: np.ndarray, info: dict[str, Any], done: np.ndarray) -> None:
        """Write this step's named reward components ``[N, K]`` (from final_info where needed)."""
        assert self._component_names is not None
        sources = [info]
        if self.mode == AutoresetMode.SAME_STEP and done.any() and "final_info" in info:
            sources.append(info["final_info"])
        for n in range(self.num_envs):
            source = sources[-1] if done[n] and len(sources) > 1 else sources[0]
            comps = source.get(REWARD_COMPONENTS)
            if comps is not None:
                for k, name in enumerate(self._component_names):
                    value = _env_info(comps, n, name)
                    if value is not None:
                        out[n, k] = value


class TorchRolloutCollector:
    """:class:`RolloutCollector` for a :class:`~omnigym.platform.vec_env.TorchVectorEnv`.

    Observations, actions, rewards and episode accumulators stay tensors on the env's device;
    the host syncs once per step (whether any episode ended, and the finiteness check of the
    actions) and reads back only the returns of finished episodes. Finished sub-envs have
    already started their next episode, so every step is a transition (``valid`` is all True)
    and truncated episodes bootstrap from ``info["final_obs"]``.

    Args:
        envs: the batched torch env.
        policy: acts on the observation tensors (moved to ``device`` if the env's differs).
        num_steps: T, steps per env per rollout.
        device: where the policy runs.
    """

    def __init__(
        self, envs: TorchVectorEnv, policy: Policy, num_steps: int, device: torch.device | str = "cpu"
    ) -> None:
        self.envs, self.policy, self.num_steps = envs, policy, num_steps
        self.device = torch.device(device)
        self.env_device = envs.device
        self.num_envs = envs.num_envs
        self.policy_version = 0
        self.obs: dict[str, Tensor] | None = None
        self._episode_return = torch.zeros(self.num_envs, device=self.env_device)
        self._episode_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.env_device)

    def reset(self, seed: int | None = None) -> None:
        """Start fresh episodes in every sub-env."""
        self.obs, _ = self.envs.reset(seed=seed)
        self._episode_return.zero_()
        self._episode_length.zero_()
        self.policy.reset()

    def state_dict(self) -> dict[str, Any]:
        """The current observation and episode accumulators."""
        return {
            "obs": self.obs,
            "episode_return": self._episode_return,
            "episode_length": self._episode_length,
            "policy_version": self.policy_version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s output (the envs must be restored alongside)."""
        self.obs = state["obs"]
        self._episode_return = state["episode_return"]
        self._episode_length = state["episode_length"]
        self.policy_version = state["policy_version"]

    def collect(self) -> tuple[Rollout, EpisodeStats]:
        """One rollout ``[T, N]`` on the env's device and the episodes that ended in it."""
        if self.obs is None:
            self.reset()
        assert self.obs is not None
        T, N, device = self.num_steps, self.num_envs, self.env_device
        keys = [k for k, v in self.obs.items() if isinstance(v, Tensor)]
        obs_buf = {
            k: torch.empty((T, *self.obs[k].shape), dtype=self.obs[k].dtype, device=device) for k in keys
        }
        rewards = torch.empty((T, N), dtype=torch.float32, device=device)
        terminated = torch.empty((T, N), dtype=torch.bool, device=device)
        truncated = torch.empty((T, N), dtype=torch.bool, device=device)
        steps: list[PolicyStep] = []
        finals: list[tuple[Tensor, dict[str, Tensor]]] = []  # (index [F_t, 2], final obs [F_t, ...])
        stats = EpisodeStats()
        action_space = self.envs.single_action_space

        for t in range(T):
            for k in keys:
                obs_buf[k][t] = self.obs[k]
            with torch.inference_mode():
                step = self.policy.act({k: self.obs[k].to(self.device) for k in keys})
            steps.append(step)
            next_obs, reward, term, trunc, info = self.envs.step(
                to_torch_env_action(action_space, step.action, device)
            )
            rewards[t], terminated[t], truncated[t] = reward, term, trunc
            self._episode_return += reward
            self._episode_length += 1
            done = term | trunc
            if bool(done.any()):
                self._end_episodes(t, done, trunc & ~term, info, keys, finals, stats)
            self.obs = next_obs

        actions, logprob, mask, extras = _stack_steps(steps, device)
        return (
            Rollout(
                obs=obs_buf,
                actions=actions,
                rewards=rewards,
                reward_components=torch.zeros((T, N, 0), device=device),
                terminated=terminated,
                truncated=truncated,
                valid=torch.ones((T, N), dtype=torch.bool, device=device),
                logprob=logprob,
                mask=mask,
                policy_version=torch.full((T, N), self.policy_version, dtype=torch.int64, device=device),
                extras=extras,
                next_obs={k: self.obs[k].clone() for k in keys},
                final_obs={
                    k: torch.cat([f[k] for _, f in finals]) if finals else obs_buf[k][0, :0].clone()
                    for k in obs_buf
                },
                final_index=torch.cat([i for i, _ in finals])
                if finals
                else torch.zeros((0, 2), dtype=torch.int64, device=device),
            ),
            stats,
        )

    def _end_episodes(
        self,
        t: int,
        done: Tensor,
        bootstrap: Tensor,
        info: dict[str, Any],
        keys: list[str],
        finals: list[tuple[Tensor, dict[str, Tensor]]],
        stats: EpisodeStats,
    ) -> None:
        """Record finished episodes and the final observations of truncated ones."""
        ended = done.nonzero().squeeze(-1)
        stats.returns.extend(self._episode_return[ended].tolist())
        stats.lengths.extend(self._episode_length[ended].tolist())
        for name, values in (info.get("final_info") or {}).items():
            stats.metrics.setdefault(name, []).extend(values[ended].float().tolist())
        rows = bootstrap.nonzero().squeeze(-1)
        if len(rows):
            if "final_obs" not in info:
                raise ValueError("a TorchVectorEnv must return info['final_obs'] for truncated episodes")
            index = torch.stack([torch.full_like(rows, t), rows], dim=-1)
            finals.append((index, {k: info["final_obs"][k][rows] for k in keys}))
        self._episode_return = torch.where(done, 0.0, self._episode_return)
        self._episode_length = torch.where(done, 0, self._episode_length)
        self.policy.reset(done.to(self.device))


def make_collector(
    envs: gym.vector.VectorEnv, policy: Policy, num_steps: int, device: torch.device | str = "cpu"
) -> RolloutCollector | TorchRolloutCollector:
    """The collector for ``envs``: torch-native for a :class:`TorchVectorEnv`, NumPy otherwise."""
    if isinstance(envs, TorchVectorEnv):
        return TorchRolloutCollector(envs, policy, num_steps, device)
    return RolloutCollector(envs, policy, num_steps, device)
