"""Supervised fine-tuning (SFT) of a :class:`VLMPolicy` on demonstrations.

Demonstrations are (observation, action text) pairs, e.g. an oracle's episodes recorded as a
Minari dataset by ``omnigym collect`` and read back with
:func:`~omnigym.platform.datasets.load_dataset_steps`. Each action becomes a target reply in the
policy's output format (``<answer>ACTION</answer>`` by default) and the policy's own
:meth:`~VLMPolicy.compute_loss` (masked token NLL on the temperature-scaled distribution the
policy samples from) is minimised with AdamW on shuffled minibatches. SFT is the usual first
stage before RL (GRPO/DAPO/VL-DAC): it teaches the reply format and a starting behaviour.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.types import OnPolicyBatch
from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig

logger = logging.getLogger(__name__)

ANSWER_TEMPLATE = "<answer>{action}</answer>"
"""The target reply of one demonstrated action (the ``answer`` output format without a thought)."""


@dataclass
class SFTConfig:
    """How to fine-tune: minibatch steps of AdamW on the demonstrations."""

    steps: int = 200
    """Optimiser steps."""
    batch_size: int = 32
    """Demonstrations per step (drawn without replacement within each pass over the data)."""
    learning_rate: float = 1e-3
    """AdamW learning rate (1e-3 suits a tiny model trained from scratch; real VLMs want ~1e-5)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    seed: int = 0
    """Minibatch order."""
    log_every: int = 20
    """Steps between log lines (and ``callback`` calls); 0 logs only the end."""

    def __post_init__(self) -> None:
        """Reject counts and rates that cannot train."""
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"sft {name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"sft learning_rate must be > 0, got {self.learning_rate}")
        if self.log_every < 0:
            raise ValueError(f"sft log_every must be >= 0, got {self.log_every}")


def answer_targets(actions: Sequence[str], template: str = ANSWER_TEMPLATE) -> list[str]:
    """Target replies for demonstrated action texts, e.g. ``"up"`` -> ``"<answer>up</answer>"``."""
    return [template.format(action=action) for action in actions]


def supervised_finetune(
    policy: VLMPolicy,
    obs: dict[str, Any],
    targets: Sequence[str],
    config: SFTConfig | None = None,
    callback: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Fit ``policy`` to reply ``targets[i]`` to observation ``i``; returns the logged metrics.

    Args:
        policy: the VLM to train (in place; its LoRA adapters only, when it has them).
        obs: ``key -> [N, ...]`` observations (``text`` as ``N`` strings, ``image`` uint8 arrays).
        targets: ``N`` target replies (see :func:`answer_targets`).
        config: steps, batch size and optimiser settings.
        callback: called as ``callback(step, metrics)`` at each log point (e.g. an evaluation).

    Raises:
        ValueError: ``obs`` and ``targets`` differ in length, or there is no demonstration.
    """
    config = config or SFTConfig()
    count = len(targets)
    sizes = {key: len(value) for key, value in obs.items()}
    if count == 0 or any(size != count for size in sizes.values()):
        raise ValueError(f"need one observation per target: {count} targets, observation sizes {sizes}")
    extras, mask = policy.encode_targets(_rows(obs, np.arange(count)), list(targets))
    parameters = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate, weight_decay=config.weight_decay)
    order = _minibatch_order(count, config.batch_size, config.steps, config.seed)
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    policy.train()
    for step, rows in enumerate(order, start=1):
        index = torch.from_numpy(rows)
        loss, metrics = policy.compute_loss(_sft_batch(_rows(obs, rows), extras, mask, index))
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm)
        optimizer.step()
        if step == config.steps or (config.log_every and step % config.log_every == 0):
            elapsed = time.perf_counter() - start
            metrics = {**metrics, "train/grad_norm": float(grad_norm), "time/elapsed_s": elapsed}
            logger.info("sft step %d/%d: nll %.4f", step, config.steps, metrics["train/sft_nll"])
            history.append({"step": float(step), **metrics})
            if callback is not None:
                callback(step, metrics)
    policy.eval()
    return history


def _minibatch_order(count: int, batch_size: int, steps: int, seed: int) -> list[np.ndarray]:
    """``steps`` index arrays: consecutive slices of fresh permutations (smaller when count is)."""
    rng = np.random.default_rng(seed)
    size = min(batch_size, count)
    order: list[np.ndarray] = []
    permutation = rng.permutation(count)
    position = 0
    while len(order) < steps:
        if position + size > count:
            permutation, position = rng.permutation(count), 0
        order.append(permutation[position : position + size])
        position += size
    return order


def _rows(obs: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The observations at ``rows``: tensors for arrays, lists for text."""
    return {
        key: [value[i] for i in rows] if isinstance(value, list) else torch.as_tensor(np.asarray(value)[rows])
        for key, value in obs.items()
    }


def _sft_batch(
    obs: dict[str, Any], extras: dict[str, torch.Tensor], mask: torch.Tensor, index: torch.Tensor
) -> OnPolicyBatch:
    """The batch ``compute_loss`` reads (``obs``, ``extras``, ``mask``); RL fields are unused zeros."""
    rows = len(index)
    zeros = torch.zeros(rows)
    return OnPolicyBatch(
        obs=obs,
        actions=zeros,
        logprob=torch.zeros(rows, mask.shape[1]),
        mask=mask[index.to(mask.device)],
        values=zeros,
        advantages=zeros,
        returns=zeros,
        extras={key: value[index.to(value.device)] for key, value in extras.items()},
    )


def finetune_on_dataset(
    dataset_id: str,
    policy_config: VLMPolicyConfig,
    config: SFTConfig | None = None,
    *,
    successful_only: bool = True,
    template: str = ANSWER_TEMPLATE,
    callback: Callable[[int, dict[str, float]], None] | None = None,
    device: torch.device | str = "cpu",
) -> tuple[VLMPolicy, list[dict[str, float]]]:
    """A new :class:`VLMPolicy` for the dataset's spaces, fine-tuned on its demonstrations.

    Args:
        dataset_id: a Minari dataset with text actions (e.g. ``omnigym collect --policy game_solver``).
        policy_config: the policy to build (model, prompt and generation settings).
        config: SFT steps and optimiser settings.
        successful_only: learn only from the episodes that succeeded.
        template: target reply of an action (``{action}`` is replaced).
        callback: see :func:`supervised_finetune`.
        device: where the model trains (e.g. ``cuda``).

    Raises:
        ValueError: the dataset's actions are not text.
    """
    import minari

    from omnigym.platform.datasets import load_dataset_steps

    steps = load_dataset_steps(dataset_id, successful_only=successful_only)
    dataset = minari.load_dataset(dataset_id)
    if not isinstance(dataset.action_space, spaces.Text):
        raise ValueError(f"{dataset_id}: a VLM learns text actions; the dataset's are {dataset.action_space}")
    policy = VLMPolicy(policy_config, dataset.observation_space, dataset.action_space).to(device)
    obs = {key: steps.obs[key] for key in policy_config.obs_keys}
    history = supervised_finetune(policy, obs, answer_targets(steps.actions, template), config, callback)
    return policy, history
