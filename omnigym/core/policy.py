"""The Policy interface: the deployable actor, nothing that only training needs.

Critics, Q-networks and optimisers belong to algorithms, so one policy can be trained by
behaviour cloning today and by PPO tomorrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.config import build_dataclass
from omnigym.core.pretrained import load_weights, read_meta, save_folder
from omnigym.core.types import Evaluation, Obs, PolicyStep


@dataclass
class PolicyConfig:
    """Base of every policy config; ``type`` is the registered policy name."""

    type: str = ""


CAPABILITIES = frozenset({"act", "evaluate", "compute_loss", "features", "trainable", "rsample"})
"""Every capability a policy may declare (see :class:`Policy`)."""


class IncompatibleSpacesError(ValueError):
    """A policy cannot act in an env's spaces; raised before the policy is built.

    Attributes:
        policy: the policy's registered name.
        part: ``"action"`` or ``"observation"``, the space that does not fit.
        supported: the space types the policy accepts there (names, e.g. ``("Box", "Discrete")``).
    """

    def __init__(self, message: str, *, policy: str, part: str, supported: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.policy, self.part, self.supported = policy, part, supported


def describe_space(space: spaces.Space) -> str:
    """A space in a few words: ``Box(-1.0, 1.0, (4,), float32)``, ``Text(max_length=512)``."""
    if isinstance(space, spaces.Text):  # its repr lists the whole character set
        return f"Text(max_length={space.max_length})"
    if isinstance(space, spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe_space(s)}" for k, s in space.spaces.items()) + ")"
    text = str(space)
    if isinstance(space, spaces.Box) and "\n" in text:  # per-element bounds of a matrix: summarised
        return f"Box({space.low.min():g}..{space.high.max():g}, {space.shape}, {space.dtype})"
    return text


def space_names(types: tuple[type[spaces.Space], ...]) -> str:
    """``"Box or Discrete"`` for ``(spaces.Box, spaces.Discrete)``."""
    names = [t.__name__ for t in types]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


class Policy(nn.Module):
    """Maps a batch of dict observations to actions, with the log-probability of each part.

    Subclasses set ``name``, ``config_class`` and ``capabilities`` (what algorithms may rely on:
    ``act`` always; ``evaluate`` to re-score stored actions; ``compute_loss`` for supervised
    training; ``features`` for critics that share the policy's encoder; ``trainable`` when the
    policy has parameters to learn).
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig
    capabilities: ClassVar[frozenset[str]] = frozenset({"act"})
    capability_switches: ClassVar[dict[str, str]] = {}
    """Capabilities the policy gains through a config key, and that key (``{"evaluate":
    "rl_chain=true"}``): an algorithm that needs one names the switch in its refusal."""
    env_kwargs: ClassVar[dict[str, Any]] = {}
    """Keyword arguments the env must be made with for this policy (e.g. the privileged
    observations an expert reads); ``omnigym eval`` and ``evaluate_policy`` apply them."""
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = ()
    """The action space types the policy acts in (``Box``, ``Discrete``, ``Text``...); empty: any.
    :meth:`check_spaces` reads it, so a mismatch is one clear error before anything is built."""
    obs_key_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    """The space types of the observation keys its config's ``obs_keys`` may name."""

    def __init__(
        self, config: PolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(f"policies take Dict observation spaces, got {type(observation_space).__name__}")
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space

    @classmethod
    def check_spaces(
        cls, config: PolicyConfig | None, observation_space: spaces.Space, action_space: spaces.Space
    ) -> None:
        """Refuse spaces this policy type cannot act in, before building it (cheap, no weights).

        Checks the declared :attr:`action_spaces` and, when ``config`` has ``obs_keys``, that each
        names an observation key of a type in :attr:`obs_key_spaces`. Finer checks (shapes, bounds)
        stay in ``__init__``.

        Raises:
            IncompatibleSpacesError: names the space that does not fit and what the policy accepts.
        """
        name = cls.name or cls.__name__
        if cls.action_spaces and not isinstance(action_space, cls.action_spaces):
            raise IncompatibleSpacesError(
                f"policy {name!r} acts in {space_names(cls.action_spaces)} action spaces, "
                f"not {describe_space(action_space)}",
                policy=name,
                part="action",
                supported=tuple(t.__name__ for t in cls.action_spaces),
            )
        if not isinstance(observation_space, spaces.Dict):
            raise IncompatibleSpacesError(
                f"policy {name!r} reads Dict observations, not {describe_space(observation_space)}",
                policy=name,
                part="observation",
            )
        for key in getattr(config, "obs_keys", None) or ():
            space = observation_space.spaces.get(key)
            if space is None:
                raise IncompatibleSpacesError(
                    f"policy {name!r} reads observation {key!r} (policy.obs_keys), which the env "
                    f"does not have (it observes {sorted(observation_space.spaces)})",
                    policy=name,
                    part="observation",
                )
            if not isinstance(space, cls.obs_key_spaces):
                raise IncompatibleSpacesError(
                    f"policy {name!r} reads {space_names(cls.obs_key_spaces)} observations, but "
                    f"{key!r} (policy.obs_keys) is {type(space).__name__}",
                    policy=name,
                    part="observation",
                    supported=tuple(t.__name__ for t in cls.obs_key_spaces),
                )

    # --- acting -------------------------------------------------------------------------
    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """Choose actions for a batch of observations ``key -> [B, ...]``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement act")

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Log-probability and entropy of stored ``actions`` under the current weights."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot re-evaluate actions (no 'evaluate' capability)"
        )

    def rsample(self, obs: Obs, *, deterministic: bool = False) -> tuple[Tensor, Tensor]:
        """Box actions ``[B, A]`` and their log-probabilities ``[B]``, differentiable (reparameterised)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no differentiable actions (no 'rsample' capability)"
        )

    def evaluate_with_features(
        self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None
    ) -> tuple[Evaluation, Tensor]:
        """:meth:`evaluate` and :meth:`features` of one batch, for an actor-critic loss.

        Policies whose head is built on their features override this to encode the batch once
        (a CNN encoder shared by actor and critic would otherwise run twice per minibatch).
        """
        return self.evaluate(obs, actions, extras), self.features(obs)

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """Supervised (behaviour cloning) loss on a batch with ``obs`` and ``actions``."""
        raise NotImplementedError(
            f"{type(self).__name__} has no supervised loss (no 'compute_loss' capability)"
        )

    def features(self, obs: Obs) -> Tensor:
        """The encoded observation ``[B, feature_dim]`` a critic may build on."""
        raise NotImplementedError(f"{type(self).__name__} exposes no features (no 'features' capability)")

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features`."""
        raise NotImplementedError(f"{type(self).__name__} exposes no features")

    def start_fine_tuning(self, source: Policy) -> None:
        """Prepare weights just loaded from ``source`` for RL fine-tuning (``init_from``, once).

        Nothing by default; the action-chunk policies take the weights ``source`` acted with and
        freeze the chain's deterministic first steps (``ChunkPolicy.start_fine_tuning``).
        """

    def reset(self, done_mask: Tensor | None = None) -> None:
        """Clear per-episode memory (action-chunk queues, recurrent state) where ``done_mask``."""

    def update_obs_stats(self, obs: Obs) -> None:
        """Update observation-normalisation statistics from collected ``obs [T, N, ...]``."""

    @property
    def device(self) -> torch.device:
        """The device of the policy's parameters or buffers (CPU when it has none)."""
        for tensor in (*self.parameters(), *self.buffers()):
            return tensor.device
        return torch.device("cpu")

    @torch.inference_mode()
    def predict(self, obs: dict[str, np.ndarray], *, deterministic: bool = True) -> Any:
        """Act on NumPy observations ``key -> [B, ...]``; returns the action as NumPy."""
        step = self.act(obs_to_torch(obs, self.device), deterministic=deterministic)
        return step.action.cpu().numpy() if isinstance(step.action, Tensor) else step.action

    # --- saving -------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> Path:
        """Write ``config.json`` (type, config, spaces) and ``model.safetensors`` to ``path``."""
        return save_folder(path, self, self.name, self.config, self.observation_space, self.action_space)

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> Policy:
        """Load a policy saved by :meth:`save_pretrained` (any registered type)."""
        from omnigym.core.registry import POLICIES

        meta = read_meta(path, "policy")
        try:
            policy_cls = POLICIES.get(meta["type"])
        except KeyError as exc:
            raise ValueError(f"corrupt policy config in {path}: {exc}") from exc
        if cls is Policy and _loads_itself(policy_cls):  # e.g. a VLM, which reloads its hf/ copy
            return policy_cls.from_pretrained(path, device)
        try:
            config = build_dataclass(policy_cls.config_class, meta["config"], path="policy")
            policy = policy_cls(config, meta["observation_space"], meta["action_space"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"corrupt policy config in {path}: {exc}") from exc
        if cls is not Policy and not isinstance(policy, cls):
            raise TypeError(f"{path} holds a {type(policy).__name__}, not a {cls.__name__}")
        load_weights(path, policy, "policy")
        return policy.to(device)


def _loads_itself(policy_cls: type[Policy]) -> bool:
    """Whether a policy type overrides :meth:`Policy.from_pretrained`."""
    own = getattr(policy_cls.from_pretrained, "__func__", None)
    return own is not getattr(Policy.from_pretrained, "__func__", None)


def obs_to_torch(obs: dict[str, Any], device: torch.device | str = "cpu") -> Obs:
    """NumPy observations to tensors on ``device`` (no copy on CPU); text stays as it is."""
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            out[key] = torch.from_numpy(value).to(device)
        else:
            out[key] = value
    return out
