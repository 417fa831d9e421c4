"""Fitting a world model to a replay buffer, with MBPO's held-out early stopping.

The buffer's transitions are split once into a training set and a held-out set (``holdout_fraction``
of them, at most ``max_holdout``). Each epoch is one shuffled pass over the training set in
minibatches; after it, every member's held-out loss is measured and training stops when no member
improved its best by more than ``min_improvement`` (relative) for ``patience`` epochs in a row
(MBPO: 1 %, 5 epochs). The weights of the epoch with the lowest mean held-out loss are restored and
the elites chosen on the held-out set. Works with any :class:`~omnigym.world_models.base.WorldModel`.

A model whose ``sequence_length`` is set (a recurrent model such as the RSSM) is fed chunks
of that many consecutive transitions of one real episode instead (:func:`sequence_chunks`):
batches of ``[B, L, ...]`` tensors, split, shuffled and held out chunk by chunk, with
``batch_size // L`` chunks per step (``batch_size`` still counts transitions).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from omnigym.core.types import TransitionBatch
from omnigym.platform.buffers import ReplayBuffer
from omnigym.world_models.base import WorldModel

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, dict[str, float]], None]
"""``callback(epoch, metrics)`` after every epoch (``train/...`` epoch means, ``eval/...``, ``time/...``)."""


def take_rows(batch: TransitionBatch, idx: Tensor) -> TransitionBatch:
    """The rows ``idx`` of every tensor of ``batch``."""
    values: dict[str, Any] = {}
    for f in fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, dict):
            values[f.name] = {k: v[idx] for k, v in value.items()}
        else:
            values[f.name] = None if value is None else value[idx]
    return TransitionBatch(**values)


def sequence_chunks(buffer: ReplayBuffer, length: int) -> TransitionBatch:
    """Every episode of ``buffer`` cut into chunks of ``length`` consecutive transitions.

    Chunks never cross an episode boundary. They tile each episode from its start without
    overlap; the last chunk is aligned to the episode's end, so every transition (the final,
    possibly terminal one too) is in some chunk. Episodes shorter than ``length`` are dropped.

    Returns:
        A batch of ``[N, length, ...]`` tensors (``len`` is the number of chunks N).

    Raises:
        ValueError: no episode has ``length`` transitions.
    """
    columns: dict[str, list[np.ndarray]] = {"actions": [], "rewards": [], "terminated": []}
    obs: dict[str, list[np.ndarray]] = {key: [] for key in buffer.obs_keys}
    next_obs: dict[str, list[np.ndarray]] = {key: [] for key in buffer.obs_keys}
    dropped = 0
    for episode in buffer.episodes():
        steps = len(episode["rewards"])
        if steps < length:
            dropped += 1
            continue
        starts = list(range(0, steps - length + 1, length))
        if starts[-1] != steps - length:
            starts.append(steps - length)
        for s in starts:
            window = slice(s, s + length)
            columns["actions"].append(episode["actions"].reshape(steps, -1)[window])
            columns["rewards"].append(episode["rewards"][window])
            columns["terminated"].append(episode["terminations"][window])
            for key in buffer.obs_keys:
                obs[key].append(episode["observations"][key][window])
                next_obs[key].append(episode["observations"][key][s + 1 : s + length + 1])
    if not columns["rewards"]:
        raise ValueError(f"no episode in the buffer has {length} transitions for a sequence chunk")
    if dropped:
        logger.warning(
            "%d episodes shorter than %d transitions left out of the sequence chunks", dropped, length
        )

    def stack(rows: list[np.ndarray]) -> Tensor:
        return torch.as_tensor(np.stack(rows), dtype=torch.float32, device=buffer.device)

    return TransitionBatch(
        obs={key: stack(rows) for key, rows in obs.items()},
        actions=stack(columns["actions"]),
        rewards=stack(columns["rewards"]),
        next_obs={key: stack(rows) for key, rows in next_obs.items()},
        terminated=stack(columns["terminated"]),
    )


def split_holdout(
    data: TransitionBatch, holdout_fraction: float, max_holdout: int, generator: torch.Generator
) -> tuple[TransitionBatch, TransitionBatch | None]:
    """A random ``(train, holdout)`` split; ``holdout`` is None when ``holdout_fraction`` is 0."""
    n = len(data)
    num_holdout = min(max_holdout, round(n * holdout_fraction))
    if holdout_fraction > 0:
        num_holdout = max(num_holdout, 1)
    if num_holdout >= n:
        raise ValueError(f"{n} transitions leave nothing to train on after a {num_holdout}-row holdout")
    perm = torch.randperm(n, generator=generator).to(data.rewards.device)
    holdout = take_rows(data, perm[:num_holdout]) if num_holdout else None
    return take_rows(data, perm[num_holdout:]), holdout


@dataclass
class EarlyStopping:
    """MBPO's rule: stop after ``patience`` epochs in which no member improved by ``min_improvement``.

    Also remembers the weights with the lowest mean held-out loss seen.
    """

    patience: int = 5
    min_improvement: float = 0.01
    best: Tensor | None = None
    epochs_without_improvement: int = 0
    best_mean: float = float("inf")
    best_state: dict[str, Tensor] = field(default_factory=dict)

    def update(self, losses: Tensor, model: WorldModel) -> bool:
        """Record one epoch's held-out ``losses [M]``; True when training should stop."""
        losses = losses.detach().cpu()
        if self.best is None:
            self.best, improved = losses.clone(), True
        else:
            gain = (self.best - losses) / self.best.abs().clamp_min(1e-12)
            better = gain > self.min_improvement
            self.best = torch.where(better, losses, self.best)
            improved = bool(better.any())
        self.epochs_without_improvement = 0 if improved else self.epochs_without_improvement + 1
        if float(losses.mean()) < self.best_mean:
            self.best_mean = float(losses.mean())
            self.best_state = copy.deepcopy(model.state_dict())
        return self.epochs_without_improvement >= self.patience


def fit_world_model(
    model: WorldModel,
    buffer: ReplayBuffer,
    *,
    max_epochs: int | None = None,
    max_steps: int | None = None,
    batch_size: int = 256,
    holdout_fraction: float = 0.1,
    max_holdout: int = 5000,
    patience: int = 5,
    min_improvement: float = 0.01,
    seed: int = 0,
    callback: ProgressCallback | None = None,
) -> dict[str, float]:
    """Train ``model`` on every transition in ``buffer`` until early stopping or a budget runs out.

    Args:
        model: the world model; its data statistics are set from the training split first.
        buffer: the transitions to learn from.
        max_epochs: passes over the training split at most (None: no limit).
        max_steps: optimiser steps at most (None: no limit).
        batch_size: transitions per optimiser step (sequence models: ``batch_size // L`` chunks).
        holdout_fraction: share of the transitions (or chunks) held out (0: no holdout, no early
            stopping).
        max_holdout: held-out transitions at most (MBPO: 5000).
        patience: epochs without a >``min_improvement`` gain of any member before stopping.
        min_improvement: relative held-out loss decrease that counts as improving.
        seed: seeds the split and the minibatch order.
        callback: called after each epoch with ``(epoch, metrics)``; otherwise each epoch is logged.

    Returns:
        The final held-out metrics (``eval/...``; of the training split without a holdout) and
        ``train/epochs``, ``train/steps``.

    Raises:
        ValueError: nothing would stop training (no budget and no holdout), or too little data.
    """
    if max_epochs is None and max_steps is None and holdout_fraction <= 0:
        raise ValueError("fit_world_model needs max_epochs, max_steps or a holdout for early stopping")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    length = model.sequence_length
    data = buffer.all() if length is None else sequence_chunks(buffer, length)
    if length is not None:
        batch_size, max_holdout = max(1, batch_size // length), max(1, max_holdout // length)
    train, holdout = split_holdout(data, holdout_fraction, max_holdout, generator)
    model.set_data_statistics(train)
    stopper = EarlyStopping(patience, min_improvement)
    epoch = steps = 0
    start = time.perf_counter()
    while (max_epochs is None or epoch < max_epochs) and (max_steps is None or steps < max_steps):
        budget = None if max_steps is None else max_steps - steps
        train_metrics, epoch_steps = _train_epoch(model, train, batch_size, generator, budget)
        epoch, steps = epoch + 1, steps + epoch_steps
        stop = holdout is not None and stopper.update(model.member_losses(holdout), model)
        metrics = {**train_metrics, **model.evaluate(holdout if holdout is not None else train)}
        metrics.update(_timing(time.perf_counter() - start, epoch, steps, max_epochs, max_steps))
        _report(callback, epoch, metrics)
        if stop:
            break
    if stopper.best_state:
        model.load_state_dict(stopper.best_state)
    model.select_elites(holdout if holdout is not None else train)
    final = model.evaluate(holdout if holdout is not None else train)
    return {**final, "train/epochs": float(epoch), "train/steps": float(steps)}


def _train_epoch(
    model: WorldModel,
    train: TransitionBatch,
    batch_size: int,
    generator: torch.Generator,
    max_steps: int | None,
) -> tuple[dict[str, float], int]:
    """One shuffled pass over ``train`` (or ``max_steps`` minibatches); the mean metrics and the steps."""
    perm = torch.randperm(len(train), generator=generator).to(train.rewards.device)
    chunks = perm.split(batch_size)
    if max_steps is not None:
        chunks = chunks[:max_steps]
    totals: dict[str, float] = {}
    for idx in chunks:
        for name, value in model.train_step(take_rows(train, idx)).items():
            totals[name] = totals.get(name, 0.0) + value
    return {name: total / len(chunks) for name, total in totals.items()}, len(chunks)


def _timing(
    elapsed: float, epoch: int, steps: int, max_epochs: int | None, max_steps: int | None
) -> dict[str, float]:
    """``time/elapsed_s`` and, under a budget, ``time/eta_s``: the time left at most.

    Early stopping may end the fit sooner; without a budget the time left is unknown (NaN).
    """
    left = [
        elapsed / done * (budget - done)
        for done, budget in ((epoch, max_epochs), (steps, max_steps))
        if budget is not None and done > 0
    ]
    return {"time/elapsed_s": elapsed, "time/eta_s": max(min(left), 0.0) if left else float("nan")}


def _report(callback: ProgressCallback | None, epoch: int, metrics: dict[str, float]) -> None:
    """Hand one epoch's metrics to ``callback``, or log them."""
    if callback is not None:
        callback(epoch, metrics)
    else:
        logger.info("world model epoch %d: %s", epoch, " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
