"""The data that flows between collection, algorithms and policies, and nothing else.

Every tensor is time-major: ``[T, N, ...]`` for ``T`` steps of ``N`` parallel envs. An action is
made of ``L`` *parts* (one for a Gaussian or categorical action, one per generated token for a
VLM, one per denoising step for a diffusion policy), so log-probabilities are ``[T, N, L]`` with
a ``mask`` of the same shape saying which parts count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor

# The well-known observation keys every env family uses, so any policy can read any env.
OBS_IMAGE = "image"  # uint8 [H, W, 3]: BEV raster, screenshot, rendered camera
OBS_STATE = "state"  # float32 [D]: proprioception, object poses, ego state
OBS_TEXT = "text"  # str: instruction, mission, textual state
TOKEN_VERSION_KEY = "token_version"
"""Policy ``extras`` key of each generated token's weights version, written when a reply spans a
weight update (interruptible generation, ``runtime.async.interrupt_every_tokens``). Shape: [B, L]."""
WELL_KNOWN_OBS_KEYS = (OBS_IMAGE, OBS_STATE, OBS_TEXT)

Obs = dict[str, Tensor]
"""A batch of observations: key -> tensor ``[B, ...]`` (text keys are handled by the policy)."""


@dataclass
class PolicyStep:
    """What a policy returns for a batch of observations.

    Attributes:
        action: the action in the env's format, ``[B, ...]`` (a list of strings for text actions).
        logprob: log-probability of each action part. Shape: [B, L].
        mask: which parts count (padding tokens do not). Shape: [B, L].
        extras: tensors ``[B, ...]`` the policy needs later to re-evaluate the same action
            (generated token ids, diffusion chain latents, ...).
    """

    action: Any
    logprob: Tensor
    mask: Tensor
    extras: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class Evaluation:
    """A policy's re-evaluation of stored actions under its current weights.

    Attributes:
        logprob: Shape: [B, L].
        entropy: Shape: [B, L].
    """

    logprob: Tensor
    entropy: Tensor


def _map_tensors(value: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


@dataclass
class Rollout:
    """Steps collected from ``N`` vector envs over ``T`` steps. Shapes are ``[T, N, ...]``.

    Attributes:
        obs: observation at each step, key -> ``[T, N, ...]``.
        actions: the actions taken (policy format, before clipping to the env's bounds).
        rewards: scalar reward. Shape: [T, N].
        reward_components: named reward components, ``[T, N, K]`` (``K`` may be 0).
        terminated: the MDP ended after this step (do not bootstrap). Shape: [T, N].
        truncated: the episode was cut after this step (time limit; bootstrap). Shape: [T, N].
        valid: False on steps that are not transitions (the reset step of Gymnasium's
            next-step autoreset mode); they are excluded from every loss. Shape: [T, N].
        logprob: behaviour log-probability of each action part. Shape: [T, N, L].
        mask: which action parts count. Shape: [T, N, L].
        policy_version: version of the policy that acted. Shape: [T, N].
        extras: policy extras, key -> ``[T, N, ...]``.
        next_obs: observation after the last step, key -> ``[N, ...]`` (bootstrap).
        final_obs: true final observation of truncated episodes whose next stored observation
            is already the next episode's first one, key -> ``[F, ...]``.
        final_index: ``(t, n)`` of each ``final_obs`` row. Shape: [F, 2].
        reward_component_names: names of the ``K`` reward components.
        values, advantages, returns: filled by an algorithm's ``process_rollout``. Shape: [T, N].
        aux: per-step data an algorithm adds in ``process_rollout`` for its loss (proximal or
            reference log-probabilities, loss weights), key -> ``[T, N, ...]``; flattened with
            the rest, never shown to the policy.
    """

    obs: Obs
    actions: Tensor
    rewards: Tensor
    reward_components: Tensor
    terminated: Tensor
    truncated: Tensor
    valid: Tensor
    logprob: Tensor
    mask: Tensor
    policy_version: Tensor
    extras: dict[str, Tensor]
    next_obs: Obs
    final_obs: Obs
    final_index: Tensor
    reward_component_names: tuple[str, ...] = ()
    values: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    aux: dict[str, Tensor] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        """T, the number of steps per env."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        """N, the number of parallel envs."""
        return int(self.rewards.shape[1])

    @property
    def dones(self) -> Tensor:
        """Terminated or truncated. Shape: [T, N]."""
        return self.terminated | self.truncated

    def to(self, device: torch.device | str) -> Rollout:
        """A copy with every tensor on ``device``."""
        return self.map(lambda t: t.to(device))

    def map(self, fn: Callable[[Tensor], Tensor]) -> Rollout:
        """A copy with ``fn`` applied to every tensor field."""
        return replace(self, **{f.name: _map_tensors(getattr(self, f.name), fn) for f in fields(self)})

    def flatten(self) -> OnPolicyBatch:
        """All valid steps as one batch ``[B, ...]`` (``B`` = valid steps); needs advantages."""
        if self.advantages is None or self.returns is None or self.values is None:
            raise ValueError("Rollout.flatten needs values, advantages and returns: run process_rollout")
        keep = self.valid.reshape(-1)

        def flat(t: Tensor) -> Tensor:
            return t.reshape(-1, *t.shape[2:])[keep]

        return OnPolicyBatch(
            obs={k: flat(v) for k, v in self.obs.items()},
            actions=flat(self.actions),
            logprob=flat(self.logprob),
            mask=flat(self.mask),
            values=flat(self.values),
            advantages=flat(self.advantages),
            returns=flat(self.returns),
            extras={k: flat(v) for k, v in self.extras.items()},
            aux={k: flat(v) for k, v in self.aux.items()},
        )


@dataclass
class OnPolicyBatch:
    """A flat minibatch for on-policy losses. Shapes are ``[B, ...]``.

    Attributes:
        obs: key -> ``[B, ...]``.
        actions: ``[B, ...]``.
        logprob: behaviour log-probability per action part. Shape: [B, L].
        mask: Shape: [B, L].
        values: critic value when collected. Shape: [B].
        advantages: Shape: [B] (or [B, L] for per-part advantages).
        returns: value target. Shape: [B].
        extras: policy extras, key -> ``[B, ...]``.
        aux: the algorithm's per-step data (``Rollout.aux``), key -> ``[B, ...]``.
    """

    obs: Obs
    actions: Tensor
    logprob: Tensor
    mask: Tensor
    values: Tensor
    advantages: Tensor
    returns: Tensor
    extras: dict[str, Tensor] = field(default_factory=dict)
    aux: dict[str, Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def index(self, idx: Tensor) -> OnPolicyBatch:
        """The rows ``idx`` of every tensor."""
        return OnPolicyBatch(
            **{f.name: _map_tensors(getattr(self, f.name), lambda t: t[idx]) for f in fields(self)}
        )

    def minibatches(
        self, num_minibatches: int, generator: torch.Generator | None = None
    ) -> Iterator[OnPolicyBatch]:
        """Shuffled minibatches that together cover the batch once (the batch itself for one)."""
        if num_minibatches == 1:
            yield self
            return
        perm = torch.randperm(len(self), generator=generator)
        for chunk in perm.chunk(num_minibatches):
            yield self.index(chunk)


@dataclass
class TransitionBatch:
    """Transitions ``(s, a, r, s', terminated)`` for off-policy and offline losses. Shapes ``[B, ...]``.

    Attributes:
        obs: key -> ``[B, ...]``.
        actions: ``[B, A]`` (flat Box actions).
        rewards: Shape: [B].
        next_obs: key -> ``[B, ...]``.
        terminated: 1.0 where the episode ended in a terminal state (no bootstrap); time-limit
            ends are 0 and still bootstrap. Shape: [B].
        mc_returns: discounted return-to-go of each transition's episode, where the loss needs
            it (Cal-QL); None otherwise. Shape: [B].
    """

    obs: Obs
    actions: Tensor
    rewards: Tensor
    next_obs: Obs
    terminated: Tensor
    mc_returns: Tensor | None = None

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def to(self, device: torch.device | str) -> TransitionBatch:
        """The batch on ``device``."""
        return TransitionBatch(
            **{f.name: _map_tensors(getattr(self, f.name), lambda t: t.to(device)) for f in fields(self)}
        )

    @staticmethod
    def concat(batches: Sequence[TransitionBatch]) -> TransitionBatch:
        """The batches one after another (e.g. offline and online halves of an RLPD batch)."""

        def cat(values: list[Any]) -> Any:
            if values[0] is None:
                return None
            if isinstance(values[0], dict):
                return {k: torch.cat([v[k] for v in values]) for k in values[0]}
            return torch.cat(values)

        return TransitionBatch(
            **{f.name: cat([getattr(b, f.name) for b in batches]) for f in fields(TransitionBatch)}
        )


@dataclass
class EpisodeStats:
    """Episodes that ended during one collection: their returns, lengths and env metrics."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.returns)
