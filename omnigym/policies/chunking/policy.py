"""The base of the action-chunk generative policies: chunked acting and RL-scored chains.

A subclass supplies the generative model's two halves on normalised action chunks
``[B, horizon, action_dim]``: :meth:`ChunkPolicy.objective` (the training loss) and
:meth:`ChunkPolicy.sample` (noise -> chunk). Everything else is shared:

* **Receding horizon** (Diffusion Policy, Chi et al. 2023, §III-C): ``act`` keeps the last
  ``n_obs_steps`` observations per row, samples a chunk of ``horizon`` actions whenever a row's
  queue is empty, and returns one action per call from the chunk's executed slice
  ``[n_obs_steps - 1, n_obs_steps - 1 + n_action_steps)``; ``reset(done_mask)`` clears the
  history and queue of finished rows only, so only those rows re-sample on the next call.
* **Normalisation, EMA, deterministic noise**: the network and its training, in
  :mod:`omnigym.policies.chunking.base` (:class:`~omnigym.policies.chunking.base.ChunkPolicyBase`);
  the settings are :class:`~omnigym.policies.chunking.config.ChunkPolicyConfig`.

Log-probabilities: by default ``act`` returns one part with log-probability 0 (behaviour cloning
only). A subclass whose config sets ``rl_chain`` (``diffusion``: DPPO, ``flow``: Flow-GRPO) samples
each chunk with a stochastic chain instead and returns its ``K`` stochastic denoising steps as the
action's parts (see :meth:`ChunkPolicy.act` and the "RL fine-tuning" paragraph of
docs/policies.md); :meth:`ChunkPolicy.evaluate` re-scores the stored chain with gradient.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.policy import Policy
from omnigym.core.types import Evaluation, Obs, PolicyStep
from omnigym.policies.chunking.base import ChunkDenoiser, ChunkPolicyBase
from omnigym.policies.chunking.config import ChunkPolicyConfig
from omnigym.policies.chunking.unet import ConditionalUnet1D

LOG_2PI = math.log(2 * math.pi)
EXTRA_CHAIN = "chain"
"""Extras key of the stochastic chain ``[B, K + 1, horizon, action_dim]`` (normalised; zeros in
rows that sampled no chunk at this step)."""
EXTRA_SAMPLED = "chunk_sampled"
"""Extras key of ``[B]`` bools: the row sampled a chunk at this step (its parts count)."""
EXTRA_HISTORY = "obs_history."
"""Extras key prefix of the observation history ``[B, To, ...]`` the chunk was conditioned on."""


class ChunkPolicy(ChunkPolicyBase):
    """Receding-horizon acting over a generative model of action chunks (see the module doc)."""

    def __init__(
        self, config: ChunkPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self._history: dict[str, Tensor] = {}
        self._queue = torch.zeros(0)
        self._queue_pos = torch.zeros(0, dtype=torch.long)
        self._fresh = torch.zeros(0, dtype=torch.bool)
        self._ens = torch.zeros(0)
        self._ens_count = torch.zeros(0, dtype=torch.long)
        if self.rl_chain:  # instance-level capabilities: only the switched-on policy re-scores
            setattr(self, "capabilities", type(self).capabilities | {"evaluate", "features"})  # noqa: B010
        self.apply_encoder_freeze()

    def apply_encoder_freeze(self) -> None:
        """Stop the encoder's gradients when ``ft_freeze_encoder`` is set under ``rl_chain``.

        A subclass that replaces ``self.model`` after this constructor (``vla``) calls it again.
        """
        if self.rl_chain and getattr(self.config, "ft_freeze_encoder", False):
            self.model.encoder.requires_grad_(False)

    # --- RL fine-tuning: stochastic chains scored step by step (DPPO, Flow-GRPO) -----------------
    @property
    def num_chain_steps(self) -> int:
        """Denoising steps N of a stochastic chain (deterministic ones first, then the parts)."""
        raise NotImplementedError(f"{type(self).__name__} has no stochastic chain (rl_chain)")

    @property
    def num_chain_parts(self) -> int:
        """Stochastic denoising steps K <= N per chunk: the action's parts under ``rl_chain``."""
        return self.num_chain_steps

    def chain_transition(
        self, x: Tensor, step: int, cond: Tensor, unet: ConditionalUnet1D, stochastic: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The Gaussian transition of chain step ``step`` (0: from the noise) out of ``x [B, Tp, Da]``.

        Returns:
            The mean ``[B, Tp, Da]`` (the deterministic step's result when not ``stochastic``), the
            std to sample with and the std of the log-probability (scalars or broadcastable).
        """
        raise NotImplementedError(f"{type(self).__name__} has no stochastic chain (rl_chain)")

    def chain_gaussian(self, target: Tensor, mean: Tensor, std: Tensor) -> tuple[Tensor, Tensor]:
        """One part's log-probability and entropy ``[B]`` from per-element Gaussians.

        Per element of the chunk, ``log N(target; mean, std^2)`` (clamped to the config's
        ``[logprob_min, logprob_max]`` where it has them, DPPO), and the Gaussian entropy
        ``0.5 + 0.5 log 2π + log std``; both reduced (config ``logprob_reduce``: mean or sum) over
        the action dims of the executed slice or of the whole chunk (config ``logprob_slice``).
        Shapes: target, mean [B, Tp, Da]; std broadcastable to them.
        """
        cfg = self.config
        std = torch.as_tensor(std, dtype=mean.dtype, device=mean.device).expand_as(mean)
        log_std = std.log()
        logprob = -((target - mean) ** 2) / (2 * std**2) - log_std - 0.5 * LOG_2PI
        entropy = 0.5 + 0.5 * LOG_2PI + log_std
        low, high = getattr(cfg, "logprob_min", None), getattr(cfg, "logprob_max", None)
        if low is not None or high is not None:
            logprob = logprob.clamp(low, high)
        if getattr(cfg, "logprob_slice", "chunk") == "executed":
            start = cfg.n_obs_steps - 1
            logprob = logprob[:, start : start + cfg.n_action_steps]
            entropy = entropy[:, start : start + cfg.n_action_steps]
        if getattr(cfg, "logprob_reduce", "mean") == "sum":
            return logprob.sum(dim=(1, 2)), entropy.sum(dim=(1, 2))
        return logprob.mean(dim=(1, 2)), entropy.mean(dim=(1, 2))

    def start_fine_tuning(self, source: Policy) -> None:
        """Train the weights ``source`` acted with; freeze the chain's first steps if only the last are parts.

        ``source`` acted with its EMA copy after behaviour cloning and with its trained weights
        after RL (:attr:`acting_model`); a source with a frozen chain prefix passes it on.
        What ``bench/pushcube_rl_finetune.py`` does by hand (``use_ema_weights``,
        ``freeze_chain_prefix``); the on-policy trainer calls it for ``init_from``.
        """
        if isinstance(source, ChunkPolicyBase):
            self.model.load_state_dict(source.acting_model.state_dict())
            if source.frozen_model is not None:
                self.frozen_model = copy.deepcopy(source.frozen_model).requires_grad_(False)
                self.config = dataclasses.replace(self.config, frozen_chain_prefix=True)
        if self.rl_chain and self.num_chain_parts < self.num_chain_steps and self.frozen_model is None:
            self.freeze_chain_prefix()

    def freeze_chain_prefix(self) -> None:
        """Run the chain's deterministic first ``N - K`` steps with a frozen copy of the current weights.

        DPPO fine-tunes a copy of the network for the last K (stochastic)
        steps only and keeps the pre-trained one for the earlier steps. Without this, the shared
        weights also move the earlier steps, which are not parts, so their change escapes the
        likelihood ratio. Call it once, before fine-tuning starts (after :meth:`use_ema_weights`);
        the copy (``frozen_model``, saved with the weights) is not trained and also serves
        deterministic acting's first steps. It changes nothing when every step is a part.
        """
        self.frozen_model = copy.deepcopy(self.model).requires_grad_(False)
        self.config = dataclasses.replace(self.config, frozen_chain_prefix=True)

    def _prefix(self, history: Obs, model: ChunkDenoiser, cond: Tensor) -> tuple[ConditionalUnet1D, Tensor]:
        """The U-Net and features of the chain's deterministic first steps."""
        if self.frozen_model is None or self.num_chain_parts == self.num_chain_steps:
            return model.unet, cond
        return self.frozen_model.unet, self.encode(history, self.frozen_model)

    @torch.no_grad()
    def sample_chain(self, history: Obs, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Sample chunks with the stochastic chain, scoring each stochastic step.

        The first ``N - K`` steps are deterministic (run by ``frozen_model`` where
        :meth:`freeze_chain_prefix` made one); each of the last K draws ``x' = mean + std * z``
        (``z`` clipped to ``±randn_clip_value`` where the config has it). ``deterministic``: every
        step deterministic from the fixed noise (the chain and log-probabilities are then empty).

        Returns:
            The chunks in the env's units ``[B, Tp, *action_shape]``, the normalised chain of the
            stochastic steps ``[B, K + 1, Tp, Da]`` (its input first) and the log-probabilities
            ``[B, K]``.
        """
        model = self.acting_model
        cond = self.encode(history, model)
        prefix_unet, prefix_cond = self._prefix(history, model, cond)
        batch = cond.shape[0]
        if deterministic:
            x = self.fixed_noise.expand(batch, -1, -1)
        else:
            x = torch.randn(batch, *self.fixed_noise.shape, device=cond.device)
        steps, parts = self.num_chain_steps, self.num_chain_parts
        clip = float(getattr(self.config, "randn_clip_value", 0.0))
        chain: list[Tensor] = []
        logprobs: list[Tensor] = []
        for step in range(steps):
            tuned = step >= steps - parts
            stochastic = tuned and not deterministic
            unet, features = (model.unet, cond) if tuned else (prefix_unet, prefix_cond)
            mean, sample_std, logprob_std = self.chain_transition(x, step, features, unet, stochastic)
            if not stochastic:
                x = mean
                continue
            if not chain:
                chain.append(x)
            z = torch.randn_like(mean)
            if clip > 0:
                z = z.clamp(-clip, clip)
            x = mean + sample_std * z
            chain.append(x)
            logprobs.append(self.chain_gaussian(x, mean, logprob_std)[0])
        chunk = self.action_normalizer.unnormalize(x.clamp(-1, 1))
        chunk = chunk.clamp(self.action_low, self.action_high)
        chunk = chunk.reshape(batch, self.config.horizon, *self.action_shape)
        if deterministic:
            return chunk, x.new_zeros(batch, 0, *x.shape[1:]), x.new_zeros(batch, 0)
        return chunk, torch.stack(chain, dim=1), torch.stack(logprobs, dim=1)

    def score_chain(self, chain: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, Tensor]:
        """Log-probabilities and entropies ``[B, K]`` of a stored chain ``[B, K + 1, Tp, Da]``."""
        steps, parts = self.num_chain_steps, self.num_chain_parts
        logprobs, entropies = [], []
        for part in range(parts):
            mean, _, logprob_std = self.chain_transition(
                chain[:, part], steps - parts + part, cond, unet, True
            )
            logprob, entropy = self.chain_gaussian(chain[:, part + 1], mean, logprob_std)
            logprobs.append(logprob)
            entropies.append(entropy)
        return torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1)

    def evaluate(self, obs: Obs, actions: Tensor, extras: dict[str, Tensor] | None = None) -> Evaluation:
        """Re-score the chains ``act`` stored in ``extras`` under the current (trained) weights.

        Rows that sampled no chunk at their step give log-probability and entropy 0 (their parts
        are masked out). ``obs`` and ``actions`` are not read: the chain and the observation
        history are in ``extras``.
        """
        if not self.rl_chain:
            return super().evaluate(obs, actions, extras)
        if extras is None or EXTRA_CHAIN not in extras or EXTRA_SAMPLED not in extras:
            raise ValueError(f"{type(self).__name__}.evaluate needs the extras act returned (the chain)")
        device = self.fixed_noise.device
        chain = extras[EXTRA_CHAIN].to(device).float()
        sampled = extras[EXTRA_SAMPLED].to(device).bool()
        # keeps the graph connected when no row in the batch sampled a chunk
        anchor = 0.0 * next(self.model.unet.parameters()).sum()
        logprob = chain.new_zeros(chain.shape[0], chain.shape[1] - 1) + anchor
        entropy = torch.zeros_like(logprob)
        rows = sampled.nonzero().squeeze(-1)
        if len(rows):
            history = {k: extras[EXTRA_HISTORY + k][rows] for k in (*self.state_keys, *self.image_keys)}
            cond = self.encode(history, self.model)
            row_logprob, row_entropy = self.score_chain(chain[rows], cond, self.model.unet)
            logprob = logprob.index_put((rows,), row_logprob)
            entropy = entropy.index_put((rows,), row_entropy)
        return Evaluation(logprob=logprob, entropy=entropy)

    @torch.no_grad()
    def features(self, obs: Obs) -> Tensor:
        """Features of single observations ``key -> [B, ...]`` for a critic (PPO, DPPO's value net).

        The observation encoder (of the frozen prefix copy where there is one, else the acting
        weights) on a history that repeats the observation, as a fresh episode's first step does.
        No gradient flows back: a critic's loss must not move the actor's conditioning, which the
        likelihood ratio would not see.
        """
        device = self.fixed_noise.device
        steps = self.config.n_obs_steps
        history = {}
        for key in (*self.state_keys, *self.image_keys):
            value = torch.as_tensor(obs[key], device=device)
            history[key] = value.unsqueeze(1).expand(-1, steps, *value.shape[1:])
        model = self.frozen_model if self.frozen_model is not None else self.acting_model
        return self.encode(history, model)

    @property
    def feature_dim(self) -> int:
        """Width of :meth:`features` (the encoder's conditioning width)."""
        return int(self.model.encoder.out_dim)

    def replanning(self, batch: int) -> Tensor:
        """``[batch]`` bools: the rows whose next ``act`` (on ``batch`` rows) samples a chunk."""
        if self.config.temporal_ensemble or self._queue_pos.shape[0] != batch:
            return torch.ones(batch, dtype=torch.bool, device=self.fixed_noise.device)
        return self._queue_pos >= self.config.n_action_steps

    def act(self, obs: Obs, *, deterministic: bool = False, noise: Tensor | None = None) -> PolicyStep:
        """One action per row from its queue, sampling a new chunk for rows whose queue is empty.

        ``noise [B, horizon, action_dim]`` (normalised units) starts the sampler of the rows that
        sample a chunk (:meth:`replanning`) instead of drawn or fixed noise: a steering policy
        chooses it (``noise_steering``). Not with ``rl_chain``, whose chain draws its own.
        """
        cfg = self.config
        if noise is not None and self.rl_chain:
            raise ValueError("act(noise=...) steers the deterministic sampler; rl_chain samples its own")
        current = {
            k: torch.as_tensor(obs[k], device=self.fixed_noise.device)
            for k in (*self.state_keys, *self.image_keys)
        }
        batch = next(iter(current.values())).shape[0]
        if self._queue_pos.shape[0] != batch:
            self._start(batch)
        for key, value in current.items():
            # a fresh row fills its history with the current observation (Diffusion Policy's padding)
            stacked = value.unsqueeze(1).expand(-1, cfg.n_obs_steps, *value.shape[1:])
            if key in self._history:
                rolled = torch.cat([self._history[key][:, 1:], value.unsqueeze(1)], dim=1)
                fresh = self._fresh.view(-1, *([1] * (value.dim())))
                stacked = torch.where(fresh, stacked, rolled)
            self._history[key] = stacked.clone()
        if self.rl_chain:
            return self._act_chain(batch, deterministic)
        if cfg.temporal_ensemble:
            chunk, _ = self.sample_chunks(self._history, deterministic, noise)
            action = self._ensemble(chunk[:, cfg.n_obs_steps - 1 :])
            self._fresh = torch.zeros_like(self._fresh)
            logprob = torch.zeros(batch, 1, device=action.device)
            return PolicyStep(action=action, logprob=logprob, mask=torch.ones_like(logprob, dtype=torch.bool))
        empty = (self._queue_pos >= cfg.n_action_steps).nonzero().squeeze(-1)
        if len(empty):
            rows_noise = None if noise is None else noise[empty]
            chunk, _ = self.sample_chunks(
                {k: v[empty] for k, v in self._history.items()}, deterministic, rows_noise
            )
            start = cfg.n_obs_steps - 1
            queue, position = self._queue.clone(), self._queue_pos.clone()
            queue[empty] = chunk[:, start : start + cfg.n_action_steps]
            position[empty] = 0
            self._queue, self._queue_pos = queue, position
        action = self._queue[torch.arange(batch), self._queue_pos]
        self._queue_pos = self._queue_pos + 1
        self._fresh = torch.zeros_like(self._fresh)
        logprob = torch.zeros(batch, 1, device=action.device)
        return PolicyStep(action=action, logprob=logprob, mask=torch.ones_like(logprob, dtype=torch.bool))

    def _act_chain(self, batch: int, deterministic: bool) -> PolicyStep:
        """``act`` under ``rl_chain``: the chunk-sampling step of a row carries the chain's K parts.

        A row that samples a chunk at this step gets the log-probabilities of its K stochastic
        denoising steps, mask True; a row that only pops a queued action gets K parts with
        log-probability 0, mask False (DPPO: the chunk is the action, and the step that sampled
        it carries it). Deterministic acting runs the deterministic sampler (DDIM η = 0 / the
        ODE) from the fixed noise, which is not a sample of the stochastic policy: no part counts.
        """
        cfg = self.config
        device = self.fixed_noise.device
        parts = self.num_chain_parts
        if cfg.temporal_ensemble:
            rows = torch.arange(batch, device=device)
        else:
            rows = (self._queue_pos >= cfg.n_action_steps).nonzero().squeeze(-1)
        chain = torch.zeros(batch, parts + 1, cfg.horizon, self.action_dim, device=device)
        logprob = torch.zeros(batch, parts, device=device)
        sampled = torch.zeros(batch, dtype=torch.bool, device=device)
        chunk = None
        if len(rows):
            history = {k: v[rows] for k, v in self._history.items()}
            if deterministic and self.frozen_model is not None:
                chunk = self.sample_chain(history, deterministic=True)[0]
            elif deterministic:
                chunk, _ = self.sample_chunks(history, deterministic=True)
            else:
                chunk, row_chain, row_logprob = self.sample_chain(history)
                chain[rows], logprob[rows], sampled[rows] = row_chain, row_logprob, True
        if cfg.temporal_ensemble:
            assert chunk is not None
            action = self._ensemble(chunk[:, cfg.n_obs_steps - 1 :])
        else:
            if chunk is not None:
                start = cfg.n_obs_steps - 1
                queue, position = self._queue.clone(), self._queue_pos.clone()
                queue[rows] = chunk[:, start : start + cfg.n_action_steps]
                position[rows] = 0
                self._queue, self._queue_pos = queue, position
            action = self._queue[torch.arange(batch), self._queue_pos]
            self._queue_pos = self._queue_pos + 1
        self._fresh = torch.zeros_like(self._fresh)
        extras = {EXTRA_CHAIN: chain, EXTRA_SAMPLED: sampled}
        extras.update({EXTRA_HISTORY + k: v.clone() for k, v in self._history.items()})
        return PolicyStep(
            action=action, logprob=logprob, mask=sampled.unsqueeze(1).expand(-1, parts).clone(), extras=extras
        )

    def _ensemble(self, chunk: Tensor) -> Tensor:
        """ACT's temporal ensembling (online): this step's action from every chunk's prediction.

        This step's chunk ``[B, L, *action_shape]`` joins the running weighted means of the steps
        it predicts, and the current step's mean is popped. Every earlier chunk predicted the
        current step too; prediction ``i`` (0: oldest) weighs ``w_i = exp(-ensemble_coeff * i)``.
        A running mean over ``n`` predictions is rescaled by ``W_n = w_0 + ... + w_{n-1}`` before
        the new one joins with weight ``w_n``.
        """
        length = chunk.shape[1]
        weights = torch.exp(-self.config.ensemble_coeff * torch.arange(length, device=chunk.device))
        cumulative = torch.cat([weights.new_zeros(1), weights.cumsum(0)])  # W_0 = 0, ..., W_L
        count = self._ens_count  # [B, L - 1]; 0 where no chunk predicted the step yet
        shape = (*count.shape, *([1] * (chunk.dim() - 2)))
        folded = (
            self._ens * cumulative[count].view(shape) + chunk[:, :-1] * weights[count].view(shape)
        ) / cumulative[count + 1].view(shape)
        means = torch.cat([folded, chunk[:, -1:]], dim=1)
        counts = torch.cat([(count + 1).clamp(max=length), torch.ones_like(count[:, :1])], dim=1)
        self._ens, self._ens_count = means[:, 1:], counts[:, 1:]
        return means[:, 0]

    def _start(self, batch: int) -> None:
        device = self.fixed_noise.device
        length = self.config.horizon - self.config.n_obs_steps  # predicted steps after the current one
        self._ens = torch.zeros(batch, length, *self.action_shape, device=device)
        self._ens_count = torch.zeros(batch, length, dtype=torch.long, device=device)
        self._history = {}
        self._queue = torch.zeros(batch, self.config.n_action_steps, *self.action_shape, device=device)
        self._queue_pos = torch.full((batch,), self.config.n_action_steps, dtype=torch.long, device=device)
        self._fresh = torch.ones(batch, dtype=torch.bool, device=device)

    def reset(self, done_mask: Any = None) -> None:
        """Forget the history and queued actions of rows where ``done_mask [B]`` (all rows if None)."""
        if done_mask is None or self._queue_pos.shape[0] == 0:
            self._start(0)
            return
        done = torch.as_tensor(np.asarray(done_mask), dtype=torch.bool, device=self._queue_pos.device)
        if done.shape != self._queue_pos.shape:
            self._start(0)
            return
        self._queue_pos = torch.where(done, self.config.n_action_steps, self._queue_pos)
        self._ens_count = torch.where(done.unsqueeze(-1), 0, self._ens_count)
        self._fresh = self._fresh | done
