"""The base of the action-chunk generative policies: chunked acting, normalisation, EMA.

A subclass supplies the generative model's two halves on normalised action chunks
``[B, horizon, action_dim]``: :meth:`ChunkPolicy.objective` (the training loss) and
:meth:`ChunkPolicy.sample` (noise -> chunk). Everything else is shared:

* **Receding horizon** (Diffusion Policy, Chi et al. 2023, §III-C): ``act`` keeps the last
  ``n_obs_steps`` observations per row, samples a chunk of ``horizon`` actions whenever a row's
  queue is empty, and returns one action per call from the chunk's executed slice
  ``[n_obs_steps - 1, n_obs_steps - 1 + n_action_steps)``; ``reset(done_mask)`` clears the
  history and queue of finished rows only, so only those rows re-sample on the next call.
* **Normalisation**: actions (and vector observations) are min-max scaled to [-1, 1]; the
  statistics are buffers (saved with the weights) set by :meth:`ChunkPolicy.fit_normalizers`.
  Until then the action range is the action space's bounds (or [-1, 1] where unbounded).
* **EMA**: a copy of the network follows the trained one with Diffusion Policy's decay
  ``min(max_decay, 1 - (1 + step)^-power)`` (0 at the first update); acting uses the copy, which
  is saved too. The imitation loop calls :meth:`ChunkPolicy.update_ema` after each optimiser step.
* **Determinism**: with ``deterministic=True`` every row starts from the same fixed noise
  (seeded by ``noise_seed``), so an action depends only on the observation history, not on the
  call count or the batch layout.

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
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import OBS_IMAGE, OBS_STATE, Evaluation, Obs, PolicyStep
from omnigym.policies.chunking.encoders import MinMaxNormalizer, ObservationEncoder
from omnigym.policies.chunking.unet import ConditionalUnet1D

LOG_2PI = math.log(2 * math.pi)
EXTRA_CHAIN = "chain"
"""Extras key of the stochastic chain ``[B, K + 1, horizon, action_dim]`` (normalised; zeros in
rows that sampled no chunk at this step)."""
EXTRA_SAMPLED = "chunk_sampled"
"""Extras key of ``[B]`` bools: the row sampled a chunk at this step (its parts count)."""
EXTRA_HISTORY = "obs_history."
"""Extras key prefix of the observation history ``[B, To, ...]`` the chunk was conditioned on."""


@dataclass
class ChunkPolicyConfig(PolicyConfig):
    """What the chunk policies share; defaults follow Diffusion Policy with a CPU-sized U-Net."""

    obs_keys: tuple[str, ...] = ()
    """Observation keys to read (Box spaces); empty: ``image`` and ``state``, those the env has."""
    n_obs_steps: int = 2
    """Observation history length (To)."""
    horizon: int = 16
    """Predicted actions per chunk (Tp); divisible by 2^(len(down_dims) - 1)."""
    n_action_steps: int = 8
    """Actions executed from each chunk before re-planning (Ta); at most horizon - To + 1."""
    down_dims: tuple[int, ...] = (64, 128, 256)
    """U-Net channels per level (the paper's (512, 1024, 2048) is ~60x the compute)."""
    kernel_size: int = 5
    """U-Net temporal kernel."""
    n_groups: int = 8
    """GroupNorm groups in the U-Net (must divide every down_dims entry)."""
    time_embed_dim: int = 128
    """Width of the sinusoidal time embedding."""
    state_hidden_sizes: tuple[int, ...] = (256, 256)
    """MLP over the normalised vector keys of one step (empty: the vector itself)."""
    image_widths: tuple[int, ...] = (32, 64, 128)
    """Image encoder: stem width, then one stride-2 residual block per further width."""
    num_keypoints: int = 32
    """Spatial-softmax keypoints of the image encoder."""
    image_feature_dim: int = 64
    """Width of one image encoding."""
    crop_ratio: float = 0.9
    """Image crop side / image side: random crop in training, centre crop when acting (1: none)."""
    use_ema: bool = True
    """Act with an exponential moving average of the weights."""
    ema_power: float = 0.75
    """EMA decay warm-up power: decay = 1 - (1 + step)^-power."""
    ema_max_decay: float = 0.9999
    """Largest EMA decay."""
    noise_seed: int = 0
    """Seed of the fixed initial noise used by deterministic acting."""
    temporal_ensemble: bool = False
    """Re-plan every step and act with the weighted mean of every chunk's prediction for the
    step (ACT's temporal ensembling, Zhao et al. 2023); needs n_action_steps 1."""
    ensemble_coeff: float = 0.01
    """Temporal-ensembling weight exp(-ensemble_coeff * i) of the i-th oldest prediction."""
    frozen_chain_prefix: bool = False
    """The policy holds a frozen copy of its network for the chain's deterministic first steps
    (set by :meth:`ChunkPolicy.freeze_chain_prefix`, so that a saved fine-tuned policy loads with
    its copy); not a setting to choose by hand."""

    def __post_init__(self) -> None:
        """Reject horizons and widths the U-Net and the receding horizon cannot use."""
        self.obs_keys = tuple(self.obs_keys)
        self.down_dims = tuple(self.down_dims)
        if self.n_obs_steps < 1 or self.n_action_steps < 1:
            raise ValueError("policy.n_obs_steps and n_action_steps must be >= 1")
        if self.n_obs_steps - 1 + self.n_action_steps > self.horizon:
            raise ValueError(
                f"policy.horizon {self.horizon} is shorter than n_obs_steps - 1 + n_action_steps "
                f"= {self.n_obs_steps - 1 + self.n_action_steps}"
            )
        if not self.down_dims or self.horizon % 2 ** (len(self.down_dims) - 1):
            raise ValueError(
                f"policy.horizon {self.horizon} must be divisible by 2^(len(down_dims) - 1) "
                f"for down_dims {self.down_dims}"
            )
        if any(d % self.n_groups for d in self.down_dims):
            raise ValueError(f"policy.n_groups {self.n_groups} must divide every down_dims {self.down_dims}")
        if not 0 < self.crop_ratio <= 1:
            raise ValueError(f"policy.crop_ratio must be in (0, 1], got {self.crop_ratio}")
        if self.temporal_ensemble and self.n_action_steps != 1:
            raise ValueError("policy.temporal_ensemble re-plans every step: set n_action_steps to 1")


class ChunkDenoiser(nn.Module):
    """The trained network: the observation encoder and the conditional U-Net."""

    def __init__(self, encoder: ObservationEncoder, unet: ConditionalUnet1D) -> None:
        super().__init__()
        self.encoder = encoder
        self.unet = unet


class ChunkPolicy(Policy):
    """Receding-horizon acting over a generative model of action chunks (see the module doc)."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"act", "compute_loss", "trainable"})
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Box,)
    num_times: ClassVar[int] = 1
    """Scalar times the U-Net is conditioned on (MeanFlow: r and t)."""
    config: ChunkPolicyConfig
    action_low: Tensor
    action_high: Tensor
    ema_step: Tensor
    fixed_noise: Tensor

    def __init__(
        self, config: ChunkPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(action_space, spaces.Box):
            raise TypeError(
                f"{type(self).__name__} generates continuous (Box) actions, not {type(action_space).__name__}"
            )
        self.action_shape: tuple[int, ...] = tuple(action_space.shape)
        self.action_dim = math.prod(self.action_shape)
        self.state_keys, self.image_keys = self._resolve_keys(observation_space, config.obs_keys)
        shapes = {k: tuple(observation_space[k].shape or ()) for k in (*self.state_keys, *self.image_keys)}
        state_dims = [math.prod(shapes[k]) for k in self.state_keys]
        image_channels = [shapes[k][2] for k in self.image_keys]
        low, high = (
            torch.as_tensor(b, dtype=torch.float32).flatten() for b in (action_space.low, action_space.high)
        )
        self.register_buffer("action_low", low, persistent=False)  # the space's bounds clamp actions
        self.register_buffer("action_high", high, persistent=False)
        bounded = torch.isfinite(low) & torch.isfinite(high)
        self.action_normalizer = MinMaxNormalizer(
            torch.where(bounded, low, -1.0), torch.where(bounded, high, 1.0)
        )
        self.state_normalizer = MinMaxNormalizer(-torch.ones(sum(state_dims)), torch.ones(sum(state_dims)))
        encoder = ObservationEncoder(
            state_dims, image_channels, config.n_obs_steps, tuple(config.state_hidden_sizes),
            tuple(config.image_widths), config.num_keypoints, config.image_feature_dim, config.crop_ratio,
        )  # fmt: skip
        unet = ConditionalUnet1D(
            self.action_dim, encoder.out_dim, config.down_dims, config.kernel_size,
            config.n_groups, config.time_embed_dim, self.num_times,
        )  # fmt: skip
        self.model = ChunkDenoiser(encoder, unet)
        self.ema_model: ChunkDenoiser | None = None
        if config.use_ema:
            self.ema_model = copy.deepcopy(self.model).requires_grad_(False)
        self.register_buffer("ema_step", torch.zeros((), dtype=torch.long))
        self.frozen_model: ChunkDenoiser | None = None
        """Weights of the chain's deterministic first steps under ``rl_chain`` (see
        :meth:`freeze_chain_prefix`); None: the trained weights run every step."""
        if config.frozen_chain_prefix:  # a saved fine-tuned policy: its weights load into the copy
            self.frozen_model = copy.deepcopy(self.model).requires_grad_(False)
        noise = torch.randn(
            config.horizon, self.action_dim, generator=torch.Generator().manual_seed(config.noise_seed)
        )
        self.register_buffer("fixed_noise", noise, persistent=False)
        self._history: dict[str, Tensor] = {}
        self._queue = torch.zeros(0)
        self._queue_pos = torch.zeros(0, dtype=torch.long)
        self._fresh = torch.zeros(0, dtype=torch.bool)
        self._ens = torch.zeros(0)
        self._ens_count = torch.zeros(0, dtype=torch.long)
        if self.rl_chain:  # instance-level capabilities: only the switched-on policy re-scores
            setattr(self, "capabilities", type(self).capabilities | {"evaluate", "features"})  # noqa: B010

    @staticmethod
    def _resolve_keys(observation_space: spaces.Dict, keys: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """Split the observation keys read into vector keys and ``[H, W, C]`` image keys."""
        chosen = keys or tuple(k for k in (OBS_IMAGE, OBS_STATE) if k in observation_space.spaces)
        if not keys:
            unread = [k for k, s in observation_space.spaces.items() if not isinstance(s, spaces.Box)]
            if unread:
                raise TypeError(
                    f"chunk policies read Box observations only; set policy.obs_keys to skip {unread}"
                )
        if not chosen:
            raise TypeError(f"no image or state key to read in {sorted(observation_space.spaces)}")
        state_keys: list[str] = []
        image_keys: list[str] = []
        for key in chosen:
            space = observation_space.spaces.get(key)
            if space is None:
                raise ValueError(
                    f"policy.obs_keys names {key!r}, but the env observes {sorted(observation_space.spaces)}"
                )
            if not isinstance(space, spaces.Box):
                raise TypeError(f"chunk policies read Box observations; {key!r} is {type(space).__name__}")
            is_image = len(space.shape or ()) == 3 and space.dtype == np.uint8
            (image_keys if is_image else state_keys).append(key)
        sizes = {tuple(observation_space[k].shape or ())[:2] for k in image_keys}
        if len(sizes) > 1:
            raise ValueError(f"image keys {image_keys} have different sizes {sorted(sizes)}")
        return state_keys, image_keys

    # --- the generative model (subclasses) ------------------------------------------------------
    def objective(self, actions: Tensor, cond: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Training loss on normalised chunks ``actions [B, Tp, Da]`` given features ``cond [B, C]``."""
        raise NotImplementedError

    def sample(self, noise: Tensor, cond: Tensor, unet: ConditionalUnet1D) -> tuple[Tensor, list[Tensor]]:
        """Generate normalised chunks from ``noise [B, Tp, Da]``.

        Returns:
            The chunks and the chain of intermediate chunks (noise first, the result last),
            each ``[B, Tp, Da]``.
        """
        raise NotImplementedError

    # --- RL fine-tuning: stochastic chains scored step by step (DPPO, Flow-GRPO) -----------------
    @property
    def rl_chain(self) -> bool:
        """Whether ``act`` samples stochastic chains and returns their steps as parts."""
        return bool(getattr(self.config, "rl_chain", False))

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

    def freeze_chain_prefix(self) -> None:
        """Run the chain's deterministic first ``N - K`` steps with a frozen copy of the current weights.

        DPPO (ALGORITHMS.md §7.2) fine-tunes a copy of the network for the last K (stochastic)
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

    def use_ema_weights(self) -> None:
        """Copy the EMA weights into the trained network (before RL fine-tuning acts with it)."""
        if self.ema_model is not None:
            self.model.load_state_dict(self.ema_model.state_dict())

    # --- data -----------------------------------------------------------------------------------
    @torch.no_grad()
    def fit_normalizers(self, obs: dict[str, Any], actions: Any) -> None:
        """Set the min-max statistics from demonstrations.

        Args:
            obs: key -> ``[N, ...]`` (vector keys are read).
            actions: Shape: [N, *action_shape].
        """
        self.action_normalizer.fit(torch.as_tensor(np.asarray(actions)).reshape(-1, self.action_dim))
        if self.state_keys:
            flat = [
                torch.as_tensor(np.asarray(obs[k])).reshape(len(obs[k]), -1).float() for k in self.state_keys
            ]
            self.state_normalizer.fit(torch.cat(flat, dim=-1))

    def encode(self, history: Obs, model: ChunkDenoiser, random_crop: bool = False) -> Tensor:
        """Features of observation histories key -> ``[B, To, ...]``. Shape: [B, cond_dim]."""
        device = self.fixed_noise.device
        states = images = None
        if self.state_keys:
            parts = [history[k].to(device).flatten(2).float() for k in self.state_keys]
            states = self.state_normalizer.normalize(torch.cat(parts, dim=-1))
        if self.image_keys:
            pixels = [history[k].to(device).permute(0, 1, 4, 2, 3).float() / 255 for k in self.image_keys]
            images = torch.cat(pixels, dim=2)
        return model.encoder(states, images, random_crop)

    def _windows(self, batch: Any) -> tuple[Obs, Tensor]:
        """``(obs history [B, To, ...], action chunks [B, Tp, Da])`` of a :class:`ChunkBatch`.

        A batch of single steps (``obs [B, ...]``, ``actions [B, *action_shape]``, e.g. an
        ``OnPolicyBatch``) is read as windows padded by repeating that step.
        """
        cfg = self.config
        history = {}
        for key in (*self.state_keys, *self.image_keys):
            value = batch.obs[key]
            if value.dim() == len(self.observation_space[key].shape or ()) + 1:
                value = value.unsqueeze(1).expand(-1, cfg.n_obs_steps, *value.shape[1:])
            history[key] = value
        actions = batch.actions.to(self.fixed_noise.device).float()
        if actions.dim() == len(self.action_shape) + 1:
            actions = actions.unsqueeze(1).expand(-1, cfg.horizon, *actions.shape[1:])
        return history, actions.reshape(actions.shape[0], cfg.horizon, self.action_dim)

    def compute_loss(self, batch: Any) -> tuple[Tensor, dict[str, float]]:
        """The generative model's loss on demonstration windows (a :class:`ChunkBatch`)."""
        history, actions = self._windows(batch)
        cond = self.encode(history, self.model, random_crop=True)
        return self.objective(self.action_normalizer.normalize(actions), cond)

    @torch.no_grad()
    def update_ema(self) -> None:
        """Move the EMA weights towards the trained ones; call after each optimiser step."""
        if self.ema_model is None:
            return
        step = int(self.ema_step)
        decay = 0.0 if step == 0 else min(self.config.ema_max_decay, 1 - (1 + step) ** -self.config.ema_power)
        for ema, param in zip(self.ema_model.parameters(), self.model.parameters(), strict=True):
            ema.lerp_(param.detach(), 1 - decay)
        self.ema_step.add_(1)

    # --- acting ---------------------------------------------------------------------------------
    @property
    def acting_model(self) -> ChunkDenoiser:
        """The weights ``act`` uses: the EMA copy when enabled, the trained ones under ``rl_chain``.

        RL fine-tuning must act with the weights :meth:`evaluate` differentiates; call
        :meth:`use_ema_weights` first to start it from the EMA copy of an imitation run.
        """
        if self.ema_model is None or self.rl_chain:
            return self.model
        return self.ema_model

    @torch.no_grad()
    def sample_chunks(
        self, history: Obs, deterministic: bool = False, noise: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """Sample whole chunks for observation histories key -> ``[B, To, ...]``.

        ``noise [B, horizon, action_dim]``: the sampler's initial noise (normalised units); None
        draws it (the fixed noise when ``deterministic``).

        Returns:
            The chunks in the env's units, ``[B, Tp, *action_shape]``, and the normalised chain
            of :meth:`sample` (each ``[B, Tp, Da]``).
        """
        model = self.acting_model
        cond = self.encode(history, model)
        batch = cond.shape[0]
        if noise is not None:
            noise = noise.to(cond.device).reshape(batch, *self.fixed_noise.shape)
        elif deterministic:
            noise = self.fixed_noise.expand(batch, -1, -1)
        else:
            noise = torch.randn(batch, *self.fixed_noise.shape, device=cond.device)
        normalized, chain = self.sample(noise, cond, model.unet)
        chunk = self.action_normalizer.unnormalize(normalized.clamp(-1, 1))
        chunk = chunk.clamp(self.action_low, self.action_high)  # infinite bounds clamp nothing
        return chunk.reshape(batch, self.config.horizon, *self.action_shape), chain

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
