"""The on-policy loop: collect a rollout, process it, update, log, evaluate, checkpoint."""

from __future__ import annotations

import copy
import json
import math
import pickle
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import yaml

from omnigym.core.config import config_to_dict
from omnigym.core.policy import Policy
from omnigym.core.registry import ALGORITHMS
from omnigym.core.types import EpisodeStats, Rollout
from omnigym.core.vector import TorchVectorEnv
from omnigym.platform.algorithms.base import Algorithm
from omnigym.platform.checkpoint import CheckpointSchedule, save_checkpoint
from omnigym.platform.collect import (
    RolloutCollector,
    TorchRolloutCollector,
    make_collector,
    preflight_rollout_memory,
)
from omnigym.platform.env_state import restore_envs, snapshot_envs
from omnigym.platform.evaluate import EvalResult, evaluate_policy, evaluate_torch_env
from omnigym.platform.experiment import ExperimentConfig, build_experiment
from omnigym.platform.groups import GroupCollector, select_envs, stack_envs
from omnigym.platform.interrupts import GracefulStop, TrainingInterrupted
from omnigym.platform.loggers import RunLogger
from omnigym.platform.policy_fit import build_policy
from omnigym.platform.run_dirs import CONFIG_FILE, RESULTS_FILE, claim_run_dir, load_resume_checkpoint
from omnigym.platform.runtime import setup_runtime
from omnigym.platform.runtime.async_runtime import AsyncRuntime, check_async_support, probe_env_config
from omnigym.platform.runtime.ray_runtime import RayRuntime
from omnigym.platform.seeding import capture_rng_state, restore_rng_state, seed_everything
from omnigym.platform.trainers.warm_start import load_pretrained_policy
from omnigym.platform.vec_env import make_vec_env

__all__ = ["CONFIG_FILE", "RESULTS_FILE", "OnPolicyTrainer", "TrainResult", "load_run_config", "new_run_dir"]


@dataclass
class TrainResult:
    """What a finished run reports: both the final and the best evaluation."""

    run_dir: Path
    final_eval: dict[str, float]
    best_eval: dict[str, float] | None
    total_steps: int


def new_run_dir(config: ExperimentConfig, root: Path = Path("runs")) -> Path:
    """``runs/<name>-<timestamp>`` (with a suffix if that exists already), or ``config.run_dir`` when set."""
    if config.run_dir:
        return Path(config.run_dir)
    base = root / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, suffix = base, 1
    while path.exists():
        suffix += 1
        path = base.with_name(f"{base.name}-{suffix}")
    return path


def load_run_config(run_dir: Path) -> ExperimentConfig:
    """The resolved config a run saved."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not an omnigym run directory ({CONFIG_FILE} missing)")
    return build_experiment(yaml.safe_load(path.read_text()))


def evaluate_run(
    policy: Policy, config: ExperimentConfig, run_dir: Path, step: int, video: bool
) -> EvalResult:
    """A run's evaluation as its ``eval`` config says, on fresh envs (the MP4 under ``run_dir/videos``)."""
    return evaluate_policy(
        policy,
        config.env.id,
        episodes=config.eval.episodes,
        seed=config.eval.seed,
        deterministic=config.eval.deterministic,
        num_envs=config.eval.num_envs,
        env_kwargs={**config.env.kwargs, **config.eval.env_kwargs},
        max_episode_steps=config.env.max_episode_steps,
        video_path=run_dir / "videos" / f"eval_{step}.mp4" if video else None,
        video_episodes=config.eval.video_episodes,
    )


def episode_metrics(stats: EpisodeStats) -> dict[str, float]:
    """``rollout/...`` means of the episodes that ended in one rollout."""
    if not stats:
        return {}
    out = {
        "rollout/episode_return": float(np.mean(stats.returns)),
        "rollout/episode_length": float(np.mean(stats.lengths)),
        "rollout/episodes": float(len(stats)),
    }
    out.update({f"rollout/{k}": float(np.mean(v)) for k, v in stats.metrics.items()})
    return out


def _check_sizes(config: ExperimentConfig) -> None:
    """Refuse an iteration far beyond the budget, or a rollout that cannot fit in memory.

    Raises:
        ValueError: one iteration is more than twice ``total_steps``.
        InsufficientMemoryError: the rollout storage would not fit in the available memory.
    """
    num_steps = getattr(config.algo, "num_steps", None)
    if num_steps is None or getattr(ALGORITHMS.get(config.algo.type), "collects", "steps") == "groups":
        return
    preflight_rollout_memory(config.env, num_steps, config.policy)
    per_iteration = num_steps * config.env.num_envs
    if per_iteration > 2 * config.total_steps:
        raise ValueError(
            f"one iteration is env.num_envs x algo.num_steps = {config.env.num_envs} x {num_steps} = "
            f"{per_iteration:,} env steps, more than twice total_steps={config.total_steps:,}; lower "
            "env.num_envs or algo.num_steps, or raise total_steps"
        )


class OnPolicyTrainer:
    """Trains a policy with an on-policy algorithm (PPO, the GRPO family) on vector envs.

    Algorithms whose ``collects`` is ``"groups"`` (the GRPO family) get group rollouts, one
    episode per env with ``group_size`` envs per start state (:mod:`~omnigym.platform.groups`);
    the others get ``num_steps`` steps per env. The budget ``total_steps`` counts env steps either
    way. An algorithm config with ``simulated_staleness: k`` makes the trainer act with the policy
    of ``k`` updates ago, to study stale data without the asynchronous runtime.

    With ``runtime.type: async`` env worker threads collect while this loop updates
    (:class:`~omnigym.platform.runtime.async_runtime.AsyncRuntime`, docs/runtime.md): each iteration
    takes a ``[T, N]`` batch of their chunks instead of collecting, and publishes the new weights.
    ``runtime.type: ray`` is the same with the workers' envs in Ray actors
    (:class:`~omnigym.platform.runtime.ray_runtime.RayRuntime`).

    Args:
        config: the experiment.
        run_dir: where the run is written; with ``resume`` it must hold a checkpoint.
        resume: continue from the run's latest checkpoint. On CPU with picklable envs the
            resumed run reproduces the uninterrupted run exactly.
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
        use_async = config.runtime.type in ("async", "ray")
        _check_sizes(config)  # before building num_envs envs: impossible sizes fail in a moment
        # Async workers build their own envs; here one env only tells the spaces.
        env_config = probe_env_config(config.env) if use_async else config.env
        self.envs = make_vec_env(env_config, copy_observations=False)  # the collector copies
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        self.policy: Policy = build_policy(
            config.policy.type, config.policy, obs_space, act_space,
            env_id=config.env.id, env_kwargs=config.env.kwargs,
        ).to(self.device)  # fmt: skip
        if config.init_from and not resume:  # before the algorithm copies the policy (a KL reference)
            folder = load_pretrained_policy(self.policy, config.init_from, self.device)
            print(f"[omnigym] init_from: policy weights from {folder}", flush=True)
        self.algorithm: Algorithm = ALGORITHMS.get(config.algo.type)(
            config.algo, self.policy, obs_space, act_space, self.device
        )
        if isinstance(self.envs, TorchVectorEnv) and config.eval.video:
            raise ValueError(f"eval.video: the batched torch env {config.env.id} records no video")
        self.groups = getattr(self.algorithm, "collects", "steps") == "groups"
        if use_async:
            check_async_support(config, groups=self.groups, probe=self.envs)
        self.collector: RolloutCollector | TorchRolloutCollector
        if self.groups:
            group_size = int(getattr(config.algo, "group_size", 0))
            steps = self._max_episode_steps()
            self.collector = GroupCollector(
                self.envs, self.policy, group_size, steps, self.device, config.seed
            )
            self.steps_per_iteration = 0  # varies: episodes end when they end
            self.num_iterations = 0
            self.planned_steps = config.total_steps
        else:
            num_steps = getattr(config.algo, "num_steps", None)
            if num_steps is None:
                raise ValueError(
                    f"algorithm {config.algo.type!r} is not on-policy (its config has no num_steps)"
                )
            self.collector = make_collector(self.envs, self.policy, num_steps, self.device)
            self.steps_per_iteration = num_steps * config.env.num_envs
            self.num_iterations = max(1, math.ceil(config.total_steps / self.steps_per_iteration))
            self.planned_steps = self.num_iterations * self.steps_per_iteration
        self.runtime: AsyncRuntime | None = None
        if use_async:
            runtime_class = RayRuntime if config.runtime.type == "ray" else AsyncRuntime
            self.runtime = runtime_class(config, self.policy)
        self.staleness = int(getattr(config.algo, "simulated_staleness", 0))
        self._weights: deque[dict[str, torch.Tensor]] = deque(maxlen=self.staleness + 1)
        if self.staleness:  # the collector acts with an older copy of the policy
            self.collector.policy = copy.deepcopy(self.policy)
        self.iteration = 0
        self.env_steps = 0
        self.best_eval: dict[str, float] | None = None
        self.last_eval: dict[str, float] | None = None
        if resume:
            self._restore()
        else:
            claim_run_dir(self.run_dir, config_to_dict(config), existing_ok=existing_ok)
            self.collector.reset(seed=config.seed)

    @property
    def global_step(self) -> int:
        """Env steps taken so far."""
        return self.env_steps

    def _max_episode_steps(self) -> int:
        """The longest episode a group rollout keeps.

        The algorithm's ``max_episode_steps``, else the env config's, else the registered limit.
        """
        limit = getattr(self.config.algo, "max_episode_steps", None) or self.config.env.max_episode_steps
        if limit is None and self.config.env.id in gym.registry:
            limit = gym.spec(self.config.env.id).max_episode_steps
        if limit is None:
            raise ValueError(
                f"group rollouts need an episode limit: {self.config.env.id} has no time limit; set "
                "algo.max_episode_steps or env.max_episode_steps"
            )
        return int(limit)

    def _finished(self) -> bool:
        if self.groups:
            return self.env_steps >= self.config.total_steps
        return self.iteration >= self.num_iterations

    def train(self) -> TrainResult:
        """Run to ``total_steps``; returns the final and best evaluations.

        Raises:
            TrainingInterrupted: after SIGINT/SIGTERM, once the current iteration is checkpointed.
        """
        cfg = self.config
        logger = RunLogger(
            self.run_dir,
            total_steps=self.planned_steps,
            start_step=self.global_step,
            tensorboard=cfg.log.tensorboard,
            progress=cfg.log.progress,
        )
        schedule = CheckpointSchedule(cfg.checkpoint.every_steps, cfg.checkpoint.every_minutes)
        try:
            with GracefulStop() as stop:
                while not self._finished():
                    previous = self.env_steps
                    metrics = self.train_iteration()
                    last = self._finished()
                    if last or self._due(cfg.eval.every_steps, previous):
                        metrics.update(self.evaluate(video=last and cfg.eval.video))
                    logger.log(self.global_step, metrics)
                    if last or stop.requested or schedule.due(self.env_steps, previous):
                        checkpoint = self.save_checkpoint()
                        schedule.saved()
                        if stop.requested and not last:
                            raise TrainingInterrupted(self.run_dir, self.global_step, checkpoint)
        finally:
            logger.close()
            self.close()
        assert self.last_eval is not None
        self.policy.save_pretrained(self.run_dir / "policy")
        results = {"final_eval": self.last_eval, "best_eval": self.best_eval, "total_steps": self.global_step}
        (self.run_dir / RESULTS_FILE).write_text(json.dumps(results, indent=2))
        return TrainResult(self.run_dir, self.last_eval, self.best_eval, self.global_step)

    def close(self) -> None:
        """Stop the async runtime's workers (joined) and close the envs; idempotent."""
        if self.runtime is not None:
            self.runtime.close()
        self.envs.close()

    def _due(self, every_steps: int, previous_steps: int) -> bool:
        """Whether a periodic event falls inside the iteration that just ended."""
        if every_steps <= 0:
            return False
        return self.env_steps // every_steps > previous_steps // every_steps

    def train_iteration(self) -> dict[str, float]:
        """One collect -> process -> update iteration; returns its metrics (no logging)."""
        self.algorithm.set_progress(self.env_steps / self.planned_steps)
        start = time.perf_counter()
        self.policy.eval()
        self._load_behaviour_weights()
        if self.runtime is not None:
            rollout, stats = self.runtime.next_batch(self.iteration)
            steps, sampling = self.steps_per_iteration, dict[str, float]()
        elif self.groups:
            rollout, stats, steps, sampling = self._collect_groups()
        else:
            (rollout, stats), steps, sampling = self.collector.collect(), self.steps_per_iteration, {}
        collected = time.perf_counter()
        self.policy.train()
        rollout = self.algorithm.process_rollout(rollout)
        metrics = self.algorithm.update(rollout)
        self.policy.update_obs_stats(rollout.obs)
        self.iteration += 1
        self.collector.policy_version = self.iteration
        self.env_steps += steps
        if self.runtime is not None:
            self.runtime.publish(self.iteration)
            metrics.update(self.runtime.metrics())
        done = time.perf_counter()
        metrics.update(episode_metrics(stats))
        metrics.update(sampling)
        metrics["time/sps"] = steps / (done - start)
        metrics["time/collect_s"] = collected - start
        metrics["time/update_s"] = done - collected
        return metrics

    def _load_behaviour_weights(self) -> None:
        """With simulated staleness, act with the weights of ``staleness`` updates ago.

        Early in training the oldest weights kept stand in; the rollout carries their version.
        """
        if not self.staleness:
            return
        self._weights.append({k: v.detach().clone() for k, v in self.policy.state_dict().items()})
        self.collector.policy.load_state_dict(self._weights[0])
        self.collector.policy_version = self.iteration - (len(self._weights) - 1)

    def _collect_groups(self) -> tuple[Rollout, EpisodeStats, int, dict[str, float]]:
        """One batch of group rollouts and the env steps it took.

        With dynamic sampling, groups whose episodes all scored alike are dropped and more are
        collected (at most ``max_sampling_rounds``) until the batch is full; if none is
        informative, the last collection is used (its advantages are zero).
        """
        assert isinstance(self.collector, GroupCollector)
        rollout, stats = self.collector.collect()
        steps = int(rollout.valid.sum())
        if not getattr(self.config.algo, "dynamic_sampling", False):
            return rollout, stats, steps, {}
        wanted, kept, count, rounds = self.collector.num_envs, [], 0, 1
        while True:
            keep = self.algorithm.keep_groups(rollout)  # type: ignore[attr-defined]
            if keep.any():
                kept.append(select_envs(rollout, keep))
                count += int(keep.sum())
            if count >= wanted or rounds >= int(getattr(self.config.algo, "max_sampling_rounds", 1)):
                break
            rollout, more = self.collector.collect()
            steps += int(rollout.valid.sum())
            stats.returns += more.returns
            stats.lengths += more.lengths
            for key, values in more.metrics.items():
                stats.metrics.setdefault(key, []).extend(values)
            rounds += 1
        sampling = {
            "rollout/sampling_rounds": float(rounds),
            "rollout/kept_episodes": float(min(count, wanted)),
        }
        if not kept:
            return rollout, stats, steps, sampling
        batch = stack_envs(kept)
        if count > wanted:
            batch = select_envs(batch, torch.arange(count) < wanted)
        return batch, stats, steps, sampling

    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Evaluate with fixed seeds; tracks the best result and saves its policy.

        Plain envs are evaluated on fresh copies, batched torch envs on the training envs.
        Returns the summary as ``eval/...`` metrics.
        """
        self.policy.eval()
        result = (
            self._evaluate_torch() if isinstance(self.envs, TorchVectorEnv) else self._evaluate_plain(video)
        )
        summary = result.summary()
        summary["step"] = float(self.global_step)
        self.last_eval = summary
        if self.best_eval is None or summary["return_mean"] > self.best_eval["return_mean"]:
            self.best_eval = summary
            self.policy.save_pretrained(self.run_dir / "best_policy")
        return {f"eval/{k}": v for k, v in summary.items() if k != "step"}

    def _evaluate_plain(self, video: bool) -> EvalResult:
        """Episodes on fresh plain envs, apart from the training envs."""
        return evaluate_run(self.policy, self.config, self.run_dir, self.global_step, video)

    def _evaluate_torch(self) -> EvalResult:
        """Episodes on the training envs, which then restart their episodes.

        A batched simulator exists once per process, so evaluation cannot have envs of its own;
        the collector resets with a seed of its own afterwards.
        """
        cfg = self.config
        assert isinstance(self.envs, TorchVectorEnv)
        result = evaluate_torch_env(
            self.policy,
            self.envs,
            episodes=cfg.eval.episodes,
            seed=cfg.eval.seed,
            deterministic=cfg.eval.deterministic,
        )
        self.collector.reset(seed=cfg.seed + self.iteration)
        return result

    # --- checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Write an atomic checkpoint of everything needed to resume exactly."""
        trainer_state = {
            "iteration": self.iteration,
            "global_step": self.global_step,
            "next_seed": getattr(self.collector, "next_seed", None),
            "policy_version": self.collector.policy_version,
            "best_eval": self.best_eval,
            "last_eval": self.last_eval,
        }
        return save_checkpoint(
            self.run_dir,
            self.global_step,
            policy=self.policy,
            algorithm_state=self.algorithm.state_dict(),
            trainer_state=trainer_state,
            rng_state=capture_rng_state(),
            env_state=self._env_state(),
            keep=self.config.checkpoint.keep,
        )

    def _env_state(self) -> bytes | None:
        """The sub-envs and the collector's episode state, when the envs live in this process."""
        if self.runtime is not None:  # the envs live in the async workers: resumes start fresh episodes
            return None
        envs = snapshot_envs(self.envs)
        if envs is None:
            return None
        return pickle.dumps({"envs": envs, "collector": self.collector.state_dict()})

    def _restore(self) -> None:
        """Load the run's latest checkpoint into the trainer."""
        ckpt = load_resume_checkpoint(self.run_dir)
        loaded = Policy.from_pretrained(ckpt.policy_dir, device=self.device)
        self.policy.load_state_dict(loaded.state_dict())
        self.algorithm.load_state_dict(ckpt.algorithm_state)
        trainer_state = ckpt.trainer_state
        self.iteration = int(trainer_state["iteration"])
        self.env_steps = int(trainer_state["global_step"])
        if isinstance(self.collector, GroupCollector) and trainer_state.get("next_seed") is not None:
            self.collector.next_seed = int(trainer_state["next_seed"])
        self.best_eval, self.last_eval = trainer_state.get("best_eval"), trainer_state.get("last_eval")
        restore_rng_state(ckpt.rng_state)
        if ckpt.env_state is not None:
            snapshot = pickle.loads(ckpt.env_state)  # our own checkpoint file, verified by its manifest
            restore_envs(self.envs, snapshot["envs"])
            self.collector.load_state_dict(snapshot["collector"])
        else:  # envs in other processes: start fresh episodes, so the resume is not bit-exact
            self.collector.reset(seed=self.config.seed + self.iteration)
            self.collector.policy_version = int(trainer_state["policy_version"])
