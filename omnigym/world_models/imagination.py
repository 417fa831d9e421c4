"""A Dreamer-style actor-critic trained only in an RSSM's imagination (DreamerV3, section 3).

From posterior states of real data, the frozen :class:`~omnigym.world_models.rssm.RSSMWorldModel`
is rolled out for ``horizon`` prior steps under the actor; the critic's lambda-returns of those
imagined rewards train both::

    R_t   = r_t + d_t * ((1 - lambda) * v(s_{t+1}) + lambda * R_{t+1}),   R_H = v(s_H)
    d_t   = gamma * P(continue | s_{t+1})
    actor  : min  -E[w_t * R_t / max(1, S)] + eta * E[w_t * log pi(a_t | o_t)]
    critic : min   E[w_t * ((c(s_t) - symlog sg(R_t))^2 + (c(s_t) - sg(c_slow(s_t)))^2)]

with ``w_t`` the product of the continue probabilities before ``t``, ``S`` DreamerV3's return
scale (an EMA of the 95th minus the 5th percentile of the returns) and ``c`` predicting symlog
values. The actor's gradient is the dynamics backpropagation of Dreamer (v1) for continuous
actions: through the reward head, the critic and the latent transitions (straight-through
samples) into the reparameterised action.

Decisions, and why:

* **The actor acts on observations**, not on latent features: it reads the decoded observation of
  each imagined state (``decode([h, z])``) in imagination and the real observation in the real
  env. It is then an ordinary omnigym policy (any registered policy with ``rsample``, by default
  the squashed-Gaussian ``mlp`` of SAC) that deploys, evaluates and saves like any other, with no
  recurrent filter to carry at evaluation time. The cost: it needs (nearly) Markov observations
  (Pendulum's ``[cos, sin, thdot]`` are) and it trusts the decoder. The critic, which only
  training needs, reads the latent features.
* The world model is fitted first and frozen (no interleaved data collection): this is the
  offline form of Dreamer that one fit on random real data allows, as the ``model_based``
  trainer does for SAC.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn

from omnigym.core.policy import Policy
from omnigym.platform.buffers import ReplayBuffer
from omnigym.policies.layers import MLP
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig
from omnigym.world_models.rssm import RSSMConfig, RSSMWorldModel, State, symexp, symlog
from omnigym.world_models.training import fit_world_model, sequence_chunks


@dataclass
class ImaginationConfig:
    """Settings of :class:`ImaginationActorCritic` (DreamerV3's, with learning rates for small nets)."""

    horizon: int = 15
    """Imagined steps per rollout (DreamerV3: 15)."""
    gamma: float = 0.99
    """Discount (DreamerV3: 0.997; 0.99 suits Pendulum's 200-step episodes)."""
    return_lambda: float = 0.95
    """Lambda of the lambda-returns."""
    num_starts: int = 256
    """Posterior start states per update."""
    actor_learning_rate: float = 1e-3
    """Adam learning rate of the actor (DreamerV3: 3e-5 for its larger networks)."""
    critic_learning_rate: float = 1e-3
    """Adam learning rate of the critic."""
    entropy_coef: float = 3e-3
    """``eta``, weight of the actor's entropy bonus on normalised returns (DreamerV3: 3e-4, for its
    REINFORCE gradients). Measured on Pendulum (one seed, 250 updates): 3e-3 reached a real return
    of -156, 1e-2 (with learning rates 3e-4) -837; with little entropy the tanh saturates early,
    where the backpropagated gradient vanishes."""
    critic_hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden widths of the critic."""
    slow_critic_rate: float = 0.02
    """EMA rate of the slow critic the critic is regularised towards."""
    return_scale_decay: float = 0.99
    """EMA decay of the return percentile range."""
    grad_clip: float = 100.0
    """Gradient-norm clip of actor and critic."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        if self.horizon < 1 or self.num_starts < 1:
            raise ValueError("horizon and num_starts must be >= 1")
        if not (0 < self.gamma <= 1 and 0 <= self.return_lambda <= 1):
            raise ValueError("gamma must be in (0, 1], return_lambda in [0, 1]")
        if not 0 < self.slow_critic_rate <= 1 or not 0 <= self.return_scale_decay < 1:
            raise ValueError("slow_critic_rate must be in (0, 1], return_scale_decay in [0, 1)")


def lambda_returns(rewards: Tensor, values: Tensor, discounts: Tensor, lam: float) -> Tensor:
    """TD(lambda) returns bootstrapped from ``values``; ``R_H = v_H`` (module docstring).

    Args:
        rewards: ``r_t`` of the step into ``s_{t+1}``. Shape: [H, N].
        values: ``v(s_t)``, t = 0..H. Shape: [H + 1, N].
        discounts: ``d_t`` (gamma times the continue probability of ``s_{t+1}``). Shape: [H, N].
        lam: lambda.

    Returns:
        ``R_0 .. R_{H-1}``. Shape: [H, N].
    """
    out, last = [], values[-1]
    for t in reversed(range(rewards.shape[0])):
        last = rewards[t] + discounts[t] * ((1 - lam) * values[t + 1] + lam * last)
        out.append(last)
    return torch.stack(out[::-1])


@dataclass
class Imagined:
    """One imagined rollout of ``H`` steps from ``N`` start states.

    Attributes:
        features: ``[h, z]`` of ``s_0 .. s_H``. Shape: [H + 1, N, F].
        logprobs: ``log pi(a_t | o_t)``. Shape: [H, N].
        rewards: predicted reward of the step into ``s_{t+1}``. Shape: [H, N].
        continues: predicted continue probability of ``s_{t+1}``. Shape: [H, N].
    """

    features: Tensor
    logprobs: Tensor
    rewards: Tensor
    continues: Tensor


@contextlib.contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """``module``'s parameters without gradients inside the block (gradients still flow through it)."""
    flags = [p.requires_grad for p in module.parameters()]
    module.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(module.parameters(), flags, strict=True):
            p.requires_grad_(flag)


class ImaginationActorCritic(nn.Module):
    """Trains ``policy`` (any policy with ``rsample``) and a latent critic inside ``model``.

    Args:
        model: a fitted RSSM; never changed here.
        policy: the actor, acting on the model's decoded observations.
        config: an :class:`ImaginationConfig`.
    """

    def __init__(
        self, model: RSSMWorldModel, policy: Policy, config: ImaginationConfig | None = None
    ) -> None:
        super().__init__()
        if "rsample" not in policy.capabilities:
            raise TypeError(
                f"the imagination actor needs differentiable actions ('rsample'); {policy.name} has none"
            )
        self.config = config or ImaginationConfig()
        self.model, self.policy = model, policy
        self.critic = MLP(
            model.feature_dim, (*self.config.critic_hidden_sizes, 1), "elu", activate_last=False
        )
        output = cast(nn.Linear, self.critic.layers[-1])
        nn.init.zeros_(output.weight)  # DreamerV3: the critic starts at value 0
        self.slow_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=self.config.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(
            self.critic.parameters(), lr=self.config.critic_learning_rate
        )
        self.return_scale: Tensor
        self.register_buffer("return_scale", torch.zeros(2))  # EMA of the 5th and 95th percentiles

    def imagine(self, start: State) -> Imagined:
        """Roll the actor out in the model for ``horizon`` steps (differentiable in the actions)."""
        state, features, logprobs = start, [self.model.features(start)], []
        for _ in range(self.config.horizon):
            obs = self.model.unflatten_obs(self.model.decode(features[-1]))
            action, logprob = self.policy.rsample(obs)
            state = self.model.imagine_step(state, action)
            features.append(self.model.features(state))
            logprobs.append(logprob)
        later = torch.stack(features[1:])
        return Imagined(
            features=torch.stack(features),
            logprobs=torch.stack(logprobs),
            rewards=self.model.predict_reward(later),
            continues=torch.sigmoid(self.model.continue_logit(later)),
        )

    def value(self, features: Tensor) -> Tensor:
        """The critic's value in raw units. Shape: [...]."""
        return symexp(self.critic(features).squeeze(-1))

    def update(self, start: State) -> dict[str, float]:
        """One actor and one critic step on a rollout from the posterior states ``start`` ([N, ...])."""
        c = self.config
        with frozen(self.model):
            rollout = self.imagine(start)
            discounts = c.gamma * rollout.continues
            returns = lambda_returns(
                rollout.rewards, self.value(rollout.features), discounts, c.return_lambda
            )
            weights = torch.cumprod(
                torch.cat([torch.ones_like(discounts[:1]), rollout.continues[:-1]]), 0
            ).detach()
            scale = self._update_return_scale(returns.detach())
            actor_loss = (
                -(weights * returns).mean() / scale + c.entropy_coef * (weights * rollout.logprobs).mean()
            )
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            nn.utils.clip_grad_norm_(self.policy.parameters(), c.grad_clip)
            self.actor_optimizer.step()
        features = rollout.features[:-1].detach()
        prediction = self.critic(features).squeeze(-1)
        with torch.no_grad():
            slow = self.slow_critic(features).squeeze(-1)
        critic_loss = (
            weights * ((prediction - symlog(returns.detach())).square() + (prediction - slow).square())
        ).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), c.grad_clip)
        self.critic_optimizer.step()
        with torch.no_grad():
            for fast, slow_p in zip(self.critic.parameters(), self.slow_critic.parameters(), strict=True):
                slow_p.lerp_(fast, c.slow_critic_rate)
        return {
            "train/actor_loss": float(actor_loss.detach()),
            "train/critic_loss": float(critic_loss.detach()),
            "train/imagined_return": float(returns[0].detach().mean()),
            "train/imagined_reward": float(rollout.rewards.detach().mean()),
            "train/return_scale": float(scale),
            "train/entropy": float(-rollout.logprobs.detach().mean()),
        }

    def _update_return_scale(self, returns: Tensor) -> Tensor:
        """``max(1, EMA(P95) - EMA(P5))`` of the returns (DreamerV3 eq. 7-8)."""
        quantiles = torch.quantile(returns.flatten(), torch.tensor([0.05, 0.95], device=returns.device))
        if bool((self.return_scale == 0).all()):
            self.return_scale.copy_(quantiles)
        else:
            self.return_scale.lerp_(quantiles, 1 - self.config.return_scale_decay)
        return torch.clamp(self.return_scale[1] - self.return_scale[0], min=1.0)


@torch.no_grad()
def posterior_states(model: RSSMWorldModel, buffer: ReplayBuffer) -> State:
    """The model's (sampled) posterior state at every step of the buffer's sequence chunks. ``[N, ...]``."""
    chunks = sequence_chunks(buffer, model.sequence_length)
    observations, actions, _, _ = model.sequences(chunks)
    features = model.observe(observations, actions).features.flatten(0, 1)
    h, z = features.split([model.config.deter_size, model.stoch_dim], dim=-1)
    return {"h": h, "z": z}


def train_in_imagination(
    trainer: ImaginationActorCritic,
    starts: State,
    updates: int,
    *,
    seed: int = 0,
    callback: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """``updates`` actor-critic updates, each from ``num_starts`` start states drawn uniformly.

    Returns:
        Every update's metrics.
    """
    generator = torch.Generator().manual_seed(seed)
    size = starts["h"].shape[0]
    history = []
    for update in range(updates):
        rows = torch.randint(size, (trainer.config.num_starts,), generator=generator)
        metrics = trainer.update({k: v[rows] for k, v in starts.items()})
        history.append(metrics)
        if callback is not None:
            callback(update, metrics)
    return history


def imagination_actor(model: RSSMWorldModel, hidden_sizes: tuple[int, ...] = (128, 128)) -> MLPPolicy:
    """The default actor: SAC's tanh-squashed Gaussian ``mlp`` over the model's observation keys."""
    config = MLPPolicyConfig(
        hidden_sizes=hidden_sizes,
        activation="elu",
        obs_keys=tuple(model.obs_layout),
        action_head="squashed_gaussian",
        ortho_init=False,
    )
    return MLPPolicy(config, model.observation_space, model.action_space)


@dataclass
class DreamerResult:
    """What :func:`train_dreamer` measured (returns are real-env means over ``eval_episodes``)."""

    model: RSSMWorldModel
    policy: Policy
    fit: dict[str, float]
    history: list[dict[str, float]]
    real_return: float
    random_return: float
    seconds: dict[str, float] = field(default_factory=dict)


def train_dreamer(
    env_id: str,
    buffer: ReplayBuffer,
    *,
    model_config: RSSMConfig | None = None,
    config: ImaginationConfig | None = None,
    fit_steps: int = 1500,
    updates: int = 300,
    eval_episodes: int = 10,
    seed: int = 0,
    callback: Callable[[int, dict[str, float]], None] | None = None,
) -> DreamerResult:
    """Real data -> fit the RSSM -> actor-critic in imagination -> real evaluation against random.

    ``buffer`` holds real episodes (e.g. from
    :func:`~omnigym.platform.trainers.model_based.collect_real_data`).

    Args:
        env_id: the real env, for the evaluation.
        buffer: real transitions, whole episodes in order.
        model_config: the RSSM's settings (default :class:`RSSMConfig`).
        config: the actor-critic's settings.
        fit_steps: world-model optimiser steps (held-out early stopping with patience 20 epochs).
        updates: actor-critic updates.
        eval_episodes: real episodes per evaluation (seeds ``seed + 1_000_000 + i``).
        seed: seeds the initialisation, the fit and the start-state draws.
        callback: called with ``(update, metrics)`` after every actor-critic update.
    """
    from omnigym.platform.evaluate import evaluate_policy
    from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig

    torch.manual_seed(seed)
    model = RSSMWorldModel(model_config or RSSMConfig(), buffer.observation_space, buffer.action_space)
    clock = time.perf_counter()
    fit = fit_world_model(
        model, buffer, max_steps=fit_steps, patience=20, seed=seed, callback=lambda *_: None
    )
    seconds: dict[str, Any] = {"fit": time.perf_counter() - clock}
    model.eval()
    clock = time.perf_counter()
    trainer = ImaginationActorCritic(model, imagination_actor(model), config)
    history = train_in_imagination(
        trainer, posterior_states(model, buffer), updates, seed=seed, callback=callback
    )
    seconds["imagination"] = time.perf_counter() - clock
    eval_seed = seed + 1_000_000
    real = evaluate_policy(trainer.policy, env_id, episodes=eval_episodes, seed=eval_seed)
    random = RandomPolicy(RandomPolicyConfig(), model.observation_space, model.action_space)
    baseline = evaluate_policy(random, env_id, episodes=eval_episodes, seed=eval_seed, deterministic=False)
    mean = lambda result: sum(result.returns) / len(result.returns)  # noqa: E731
    return DreamerResult(model, trainer.policy, fit, history, mean(real), mean(baseline), seconds)
