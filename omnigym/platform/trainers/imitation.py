"""Imitation learning for the action-chunk policies: AdamW on demonstration windows.

Diffusion Policy's recipe: AdamW (lr 1e-4, betas (0.95, 0.999), weight
decay 1e-6), a cosine learning-rate schedule with warm-up, an EMA update after every step, and
min-max normalisers fitted once on the whole dataset. :func:`imitate_dataset` builds a policy
for a Minari dataset's spaces and trains it; :func:`train_imitation` trains a given policy.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from omnigym.policies.chunking.config import ChunkPolicyConfig
from omnigym.policies.chunking.data import DemoWindows
from omnigym.policies.chunking.policy import ChunkPolicy

logger = logging.getLogger(__name__)

CHUNK_POLICIES = (
    "diffusion", "flow", "meanflow", "vla", "diffusion_planner", "hierarchical_diffusion_planner",
)  # fmt: skip
"""Registered policies :func:`imitate_dataset` can train."""


@dataclass
class ImitationConfig:
    """How to train: AdamW steps on random demonstration windows (Diffusion Policy's defaults)."""

    steps: int = 1000
    """Optimiser steps."""
    batch_size: int = 64
    """Windows per step (drawn with replacement)."""
    learning_rate: float = 1e-4
    """AdamW peak learning rate."""
    betas: tuple[float, float] = (0.95, 0.999)
    """AdamW betas."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    warmup_steps: int = 500
    """Linear warm-up steps of the cosine schedule (capped at a tenth of ``steps``)."""
    max_grad_norm: float = 0.0
    """Gradient-norm clip (0: none, as Diffusion Policy)."""
    seed: int = 0
    """Network initialisation and window order."""
    log_every: int = 100
    """Steps between log lines (and ``callback`` calls); 0 logs only the end."""
    eval_every: int = 0
    """Steps between success evaluations on the dataset's env (0: none, but at the end if
    ``eval_episodes``)."""
    eval_episodes: int = 0
    """Episodes per evaluation (0: no evaluation)."""
    eval_seed: int = 10_000
    """First evaluation episode's seed (away from the demonstrations' seeds)."""
    successful_only: bool = False
    """Learn only from episodes whose metadata says they succeeded."""
    best_dir: str = ""
    """Where the policy of the best evaluation so far is saved (``save_pretrained``; by success
    rate, then mean return; the final evaluation counts too), so that a run's best checkpoint can
    be scored beside its final one, as Diffusion Policy reports both. Empty: not kept."""
    checkpoint_dir: str = ""
    """Where the training state (weights with EMA, optimiser, schedule, random states, metrics) is
    checkpointed every ``checkpoint_every`` steps and at the end. A run started on a directory
    that holds a checkpoint continues from it and ends as the uninterrupted run would: hours of
    CPU training survive a killed process. Empty: no checkpoints."""
    checkpoint_every: int = 500
    """Steps between checkpoints (with ``checkpoint_dir``)."""

    def __post_init__(self) -> None:
        """Reject counts and rates that cannot train."""
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("imitation steps and batch_size must be >= 1")
        if self.learning_rate <= 0:
            raise ValueError(f"imitation learning_rate must be > 0, got {self.learning_rate}")
        if self.checkpoint_every < 1:
            raise ValueError(f"imitation checkpoint_every must be >= 1, got {self.checkpoint_every}")

    def resume_key(self) -> dict[str, Any]:
        """The settings a checkpoint must have been written under to be resumed by this run."""
        keys = (
            "steps", "batch_size", "learning_rate", "betas", "weight_decay", "warmup_steps",
            "max_grad_norm", "seed", "eval_every", "eval_episodes", "eval_seed", "successful_only",
        )  # fmt: skip
        return {key: list(v) if isinstance(v := getattr(self, key), tuple) else v for key in keys}


Evaluator = Callable[[ChunkPolicy], dict[str, float]]
"""``evaluate(policy) -> metrics`` (e.g. ``{"eval/success_rate": ...}``)."""


def train_imitation(
    policy: ChunkPolicy,
    windows: DemoWindows,
    config: ImitationConfig | None = None,
    *,
    evaluate: Evaluator | None = None,
    callback: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Fit ``policy`` (in place) to demonstration ``windows``; returns the logged metrics.

    The normalisers are not fitted here (see :meth:`ChunkPolicy.fit_normalizers`).

    Args:
        policy: a chunk policy whose ``n_obs_steps`` and ``horizon`` match the windows.
        windows: the demonstrations.
        config: steps and optimiser settings.
        evaluate: called every ``eval_every`` steps and at the end; its metrics are logged.
        callback: called as ``callback(step, metrics)`` at each log point.
    """
    from diffusers.optimization import get_cosine_schedule_with_warmup

    config = config or ImitationConfig()
    parameters = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        parameters, lr=config.learning_rate, betas=config.betas, weight_decay=config.weight_decay
    )
    warmup = min(config.warmup_steps, config.steps // 10)
    schedule = get_cosine_schedule_with_warmup(optimizer, warmup, config.steps)
    rng = np.random.default_rng(config.seed)
    history: list[dict[str, float]] = []
    best: tuple[float, float] | None = None
    done, elapsed = 0, 0.0
    if config.checkpoint_dir:
        resumed = _resume(config, policy, optimizer, schedule, rng)
        if resumed is not None:
            done, elapsed, history, best = resumed
    start = time.perf_counter() - elapsed
    policy.train()
    for step in range(done + 1, config.steps + 1):
        loss, metrics = policy.compute_loss(windows.sample(config.batch_size, rng, policy.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm)
        optimizer.step()
        schedule.step()
        policy.update_ema()
        last = step == config.steps
        evaluating = evaluate is not None and (last or (config.eval_every and step % config.eval_every == 0))
        if evaluating or last or (config.log_every and step % config.log_every == 0):
            metrics = {
                **metrics,
                "train/lr": float(schedule.get_last_lr()[0]),
                "time/elapsed_s": time.perf_counter() - start,
            }
            if evaluating and evaluate is not None:
                policy.eval()
                metrics.update(evaluate(policy))
                score = (metrics.get("eval/success_rate", 0.0), metrics.get("eval/return_mean", -math.inf))
                if config.best_dir and (best is None or score > best):
                    best = score
                    policy.save_pretrained(config.best_dir)
                    metrics["eval/best_so_far"] = 1.0
                policy.train()
            logger.info("imitation step %d/%d: %s", step, config.steps, metrics)
            history.append({"step": float(step), **metrics})
            if callback is not None:
                callback(step, metrics)
        if config.checkpoint_dir and (last or step % config.checkpoint_every == 0):
            elapsed = time.perf_counter() - start
            _checkpoint(config, step, elapsed, policy, optimizer, schedule, rng, history, best)
    policy.eval()
    policy.reset()
    return history


def _checkpoint(
    config: ImitationConfig,
    step: int,
    elapsed: float,
    policy: ChunkPolicy,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    rng: np.random.Generator,
    history: list[dict[str, float]],
    best: tuple[float, float] | None,
) -> None:
    """Write the training state after ``step`` to ``config.checkpoint_dir``."""
    from omnigym.platform.checkpoint import save_checkpoint
    from omnigym.platform.seeding import capture_rng_state

    save_checkpoint(
        config.checkpoint_dir,
        step,
        policy=policy,
        algorithm_state={"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()},
        trainer_state={
            "settings": config.resume_key(),
            "step": step,
            "elapsed_s": elapsed,
            "history": history,
            "best": list(best) if best is not None else None,
            "window_rng": rng.bit_generator.state,
        },
        rng_state=capture_rng_state(),
    )


def _resume(
    config: ImitationConfig,
    policy: ChunkPolicy,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    rng: np.random.Generator,
) -> tuple[int, float, list[dict[str, float]], tuple[float, float] | None] | None:
    """Load ``config.checkpoint_dir``'s latest checkpoint into the run; None when it has none.

    Returns the steps done, the seconds they took, the metrics logged and the best score so far.
    """
    from omnigym.core.pretrained import load_weights
    from omnigym.platform.checkpoint import find_checkpoint, load_checkpoint
    from omnigym.platform.seeding import restore_rng_state

    found = find_checkpoint(config.checkpoint_dir)
    if found.path is None:
        return None
    checkpoint = load_checkpoint(found.path)
    state = checkpoint.trainer_state
    if state.get("settings") != config.resume_key():
        raise ValueError(
            f"{config.checkpoint_dir} holds a checkpoint of another imitation run "
            f"({state.get('settings')}); give this run another checkpoint_dir or delete that one"
        )
    load_weights(checkpoint.policy_dir, policy, "policy")
    optimizer.load_state_dict(checkpoint.algorithm_state["optimizer"])
    schedule.load_state_dict(checkpoint.algorithm_state["schedule"])
    rng.bit_generator.state = state["window_rng"]
    restore_rng_state(checkpoint.rng_state)
    logger.info("imitation resumed from %s (step %d/%d)", checkpoint.path, checkpoint.step, config.steps)
    best = tuple(state["best"]) if state["best"] is not None else None
    return checkpoint.step, float(state["elapsed_s"]), list(state["history"]), best  # type: ignore[return-value]


def imitate_dataset(
    dataset_id: str,
    policy_name: str,
    policy_overrides: list[str] | None = None,
    config: ImitationConfig | None = None,
    *,
    callback: Callable[[int, dict[str, float]], None] | None = None,
    device: torch.device | str = "cpu",
) -> tuple[ChunkPolicy, list[dict[str, float]]]:
    """A new action-chunk policy (one of :data:`CHUNK_POLICIES`) trained on a Minari dataset.

    The policy config is ``configs/policy/<policy_name>.yaml`` with ``policy_overrides``
    (``KEY=VALUE``) applied; its normalisers are fitted on the dataset. With
    ``config.eval_episodes``, success is measured on the dataset's env (as recorded in the
    dataset) every ``config.eval_every`` steps and at the end.

    Args:
        dataset_id: a dataset under ``$MINARI_DATASETS_PATH`` (e.g. from ``omnigym collect``).
        policy_name: one of :data:`CHUNK_POLICIES`.
        policy_overrides: policy config overrides, e.g. ``["num_inference_steps=5"]``.
        config: training settings.
        callback: see :func:`train_imitation`.
        device: where to train.

    Raises:
        ValueError: an unknown policy, or a dataset whose actions the policy cannot model.
    """
    import minari

    from omnigym.core.config import apply_overrides, build_dataclass, load_yaml
    from omnigym.core.registry import POLICIES
    from omnigym.platform.datasets import load_dataset_steps
    from omnigym.platform.experiment import config_dir

    if policy_name not in CHUNK_POLICIES:
        raise ValueError(f"imitation trains {', '.join(CHUNK_POLICIES)}, not {policy_name!r}")
    config = config or ImitationConfig()
    policy_cls = POLICIES.get(policy_name)
    base = load_yaml(config_dir() / "policy" / f"{policy_name}.yaml")
    policy_config: ChunkPolicyConfig = build_dataclass(
        policy_cls.config_class, apply_overrides(base, policy_overrides or []), path="policy"
    )
    dataset = minari.load_dataset(dataset_id)
    steps = load_dataset_steps(dataset_id, successful_only=config.successful_only)
    torch.manual_seed(config.seed)
    try:
        policy: ChunkPolicy = policy_cls(policy_config, dataset.observation_space, dataset.action_space)
    except TypeError as exc:
        raise ValueError(f"{dataset_id}: {exc}") from exc
    keys = (*policy.state_keys, *policy.image_keys)
    obs = {key: steps.obs[key] for key in keys}
    policy.fit_normalizers(obs, steps.actions)
    policy.to(device)
    windows = DemoWindows(
        obs, steps.actions, steps.episode_index, policy_config.n_obs_steps, policy_config.horizon
    )
    evaluate = _dataset_evaluator(dataset, config) if config.eval_episodes > 0 else None
    return policy, train_imitation(policy, windows, config, evaluate=evaluate, callback=callback)


def _dataset_evaluator(dataset: Any, config: ImitationConfig) -> Evaluator:
    """Success (and return) of a policy on the env the dataset was recorded on."""
    from omnigym.platform.evaluate import evaluate_policy

    spec = dataset.spec.env_spec
    if spec is None:
        raise ValueError(f"{dataset.spec.dataset_id}: the dataset records no env to evaluate on")

    def evaluate(policy: ChunkPolicy) -> dict[str, float]:
        result = evaluate_policy(
            policy,
            spec.id,
            episodes=config.eval_episodes,
            seed=config.eval_seed,
            env_kwargs=dict(spec.kwargs),
        )
        return {f"eval/{key}": float(value) for key, value in result.summary().items()}

    return evaluate
