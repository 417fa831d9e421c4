"""Offline training: gradient updates on batches sampled from a Minari dataset, no env interaction.

:class:`TransitionTrainer` holds what offline and off-policy (online) training share: building
the policy and a transition-learning algorithm, evaluation with the D4RL normalised score,
metrics averaged over logging intervals, checkpoints and resuming, warm starts from another run.
:class:`OfflineTrainer` adds the dataset and the update loop.
"""

from __future__ import annotations

import json
import math
import pickle
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces

from omnigym.core.config import config_to_dict
from omnigym.core.policy import Policy
from omnigym.core.registry import ALGORITHMS
from omnigym.platform.algorithms.off_policy import OffPolicyAlgorithm
from omnigym.platform.buffers import ReplayBuffer
from omnigym.platform.checkpoint import (
    CheckpointSchedule,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from omnigym.platform.experiment import ExperimentConfig
from omnigym.platform.interrupts import GracefulStop, TrainingInterrupted
from omnigym.platform.loggers import RunLogger
from omnigym.platform.policy_fit import build_policy
from omnigym.platform.run_dirs import RESULTS_FILE, claim_run_dir, load_resume_checkpoint
from omnigym.platform.runtime import setup_runtime
from omnigym.platform.scores import normalized_score, reference_task
from omnigym.platform.seeding import capture_rng_state, restore_rng_state, seed_everything
from omnigym.platform.trainers.on_policy import TrainResult, evaluate_run
from omnigym.platform.vec_env import make_env


class MetricAverager:
    """Means of the metrics of many updates, reported once per logging interval."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, metrics: dict[str, float]) -> None:
        """Fold one update's metrics in."""
        for key, value in metrics.items():
            self.sums[key] += value
            self.counts[key] += 1

    def pop(self) -> dict[str, float]:
        """The means since the last ``pop``, and start again."""
        means = {key: total / self.counts[key] for key, total in self.sums.items()}
        self.sums.clear()
        self.counts.clear()
        return means


class TransitionTrainer:
    """What offline and off-policy trainers share. Subclasses implement ``train``.

    Args:
        config: the experiment; its algorithm must learn from transitions.
        run_dir: where the run is written; with ``resume`` it must hold a checkpoint.
        resume: continue from the run's latest checkpoint.
        existing_ok: start in a run directory that already holds files (a model-based run's inner
            trainer); otherwise a new run refuses a directory that holds anything.
    """

    def __init__(
        self, config: ExperimentConfig, run_dir: Path, *, resume: bool = False, existing_ok: bool = False
    ) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.device = setup_runtime(config.runtime)
        seed_everything(config.seed)
        env = make_env(config.env.id, max_episode_steps=config.env.max_episode_steps, **config.env.kwargs)
        if not isinstance(env.observation_space, spaces.Dict) or not isinstance(env.action_space, spaces.Box):
            raise TypeError(
                f"{config.env.id}: learning from transitions needs Dict observations and Box actions, "
                f"got {env.observation_space} and {env.action_space}"
            )
        self.observation_space: spaces.Dict = env.observation_space
        self.action_space: spaces.Box = env.action_space
        env.close()
        algo_cls = ALGORITHMS.get(config.algo.type)
        if getattr(algo_cls, "learns_from", "rollouts") != "transitions":
            raise ValueError(
                f"trainer {config.trainer!r} needs an algorithm that learns from transitions "
                f"(sac, td3bc, iql, cql, awac, fql, bc, wsrl); {config.algo.type!r} learns from rollouts"
            )
        self.policy: Policy = build_policy(
            config.policy.type, config.policy, self.observation_space, self.action_space,
            env_id=config.env.id, env_kwargs=config.env.kwargs,
        ).to(self.device)  # fmt: skip
        self.algorithm: OffPolicyAlgorithm = algo_cls(
            config.algo, self.policy, self.observation_space, self.action_space, self.device
        )
        self.generator = torch.Generator().manual_seed(config.seed)
        self.steps = 0
        self.task = reference_task(config.env.id)
        self.best_eval: dict[str, float] | None = None
        self.last_eval: dict[str, float] | None = None
        self.after_eval: Callable[[TransitionTrainer], bool] | None = None
        """Called after each evaluation (``self.last_eval`` holds it); returning True ends
        training there (e.g. once a behaviour policy reaches a target return)."""
        self.resume = resume
        self.existing_ok = existing_ok

    def start_run(self) -> None:
        """Claim the run directory and write ``config.yaml``; subclasses call it last in ``__init__``.

        Called only once everything was built, so a start that fails leaves no directory behind.
        """
        if self.resume:
            return
        claim_run_dir(self.run_dir, config_to_dict(self.config), existing_ok=self.existing_ok)

    def checkpoint_schedule(self) -> CheckpointSchedule:
        """When this run checkpoints besides its end and interrupts (``checkpoint`` config)."""
        return CheckpointSchedule(self.config.checkpoint.every_steps, self.config.checkpoint.every_minutes)

    # --- evaluation -------------------------------------------------------------------------------
    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Deterministic episodes on fresh envs; adds the D4RL normalised score where one is defined.

        Tracks the best evaluation (by mean return) and saves its policy as ``best_policy``.
        """
        self.policy.eval()
        result = evaluate_run(self.policy, self.config, self.run_dir, self.steps, video)
        self.policy.train()
        summary = result.summary()
        if self.task is not None:
            scores = [normalized_score(self.task, r) for r in result.returns]
            summary["normalized_score_mean"] = float(sum(scores) / len(scores))
        summary["step"] = float(self.steps)
        self.last_eval = summary
        if self.best_eval is None or summary["return_mean"] > self.best_eval["return_mean"]:
            self.best_eval = summary
            self.policy.save_pretrained(self.run_dir / "best_policy")
        return {f"eval/{k}": v for k, v in summary.items() if k != "step"}

    def stop_requested(self) -> bool:
        """Whether :attr:`after_eval` asks to end training after the evaluation just made."""
        return self.after_eval is not None and self.after_eval(self)

    def due(self, every: int, previous: int) -> bool:
        """Whether a periodic event falls between step ``previous`` and the current step."""
        return every > 0 and self.steps // every > previous // every

    # --- warm start, checkpoints, results ---------------------------------------------------------
    def warm_start(self, source: str) -> list[str]:
        """Start from another run's latest checkpoint (or a checkpoint directory).

        Loads its policy, and the networks the algorithm takes from another agent
        (:meth:`~omnigym.platform.algorithms.off_policy.OffPolicyAlgorithm.load_pretrained`);
        returns what was loaded.
        """
        path = Path(source)
        checkpoint = path if (path / "manifest.json").is_file() else latest_checkpoint(path)
        if checkpoint is None:
            raise FileNotFoundError(f"init_from: no checkpoint in {source}")
        ckpt = load_checkpoint(checkpoint)
        self.policy.load_state_dict(Policy.from_pretrained(ckpt.policy_dir, device=self.device).state_dict())
        return ["policy", *self.algorithm.load_pretrained(ckpt.algorithm_state)]

    def trainer_state(self) -> dict[str, Any]:
        """The JSON-able part of the trainer's state."""
        return {"global_step": self.steps, "best_eval": self.best_eval, "last_eval": self.last_eval}

    def save_checkpoint(self, extra: dict[str, Any] | None = None) -> Path:
        """An atomic checkpoint: policy, algorithm, trainer state, RNG (and ``extra``, pickled)."""
        state = {"generator": self.generator.get_state(), **(extra or {})}
        return save_checkpoint(
            self.run_dir,
            self.steps,
            policy=self.policy,
            algorithm_state=self.algorithm.state_dict(),
            trainer_state=self.trainer_state(),
            rng_state=capture_rng_state(),
            env_state=pickle.dumps(state),
            keep=self.config.checkpoint.keep,
        )

    def restore(self) -> dict[str, Any]:
        """Load the run's latest checkpoint; returns the ``extra`` state saved with it."""
        ckpt = load_resume_checkpoint(self.run_dir)
        self.policy.load_state_dict(Policy.from_pretrained(ckpt.policy_dir, device=self.device).state_dict())
        self.algorithm.load_state_dict(ckpt.algorithm_state)
        self.steps = int(ckpt.trainer_state["global_step"])
        self.best_eval, self.last_eval = (
            ckpt.trainer_state.get("best_eval"),
            ckpt.trainer_state.get("last_eval"),
        )
        restore_rng_state(ckpt.rng_state)
        extra = pickle.loads(ckpt.env_state) if ckpt.env_state else {}  # our own checkpoint file
        if "generator" in extra:
            self.generator.set_state(extra.pop("generator"))
        return extra

    def finish(self) -> TrainResult:
        """Save the final policy and ``results.json``."""
        assert self.last_eval is not None
        self.policy.save_pretrained(self.run_dir / "policy")
        results = {"final_eval": self.last_eval, "best_eval": self.best_eval, "total_steps": self.steps}
        (self.run_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2))
        return TrainResult(self.run_dir, self.last_eval, self.best_eval, self.steps)

    def logger(self) -> RunLogger:
        """The run's logger, positioned at the current step."""
        cfg = self.config
        return RunLogger(
            self.run_dir,
            total_steps=cfg.total_steps,
            start_step=self.steps,
            tensorboard=cfg.log.tensorboard,
            progress=cfg.log.progress,
        )


class OfflineTrainer(TransitionTrainer):
    """Trains a policy from a Minari dataset alone; ``total_steps`` counts gradient updates.

    Before the first update the algorithm looks at the dataset once (observation statistics,
    reward scale). Evaluations every ``eval.every_steps`` updates run real episodes on the env.
    """

    def __init__(
        self, config: ExperimentConfig, run_dir: Path, *, resume: bool = False, existing_ok: bool = False
    ) -> None:
        super().__init__(config, run_dir, resume=resume, existing_ok=existing_ok)
        if not config.dataset:
            raise ValueError("trainer offline needs a dataset (a Minari dataset id)")
        self.buffer = load_dataset_buffer(
            config.dataset, self.observation_space, self.action_space, self.device
        )
        if resume:
            self.restore()
        else:
            if config.init_from:
                self.warm_start(config.init_from)
            self.dataset_info = self.algorithm.prepare_dataset(self.buffer)
        self.start_run()

    def train(self) -> TrainResult:
        """Run ``total_steps`` updates; returns the final and best evaluations."""
        cfg = self.config
        batch_size = self.algorithm.config.batch_size
        logger = self.logger()
        averager = MetricAverager()
        every = max(1, cfg.log.every_steps)
        tic, tic_step = time.perf_counter(), self.steps
        schedule = self.checkpoint_schedule()
        try:
            with GracefulStop() as stop:
                while self.steps < cfg.total_steps:
                    previous = self.steps
                    averager.add(self.algorithm.update(self.buffer.sample(batch_size, self.generator)))
                    self.steps += 1
                    last = self.steps >= cfg.total_steps
                    evaluating = last or self.due(cfg.eval.every_steps, previous)
                    if evaluating or last or stop.requested or self.due(every, previous):
                        metrics = averager.pop()
                        metrics["time/sps"] = (self.steps - tic_step) / (time.perf_counter() - tic)
                        if evaluating:
                            metrics.update(self.evaluate(video=last and cfg.eval.video))
                            last = last or self.stop_requested()
                        logger.log(self.steps, metrics)
                        tic, tic_step = time.perf_counter(), self.steps
                    if last or stop.requested or schedule.due(self.steps, previous):
                        checkpoint = self.save_checkpoint()
                        schedule.saved()
                        if stop.requested and not last:
                            raise TrainingInterrupted(self.run_dir, self.steps, checkpoint)
                    if last:
                        break
        finally:
            logger.close()
        return self.finish()


def load_dataset_buffer(
    dataset_id: str, observation_space: Any, action_space: Any, device: torch.device | str = "cpu"
) -> ReplayBuffer:
    """The dataset's transitions, checked against the env's spaces.

    Raises:
        ValueError: the dataset's observation keys or action shape differ from the env's.
    """
    buffer = ReplayBuffer.from_minari(dataset_id, device)
    for key in buffer.obs_keys:
        theirs = buffer.observation_space.spaces[key].shape
        mine = observation_space.spaces[key].shape if key in observation_space.spaces else None
        if theirs != mine:
            raise ValueError(f"dataset {dataset_id} observes {key!r} with shape {theirs}, the env {mine}")
    if buffer.action_dim != int(math.prod(action_space.shape)):
        raise ValueError(
            f"dataset {dataset_id} has {buffer.action_dim}-dim actions, the env {action_space.shape}"
        )
    return buffer
