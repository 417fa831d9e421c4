"""A compact recurrent state-space model over state observations (DreamerV3's essentials).

Hafner et al. 2023, "Mastering Diverse Domains through World Models" (DreamerV3), section 2 and
appendix; the RSSM itself is from PlaNet (Hafner et al. 2019). The model state is a deterministic
GRU state ``h`` and a stochastic latent ``z`` of ``stoch_groups`` one-hot categoricals of
``stoch_classes`` classes; its features ``[h, z]`` feed the decoder and the heads::

    embed_t  = enc(symlog(o_t))
    h_t      = GRU(h_{t-1}, [z_{t-1}, a_{t-1}])            h_0 = tanh(W embed_0 + b)
    prior    p(z_t | h_t)           posterior  q(z_t | h_t, embed_t)
    o_t      ~ symexp(dec(h_t, z_t))   r_t ~ symexp(rew(h_t, z_t))   continue_t ~ Bern(cont(h_t, z_t))

Training, on sequence chunks of real episodes (``sequence_length`` transitions each; see
:func:`omnigym.world_models.training.sequence_chunks`), minimises (DreamerV3 eq. 5)::

    L = ||dec - symlog o||^2 + (rew - symlog r)^2 + BCE(cont, 1 - terminated)
        + 0.5 * max(1, KL[sg(q) || p]) + 0.1 * max(1, KL[q || sg(p)])

with KL summed over the latent groups per step and clipped from below at 1 nat (free bits). Every
categorical mixes 1 % uniform into its probabilities (unimix) and is sampled with straight-through
gradients.

Decisions, and why:

* Observations are the flat ``Box`` keys, as for the ensemble; symlog squashes their scale, so no
  data statistics are fitted. The decoder and reward head regress symlog targets with a squared
  error (DreamerV3 uses it for vector observations; for rewards it uses a two-hot critic-style
  head, which a small dense-reward task does not need).
* Every chunk starts from ``h_0`` and the posterior of its first observation, exactly as
  :meth:`RSSMWorldModel.reset` starts a simulated episode from one real observation. The model is
  therefore trained for the way :class:`~omnigym.world_models.env.WorldModelVectorEnv` uses it.
* ``h_0`` is a function of the first observation (DreamerV3: a learned constant, with several
  real observations of context before imagination starts). A simulated episode here starts from
  one observation, and with a constant ``h_0`` all of it must pass through the discrete ``z_0``:
  measured on Pendulum (800 steps), the reconstruction MSE was 0.31 at ``t = 0`` against 0.03
  from ``t = 4`` on, and a reset's 1-step ``thdot`` MSE 1.9.
* ``reset`` has no generator, so it takes the posterior's mode; ``step`` samples the prior from
  ``generator`` (or takes its mode with ``deterministic``). No uncertainty is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.types import Obs, TransitionBatch
from omnigym.world_models.base import StepResult, WorldModel, WorldModelConfig
from omnigym.world_models.state_layout import state_bounds, state_layout

State = dict[str, Tensor]
"""``{"h": [B, deter_size], "z": [B, stoch_groups * stoch_classes]}``."""


@dataclass
class RSSMConfig(WorldModelConfig):
    """Settings of :class:`RSSMWorldModel`: DreamerV3's losses, sized to train on a CPU in seconds."""

    type: str = "rssm"
    deter_size: int = 128
    """Width of the GRU state ``h``."""
    stoch_groups: int = 8
    """Categorical latents in ``z``."""
    stoch_classes: int = 8
    """Classes of each categorical latent."""
    hidden_size: int = 128
    """Width of every MLP layer (encoder, decoder, heads, prior, posterior)."""
    mlp_layers: int = 2
    """Hidden layers of the encoder, decoder and heads (LayerNorm + SiLU each)."""
    unimix: float = 0.01
    """Share of the uniform distribution mixed into every categorical (DreamerV3: 1 %)."""
    free_bits: float = 1.0
    """KL values below this many nats are not optimised (DreamerV3: 1)."""
    kl_dyn_scale: float = 0.5
    """Weight of the dynamics loss ``KL[sg(posterior) || prior]``."""
    kl_rep_scale: float = 0.1
    """Weight of the representation loss ``KL[posterior || sg(prior)]``."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    grad_clip: float = 100.0
    """Global gradient-norm clip of every step."""
    sequence_length: int = 32
    """Transitions per training chunk of a real episode."""
    termination_threshold: float = 0.5
    """``step`` ends a row when its predicted termination probability exceeds this."""
    deterministic: bool = False
    """``step`` takes the prior's most likely class instead of a sample."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        sizes = (self.deter_size, self.stoch_groups, self.stoch_classes, self.hidden_size, self.mlp_layers)
        if min(sizes) < 1 or self.stoch_classes < 2:
            raise ValueError(f"rssm sizes must be >= 1 (stoch_classes >= 2), got {sizes}")
        if not 0 <= self.unimix < 1:
            raise ValueError(f"unimix must be in [0, 1), got {self.unimix}")
        if min(self.free_bits, self.kl_dyn_scale, self.kl_rep_scale) < 0:
            raise ValueError("free_bits, kl_dyn_scale and kl_rep_scale must be >= 0")
        if self.learning_rate <= 0 or self.grad_clip <= 0:
            raise ValueError("learning_rate and grad_clip must be > 0")
        if self.sequence_length < 1:
            raise ValueError(f"sequence_length must be >= 1, got {self.sequence_length}")
        if not 0 < self.termination_threshold < 1:
            raise ValueError(f"termination_threshold must be in (0, 1), got {self.termination_threshold}")


def symlog(x: Tensor) -> Tensor:
    """``sign(x) * log(1 + |x|)`` (DreamerV3 eq. 1): compresses large magnitudes, keeps small ones."""
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x: Tensor) -> Tensor:
    """Inverse of :func:`symlog`: ``sign(x) * (exp(|x|) - 1)``."""
    return torch.sign(x) * torch.expm1(x.abs())


def unimix_log_probs(logits: Tensor, unimix: float) -> Tensor:
    """Log-probabilities of ``(1 - unimix) * softmax(logits) + unimix / C`` over the last dim.

    The floor ``unimix / C`` on every probability keeps KL terms and log-likelihoods finite.
    """
    probs = torch.softmax(logits, dim=-1)
    if unimix > 0:
        probs = (1 - unimix) * probs + unimix / logits.shape[-1]
    return torch.log(probs)


def sample_one_hot(
    log_probs: Tensor, *, generator: torch.Generator | None = None, deterministic: bool = False
) -> Tensor:
    """A one-hot sample of each categorical, with straight-through gradients.

    The forward value is the one-hot sample (or the mode when ``deterministic``); the gradient is
    that of the probabilities (``sample + p - sg(p)``, Bengio et al. 2013). The class is drawn by
    inverting the CDF at one uniform number per categorical from ``generator``.

    Args:
        log_probs: Shape: [..., S, C].
        generator: the source of the uniform numbers (the global one when None).
        deterministic: take each categorical's most likely class; draws nothing.

    Returns:
        Shape: [..., S, C].
    """
    probs = log_probs.exp()
    if deterministic:
        index = probs.argmax(-1)
    else:
        device = generator.device if generator is not None else probs.device
        u = torch.rand(probs.shape[:-1], generator=generator, device=device).to(probs.device)
        index = (probs.cumsum(-1) < u.unsqueeze(-1)).sum(-1).clamp(max=probs.shape[-1] - 1)
    one_hot = F.one_hot(index, probs.shape[-1]).to(probs.dtype)
    if not probs.requires_grad:
        return one_hot  # exactly one-hot: ``1 + p - p`` may round away from 1
    return one_hot + probs - probs.detach()


def kl_loss(
    post_log_probs: Tensor, prior_log_probs: Tensor, free_bits: float, dyn_scale: float, rep_scale: float
) -> tuple[Tensor, Tensor, Tensor]:
    """DreamerV3's balanced KL with free bits (eq. 5): ``dyn * L_dyn + rep * L_rep`` and both terms.

    ``L_dyn = max(free_bits, KL[sg(q) || p])`` trains the prior towards the posterior,
    ``L_rep = max(free_bits, KL[q || sg(p)])`` the posterior towards the prior; each KL is summed
    over the latent groups, then clipped per step, then averaged.

    Args:
        post_log_probs: the posterior's ``log q``. Shape: [..., S, C].
        prior_log_probs: the prior's ``log p``. Shape: [..., S, C].
        free_bits: nats below which each step's KL is not optimised.
        dyn_scale: weight of ``L_dyn``.
        rep_scale: weight of ``L_rep``.

    Returns:
        ``(loss, L_dyn, L_rep)``, scalars (the clipped values).
    """

    def kl(p_log: Tensor, q_log: Tensor) -> Tensor:
        return (p_log.exp() * (p_log - q_log)).sum(dim=(-2, -1))

    dyn = kl(post_log_probs.detach(), prior_log_probs).clamp_min(free_bits).mean()
    rep = kl(post_log_probs, prior_log_probs.detach()).clamp_min(free_bits).mean()
    return dyn_scale * dyn + rep_scale * rep, dyn, rep


def _mlp(in_dim: int, hidden: int, layers: int, out_dim: int | None = None) -> nn.Sequential:
    """``layers`` x (Linear, LayerNorm, SiLU), then a Linear to ``out_dim`` when given (DreamerV3's MLPs)."""
    modules: list[nn.Module] = []
    for i in range(layers):
        modules += [nn.Linear(in_dim if i == 0 else hidden, hidden), nn.LayerNorm(hidden), nn.SiLU()]
    if out_dim is not None:
        modules.append(nn.Linear(hidden if layers else in_dim, out_dim))
    return nn.Sequential(*modules)


@dataclass
class Observed:
    """The posterior pass over sequences. ``T`` transitions, ``T + 1`` observations.

    Attributes:
        post: posterior ``log q``. Shape: [B, T + 1, S, C].
        prior: prior ``log p`` of steps ``1..T``. Shape: [B, T, S, C].
        features: posterior features ``[h, z]``. Shape: [B, T + 1, F].
        prior_features: ``[h_t, mode of p(z_t | h_t)]`` of steps ``1..T``, the open-loop 1-step
            prediction. Shape: [B, T, F].
    """

    post: Tensor
    prior: Tensor
    features: Tensor
    prior_features: Tensor


class RSSMWorldModel(WorldModel):
    """DreamerV3-style RSSM over flat state observations, with reward and continue heads.

    The model state is ``{"h", "z"}`` (:data:`State`). ``step`` decodes the observation from the
    latent; rewards and terminations come from the heads on the new state's features.

    Args:
        config: an :class:`RSSMConfig`.
        observation_space: the env's ``Dict`` observation space (its float ``Box`` keys are modelled).
        action_space: the env's ``Box`` action space.
    """

    name = "rssm"
    config_class = RSSMConfig
    config: RSSMConfig

    def __init__(
        self, config: RSSMConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(action_space, spaces.Box):
            raise TypeError(f"the rssm takes Box actions, got {action_space}")
        self.obs_layout = state_layout(observation_space)
        self.obs_dim = sum(math.prod(shape) for shape in self.obs_layout.values())
        self.action_dim = int(math.prod(action_space.shape))
        c = config
        self.stoch_dim = c.stoch_groups * c.stoch_classes
        self.feature_dim = c.deter_size + self.stoch_dim
        self.encoder = _mlp(self.obs_dim, c.hidden_size, c.mlp_layers)
        self.initial_net = nn.Linear(c.hidden_size, c.deter_size)
        self.img_in = _mlp(self.stoch_dim + self.action_dim, c.hidden_size, 1)
        self.gru = nn.GRUCell(c.hidden_size, c.deter_size)
        self.prior_net = _mlp(c.deter_size, c.hidden_size, 1, self.stoch_dim)
        self.post_net = _mlp(c.deter_size + c.hidden_size, c.hidden_size, 1, self.stoch_dim)
        self.decoder = _mlp(self.feature_dim, c.hidden_size, c.mlp_layers, self.obs_dim)
        self.reward_head = _mlp(self.feature_dim, c.hidden_size, c.mlp_layers, 1)
        self.continue_head = _mlp(self.feature_dim, c.hidden_size, c.mlp_layers, 1)
        nn.init.zeros_(cast(nn.Linear, self.reward_head[-1]).weight)  # DreamerV3: zero-initialised outputs
        low, high = state_bounds(observation_space, self.obs_layout)
        self.obs_low: Tensor
        self.obs_high: Tensor
        self.action_scale: Tensor
        self.action_bias: Tensor
        self.register_buffer("obs_low", low, persistent=False)
        self.register_buffer("obs_high", high, persistent=False)
        a_low = torch.as_tensor(action_space.low, dtype=torch.float32).flatten()
        a_high = torch.as_tensor(action_space.high, dtype=torch.float32).flatten()
        finite = torch.isfinite(a_low) & torch.isfinite(a_high)
        self.register_buffer("action_scale", torch.where(finite, (a_high - a_low) / 2, 1.0), persistent=False)
        self.register_buffer("action_bias", torch.where(finite, (a_high + a_low) / 2, 0.0), persistent=False)
        self.optimizer = torch.optim.Adam(self.parameters(), lr=c.learning_rate)

    @property
    def sequence_length(self) -> int:
        """Transitions per training chunk; ``fit_world_model`` feeds this model episode chunks."""
        return self.config.sequence_length

    # --- data layout --------------------------------------------------------------------
    def flatten_obs(self, obs: Obs, leading: int = 1) -> Tensor:
        """The modelled keys of ``obs`` as flat float rows. Shape: [*lead, D] (``leading`` dims)."""
        missing = [key for key in self.obs_layout if key not in obs]
        if missing:
            raise KeyError(f"observations lack the modelled keys {missing} (have {sorted(obs)})")
        rows = [obs[k].reshape(*obs[k].shape[:leading], -1).float() for k in self.obs_layout]
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=-1)

    def unflatten_obs(self, flat: Tensor) -> Obs:
        """Inverse of :meth:`flatten_obs` for one leading dim: key -> ``[B, *shape]``."""
        parts = flat.split([math.prod(shape) for shape in self.obs_layout.values()], dim=-1)
        return {
            key: part.reshape(flat.shape[0], *shape)
            for (key, shape), part in zip(self.obs_layout.items(), parts, strict=True)
        }

    def sequences(self, batch: TransitionBatch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Observations ``[B, T + 1, D]``, actions ``[B, T, A]``, rewards and terminations ``[B, T]``.

        Sequence batches hold ``[B, T, ...]``; single transitions ``[B, ...]`` are read as ``T = 1``.
        """
        sequence = batch.rewards.dim() == 2
        rewards = batch.rewards if sequence else batch.rewards[:, None]
        obs, next_obs = (
            self.flatten_obs(batch.obs, 2 if sequence else 1),
            self.flatten_obs(batch.next_obs, 2 if sequence else 1),
        )
        if not sequence:
            obs, next_obs = obs[:, None], next_obs[:, None]
        observations = torch.cat([obs, next_obs[:, -1:]], dim=1)
        actions = batch.actions.reshape(*rewards.shape, self.action_dim).float()
        terminated = batch.terminated.reshape(rewards.shape).float()
        return observations, actions, rewards.float(), terminated

    # --- the latent dynamics ------------------------------------------------------------
    def _log_probs(self, logits: Tensor) -> Tensor:
        return unimix_log_probs(logits.unflatten(-1, (self.config.stoch_groups, -1)), self.config.unimix)

    def initial_state(self, embed: Tensor) -> Tensor:
        """``h_0 = tanh(W embed_0 + b)``, from the first observation's embedding. Shape: [B, deter_size]."""
        return torch.tanh(self.initial_net(embed))

    def posterior(self, h: Tensor, embed: Tensor) -> Tensor:
        """``log q(z | h, embed)``. Shape: [B, S, C]."""
        return self._log_probs(self.post_net(torch.cat([h, embed], dim=-1)))

    def prior(self, h: Tensor) -> Tensor:
        """``log p(z | h)``. Shape: [B, S, C]."""
        return self._log_probs(self.prior_net(h))

    def recurrent(self, h: Tensor, z: Tensor, action: Tensor) -> Tensor:
        """``h' = GRU(h, [z, a])`` with ``a`` scaled to [-1, 1] by the action bounds. Shape: [B, deter]."""
        action = (action.reshape(action.shape[0], -1).to(h.dtype) - self.action_bias) / self.action_scale
        return self.gru(self.img_in(torch.cat([z, action], dim=-1)), h)

    def imagine_step(
        self,
        state: State,
        action: Tensor,
        *,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
    ) -> State:
        """One prior step (differentiable: straight-through ``z``, gradients into the action)."""
        h = self.recurrent(state["h"], state["z"], action)
        z = sample_one_hot(self.prior(h), generator=generator, deterministic=deterministic)
        return {"h": h, "z": z.flatten(-2)}

    @staticmethod
    def features(state: State) -> Tensor:
        """``[h, z]``. Shape: [..., F]."""
        return torch.cat([state["h"], state["z"]], dim=-1)

    def decode(self, features: Tensor) -> Tensor:
        """Flat observations in raw units, clipped to the space's bounds. Shape: [..., D]."""
        return torch.clamp(symexp(self.decoder(features)), self.obs_low, self.obs_high)

    def predict_reward(self, features: Tensor) -> Tensor:
        """Rewards in raw units. Shape: [...]."""
        return symexp(self.reward_head(features).squeeze(-1))

    def continue_logit(self, features: Tensor) -> Tensor:
        """Logit of not terminating. Shape: [...]."""
        return self.continue_head(features).squeeze(-1)

    def observe(self, observations: Tensor, actions: Tensor, *, sample: bool = True) -> Observed:
        """Filter sequences with the posterior (sampled, or its mode when not ``sample``).

        Args:
            observations: raw flat observations. Shape: [B, T + 1, D].
            actions: Shape: [B, T, A], T >= 1.
            sample: draw ``z`` from the posterior (global RNG); False: its mode.
        """
        embed = self.encoder(symlog(observations))
        h = self.initial_state(embed[:, 0])
        post = [self.posterior(h, embed[:, 0])]
        z = sample_one_hot(post[0], deterministic=not sample).flatten(-2)
        features, priors, prior_features = [torch.cat([h, z], -1)], [], []
        for t in range(actions.shape[1]):
            h = self.recurrent(h, z, actions[:, t])
            prior = self.prior(h)
            post.append(self.posterior(h, embed[:, t + 1]))
            z = sample_one_hot(post[-1], deterministic=not sample).flatten(-2)
            priors.append(prior)
            features.append(torch.cat([h, z], -1))
            prior_features.append(torch.cat([h, sample_one_hot(prior, deterministic=True).flatten(-2)], -1))
        return Observed(*(torch.stack(xs, dim=1) for xs in (post, priors, features, prior_features)))

    # --- training -----------------------------------------------------------------------
    def losses(self, batch: TransitionBatch, *, sample: bool = True) -> tuple[dict[str, Tensor], Observed]:
        """Every loss term of DreamerV3 eq. 5 on a (sequence) batch, and the posterior pass."""
        observations, actions, rewards, terminated = self.sequences(batch)
        seen = self.observe(observations, actions, sample=sample)
        later = seen.features[:, 1:]
        kl, dyn, rep = kl_loss(
            seen.post[:, 1:],
            seen.prior,
            self.config.free_bits,
            self.config.kl_dyn_scale,
            self.config.kl_rep_scale,
        )
        terms = {
            "recon": (self.decoder(seen.features) - symlog(observations)).square().sum(-1).mean(),
            "reward": (self.reward_head(later).squeeze(-1) - symlog(rewards)).square().mean(),
            "continue": F.binary_cross_entropy_with_logits(self.continue_logit(later), 1 - terminated),
            "kl_dyn": dyn,
            "kl_rep": rep,
        }
        terms["loss"] = terms["recon"] + terms["reward"] + terms["continue"] + kl
        return terms, seen

    def train_step(self, batch: TransitionBatch) -> dict[str, float]:
        """One Adam step on a batch of sequence chunks ``[B, T, ...]`` (or single transitions)."""
        self.train()
        terms, _ = self.losses(batch)
        self.optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        norm = nn.utils.clip_grad_norm_(self.parameters(), self.config.grad_clip)
        self.optimizer.step()
        return {**{f"train/{k}": float(v.detach()) for k, v in terms.items()}, "train/grad_norm": float(norm)}

    @torch.no_grad()
    def evaluate(self, batch: TransitionBatch) -> dict[str, float]:
        """Held-out metrics with posterior and prior modes (so they are deterministic).

        ``eval/loss`` (eq. 5), ``eval/obs_mse`` (raw units: the open-loop 1-step prediction of
        ``o_{t+1}`` from the posterior at ``t``, decoded from the prior's mode, comparable with the
        ensemble's), ``eval/recon_mse`` (decoded posterior), ``eval/reward_mse`` (raw, of the
        posterior features), ``eval/kl`` (``KL[q || p]``, unclipped) and
        ``eval/termination_accuracy``.
        """
        terms, seen = self.losses(batch, sample=False)
        observations, _, rewards, terminated = self.sequences(batch)
        later = seen.features[:, 1:]
        kl = (seen.post[:, 1:].exp() * (seen.post[:, 1:] - seen.prior)).sum(dim=(-2, -1)).mean()
        ends = self.continue_logit(later) < self._continue_logit_threshold()
        values = {
            "loss": terms["loss"],
            "obs_mse": (self.decode(seen.prior_features) - observations[:, 1:]).square().mean(),
            "recon_mse": (self.decode(seen.features) - observations).square().mean(),
            "reward_mse": (self.predict_reward(later) - rewards).square().mean(),
            "kl": kl,
            "termination_accuracy": (ends == terminated.bool()).float().mean(),
        }
        return {f"eval/{k}": float(v) for k, v in values.items()}

    # --- simulating ---------------------------------------------------------------------
    @torch.no_grad()
    def reset(self, obs: Obs) -> State:
        """``h_0`` and the posterior's mode for real observations ``key -> [B, ...]``."""
        embed = self.encoder(symlog(self.flatten_obs(obs).to(self.obs_low.device)))
        h = self.initial_state(embed)
        z = sample_one_hot(self.posterior(h, embed), deterministic=True)
        return {"h": h.clone(), "z": z.flatten(-2)}

    @torch.no_grad()
    def step(
        self,
        state: State,
        action: Tensor,
        *,
        generator: torch.Generator | None = None,
        deterministic: bool | None = None,
        with_uncertainty: bool = True,
    ) -> StepResult:
        """Advance every row by one prior step, ``z`` drawn from ``generator`` (one uniform per group).

        Args:
            state: ``{"h", "z"}`` of :meth:`reset` or a previous step.
            action: Shape: [B, A].
            generator: the source of the latent samples.
            deterministic: take the prior's mode; ``None``: the config's.
            with_uncertainty: unused; the model reports no uncertainty.

        Returns:
            ``(state, next_obs, reward [B], terminated [B], {})``.
        """
        deterministic = self.config.deterministic if deterministic is None else deterministic
        action = action.to(self.obs_low.device)
        state = self.imagine_step(state, action, generator=generator, deterministic=deterministic)
        features = self.features(state)
        reward = self.predict_reward(features).float()
        terminated = self.continue_logit(features) < self._continue_logit_threshold()
        return state, self.unflatten_obs(self.decode(features)), reward, terminated, {}

    def _continue_logit_threshold(self) -> float:
        """``P(end) > p`` exactly when the continue logit is below ``log((1 - p) / p)``."""
        p = self.config.termination_threshold
        return math.log((1 - p) / p)
