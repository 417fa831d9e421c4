"""Group rollouts for GRPO-style algorithms: ``G`` episodes from each start state.

The ``N`` envs form ``N / G`` groups; each group resets with one seed (``group_seeds``), so its
``G`` episodes start from the same state and differ only by the policy's sampling. Every env plays
exactly one episode per collection: an env that finishes early stops counting (its later steps are
``valid=False``), and episodes still running at ``max_steps`` are cut there (``truncated``). A
column of the returned :class:`~omnigym.core.types.Rollout` is therefore one episode, which
is what episode-level (outcome) rewards need.
"""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.text_obs import storable_obs
from omnigym.core.types import EpisodeStats, PolicyStep, Rollout
from omnigym.platform.collect import RolloutCollector, action_tensor, group_seeds


class GroupCollector(RolloutCollector):
    """Collects one episode per env, ``group_size`` envs per start state.

    Args:
        envs: the vector env; ``num_envs`` must be a multiple of ``group_size``; same-step or
            next-step autoreset.
        policy: acts on ``obs_to_torch`` observations.
        group_size: G, episodes per start state.
        max_steps: the longest episode kept (the env's time limit, usually); also ``T`` of every
            rollout, so rollouts of several collections stack side by side.
        device: where the policy runs.
        seed: start states are drawn from seeds ``seed, seed + 1, ...``, one per group, never reused.
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        policy: Policy,
        group_size: int,
        max_steps: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        super().__init__(envs, policy, max_steps, device)
        group_seeds(0, envs.num_envs, group_size)  # validates the divisibility
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if self.mode == AutoresetMode.DISABLED:
            raise ValueError("group rollouts need same_step or next_step autoreset (env.autoreset_mode)")
        self.group_size = group_size
        self.next_seed = seed

    @property
    def num_groups(self) -> int:
        """Groups per collection (``num_envs / group_size``)."""
        return self.num_envs // self.group_size

    def state_dict(self) -> dict:
        """The next start seed and the policy version (episodes never span collections)."""
        return {"next_seed": self.next_seed, "policy_version": self.policy_version}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s output."""
        self.next_seed = int(state["next_seed"])
        self.policy_version = int(state["policy_version"])

    def collect(self) -> tuple[Rollout, EpisodeStats]:
        """One episode per env from fresh group start states: a rollout ``[max_steps, N]``."""
        self.reset(seed=group_seeds(self.next_seed, self.num_envs, self.group_size))
        self.next_seed += self.num_groups
        assert self.obs is not None
        T, N = self.num_steps, self.num_envs
        first = storable_obs(self.obs, self.envs.single_observation_space)
        obs_buf = {k: np.zeros((T, *v.shape), dtype=v.dtype) for k, v in first.items()}
        rewards = np.zeros((T, N), dtype=np.float32)
        terminated = np.zeros((T, N), dtype=bool)
        truncated = np.zeros((T, N), dtype=bool)
        valid = np.zeros((T, N), dtype=bool)
        components: np.ndarray | None = None
        steps: list[PolicyStep] = []
        stats = EpisodeStats()
        active = np.ones(N, dtype=bool)

        for t in range(T):
            step, next_obs, reward, term, trunc, info = self._act_and_step(t, obs_buf)
            steps.append(step)
            valid[t] = active
            rewards[t] = np.where(active, reward, 0.0)
            terminated[t], truncated[t] = term & active, trunc & active
            self._episode_return += rewards[t]
            self._episode_length += active
            done = (term | trunc) & active
            components = self._record_components(components, t, info, term | trunc)
            if components is not None:
                components[t, ~active] = 0.0
            if done.any():
                self._end_episodes(t, done, np.zeros(N, dtype=bool), next_obs, info, [], stats)
            active &= ~done
            self.obs = next_obs
            if not active.any():
                break
        if active.any():  # episodes still running at max_steps are cut there
            truncated[T - 1] |= active
            stats.returns.extend(self._episode_return[active].tolist())
            stats.lengths.extend(self._episode_length[active].tolist())
        return self._rollout(obs_buf, steps, rewards, components, terminated, truncated, valid), stats

    def _rollout(
        self,
        obs_buf: dict[str, np.ndarray],
        steps: list[PolicyStep],
        rewards: np.ndarray,
        components: np.ndarray | None,
        terminated: np.ndarray,
        truncated: np.ndarray,
        valid: np.ndarray,
    ) -> Rollout:
        """The buffers as a Rollout; steps after every episode ended are padding (mask False)."""
        T, N = rewards.shape
        padding = T - len(steps)
        actions = torch.stack([action_tensor(s) for s in steps])
        logprob = torch.stack([s.logprob for s in steps])
        mask = torch.stack([s.mask for s in steps])
        extras = {k: torch.stack([s.extras[k] for s in steps]) for k in steps[0].extras}
        if padding:
            actions, logprob = _pad(actions, padding), _pad(logprob, padding)
            mask = _pad(mask, padding)
            extras = {k: _pad(v, padding) for k, v in extras.items()}
        names = self._component_names or ()
        if components is None:
            components = np.zeros((T, N, 0), dtype=np.float32)
        empty = {k: torch.from_numpy(v[0, :0].copy()) for k, v in obs_buf.items()}
        return Rollout(
            obs={k: torch.from_numpy(v) for k, v in obs_buf.items()},
            actions=actions,
            rewards=torch.from_numpy(rewards),
            reward_components=torch.from_numpy(components),
            terminated=torch.from_numpy(terminated),
            truncated=torch.from_numpy(truncated),
            valid=torch.from_numpy(valid),
            logprob=logprob,
            mask=mask & torch.from_numpy(valid).unsqueeze(-1),
            policy_version=torch.full((T, N), self.policy_version, dtype=torch.int64),
            extras=extras,
            next_obs={k: torch.from_numpy(np.zeros_like(v[0])) for k, v in obs_buf.items()},
            final_obs=empty,
            final_index=torch.zeros((0, 2), dtype=torch.int64),
            reward_component_names=names,
        )


def _pad(tensor: Tensor, steps: int) -> Tensor:
    """``tensor [T', N, ...]`` followed by ``steps`` rows of zeros."""
    return torch.cat([tensor, tensor.new_zeros((steps, *tensor.shape[1:]))])


def episode_totals(rollout: Rollout) -> tuple[Tensor, Tensor]:
    """Each column's episode return ``[N]`` and summed reward components ``[N, K]`` (valid steps)."""
    valid = rollout.valid.to(rollout.rewards.dtype)
    returns = (rollout.rewards * valid).sum(0)
    components = (rollout.reward_components * valid.unsqueeze(-1)).sum(0)
    return returns, components


def stack_envs(rollouts: list[Rollout]) -> Rollout:
    """Group rollouts side by side: ``[T, N1 + N2 + ...]`` (all must share ``T`` and components)."""
    if len(rollouts) == 1:
        return rollouts[0]
    names = {r.reward_component_names for r in rollouts}
    if len({r.num_steps for r in rollouts}) != 1 or len(names) != 1:
        raise ValueError("group rollouts stack only with the same max_steps and reward components")

    def cat(*tensors: Tensor) -> Tensor:
        return torch.cat(tensors, dim=1)

    first = rollouts[0]
    return replace(
        first,
        obs={k: cat(*(r.obs[k] for r in rollouts)) for k in first.obs},
        actions=cat(*(r.actions for r in rollouts)),
        rewards=cat(*(r.rewards for r in rollouts)),
        reward_components=cat(*(r.reward_components for r in rollouts)),
        terminated=cat(*(r.terminated for r in rollouts)),
        truncated=cat(*(r.truncated for r in rollouts)),
        valid=cat(*(r.valid for r in rollouts)),
        logprob=cat(*(r.logprob for r in rollouts)),
        mask=cat(*(r.mask for r in rollouts)),
        policy_version=cat(*(r.policy_version for r in rollouts)),
        extras={k: cat(*(r.extras[k] for r in rollouts)) for k in first.extras},
        next_obs={k: torch.cat([r.next_obs[k] for r in rollouts]) for k in first.next_obs},
    )


def select_envs(rollout: Rollout, keep: Tensor) -> Rollout:
    """The columns (episodes) where ``keep [N]`` is True."""
    index = torch.nonzero(keep).squeeze(-1)

    def take(t: Tensor) -> Tensor:
        return t.index_select(1, index)

    return replace(
        rollout,
        obs={k: take(v) for k, v in rollout.obs.items()},
        actions=take(rollout.actions),
        rewards=take(rollout.rewards),
        reward_components=take(rollout.reward_components),
        terminated=take(rollout.terminated),
        truncated=take(rollout.truncated),
        valid=take(rollout.valid),
        logprob=take(rollout.logprob),
        mask=take(rollout.mask),
        policy_version=take(rollout.policy_version),
        extras={k: take(v) for k, v in rollout.extras.items()},
        next_obs={k: v.index_select(0, index) for k, v in rollout.next_obs.items()},
    )
