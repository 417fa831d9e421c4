"""A probabilistic MLP ensemble over state observations (MBPO, Janner et al. 2019; MOPO, Yu et al. 2020).

Each of ``M`` members maps a normalised ``(obs, action)`` to a diagonal Gaussian over the
normalised target ``[next_obs - obs, reward]`` and to a termination logit. All members run at
once: every layer is one :class:`~omnigym.platform.algorithms.critics.EnsembleLinear` (a batched
matrix product), so the per-call overhead is one network's whatever ``M`` is.

Training minimises, summed over members, on the same minibatch for every member (members differ
by their random initialisation, which Lakshminarayanan et al. 2017 found enough for diverse deep
ensembles; PETS and MBPO also give each member a bootstrap resample, which is not done here)::

    NLL  = mean_{b,d} 0.5 * ((mu - y)^2 * exp(-logvar) + logvar)          Gaussian NLL, no constant
    BCE  = mean_b  w_b BCE(termination logit, terminated)     w_b = termination_pos_weight if terminal, else 1
    loss = sum_m (NLL_m + BCE_m) + 0.01 * (sum max_logvar - sum min_logvar)

with ``logvar`` softly kept inside learned bounds ``[min_logvar, max_logvar]`` (PETS appendix A.1)
and MBPO's per-layer L2 weight decay applied through Adam's ``weight_decay`` (coupled, as MBPO's
``l2_loss`` is). Stepping picks one elite member per row uniformly, samples from its Gaussian (or
takes its mean) and thresholds its termination probability.

Stepping runs every member only when the caller wants ``info["uncertainty"]``, which is defined
over all members. Otherwise each row runs through its chosen member alone: the rows are grouped
by member and each group takes one matrix product per layer, ``1/M`` of the work (about 10x
faster than all members at 4096 rows on one CPU thread, where all members' activations also
outgrow the caches). Both paths draw the same random numbers, so a seed gives the same rollout
either way (to float rounding).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.types import Obs, TransitionBatch
from omnigym.platform.algorithms.critics import EnsembleLinear
from omnigym.policies.layers import ACTIVATIONS
from omnigym.world_models.base import StepResult, WorldModel, WorldModelConfig
from omnigym.world_models.state_layout import state_bounds, state_layout

DYNAMICS_ACTIVATIONS = {**ACTIVATIONS, "silu": F.silu}
"""Hidden activations by name; MBPO's networks use SiLU (swish)."""

UNCERTAINTY_MEASURES = ("max_aleatoric", "ensemble_std")
"""What ``step`` reports as ``info["uncertainty"]`` (see :meth:`EnsembleDynamics.uncertainty`)."""

MBPO_WEIGHT_DECAY = (2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4)
"""MBPO's L2 weight decay of its four hidden layers and the output layer."""

MEMBER_LOOP_MIN_ROWS = 512
"""From this batch size on, :meth:`EnsembleDynamics.predict` runs the members one by one (faster
on a CPU once all members' activations outgrow the caches; measured crossover 256-1024 rows)."""


@dataclass
class EnsembleDynamicsConfig(WorldModelConfig):
    """Settings of :class:`EnsembleDynamics` (MBPO's defaults)."""

    type: str = "ensemble"
    num_members: int = 7
    """Members trained (``M``)."""
    num_elites: int = 5
    """Members with the lowest held-out error that ``step`` samples from."""
    hidden_sizes: tuple[int, ...] = (200, 200, 200, 200)
    """Width of each hidden layer of every member."""
    activation: str = "silu"
    """Hidden activation, a name in ``DYNAMICS_ACTIVATIONS``."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    weight_decay: tuple[float, ...] = MBPO_WEIGHT_DECAY
    """L2 decay of each layer's weights (hidden layers, then the output layer), or one value for
    all of them; MBPO's per-layer values by default. Biases and logvar bounds are not decayed."""
    logvar_bound_coef: float = 0.01
    """Weight of the ``sum max_logvar - sum min_logvar`` regulariser that tightens the bounds."""
    init_max_logvar: float = 0.5
    """Initial upper logvar bound (normalised target units)."""
    init_min_logvar: float = -10.0
    """Initial lower logvar bound (normalised target units)."""
    termination_threshold: float = 0.5
    """``step`` ends a row when the chosen member's termination probability exceeds this."""
    termination_pos_weight: float = 1.0
    """Weight of the terminal transitions in the termination loss (BCE's ``pos_weight``). Where
    failures are rare (0.8 % of the driving behaviour data's transitions) a head trained with
    weight 1 learns little more than their base rate and ends no row at the 0.5 threshold, so a
    policy trained in the model never sees the failures that end real episodes. A weight ``w``
    makes the head's probability the failures' odds times ``w``, so that the threshold ends rows
    whose failure probability exceeds about ``t / (t + w (1 - t))`` (1 / (1 + w) at 0.5), and gives
    the rare class the head's capacity (weight decay would otherwise flatten it)."""
    deterministic: bool = False
    """``step`` returns the chosen member's mean instead of a sample from its Gaussian."""
    uncertainty: str = "max_aleatoric"
    """``info["uncertainty"]`` of ``step``: ``max_aleatoric`` (MOPO) or ``ensemble_std`` (members'
    disagreement); see :meth:`EnsembleDynamics.uncertainty`."""
    clip_to_data: bool = False
    """``step`` also keeps each predicted observation value and the reward inside the range the
    training data spans (:meth:`EnsembleDynamics.set_data_statistics`), as it keeps observations
    inside the space's bounds: on unbounded keys and rewards (driving's positions, velocities and
    PDM reward) a policy can otherwise drive the model where it extrapolates without bound."""

    def __post_init__(self) -> None:
        """Reject settings that cannot train."""
        if not 1 <= self.num_elites <= self.num_members:
            raise ValueError(f"num_elites must be in [1, {self.num_members}], got {self.num_elites}")
        if not self.hidden_sizes or min(self.hidden_sizes) < 1:
            raise ValueError(f"hidden_sizes must be positive widths, got {self.hidden_sizes}")
        if self.activation not in DYNAMICS_ACTIVATIONS:
            raise ValueError(f"activation must be in {sorted(DYNAMICS_ACTIVATIONS)}, got {self.activation!r}")
        if len(self.weight_decay) not in (1, len(self.hidden_sizes) + 1):
            raise ValueError(
                f"weight_decay needs one value for every layer or one per layer (len(hidden_sizes) + 1 = "
                f"{len(self.hidden_sizes) + 1}), got {len(self.weight_decay)}"
            )
        if self.learning_rate <= 0 or min(self.weight_decay) < 0 or self.logvar_bound_coef < 0:
            raise ValueError("learning_rate must be > 0, weight_decay and logvar_bound_coef >= 0")
        if self.init_min_logvar >= self.init_max_logvar:
            raise ValueError("init_min_logvar must be below init_max_logvar")
        if self.uncertainty not in UNCERTAINTY_MEASURES:
            raise ValueError(f"uncertainty must be in {UNCERTAINTY_MEASURES}, got {self.uncertainty!r}")
        if not 0 < self.termination_threshold < 1:
            raise ValueError(f"termination_threshold must be in (0, 1), got {self.termination_threshold}")
        if not self.termination_pos_weight > 0:
            raise ValueError(f"termination_pos_weight must be > 0, got {self.termination_pos_weight}")


def gaussian_nll(mean: Tensor, logvar: Tensor, target: Tensor) -> Tensor:
    """Gaussian negative log-likelihood without its constant, averaged over rows and dimensions.

    ``0.5 * ((mean - target)^2 * exp(-logvar) + logvar)`` per element (MBPO, PETS).

    Args:
        mean: Shape: [M, B, D].
        logvar: log-variance. Shape: [M, B, D].
        target: Shape: [B, D] or [M, B, D].

    Returns:
        One loss per member. Shape: [M].
    """
    return 0.5 * ((mean - target).square() * torch.exp(-logvar) + logvar).mean(dim=(-2, -1))


def soft_clamp_logvar(logvar: Tensor, min_logvar: Tensor, max_logvar: Tensor) -> Tensor:
    """``logvar`` kept inside ``[min_logvar, max_logvar]`` with softplus edges (PETS appendix A.1).

    Unlike a hard clamp, gradients still flow at the bounds, so the bounds themselves are learned.
    The result lies in ``(min_logvar, max_logvar + softplus(min_logvar - max_logvar))``: the second
    softplus can lift a value at the upper bound by at most ``log(1 + exp(min - max))`` (3e-5 for
    the default bounds).
    """
    logvar = max_logvar - F.softplus(max_logvar - logvar)
    return min_logvar + F.softplus(logvar - min_logvar)


@dataclass
class EnsemblePrediction:
    """Every member's prediction in raw (unnormalised) units. ``T = obs_dim + 1`` targets.

    Attributes:
        mean: mean of ``[next_obs - obs, reward]``. Shape: [M, B, T].
        std: standard deviation of the same. Shape: [M, B, T].
        termination_logit: Shape: [M, B].
    """

    mean: Tensor
    std: Tensor
    termination_logit: Tensor


class EnsembleDynamics(WorldModel):
    """MBPO/MOPO-style probabilistic ensemble over flat state observations.

    The model state is the flat observation ``[B, D]`` (the modelled keys concatenated). Its
    ``info["uncertainty"]`` is MOPO's "max aleatoric" measure by default (see :meth:`uncertainty`).

    Args:
        config: an :class:`EnsembleDynamicsConfig`.
        observation_space: the env's ``Dict`` observation space (its float ``Box`` keys are modelled).
        action_space: the env's ``Box`` action space.
    """

    name = "ensemble"
    config_class = EnsembleDynamicsConfig
    config: EnsembleDynamicsConfig

    def __init__(
        self, config: EnsembleDynamicsConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(action_space, spaces.Box):
            raise TypeError(f"ensemble dynamics take Box actions, got {action_space}")
        self.obs_layout = state_layout(observation_space)
        self.obs_dim = sum(math.prod(shape) for shape in self.obs_layout.values())
        self.action_dim = int(math.prod(action_space.shape))
        in_dim, target_dim = self.obs_dim + self.action_dim, self.obs_dim + 1
        n = config.num_members
        widths = [in_dim, *config.hidden_sizes]
        self.layers = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in itertools.pairwise(widths))
        self.out = EnsembleLinear(n, widths[-1], 2 * target_dim + 1)  # mean, logvar, termination logit
        self.activation = DYNAMICS_ACTIVATIONS[config.activation]
        self.max_logvar = nn.Parameter(torch.full((1, 1, target_dim), config.init_max_logvar))
        self.min_logvar = nn.Parameter(torch.full((1, 1, target_dim), config.init_min_logvar))
        self.input_mean: Tensor
        self.input_std: Tensor
        self.target_mean: Tensor
        self.target_std: Tensor
        self.elites: Tensor
        self.register_buffer("input_mean", torch.zeros(in_dim))
        self.register_buffer("input_std", torch.ones(in_dim))
        self.register_buffer("target_mean", torch.zeros(target_dim))
        self.register_buffer("target_std", torch.ones(target_dim))
        self.register_buffer("elites", torch.arange(config.num_elites))
        low, high = state_bounds(observation_space, self.obs_layout)
        self.obs_low: Tensor
        self.obs_high: Tensor
        self.register_buffer("obs_low", low, persistent=False)  # from the space, not the weights
        self.register_buffer("obs_high", high, persistent=False)
        self.data_low: Tensor
        self.data_high: Tensor
        # The data's range of [obs, reward]; saved (and needed to load) only when it is used.
        self.register_buffer("data_low", torch.full((target_dim,), -math.inf), persistent=config.clip_to_data)
        self.register_buffer("data_high", torch.full((target_dim,), math.inf), persistent=config.clip_to_data)
        self.optimizer = torch.optim.Adam(self._param_groups(), lr=config.learning_rate)

    def _param_groups(self) -> list[dict[str, Any]]:
        """Adam groups: each layer's weights with its decay; biases and logvar bounds undecayed."""
        layers = [cast(EnsembleLinear, layer) for layer in (*self.layers, self.out)]
        decays = self.config.weight_decay
        decays = decays * len(layers) if len(decays) == 1 else decays
        groups: list[dict[str, Any]] = [
            {"params": [layer.weight], "weight_decay": decay}
            for layer, decay in zip(layers, decays, strict=True)
        ]
        groups.append(
            {
                "params": [*(layer.bias for layer in layers), self.max_logvar, self.min_logvar],
                "weight_decay": 0.0,
            }
        )
        return groups

    # --- data layout --------------------------------------------------------------------
    def flatten_obs(self, obs: Obs) -> Tensor:
        """The modelled keys of ``obs`` as one float row per sample. Shape: [B, D]."""
        missing = [key for key in self.obs_layout if key not in obs]
        if missing:
            raise KeyError(f"observations lack the modelled keys {missing} (have {sorted(obs)})")
        rows = [obs[key].reshape(obs[key].shape[0], -1).float() for key in self.obs_layout]
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=-1)

    def unflatten_obs(self, flat: Tensor) -> Obs:
        """Inverse of :meth:`flatten_obs`: key -> ``[B, *shape]``."""
        sizes = [math.prod(shape) for shape in self.obs_layout.values()]
        parts = flat.split(sizes, dim=-1)
        return {
            key: part.reshape(flat.shape[0], *shape)
            for (key, shape), part in zip(self.obs_layout.items(), parts, strict=True)
        }

    def _inputs(self, state: Tensor, action: Tensor) -> Tensor:
        """Normalised ``[obs, action]``. Shape: [B, D + A]."""
        action = action.reshape(action.shape[0], self.action_dim).to(state.dtype)  # also for 0 rows
        return (torch.cat([state, action], dim=-1) - self.input_mean) / self.input_std

    def _raw_targets(self, batch: TransitionBatch) -> Tensor:
        """``[next_obs - obs, reward]`` in raw units. Shape: [B, D + 1]."""
        delta = self.flatten_obs(batch.next_obs) - self.flatten_obs(batch.obs)
        return torch.cat([delta, batch.rewards.reshape(-1, 1).float()], dim=-1)

    def _training_pair(self, batch: TransitionBatch) -> tuple[Tensor, Tensor]:
        """Normalised inputs ``[B, D + A]`` and targets ``[B, D + 1]`` of ``batch``."""
        inputs = self._inputs(self.flatten_obs(batch.obs), batch.actions)
        return inputs, (self._raw_targets(batch) - self.target_mean) / self.target_std

    @torch.no_grad()
    def set_data_statistics(self, batch: TransitionBatch) -> None:
        """Fit input and target normalisation (mean, std) to ``batch``; constant dims keep std 1."""
        state = self.flatten_obs(batch.obs)
        inputs = torch.cat([state, batch.actions.reshape(len(batch), -1).float()], dim=-1)
        for (mean, std), data in (
            ((self.input_mean, self.input_std), inputs),
            ((self.target_mean, self.target_std), self._raw_targets(batch)),
        ):
            data_std = data.std(dim=0, correction=0) if len(batch) > 1 else torch.ones_like(data[0])
            mean.copy_(data.mean(dim=0))
            std.copy_(torch.where(data_std < 1e-6, torch.ones_like(data_std), data_std))
        if self.config.clip_to_data and len(batch):
            observations = torch.cat([state, self.flatten_obs(batch.next_obs)])  # [2B, D]
            rewards = batch.rewards.reshape(-1, 1).float()
            self.data_low.copy_(torch.cat([observations.amin(dim=0), rewards.amin(dim=0)]))
            self.data_high.copy_(torch.cat([observations.amax(dim=0), rewards.amax(dim=0)]))

    # --- the network --------------------------------------------------------------------
    def forward(self, inputs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Every member on normalised inputs ``[B, D + A]`` (or ``[M, B, D + A]``).

        Returns:
            Normalised mean ``[M, B, T]``, soft-bounded logvar ``[M, B, T]`` and termination
            logit ``[M, B]``.
        """
        x = inputs
        for layer in self.layers:
            x = self.activation(layer(x))
        return self._heads(self.out(x))

    def _heads(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The output layer's ``[..., 2T + 1]`` as normalised mean, soft-bounded logvar and termination logit.

        Shapes: ``[..., T]``, ``[..., T]`` and ``[...]``, for ``[M, B]`` or ``[B]`` rows alike.
        """
        target_dim = self.obs_dim + 1
        mean, logvar, termination = out.split([target_dim, target_dim, 1], dim=-1)
        bounds = self.min_logvar.reshape(-1), self.max_logvar.reshape(-1)  # [T]: fits [M, B, T] and [B, T]
        return mean, soft_clamp_logvar(logvar, *bounds), termination.squeeze(-1)

    def _raw_units(self, mean: Tensor, logvar: Tensor) -> tuple[Tensor, Tensor]:
        """Normalised mean and logvar ``[..., T]`` as a raw-unit mean and standard deviation."""
        return mean * self.target_std + self.target_mean, torch.exp(0.5 * logvar) * self.target_std

    def _member_forward(self, member: int, inputs: Tensor) -> Tensor:
        """Member ``member``'s output layer on normalised inputs ``[B, D + A]``. Shape: [B, 2T + 1].

        It reads views of the ensemble's weight tensors (no copies, nothing cached), so it always
        uses the current weights, after training steps and ``load_state_dict`` alike.
        """
        x = inputs
        for layer in self.layers:
            layer = cast(EnsembleLinear, layer)
            x = self.activation(torch.addmm(layer.bias[member], x, layer.weight[member]))
        return torch.addmm(self.out.bias[member], x, self.out.weight[member])

    def _chosen_forward(self, inputs: Tensor, member: Tensor) -> Tensor:
        """Each row of ``inputs [B, D + A]`` through its own member ``member [B]`` only. Shape: [B, 2T + 1].

        The rows are sorted by member so that each member's rows are one contiguous block, which
        takes one matrix product per layer (members no row uses cost nothing); the outputs are
        then put back in the rows' order.
        """
        if inputs.shape[0] == 0:
            return self._member_forward(0, inputs)
        order = torch.argsort(member)
        counts = torch.bincount(member, minlength=self.config.num_members).tolist()
        blocks = inputs[order].split(counts)
        grouped = torch.cat([self._member_forward(m, rows) for m, rows in enumerate(blocks) if len(rows)])
        out = torch.empty_like(grouped)
        out[order] = grouped
        return out

    @torch.no_grad()
    def predict(self, state: Tensor, action: Tensor) -> EnsemblePrediction:
        """Every member's Gaussian over ``[next_obs - obs, reward]`` in raw units; ``state`` is ``[B, D]``.

        From ``MEMBER_LOOP_MIN_ROWS`` rows on, one member at a time rather than :meth:`forward`'s
        batched product: the same numbers, 1.6x faster at 4096 rows on a CPU, where ``[M, B, 200]``
        activations outgrow the caches (and about 5% slower at 256 rows).
        """
        inputs = self._inputs(state, action)
        if inputs.shape[0] < MEMBER_LOOP_MIN_ROWS:
            mean, logvar, termination_logit = self(inputs)
        else:
            out = torch.stack([self._member_forward(m, inputs) for m in range(self.config.num_members)])
            mean, logvar, termination_logit = self._heads(out)
        mean, std = self._raw_units(mean, logvar)
        return EnsemblePrediction(mean=mean, std=std, termination_logit=termination_logit)

    # --- training -----------------------------------------------------------------------
    def train_step(self, batch: TransitionBatch) -> dict[str, float]:
        """One Adam step of every member on the same minibatch (see the module docstring)."""
        inputs, targets = self._training_pair(batch)
        mean, logvar, termination_logit = self(inputs)
        nll = gaussian_nll(mean, logvar, targets)  # [M]
        terminated = batch.terminated.float().expand_as(termination_logit)
        pos_weight = torch.tensor(self.config.termination_pos_weight, device=terminated.device)
        bce = F.binary_cross_entropy_with_logits(
            termination_logit, terminated, reduction="none", pos_weight=pos_weight
        ).mean(-1)
        bound = self.config.logvar_bound_coef * (self.max_logvar.sum() - self.min_logvar.sum())
        loss = (nll + bce).sum() + bound
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        values = torch.stack(
            [loss, nll.mean(), bce.mean(), self.max_logvar.mean(), self.min_logvar.mean()]
        ).tolist()
        names = ("loss", "nll", "termination_bce", "max_logvar", "min_logvar")
        return {f"train/{name}": value for name, value in zip(names, values, strict=True)}

    @torch.no_grad()
    def member_losses(self, batch: TransitionBatch) -> Tensor:
        """Each member's held-out MSE of its mean on normalised targets (all dims weigh alike). Shape: [M]."""
        inputs, targets = self._training_pair(batch)
        mean, _, _ = self(inputs)
        return (mean - targets).square().mean(dim=(1, 2))

    @torch.no_grad()
    def evaluate(self, batch: TransitionBatch) -> dict[str, float]:
        """Held-out metrics, without gradients.

        ``eval/loss`` is the mean of :meth:`member_losses`; over the elites, ``eval/obs_mse`` and
        ``eval/reward_mse`` (raw units), ``eval/nll`` (normalised), ``eval/termination_accuracy``
        and, where the batch has terminal transitions, ``eval/termination_recall`` (the share of
        them the model ends: with rare failures, accuracy alone reads high for a head that ends
        nothing) and ``eval/termination_false_rate`` (the share of the other transitions it ends).
        """
        inputs, targets = self._training_pair(batch)
        mean, logvar, termination_logit = self(inputs)
        elites = self.elites
        error = ((mean[elites] - targets) * self.target_std).square()  # raw units
        predicted_end = termination_logit[elites] > self._termination_logit_threshold()
        values = torch.stack(
            [
                (mean - targets).square().mean(),
                error[..., : self.obs_dim].mean(),
                error[..., self.obs_dim].mean(),
                gaussian_nll(mean[elites], logvar[elites], targets).mean(),
                (predicted_end == batch.terminated.bool()).float().mean(),
            ]
        ).tolist()
        names = ("loss", "obs_mse", "reward_mse", "nll", "termination_accuracy")
        metrics = {f"eval/{name}": value for name, value in zip(names, values, strict=True)}
        ended = batch.terminated.bool().expand_as(predicted_end)
        if ended.any() and not ended.all():
            metrics["eval/termination_recall"] = predicted_end[ended].float().mean().item()
            metrics["eval/termination_false_rate"] = predicted_end[~ended].float().mean().item()
        return metrics

    @torch.no_grad()
    def select_elites(self, holdout: TransitionBatch) -> None:
        """Keep the ``num_elites`` members with the lowest held-out MSE (:meth:`member_losses`)."""
        best = self.member_losses(holdout).argsort()[: self.config.num_elites]
        self.elites.copy_(best.sort().values)

    # --- simulating ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device of the model's tensors.

        One buffer's, not the base class's walk over every parameter: :meth:`step` asks twice per
        call, which showed at small batches.
        """
        return self.input_mean.device

    def reset(self, obs: Obs) -> Tensor:
        """The flat observation ``[B, D]`` to start from."""
        return self.flatten_obs(obs).to(self.device)

    @torch.no_grad()
    def step(
        self,
        state: Tensor,
        action: Tensor,
        *,
        generator: torch.Generator | None = None,
        deterministic: bool | None = None,
        with_uncertainty: bool = True,
    ) -> StepResult:
        """Advance every row with one elite member drawn uniformly per row (with ``generator``).

        Under ``torch.no_grad`` rather than ``torch.inference_mode``: inference tensors could not
        be changed in place or saved for a backward pass by callers that keep the outputs (replay
        buffers, MBPO-style rollouts), and inference mode measured only 0-4% faster at 256-4096
        rows on a CPU.

        Args:
            state: flat observations. Shape: [B, D].
            action: Shape: [B, A].
            generator: the source of the member choice and the Gaussian noise, drawn in that
                order whatever ``with_uncertainty`` is.
            deterministic: take the member's mean instead of a sample; ``None``: the config's.
            with_uncertainty: run every member to report ``info["uncertainty"]``; when False,
                each row runs through its chosen member only (module docstring).

        Returns:
            ``(next state [B, D], next_obs, reward [B], terminated [B], info)`` with
            ``info["member"]`` (the member each row used, [B]) and, with ``with_uncertainty``,
            ``info["uncertainty"]`` ([B], see :meth:`uncertainty`).
        """
        deterministic = self.config.deterministic if deterministic is None else deterministic
        pick = self._draw(torch.randint, len(self.elites), (state.shape[0],), generator=generator)
        member = self.elites[pick]
        info = {"member": member}
        if with_uncertainty:
            prediction = self.predict(state, action)
            rows = torch.arange(state.shape[0], device=state.device)
            mean, std = prediction.mean[member, rows], prediction.std[member, rows]
            termination_logit = prediction.termination_logit[member, rows]
            info["uncertainty"] = self.uncertainty(prediction)
        else:
            normalised_mean, logvar, termination_logit = self._heads(
                self._chosen_forward(self._inputs(state, action), member)
            )
            mean, std = self._raw_units(normalised_mean, logvar)
        sample = mean
        if not deterministic:
            noise = self._draw(torch.randn, mean.shape, generator=generator)
            sample = mean + std * noise
        # The real env never leaves its observation space (Pendulum: |thdot| <= 8); a model
        # pushed past it by a policy would otherwise extrapolate without bound.
        next_state = torch.clamp(state + sample[:, : self.obs_dim], self.obs_low, self.obs_high)
        reward = sample[:, self.obs_dim].float()
        if self.config.clip_to_data:  # the data's range too (EnsembleDynamicsConfig.clip_to_data)
            next_state = torch.clamp(
                next_state, self.data_low[: self.obs_dim], self.data_high[: self.obs_dim]
            )
            reward = torch.clamp(reward, self.data_low[self.obs_dim], self.data_high[self.obs_dim])
        terminated = termination_logit > self._termination_logit_threshold()
        return next_state, self.unflatten_obs(next_state), reward, terminated, info

    def uncertainty(self, prediction: EnsemblePrediction) -> Tensor:
        """How little to trust each row's prediction, in raw next-obs units, >= 0. Shape: [B].

        ``max_aleatoric`` (MOPO, Yu et al. 2020, section 4.3): the largest, over all members,
        Euclidean norm of the predicted standard deviation of the next observation. All ``M``
        members, elites or not, as in MOPO's reference code (``mopo/models/fake_env.py``: the max
        over ``model.predict(inputs, factored=True)``, which returns every network). It is the
        members' learned noise, so it grows off the data only where the learned noise grows; the
        members can agree on a small variance far from any data.
        ``ensemble_std`` (Lu et al. 2022, "Revisiting Design Choices in Offline Model-Based RL"):
        the norm of the standard deviation, over members, of their next-observation means: an
        epistemic measure that grows where the members, fitted alike on the data, diverge.
        """
        if self.config.uncertainty == "max_aleatoric":
            return prediction.std[..., : self.obs_dim].norm(dim=-1).amax(dim=0)
        return prediction.mean[..., : self.obs_dim].std(dim=0, correction=0).norm(dim=-1)

    def _draw(self, sampler: Any, *args: Any, generator: torch.Generator | None = None) -> Tensor:
        """``sampler(*args)`` on the generator's device (where it must draw), moved to the model's."""
        device = generator.device if generator is not None else self.device
        return sampler(*args, generator=generator, device=device).to(self.device)

    def _termination_logit_threshold(self) -> float:
        """``sigmoid(logit) > p`` exactly when ``logit > log(p / (1 - p))``."""
        p = self.config.termination_threshold
        return math.log(p / (1 - p))
