"""Online off-policy training (SAC, WSRL): vector envs fill a replay buffer, updates sample from it.

``total_steps`` counts env steps (over all envs). A fresh run acts uniformly at random for the
algorithm's ``learning_starts`` steps, then with the policy, taking ``updates_per_step`` gradient
steps per env step. A run that starts from an offline one (``init_from``, offline-to-online) acts
with the loaded policy from the first step and, for WSRL, collects ``warmup_steps`` before its
first update. With a ``dataset`` and ``algo.offline_data_ratio > 0`` that fraction of every
batch comes from the offline data (RLPD's symmetric sampling at 0.5); at 0 the dataset is not
used (WSRL keeps no offline data).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from omnigym.core.policy import obs_to_torch
from omnigym.core.types import EpisodeStats, TransitionBatch
from omnigym.platform.buffers import ReplayBuffer
from omnigym.platform.experiment import ExperimentConfig
from omnigym.platform.interrupts import GracefulStop, TrainingInterrupted
from omnigym.platform.trainers.offline import MetricAverager, TransitionTrainer, load_dataset_buffer
from omnigym.platform.trainers.on_policy import TrainResult, episode_metrics
from omnigym.platform.vec_env import make_vec_env, to_env_action


class OffPolicyTrainer(TransitionTrainer):
    """Trains a transition-learning algorithm online on vector envs (same-step autoreset)."""

    def __init__(
        self, config: ExperimentConfig, run_dir: Path, *, resume: bool = False, existing_ok: bool = False
    ) -> None:
        super().__init__(config, run_dir, resume=resume, existing_ok=existing_ok)
        if config.env.autoreset_mode != "same_step":
            raise ValueError("the off-policy trainer needs env.autoreset_mode same_step (true final obs)")
        algo = self.algorithm.config
        self.envs = make_vec_env(config.env)
        self.num_envs = config.env.num_envs
        self.buffer = ReplayBuffer(
            self.observation_space, self.action_space, min(algo.buffer_size, config.total_steps), self.device
        )
        self.offline_ratio = algo.offline_data_ratio
        self.offline: ReplayBuffer | None = None
        if self.offline_ratio > 0:
            if not config.dataset:
                raise ValueError("algo.offline_data_ratio > 0 needs a dataset to mix into online batches")
            self.offline = load_dataset_buffer(
                config.dataset, self.observation_space, self.action_space, self.device
            )
        self.warm_started = bool(config.init_from)
        self.update_start = algo.warmup_steps if self.warm_started else algo.learning_starts
        self.rng = np.random.default_rng(config.seed)
        self.returns = np.zeros(self.num_envs)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        if resume:
            extra = self.restore()
            self.buffer.load_state_dict(extra["buffer"])
            self.rng = extra["numpy_rng"]
        elif config.init_from:
            self.warm_start(config.init_from)
        self.obs, _ = self.envs.reset(seed=config.seed + self.steps)
        self.start_run()

    def _actions(self) -> np.ndarray:
        """Uniform random actions before ``learning_starts`` (fresh runs), else the policy's samples."""
        if not self.warm_started and self.steps < self.algorithm.config.learning_starts:
            low, high = self.action_space.low, self.action_space.high
            return self.rng.uniform(low, high, size=(self.num_envs, *self.action_space.shape)).astype(
                np.float32
            )
        with torch.no_grad():
            self.policy.eval()
            step = self.policy.act(obs_to_torch(self.obs, self.device), deterministic=False)
            self.policy.train()
        return to_env_action(self.action_space, step.action.cpu().numpy())

    def env_step(self, stats: EpisodeStats) -> None:
        """One step of every env, stored in the buffer (with true final observations)."""
        actions = self._actions()
        next_obs, rewards, terminated, truncated, info = self.envs.step(actions)
        done = np.logical_or(terminated, truncated)
        stored_next = {k: np.array(v, copy=True) for k, v in next_obs.items() if k in self.buffer.obs_keys}
        for i in np.flatnonzero(done):
            for key in stored_next:
                stored_next[key][i] = info["final_obs"][i][key]
        self.buffer.add(
            self.obs, actions.reshape(self.num_envs, -1), rewards, stored_next, terminated, truncated
        )
        self.returns += rewards
        self.lengths += 1
        for i in np.flatnonzero(done):
            stats.returns.append(float(self.returns[i]))
            stats.lengths.append(int(self.lengths[i]))
        self.returns[done], self.lengths[done] = 0.0, 0
        self.obs = next_obs
        self.steps += self.num_envs

    def sample(self) -> TransitionBatch:
        """A batch of online transitions, with ``offline_data_ratio`` of it from the dataset."""
        batch_size = self.algorithm.config.batch_size
        if self.offline is None:
            return self.buffer.sample(batch_size, self.generator)
        offline = round(batch_size * self.offline_ratio)
        return TransitionBatch.concat(
            [
                self.offline.sample(offline, self.generator),
                self.buffer.sample(batch_size - offline, self.generator),
            ]
        )

    def train(self) -> TrainResult:
        """Run to ``total_steps`` env steps; returns the final and best evaluations."""
        cfg = self.config
        updates_per_iteration = self.algorithm.config.updates_per_step * self.num_envs
        logger = self.logger()
        averager, stats = MetricAverager(), EpisodeStats()
        tic, tic_step = time.perf_counter(), self.steps
        schedule = self.checkpoint_schedule()
        try:
            with GracefulStop() as stop:
                while self.steps < cfg.total_steps:
                    previous = self.steps
                    self.env_step(stats)
                    if (
                        self.steps > self.update_start
                    ):  # as SB3: the first update follows the last warm-up step
                        for _ in range(updates_per_iteration):
                            averager.add(self.algorithm.update(self.sample()))
                    last = self.steps >= cfg.total_steps
                    evaluating = last or self.due(cfg.eval.every_steps, previous)
                    if evaluating or stop.requested or self.due(max(1, cfg.log.every_steps), previous):
                        metrics = {**averager.pop(), **episode_metrics(stats)}
                        stats = EpisodeStats()
                        metrics["rollout/buffer_size"] = float(len(self.buffer))
                        metrics["time/sps"] = (self.steps - tic_step) / (time.perf_counter() - tic)
                        tic, tic_step = time.perf_counter(), self.steps
                        if evaluating:
                            metrics.update(self.evaluate(video=last and cfg.eval.video))
                            last = last or self.stop_requested()
                        logger.log(self.steps, metrics)
                    if last or stop.requested or schedule.due(self.steps, previous):
                        checkpoint = self.save_checkpoint(
                            {"buffer": self.buffer.state_dict(), "numpy_rng": self.rng}
                        )
                        schedule.saved()
                        if stop.requested and not last:
                            raise TrainingInterrupted(self.run_dir, self.steps, checkpoint)
                    if last:
                        break
        finally:
            logger.close()
            self.envs.close()
        return self.finish()
