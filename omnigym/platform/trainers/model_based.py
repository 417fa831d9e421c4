"""Model-based pipelines: real data -> a world model -> a policy trained inside it -> real evaluation.

The steps are functions, shared by the ``omnigym world-model`` commands, the bench and
:class:`ModelBasedTrainer` (``trainer: model_based``):

* :func:`collect_real_data`: roll a policy (uniform random by default) out in the real env, store
  the episodes as a Minari dataset (so model episodes can start from them) and load them into a
  :class:`~omnigym.platform.buffers.ReplayBuffer`.
* :func:`fit_and_report`: fit a world model with held-out early stopping, save it, measure its
  k-step errors on real episodes it never saw and write ``fidelity.json``/``fidelity.md``.
* :func:`evaluate_in_model` and :func:`rank_policies`: policies' returns in the model and in the
  real env from the same start states, and their Spearman rank correlation.

The trainer trains any registered online algorithm inside the model by running the existing
off-policy or on-policy trainer on ``env.backend: world_model``; their evaluation always runs the
real env (``evaluate_run`` makes ``env.id``), so every reported ``eval/`` return is a real one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from omnigym.core.config import build_dataclass, config_to_dict
from omnigym.core.policy import Policy
from omnigym.core.registry import ALGORITHMS, WORLD_MODELS
from omnigym.platform.buffers import ReplayBuffer
from omnigym.platform.evaluate import ActionFn, evaluate_policy
from omnigym.platform.experiment import ExperimentConfig, ModelBasedConfig
from omnigym.platform.run_dirs import CONFIG_FILE, RESULTS_FILE, check_new_run_dir
from omnigym.platform.seeding import seed_everything
from omnigym.platform.trainers.on_policy import TrainResult
from omnigym.platform.vec_env import WorldModelEnvConfig, make_env, to_env_action
from omnigym.policies.baselines import RandomPolicy, RandomPolicyConfig
from omnigym.world_models.base import WorldModel, WorldModelConfig
from omnigym.world_models.env import WorldModelVectorEnv
from omnigym.world_models.fidelity import Episode, FidelityReport, PolicyReturn, k_step_errors, spearman
from omnigym.world_models.known import KnownFn, known_reward
from omnigym.world_models.training import ProgressCallback, fit_world_model

MODEL_DIR = "world_model"
"""The world model's folder inside a model-based run."""


def _env_spaces(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> tuple[spaces.Dict, spaces.Box]:
    """The real env's observation and action spaces.

    Raises:
        ValueError: an unknown env id, or spaces a state world model cannot learn.
    """
    import gymnasium as gym

    try:
        env = make_env(env_id, **dict(env_kwargs or {}))
    except gym.error.Error as exc:  # NameNotFound, VersionNotFound, ...
        raise ValueError(f"cannot make env {env_id!r}: {exc}") from exc
    env.close()
    if not isinstance(env.observation_space, spaces.Dict) or not isinstance(env.action_space, spaces.Box):
        raise ValueError(f"{env_id}: world models need Dict observations and Box actions")
    return env.observation_space, env.action_space


def collect_real_data(
    env_id: str,
    steps: int,
    dataset_id: str,
    *,
    policy: Policy | None = None,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
) -> ReplayBuffer:
    """Whole real episodes until at least ``steps`` steps, saved as Minari ``dataset_id`` and loaded.

    Args:
        env_id: the real env.
        steps: at least this many transitions (the last episode is completed).
        dataset_id: the Minari id to write (must not exist).
        policy: acts, sampling (stochastic); None: uniform random actions.
        seed: episode ``i`` is seeded ``seed + i``.
        env_kwargs: the env's keyword arguments.

    Returns:
        Every collected transition, episodes in order.
    """
    from omnigym.platform.datasets import collect_dataset

    if policy is None:
        policy = RandomPolicy(RandomPolicyConfig(), *_env_spaces(env_id, env_kwargs))
    collect_dataset(
        policy,
        env_id,
        dataset_id,
        steps=steps,
        seed=seed,
        deterministic=False,
        env_kwargs=dict(env_kwargs or {}),
    )
    return ReplayBuffer.from_minari(dataset_id)


def merge_buffers(buffers: Sequence[ReplayBuffer]) -> ReplayBuffer:
    """One buffer holding every transition of ``buffers``, in order (episode ends kept)."""
    first = buffers[0]
    merged = ReplayBuffer(
        first.observation_space, first.action_space, sum(len(b) for b in buffers), first.device
    )
    for buffer in buffers:
        for episode in buffer.episodes():
            _add_episode(merged, episode)
    return merged


def _add_episode(buffer: ReplayBuffer, episode: Episode) -> None:
    """Append one Minari-layout episode to ``buffer``."""
    steps = len(episode["rewards"])
    observations = episode["observations"]
    buffer.add(
        obs={k: v[:steps] for k, v in observations.items()},
        actions=np.asarray(episode["actions"]).reshape(steps, -1),
        rewards=episode["rewards"],
        next_obs={k: v[1 : steps + 1] for k, v in observations.items()},
        terminated=episode["terminations"],
        truncated=episode["truncations"],
    )


def split_episodes(buffer: ReplayBuffer, holdout_episodes: int) -> tuple[ReplayBuffer, list[Episode]]:
    """The last ``holdout_episodes`` episodes kept apart (fidelity), the others as a training buffer.

    Raises:
        ValueError: the buffer has too few episodes to leave one to train on.
    """
    episodes: list[Episode] = list(buffer.episodes())
    if holdout_episodes >= len(episodes):
        raise ValueError(
            f"{len(episodes)} real episodes leave none to train on after holding {holdout_episodes} out "
            "for the fidelity report: collect more steps or hold fewer episodes out"
        )
    keep = episodes[: len(episodes) - holdout_episodes]
    train = ReplayBuffer(
        buffer.observation_space, buffer.action_space, sum(len(e["rewards"]) for e in keep), buffer.device
    )
    for episode in keep:
        _add_episode(train, episode)
    return train, episodes[len(keep) :]


def build_world_model(
    config: WorldModelConfig, observation_space: spaces.Dict, action_space: spaces.Box
) -> WorldModel:
    """A fresh world model of ``config.type``; a base config is completed with that type's defaults."""
    model_cls = WORLD_MODELS.get(config.type)
    if not isinstance(config, model_cls.config_class):
        config = build_dataclass(model_cls.config_class, config_to_dict(config), path="world_model")
    return model_cls(config, observation_space, action_space)


@dataclass
class FitSettings:
    """How :func:`fit_and_report` fits (see :func:`~omnigym.world_models.training.fit_world_model`)."""

    max_epochs: int = 100
    """Passes over the training transitions at most."""
    batch_size: int = 256
    """Transitions per optimiser step."""
    holdout_fraction: float = 0.1
    """Share of the transitions held out for early stopping and elite selection."""
    patience: int = 5
    """Epochs without improvement before stopping."""
    seed: int = 0
    """Seeds the split, the minibatch order and the k-step windows."""
    ks: Sequence[int] = (1, 5, 10, 20)
    """Horizons of the k-step errors."""


def fit_and_report(
    model: WorldModel,
    train: ReplayBuffer,
    holdout: Sequence[Episode],
    out_dir: str | Path,
    env_id: str,
    settings: FitSettings,
    *,
    reward_fn: KnownFn | None = None,
    callback: ProgressCallback | None = None,
) -> FidelityReport:
    """Fit ``model`` on ``train``, save it to ``out_dir`` and write its fidelity report there.

    The k-step errors are measured on ``holdout``, real episodes the fit never saw (none: the
    report has no k-step table). A report already in ``out_dir`` keeps its other sections.
    """
    metrics = fit_world_model(
        model, train, max_epochs=settings.max_epochs, batch_size=settings.batch_size,
        holdout_fraction=settings.holdout_fraction, patience=settings.patience, seed=settings.seed,
        callback=callback,
    )  # fmt: skip
    model.save_pretrained(out_dir)
    report = FidelityReport.load(out_dir) or FidelityReport(env_id=env_id, model=str(out_dir))
    report.fit = metrics
    report.holdout_episodes = len(holdout)
    report.k_step = (
        k_step_errors(model.eval(), holdout, settings.ks, seed=settings.seed, reward_fn=reward_fn)
        if holdout
        else []
    )
    model.train()
    report.write(out_dir)
    return report


def print_epoch(epoch: int, metrics: dict[str, float]) -> None:
    """A progress line per fitting epoch, on stderr."""
    shown = ("train/loss", "eval/loss", "eval/obs_mse", "eval/reward_mse")
    text = "  ".join(f"{k} {metrics[k]:.4g}" for k in shown if k in metrics)
    eta = metrics.get("time/eta_s", math.nan)
    if math.isfinite(eta):  # an upper bound: early stopping may end sooner
        text += f"  (eta at most {eta:.0f} s)"
    print(f"world model epoch {epoch}: {text}", file=sys.stderr, flush=True)


def evaluate_in_model(
    policy: Policy | ActionFn,
    model: WorldModel | str | Path,
    env_id: str,
    *,
    episodes: int = 10,
    seed: int = 0,
    deterministic: bool = True,
    env_config: WorldModelEnvConfig | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[float]:
    """Returns of ``episodes`` model episodes, all run side by side, episode ``i`` seeded ``seed + i``.

    With ``live`` start states (the default) episode ``i`` starts from the real env's
    ``reset(seed=seed + i)``, the start of :func:`~omnigym.platform.evaluate.evaluate_policy`'s
    episode ``i``, so model and real returns compare episode by episode. ``env_kwargs`` are the
    real env's ``make_env`` arguments (its observation keys, its scenes, ...).
    """
    config = env_config or WorldModelEnvConfig()
    envs = WorldModelVectorEnv(
        model, episodes, start_states=config.start_states, env_id=env_id, env_kwargs=env_kwargs,
        horizon=config.horizon,
        reward=config.reward, termination=config.termination,
        uncertainty_penalty=config.uncertainty_penalty, max_uncertainty=config.max_uncertainty,
    )  # fmt: skip
    act = _action_fn(policy, deterministic)
    returns, finished = np.zeros(episodes), np.zeros(episodes, dtype=bool)
    try:
        obs, _ = envs.reset(seed=seed)
        while not finished.all():
            actions = to_env_action(envs.single_action_space, np.asarray(act(obs)))
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            returns += np.where(finished, 0.0, rewards)
            finished |= terminated | truncated
    finally:
        envs.close()
    return returns.tolist()


def _action_fn(policy: Policy | ActionFn, deterministic: bool) -> ActionFn:
    """``obs -> actions`` of a policy (acting ``deterministic``-ally) or of a callable."""
    if isinstance(policy, Policy):
        policy.eval()
        return lambda obs: policy.predict(obs, deterministic=deterministic)
    return policy


@dataclass
class RankedPolicy:
    """A policy to rank, and whether it acts with its mode (False: it samples, e.g. random)."""

    name: str
    policy: Policy | ActionFn
    deterministic: bool = True


def rank_policies(
    policies: Sequence[RankedPolicy],
    model: WorldModel | str | Path,
    env_id: str,
    *,
    episodes: int = 10,
    seed: int = 1_000_000,
    env_config: WorldModelEnvConfig | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> tuple[list[PolicyReturn], float]:
    """Every policy's mean return in the model and in the real env, and their Spearman correlation.

    ``env_kwargs`` make the real env (and, with ``live`` start states, the model's start states).
    """
    if not isinstance(model, WorldModel):
        model = WorldModel.from_pretrained(model)  # once for all policies
    rows = []
    for entry in policies:
        in_model = evaluate_in_model(
            entry.policy, model, env_id, episodes=episodes, seed=seed,
            deterministic=entry.deterministic, env_config=env_config, env_kwargs=env_kwargs,
        )  # fmt: skip
        real = evaluate_policy(
            entry.policy, env_id, episodes=episodes, seed=seed, deterministic=entry.deterministic,
            env_kwargs=dict(env_kwargs or {}),
        )  # fmt: skip
        rows.append(PolicyReturn(entry.name, float(np.mean(in_model)), float(np.mean(real.returns))))
    rho = spearman([r.model_return for r in rows], [r.real_return for r in rows])
    return rows, rho


def reward_function(env_id: str, config: WorldModelEnvConfig) -> KnownFn | None:
    """The known reward function when ``config.reward`` asks for it, else None (the learned one)."""
    return known_reward(env_id) if config.reward == "known" else None


def default_dataset_id(name: str) -> str:
    """A Minari id for a run's or model's real data: ``omnigym-wm/<name>-v0`` (name sanitised)."""
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "data"
    return f"omnigym-wm/{slug}-v0"


class ModelBasedTrainer:
    """``trainer: model_based``: collect real data, fit, train ``algo`` in the model, evaluate for real.

    The policy learns through the trainer its algorithm would use on the real env
    (:class:`~omnigym.platform.trainers.off_policy.OffPolicyTrainer` for transition learners,
    :class:`~omnigym.platform.trainers.on_policy.OnPolicyTrainer` otherwise), given the same
    experiment with ``env.backend: world_model`` and the fitted model; both write ``metrics.jsonl``,
    ``policy/`` and ``results.json`` into the run directory and evaluate in the real env. With
    ``model_based.rounds > 1`` (Dyna, transition learners only) the off-policy trainer keeps its
    policy, critics and replay buffer of model transitions between rounds; each later round adds
    real data collected with the current policy, continues fitting the same model, rebuilds the
    model envs with it and trains for the round's share of ``total_steps``.

    Args:
        config: the experiment (``trainer: model_based``; ``env`` is the real env).
        run_dir: where the run is written; the model goes to ``run_dir/world_model``.
        resume: not supported (raises).
    """

    def __init__(self, config: ExperimentConfig, run_dir: Path, *, resume: bool = False) -> None:
        if resume:
            raise ValueError("model_based runs cannot be resumed; start a new run")
        seed_everything(config.seed)  # the world model's initialisation
        self.config = config
        self.settings: ModelBasedConfig = config.model_based
        self.run_dir = Path(run_dir)
        self.model_dir = self.run_dir / MODEL_DIR
        algo_cls = ALGORITHMS.get(config.algo.type)
        transitions = getattr(algo_cls, "learns_from", "rollouts") == "transitions"
        self.inner_trainer: Literal["off_policy", "on_policy"] = "off_policy" if transitions else "on_policy"
        if self.settings.rounds > 1 and self.inner_trainer != "off_policy":
            raise ValueError(
                f"model_based.rounds > 1 (Dyna) needs a transition-learning algorithm; {config.algo.type!r} "
                "learns from rollouts: use rounds 1"
            )
        self.observation_space, self.action_space = _env_spaces(config.env.id, config.env.kwargs)
        self.dataset_id = self.settings.dataset_id or default_dataset_id(self.run_dir.name)
        self.model = build_world_model(self.settings.model, self.observation_space, self.action_space)
        self.reward_fn = reward_function(config.env.id, config.env.world_model)
        self.trainer: Any = None
        self.report: FidelityReport | None = None
        check_new_run_dir(self.run_dir)

    def train(self) -> TrainResult:
        """Every round: (more) real data -> fit -> train in the model -> real evaluation."""
        cfg, settings = self.config, self.settings
        real = self._initial_data()
        per_round = math.ceil(cfg.total_steps / settings.rounds)
        result: TrainResult | None = None
        for round_index in range(settings.rounds):
            if round_index > 0:
                real = merge_buffers([real, self._collect_with_policy(round_index)])
            self._fit(real, settings.max_epochs if round_index == 0 else settings.refit_epochs)
            self._prepare_trainer(min(cfg.total_steps, per_round * (round_index + 1)))
            result = self.trainer.train()
        assert result is not None
        self._finish(result)
        return result

    # --- pieces of a round ----------------------------------------------------------------------------
    def _initial_data(self) -> ReplayBuffer:
        """The real transitions of the first fit: ``model_based.dataset``, or freshly collected."""
        from omnigym.platform.trainers.offline import load_dataset_buffer

        if self.settings.dataset:
            return load_dataset_buffer(self.settings.dataset, self.observation_space, self.action_space)
        return collect_real_data(
            self.config.env.id, self.settings.collect_steps, self.dataset_id,
            seed=self.config.seed, env_kwargs=self._real_env_kwargs(),
        )  # fmt: skip

    def _collect_with_policy(self, round_index: int) -> ReplayBuffer:
        """``round_steps`` real steps of the current policy (sampling), stored as the round's dataset."""
        name, version = self.dataset_id.rsplit("-v", 1)
        return collect_real_data(
            self.config.env.id, self.settings.round_steps, f"{name}-round{round_index}-v{version}",
            policy=self.trainer.policy, seed=self.config.seed + 10_000 * round_index,
            env_kwargs=self._real_env_kwargs(),
        )  # fmt: skip

    def _real_env_kwargs(self) -> dict[str, Any]:
        """``make_env`` arguments of the real env as the experiment runs it (its time limit too)."""
        env = self.config.env
        limit = {} if env.max_episode_steps is None else {"max_episode_steps": env.max_episode_steps}
        return {**env.kwargs, **limit}

    def _fit(self, real: ReplayBuffer, epochs: int) -> None:
        """Fit (or continue fitting) the model on ``real`` less the fidelity episodes; save and report."""
        s = self.settings
        train, holdout = split_episodes(real, s.fidelity_episodes)
        fit = FitSettings(epochs, s.batch_size, s.holdout_fraction, s.patience, self.config.seed, tuple(s.ks))
        self.report = fit_and_report(
            self.model, train, holdout, self.model_dir, self.config.env.id, fit,
            reward_fn=self.reward_fn, callback=print_epoch if self.config.log.progress else None,
        )  # fmt: skip

    def _inner_config(self, total_steps: int) -> ExperimentConfig:
        """The experiment the inner trainer runs: the same, in the world model just saved."""
        cfg = self.config
        world_model = dataclasses.replace(cfg.env.world_model, model=str(self.model_dir))
        if self.settings.start_states_from_data:
            world_model = dataclasses.replace(
                world_model, start_states=self.settings.dataset or self.dataset_id
            )
        env = dataclasses.replace(cfg.env, backend="world_model", world_model=world_model)
        return dataclasses.replace(
            cfg,
            trainer=self.inner_trainer,
            env=env,
            dataset=None,
            run_dir=str(self.run_dir),
            total_steps=total_steps,
        )

    def _prepare_trainer(self, total_steps: int) -> None:
        """Build the inner trainer (first round), or point it at the refitted model for more steps."""
        from omnigym.platform.trainers import build_trainer
        from omnigym.platform.vec_env import make_vec_env

        inner = self._inner_config(total_steps)
        if self.trainer is None:
            self.trainer = build_trainer(
                dataclasses.replace(inner, total_steps=self.config.total_steps),
                self.run_dir,
                existing_ok=True,
            )
            # The run's config is the model-based one (the inner trainer wrote its own).
            (self.run_dir / CONFIG_FILE).write_text(_yaml(config_to_dict(self.config)))
        else:  # Dyna: the off-policy trainer's envs were closed at the end of its last train()
            self.trainer.envs = make_vec_env(inner.env)
            self.trainer.obs, _ = self.trainer.envs.reset(seed=self.config.seed + self.trainer.steps)
            self.trainer.returns[:], self.trainer.lengths[:] = 0.0, 0
        self.trainer.config = inner

    def _finish(self, result: TrainResult) -> None:
        """The trained policy's model return next to its real one in the report and ``results.json``."""
        assert self.report is not None
        cfg = self.config
        env_config = self.trainer.config.env.world_model
        if env_config.horizon is None and cfg.env.max_episode_steps is not None:
            env_config = dataclasses.replace(env_config, horizon=cfg.env.max_episode_steps)
        model_returns = evaluate_in_model(
            self.trainer.policy, self.model, cfg.env.id, episodes=cfg.eval.episodes, seed=cfg.eval.seed,
            deterministic=cfg.eval.deterministic, env_config=env_config,
            env_kwargs={**cfg.env.kwargs, **cfg.eval.env_kwargs},  # the real evaluation's env
        )  # fmt: skip
        trained = PolicyReturn(
            "trained", float(np.mean(model_returns)), float(result.final_eval["return_mean"])
        )
        self.report.policies = [p for p in self.report.policies if p.name != "trained"] + [trained]
        self.report.write(self.model_dir)
        path = self.run_dir / RESULTS_FILE
        results = json.loads(path.read_text())
        results["world_model"] = {"dir": str(self.model_dir), "fidelity": self.report.to_dict()}
        path.write_text(json.dumps(results, indent=2))


def _yaml(data: dict[str, Any]) -> str:
    """``data`` as YAML, keys in order (as the other trainers write ``config.yaml``)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
