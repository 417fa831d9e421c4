"""The shared base of algorithms that learn from transitions: SAC online, TD3+BC, IQL, CQL, ... offline.

They differ in their losses; what they share lives here once: the settings common to all
(batch size, discount, target rate, network sizes, reward transform), critic inputs (the
policy's features of the observation), the named networks and optimisers that make up their
resumable state, and the one-off look at a dataset before offline training.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy
from omnigym.core.types import Obs, TransitionBatch
from omnigym.platform.algorithms.base import Algorithm, AlgorithmConfig
from omnigym.platform.algorithms.critics import QEnsemble
from omnigym.platform.buffers import ReplayBuffer

ModuleT = TypeVar("ModuleT", bound=nn.Module)


@dataclass
class OffPolicyConfig(AlgorithmConfig):
    """Settings every transition-learning algorithm has (CORL / SB3 defaults)."""

    batch_size: int = 256
    """Transitions per gradient step."""
    gamma: float = 0.99
    """Discount."""
    tau: float = 0.005
    """Polyak rate of the target networks."""
    actor_lr: float = 3e-4
    """Adam learning rate of the policy."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden widths of the critics (the policy's come from the policy config)."""
    num_critics: int = 2
    """Q-networks in the ensemble (2: twin critics with a min for targets)."""
    normalize_reward: bool = False
    """Scale rewards by 1000 / (max - min episode return) of the dataset (IQL/CQL on locomotion)."""
    reward_scale: float = 1.0
    """Rewards are used as ``reward * reward_scale + reward_bias`` (after ``normalize_reward``)."""
    reward_bias: float = 0.0
    """See ``reward_scale`` (AntMaze: -1)."""
    normalize_obs: bool = True
    """Set the policy's observation normalisation from the dataset before offline training
    (mean/std of its observations, TD3+BC's state normalisation); needs the policy's
    ``normalize_obs``."""
    buffer_size: int = 1_000_000
    """Online training: replay capacity."""
    learning_starts: int = 5_000
    """Online training: env steps of random actions before the first update."""
    updates_per_step: int = 1
    """Online training: gradient steps per env step of every env (the update-to-data ratio)."""
    warmup_steps: int = 0
    """Online training from an offline run (``init_from``): env steps of the loaded policy before
    the first update (WSRL's warm-up; replaces ``learning_starts``' random actions)."""
    offline_data_ratio: float = 0.0
    """Online training with a ``dataset``: the fraction of each batch drawn from it (0: online data
    only, as WSRL; 0.5: RLPD's symmetric sampling; IQL and AWAC fine-tune with their data kept)."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        if self.batch_size < 1 or self.num_critics < 1:
            raise ValueError("batch_size and num_critics must be >= 1")
        if not 0 < self.gamma <= 1 or not 0 < self.tau <= 1:
            raise ValueError(f"gamma and tau must be in (0, 1], got {self.gamma} and {self.tau}")
        if self.actor_lr <= 0 or self.critic_lr <= 0:
            raise ValueError("actor_lr and critic_lr must be > 0")
        if self.warmup_steps < 0 or not 0 <= self.offline_data_ratio < 1:
            raise ValueError("warmup_steps must be >= 0 and offline_data_ratio in [0, 1)")


class OffPolicyAlgorithm(Algorithm):
    """Base of algorithms whose ``update`` takes a :class:`TransitionBatch`.

    Subclasses build their networks and optimisers, list them in :attr:`networks` and
    :attr:`optimizers` (which then save and restore with the algorithm), and implement
    ``compute_loss`` and ``update``. Critics read ``policy.features(obs)``, detached: with the
    MLP policy that is the (normalised) flat observation.
    """

    learns_from: ClassVar[str] = "transitions"
    policy_defaults: ClassVar[dict[str, Any]] = {"type": "mlp", "action_head": "squashed_gaussian"}
    """The policy config this algorithm is meant for (the conformance tests build it; the
    algorithm's configs/experiment files set the same)."""
    requires: ClassVar[tuple[str, ...]] = ("act", "features", "rsample", "trainable")
    config: OffPolicyConfig

    def __init__(
        self,
        config: OffPolicyConfig,
        policy: Policy,
        observation_space: spaces.Dict,
        action_space: spaces.Space,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(config, policy, observation_space, action_space, device)
        if not isinstance(action_space, spaces.Box):
            raise TypeError(f"{self.name} learns continuous (Box) actions, got {action_space}")
        self.action_dim = int(math.prod(action_space.shape))
        self.action_high = torch.as_tensor(
            action_space.high, dtype=torch.float32, device=self.device
        ).reshape(-1)
        self.action_low = torch.as_tensor(action_space.low, dtype=torch.float32, device=self.device).reshape(
            -1
        )
        self.networks: dict[str, nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.reward_scale = float(config.reward_scale)
        self.updates = 0

    # --- helpers for subclasses -------------------------------------------------------------------
    def critic_input(self, obs: Obs) -> Tensor:
        """What the critics see of an observation: the policy's features, without gradient."""
        with torch.no_grad():
            return self.policy.features(obs)

    def make_critics(self, activation: str = "relu", layer_norm: bool = False) -> tuple[QEnsemble, QEnsemble]:
        """The Q-ensemble over ``features + action`` (``hidden_sizes``, ``num_critics``) and its target."""
        q = QEnsemble(
            self.policy.feature_dim + self.action_dim,
            self.config.hidden_sizes,
            self.config.num_critics,
            activation,
            layer_norm,
        ).to(self.device)
        return q, self.make_target(q)

    def make_target(self, network: ModuleT) -> ModuleT:
        """A frozen copy of ``network`` to Polyak-average into."""
        target = copy.deepcopy(network)
        target.requires_grad_(False)
        return target

    def transformed_rewards(self, rewards: Tensor) -> Tensor:
        """Rewards as the losses use them: ``reward * scale + reward_bias``."""
        return rewards * self.reward_scale + self.config.reward_bias

    @staticmethod
    def step(optimizer: torch.optim.Optimizer, loss: Tensor) -> None:
        """One optimiser step on ``loss``."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    # --- data -------------------------------------------------------------------------------------
    def prepare_dataset(self, buffer: ReplayBuffer) -> dict[str, float]:
        """Look at the dataset once before offline training: observation statistics, reward scale.

        Returns what was set, as metrics.
        """
        info: dict[str, float] = {}
        if self.config.normalize_obs and getattr(self.policy, "obs_rms", None) is not None:
            data = buffer.all()
            self.policy.update_obs_stats({k: v.unsqueeze(1) for k, v in data.obs.items()})
            info["data/obs_normalized"] = 1.0
        if self.config.normalize_reward:
            returns = buffer.episode_returns()
            if returns.numel() < 2 or float(returns.max() - returns.min()) <= 0:
                raise ValueError(
                    "normalize_reward needs two or more complete episodes with different returns"
                )
            self.reward_scale = self.config.reward_scale * 1000.0 / float(returns.max() - returns.min())
            info["data/reward_scale"] = self.reward_scale
        return info

    # --- warm starts --------------------------------------------------------------------------------
    pretrained_networks: ClassVar[tuple[str, ...]] = ()
    """Networks :meth:`load_pretrained` takes from another agent (empty: every network of this
    algorithm that the other agent has)."""

    def load_pretrained(self, state: dict[str, Any]) -> list[str]:
        """Copy networks from another algorithm's :meth:`state_dict` (offline-to-online starts).

        Takes :attr:`pretrained_networks` found in ``state`` (e.g. a CQL agent's critics into
        WSRL), and its reward scale, so online rewards keep the units the critics learnt.
        Optimiser states start fresh. Returns the names loaded.

        Raises:
            ValueError: a network's parameter names or shapes differ from this algorithm's (all
                such mismatches are named).
        """
        theirs: dict[str, dict[str, Any]] = dict(state.get("networks", {}))
        names = [name for name in (self.pretrained_networks or tuple(self.networks)) if name in theirs]
        mismatches = []
        for name in names:
            mine = self.networks[name].state_dict()
            for key in sorted(set(mine) | set(theirs[name])):
                ours, other = mine.get(key), theirs[name].get(key)
                if ours is None or other is None or tuple(ours.shape) != tuple(other.shape):
                    mismatches.append(f"{name}.{key}: {_shape(other)} vs {_shape(ours)} here")
        if mismatches:
            raise ValueError(
                "the pre-trained networks do not fit (match num_critics, hidden_sizes and layer_norm): "
                + "; ".join(mismatches)
            )
        for name in names:
            self.networks[name].load_state_dict(theirs[name])
        if "reward_scale" in state:
            self.reward_scale = float(state["reward_scale"])
            names.append("reward_scale")
        return names

    # --- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Networks, optimisers, the reward scale and the update count."""
        return {
            "networks": {name: net.state_dict() for name, net in self.networks.items()},
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "reward_scale": self.reward_scale,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        missing = set(self.networks) - set(state.get("networks", {}))
        if missing:
            raise KeyError(f"{self.name} state lacks networks {sorted(missing)}")
        for name, net in self.networks.items():
            net.load_state_dict(state["networks"][name])
        for name, opt in self.optimizers.items():
            opt.load_state_dict(state["optimizers"][name])
        self.reward_scale = float(state["reward_scale"])
        self.updates = int(state["updates"])

    def critic_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """The critics' loss on one batch and its parts; pure, no step."""
        raise NotImplementedError(f"{type(self).__name__} does not implement critic_loss")

    def actor_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy's loss on one batch and its parts; pure, no step."""
        raise NotImplementedError(f"{type(self).__name__} does not implement actor_loss")

    def compute_loss(self, batch: TransitionBatch) -> tuple[Tensor, dict[str, Tensor]]:
        """Critic plus actor loss on one batch (before any step) and their parts; pure, no step."""
        critic, critic_metrics = self.critic_loss(batch)
        actor, actor_metrics = self.actor_loss(batch)
        return critic + actor, {**critic_metrics, **actor_metrics}


def _shape(tensor: Any) -> str:
    return "missing" if tensor is None else str(tuple(tensor.shape))
