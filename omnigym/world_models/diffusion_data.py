"""Training data of the diffusion world model: history transitions from episodes, and the fit.

The model conditions on the last ``L`` frames and actions, which a plain transition lacks, so its
transitions carry their history in the observation dict (:data:`HISTORY_FRAMES`,
:data:`HISTORY_ACTIONS`), padded before an episode's first step as ``reset`` pads.
:func:`fit_diffusion_world_model` trains on them for a fixed step budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.types import OBS_IMAGE, TransitionBatch
from omnigym.world_models.training import split_holdout, take_rows

if TYPE_CHECKING:
    from omnigym.world_models.diffusion import DiffusionWorldModel

logger = logging.getLogger(__name__)

HISTORY_FRAMES = "image_history"
"""Observation key of a transition's context frames: uint8 ``[B, L, H, W, C]``, oldest first,
the last being ``obs["image"]``."""
HISTORY_ACTIONS = "action_history"
"""Observation key of the actions before the transition's own: float ``[B, L - 1, A]``."""
NO_ACTION = -1.0
"""A discrete history entry before the episode's first step ("no action yet")."""


def action_dim(action_space: spaces.Space) -> int:
    """Width of a stored action: 1 for ``Discrete`` (the index), the flat size for ``Box``."""
    if isinstance(action_space, spaces.Discrete):
        return 1
    if isinstance(action_space, spaces.Box):
        return int(math.prod(action_space.shape))
    raise TypeError(f"the diffusion world model takes Discrete or Box actions, got {action_space}")


def history_transitions(
    episodes: Sequence[Mapping[str, Any]], num_context_frames: int, action_space: spaces.Space
) -> TransitionBatch:
    """Every step of ``episodes`` as a transition that carries its frame and action history.

    Args:
        episodes: Minari layout: ``observations["image"]`` uint8 ``[T + 1, H, W, C]``, ``actions``
            ``[T]`` (Discrete) or ``[T, ...]`` (Box), ``rewards [T]``, ``terminations [T]``.
        num_context_frames: ``L``.
        action_space: the env's action space (decides the padding before the first step).

    Returns:
        ``obs`` = ``{"image", "image_history" [N, L, H, W, C], "action_history" [N, L - 1, A]}``
        (before step 0 the first frame is repeated and the actions are "no action", as ``reset``
        does), ``actions [N, A]``, ``rewards``, ``next_obs["image"]``, ``terminated``.
    """
    width = action_dim(action_space)
    fill = NO_ACTION if isinstance(action_space, spaces.Discrete) else 0.0
    pad = num_context_frames - 1
    parts: dict[str, list[Tensor]] = {
        k: [] for k in ("frames", "history", "actions", "rewards", "next", "ends")
    }
    for episode in episodes:
        frames = torch.as_tensor(np.asarray(episode["observations"][OBS_IMAGE]))
        length = len(episode["rewards"])
        if length == 0:
            continue
        actions = torch.as_tensor(np.asarray(episode["actions"]), dtype=torch.float32).reshape(length, width)
        padded_frames = torch.cat([frames[:1].expand(pad, *frames.shape[1:]), frames])
        padded_actions = torch.cat([torch.full((pad, width), fill), actions])
        steps = torch.arange(length)[:, None]
        parts["frames"].append(padded_frames[steps + torch.arange(num_context_frames)])
        parts["history"].append(padded_actions[steps + torch.arange(pad)])
        parts["actions"].append(actions)
        parts["rewards"].append(torch.as_tensor(np.asarray(episode["rewards"]), dtype=torch.float32))
        parts["next"].append(frames[1 : length + 1])
        parts["ends"].append(torch.as_tensor(np.asarray(episode["terminations"]), dtype=torch.float32))
    if not parts["rewards"]:
        raise ValueError("history_transitions needs at least one non-empty episode")
    data = {k: torch.cat(v) for k, v in parts.items()}
    return TransitionBatch(
        obs={
            OBS_IMAGE: data["frames"][:, -1],
            HISTORY_FRAMES: data["frames"],
            HISTORY_ACTIONS: data["history"],
        },
        actions=data["actions"],
        rewards=data["rewards"],
        next_obs={OBS_IMAGE: data["next"]},
        terminated=data["ends"],
    )


def fit_diffusion_world_model(
    model: DiffusionWorldModel,
    episodes: Sequence[Mapping[str, Any]],
    *,
    max_steps: int,
    batch_size: int = 32,
    holdout_fraction: float = 0.05,
    max_holdout: int = 256,
    eval_every: int | None = None,
    seed: int = 0,
    callback: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` for ``max_steps`` minibatches of real transitions (shuffled passes).

    A fixed step budget rather than ``fit_world_model``'s early stopping: the denoising loss is a
    noisy, sigma-weighted estimate whose plateau says little about sample quality.

    Args:
        model: the world model.
        episodes: real episodes (see :func:`history_transitions`).
        max_steps: optimiser steps (each updates both networks).
        batch_size: transitions per step.
        holdout_fraction: share of transitions held out for ``evaluate`` (0: evaluate on training rows).
        max_holdout: held-out transitions at most.
        eval_every: evaluate (and call ``callback``) every this many steps; None: only at the end.
        seed: seeds the split, the minibatch order and the training noise.
        callback: ``callback(step, metrics)``; otherwise metrics are logged.

    Returns:
        The final held-out metrics, the last ``eval_every`` window's mean ``train/...`` metrics
        and ``train/steps``.
    """
    if max_steps < 1 or batch_size < 1:
        raise ValueError(f"max_steps and batch_size must be >= 1, got {max_steps} and {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    data = history_transitions(episodes, model.config.num_context_frames, model.action_space)
    train, holdout = split_holdout(data, holdout_fraction, max_holdout, generator)
    check = holdout if holdout is not None else take_rows(train, torch.arange(min(len(train), max_holdout)))
    noise = torch.Generator(device=model.device).manual_seed(seed + 1)
    order = torch.randperm(len(train), generator=generator)
    position, window = 0, 0
    totals: dict[str, float] = {}
    metrics: dict[str, float] = {}
    for step in range(1, max_steps + 1):
        if position + batch_size > len(order):
            order, position = torch.randperm(len(train), generator=generator), 0
        idx = order[position : position + batch_size]
        position += batch_size
        for name, value in model.train_step(take_rows(train, idx).to(model.device), noise).items():
            totals[name] = totals.get(name, 0.0) + value
        window += 1
        if step == max_steps or (eval_every is not None and step % eval_every == 0):
            metrics = {name: total / window for name, total in totals.items()}
            metrics |= model.evaluate(check.to(model.device))
            totals, window = {}, 0
            if callback is not None:
                callback(step, metrics)
            else:
                logger.info(
                    "diffusion world model step %d: %s",
                    step,
                    " ".join(f"{k}={v:.4g}" for k, v in metrics.items()),
                )
    return {**metrics, "train/steps": float(max_steps)}
