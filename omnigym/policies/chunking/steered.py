"""Noise steering (DSRL): reinforcement learning over the initial noise of a frozen chunk policy.

Wagenmaker et al. (2025, "Steering Your Diffusion Policy with Latent Space Reinforcement
Learning") keep a behaviour-cloned diffusion or flow policy fixed and learn a small policy that
chooses the noise its deterministic sampler starts from. The generator's weights never change,
so what it learned from the demonstrations stays; the RL policy only picks, per state, which of
the generator's chunks to execute. Its action is the noise ``w [horizon * action_dim]``, a
Gaussian with a state-dependent mean and a state-independent std, one part per chunk.

At initialisation (mean about 0, std 1) the noise is about the standard normal the generator was
trained from, so the steered policy acts like the frozen policy's sampling. Any on-policy
algorithm trains it (PPO with its critic on :meth:`NoiseSteeringPolicy.features`); only the env
steps that start a chunk carry the part (mask True), as under ``rl_chain``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import Evaluation, Obs, PolicyStep
from omnigym.policies.chunking.policy import ChunkPolicy
from omnigym.policies.distributions import GaussianHead
from omnigym.policies.layers import MLP, orthogonal_init

EXTRA_NOISE = "steering_noise"
"""Extras key of the drawn noise ``[B, horizon * action_dim]`` (unclamped)."""
EXTRA_REPLAN = "steering_replan"
"""Extras key of ``[B]`` bools: the row started a chunk from its noise at this step (its part counts)."""


@dataclass
class NoiseSteeringConfig(PolicyConfig):
    """The generator to steer and the noise policy's network."""

    type: str = "noise_steering"
    base: str = "flow"
    """Registered type of the generator (an action-chunk policy: ``flow``, ``diffusion``)."""
    base_path: str = ""
    """A saved chunk policy (``save_pretrained`` folder) to steer; its type and config replace
    ``base`` and ``base_config``. Empty: a fresh generator from ``base_config`` (tests; or a saved
    steering policy, whose weights hold the generator's)."""
    base_config: dict[str, Any] = field(default_factory=dict)
    """Config fields of the generator built when ``base_path`` is empty."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the noise policy's MLP over the generator's observation features."""
    activation: str = "tanh"
    """Hidden activation of that MLP."""
    log_std_init: float = 0.0
    """Initial log-std of the noise (0: the generator's standard normal)."""
    noise_bound: float = 3.0
    """The noise fed to the generator is clamped to ±this (the stored sample is not)."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.noise_bound <= 0:
            raise ValueError(f"policy.noise_bound must be > 0, got {self.noise_bound}")


class NoiseSteeringPolicy(Policy):
    """A Gaussian policy over a frozen chunk policy's initial noise (see the module doc)."""

    name: ClassVar[str] = "noise_steering"
    config_class: ClassVar[type[PolicyConfig]] = NoiseSteeringConfig
    capabilities: ClassVar[frozenset[str]] = frozenset({"act", "evaluate", "features", "trainable"})
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    config: NoiseSteeringConfig

    def __init__(
        self, config: NoiseSteeringConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        base = load_generator(config, observation_space, action_space)
        if config.base_path:  # a saved steering policy rebuilds the generator from its own config
            base_config = {k: v for k, v in dataclasses.asdict(base.config).items() if k != "type"}
            self.config = dataclasses.replace(config, base=base.name, base_path="", base_config=base_config)
        self.base = base.requires_grad_(False).eval()
        self.noise_dim = base.config.horizon * base.action_dim
        self.trunk = MLP(base.feature_dim, tuple(config.hidden_sizes), config.activation)
        self.head = GaussianHead(self.trunk.out_dim, self.noise_dim, config.log_std_init)
        orthogonal_init(self.trunk, math.sqrt(2))
        orthogonal_init(self.head.mean, 0.01)  # the mean starts near 0: the generator's own sampling

    def train(self, mode: bool = True) -> NoiseSteeringPolicy:
        """Train the noise policy; the generator stays in eval mode."""
        super().train(mode)
        self.base.eval()
        return self

    def features(self, obs: Obs) -> Tensor:
        """The generator's observation features (detached), which the noise policy and a critic read."""
        return self.base.features(obs)

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features`."""
        return self.base.feature_dim

    def _params(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.head(self.trunk(features))

    @torch.no_grad()
    def act(self, obs: Obs, *, deterministic: bool = False) -> PolicyStep:
        """The generator's action, from chosen noise at the steps that start a chunk.

        Deterministic acting starts from the mean noise and carries no part.
        """
        features = self.features(obs)
        batch = features.shape[0]
        replan = self.base.replanning(batch) & (not deterministic)
        noise, logprob = GaussianHead.sample_with_log_prob(self._params(features), deterministic)
        bound = self.config.noise_bound
        step = self.base.act(obs, deterministic=True, noise=noise.clamp(-bound, bound))
        logprob = torch.where(replan, logprob, torch.zeros_like(logprob)).unsqueeze(-1)
        extras = {EXTRA_NOISE: noise, EXTRA_REPLAN: replan}
        return PolicyStep(
            action=step.action, logprob=logprob, mask=replan.unsqueeze(-1).clone(), extras=extras
        )

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Log-density ``[B, 1]`` of the stored noise under the current noise policy, and entropy.

        The log-density is 0 where no chunk started. ``actions`` are not read: the noise is in
        ``extras``.
        """
        if extras is None or EXTRA_NOISE not in extras or EXTRA_REPLAN not in extras:
            raise ValueError("NoiseSteeringPolicy.evaluate needs the extras act returned (the noise)")
        params = self._params(self.features(obs))
        replan = extras[EXTRA_REPLAN].to(params[0].device).bool()
        logprob = GaussianHead.log_prob(params, extras[EXTRA_NOISE].to(params[0].device).float())
        logprob = torch.where(replan, logprob, torch.zeros_like(logprob))
        return Evaluation(logprob=logprob.unsqueeze(-1), entropy=GaussianHead.entropy(params).unsqueeze(-1))

    def reset(self, done_mask: Tensor | None = None) -> None:
        """Forget the generator's history and queued actions where ``done_mask``."""
        self.base.reset(done_mask)


def load_generator(
    config: NoiseSteeringConfig, observation_space: spaces.Dict, action_space: spaces.Space
) -> ChunkPolicy:
    """The chunk policy to steer: loaded from ``base_path``, else built from ``base``/``base_config``."""
    from omnigym.core.config import build_dataclass
    from omnigym.core.registry import POLICIES

    if config.base_path:
        if not Path(config.base_path).exists():
            raise FileNotFoundError(f"policy.base_path {config.base_path!r} does not exist")
        base = Policy.from_pretrained(config.base_path)
    else:
        cls = POLICIES.get(config.base)
        base_config = build_dataclass(
            cls.config_class, {**config.base_config, "type": config.base}, path="policy.base_config"
        )
        base = cls(base_config, observation_space, action_space)
    if tuple(base.action_space.shape or ()) != tuple(action_space.shape or ()):
        raise ValueError(
            f"the generator acts in {base.action_space}, the env in {action_space}: they must match"
        )
    if not isinstance(base, ChunkPolicy):
        raise TypeError(
            f"noise_steering steers an action-chunk policy (flow, diffusion), not {type(base).__name__}"
        )
    if base.rl_chain:
        raise ValueError(
            "noise_steering needs the generator's deterministic sampler: its rl_chain must be off"
        )
    return base
