"""An experiment: the config that composes env, policy, algorithm and runtime, and its loading."""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from omnigym.core.config import ConfigError, build_dataclass, compose, list_options
from omnigym.core.policy import PolicyConfig
from omnigym.core.registry import ALGORITHMS, POLICIES, WORLD_MODELS, Registry, RegistryError
from omnigym.platform.algorithms.base import AlgorithmConfig
from omnigym.platform.runtime import RuntimeConfig
from omnigym.platform.vec_env import EnvConfig
from omnigym.world_models.base import WorldModelConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The source checkout's root (in an installed wheel: site-packages, which has no ``configs/``)."""


@dataclass
class EvalConfig:
    """Periodic and final evaluation on separate envs with fixed seeds."""

    every_steps: int = 0
    """Evaluate every this many env steps (0: only at the end)."""
    episodes: int = 10
    """Episodes per evaluation."""
    seed: int = 1_000_000
    """Episode i is reset with seed + i (kept apart from training seeds)."""
    deterministic: bool = True
    """Act with the policy's mode instead of sampling."""
    num_envs: int = 8
    """Episodes run side by side."""
    video: bool = False
    """Record MP4s of the first ``video_episodes`` episodes at the final evaluation."""
    video_episodes: int = 1
    """Episodes recorded when ``video`` is on, each whole (reset frame to last step) in its own MP4."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Env keyword arguments that differ for evaluation (e.g. a held-out scene split)."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.video_episodes < 1:
            raise ValueError(f"eval.video_episodes must be >= 1, got {self.video_episodes}")


@dataclass
class LogConfig:
    """What a run writes while it trains."""

    progress: bool = True
    """A live progress line (steps, steps/s, recent return, ETA)."""
    tensorboard: bool = True
    """TensorBoard event files next to metrics.jsonl."""
    every_steps: int = 1000
    """Off-policy and offline trainers: log the mean metrics every this many steps (updates
    offline); on-policy trainers log every iteration."""


@dataclass
class CheckpointConfig:
    """Checkpoint cadence."""

    every_steps: int = 0
    """Checkpoint every this many env steps (0: by time only)."""
    every_minutes: float = 10.0
    """Checkpoint when this much wall time passed since the last one (0: never by time). A run also
    checkpoints at its end and when interrupted (Ctrl-C, SIGTERM)."""
    keep: int = 2
    """Most recent checkpoints kept on disk."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.every_steps < 0 or self.every_minutes < 0 or self.keep < 1:
            raise ValueError(
                "checkpoint.every_steps and every_minutes must be >= 0 and checkpoint.keep >= 1, got "
                f"{self.every_steps}, {self.every_minutes}, {self.keep}"
            )


def _default_world_model() -> WorldModelConfig:
    """The ensemble's config with its defaults (imported when first needed: it pulls in torch layers)."""
    from omnigym.world_models.ensemble import EnsembleDynamicsConfig

    return EnsembleDynamicsConfig()


@dataclass
class ModelBasedConfig:
    """``trainer: model_based``: real data -> a world model -> a policy trained in it -> real evaluation.

    The run collects ``collect_steps`` real steps (or reads ``dataset``), fits ``model`` on them,
    then trains ``algo`` inside the model through the off-policy or on-policy trainer with
    ``env.backend: world_model`` (``env.world_model`` sets start states, horizon, known rewards,
    MOPO's penalty) and evaluates in the real env. ``rounds > 1`` is Dyna: every later round
    collects ``round_steps`` real steps with the current policy, refits, and trains on.
    ``total_steps`` counts the policy's env steps inside the model, over all rounds.
    """

    model: WorldModelConfig = field(default_factory=lambda: _default_world_model())
    """The world model to fit (``type``: a registered world model, with its settings); default the
    MBPO ensemble."""
    dataset: str | None = None
    """Fit on this Minari dataset of real transitions instead of collecting ``collect_steps``."""
    collect_steps: int = 2000
    """Real env steps (whole episodes, uniform random actions) collected before the first fit."""
    dataset_id: str | None = None
    """Minari id the collected real data is stored under (default ``omnigym-wm/<run name>-v0``);
    Dyna rounds add ``-round<r>``."""
    start_states_from_data: bool = False
    """Start model episodes from the real data's observations instead of ``env.world_model.start_states``."""
    max_epochs: int = 100
    """Fit at most this many epochs (held-out early stopping usually ends it sooner)."""
    refit_epochs: int = 20
    """Dyna: epochs of continued fitting after each later round's new data."""
    batch_size: int = 256
    """Transitions per world-model optimiser step."""
    holdout_fraction: float = 0.1
    """Share of the training transitions held out for early stopping and elite selection."""
    patience: int = 5
    """Epochs without improvement before the fit stops (MBPO: 5)."""
    fidelity_episodes: int = 1
    """Real episodes kept out of the fit altogether, for the k-step errors of the fidelity report."""
    ks: list[int] = field(default_factory=lambda: [1, 5, 10, 20])
    """Horizons of the k-step prediction errors."""
    rounds: int = 1
    """Collect -> fit -> train rounds (Dyna when > 1; needs a transition-learning algorithm)."""
    round_steps: int = 1000
    """Real env steps collected with the current (stochastic) policy in each round after the first."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.collect_steps < 1 or self.round_steps < 1 or self.rounds < 1:
            raise ValueError("model_based.collect_steps, round_steps and rounds must be >= 1")
        if self.max_epochs < 1 or self.refit_epochs < 1 or self.batch_size < 1:
            raise ValueError("model_based.max_epochs, refit_epochs and batch_size must be >= 1")
        if self.fidelity_episodes < 0:
            raise ValueError("model_based.fidelity_episodes must be >= 0")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"model_based.ks must be horizons >= 1, got {self.ks}")


@dataclass
class ExperimentConfig:
    """Everything a training run needs; saved as ``config.yaml`` in the run directory."""

    name: str = "experiment"
    """Run name (the run directory is ``runs/<name>-<timestamp>`` unless run_dir is set)."""
    seed: int = 1
    """Seeds torch, NumPy, Python and the training envs."""
    total_steps: int = 100_000
    """Env steps to train for."""
    trainer: Literal["on_policy", "off_policy", "offline", "model_based"] = "on_policy"
    """The training loop: ``on_policy`` (PPO, the GRPO family; ``total_steps`` counts env steps),
    ``off_policy`` (SAC, WSRL: a replay buffer filled online; env steps), ``offline`` (TD3+BC,
    IQL, CQL, ...: learns from ``dataset`` alone; ``total_steps`` counts gradient updates) or
    ``model_based`` (any of the online algorithms trained inside a world model fitted to real
    data, ``model_based``; ``total_steps`` counts env steps in the model)."""
    dataset: str | None = None
    """A Minari dataset id (local storage): what ``offline`` learns from; for ``off_policy``,
    offline data mixed into online batches (``algo.offline_data_ratio``)."""
    init_from: str | None = None
    """A run directory (or checkpoint) to start from: its policy weights, and the algorithm's
    networks where names and shapes match (offline-to-online fine-tuning). On-policy runs also
    take a saved policy folder (``omnigym bc --out``): RL fine-tuning of a clone."""
    run_dir: str | None = None
    """Where to write the run (default: runs/<name>-<timestamp>)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=lambda: PolicyConfig(type="mlp"))
    algo: AlgorithmConfig = field(default_factory=lambda: AlgorithmConfig(type="ppo"))
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    model_based: ModelBasedConfig = field(default_factory=ModelBasedConfig)
    """The world model and its data (used by ``trainer: model_based``)."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.total_steps < 1:
            raise ValueError("total_steps must be >= 1")
        if self.trainer == "offline" and not self.dataset:
            raise ValueError("trainer offline needs a dataset (a Minari dataset id)")
        if self.trainer == "model_based" and self.env.backend != "real":
            raise ValueError(
                "trainer model_based: leave env.backend real; the trainer swaps in the world model it fits"
            )
        policy_keys = getattr(self.policy, "obs_keys", None)
        check_image_obs_keys(self.env.id, self.env.kwargs, "env.kwargs", policy_keys)
        if "obs_keys" in self.eval.env_kwargs:
            check_image_obs_keys(self.env.id, self.eval.env_kwargs, "eval.env_kwargs", policy_keys)


def check_image_obs_keys(
    env_id: str,
    kwargs: Mapping[str, Any],
    where: str = "env.kwargs",
    policy_obs_keys: Sequence[str] | None = None,
) -> None:
    """Rejects ``obs_keys`` without ``image`` for an env registered to emit images.

    Gymnasium merges the given kwargs over the registered ones, so ``obs_keys: [state]`` carried
    over from a state-only base config (``omnigym train ppo_reach env.id=omnigym/ReachPixels-v0``)
    would silently turn the pixel env (``omnigym/<Task>Pixels-v0``, ``omnigym/DrivingVLM-v0``:
    registered with ``obs_keys`` that include ``image``) into its state-only twin.

    Args:
        env_id: the Gymnasium id; ids that are not registered are not checked.
        kwargs: the keyword arguments the env will be made with.
        where: the dotted config key of ``kwargs``, for the message.
        policy_obs_keys: the policy's ``obs_keys``; when they lack ``image`` the message says that
            the policy must read images too.

    Raises:
        ConfigError: naming ``<where>.obs_keys`` and the fixes (``~<where>.obs_keys`` or a list
            with ``image``).
    """
    obs_keys = kwargs.get("obs_keys")
    spec = gym.registry.get(env_id)
    registered = (spec.kwargs or {}).get("obs_keys") if spec is not None else None
    if obs_keys is None or not registered or "image" not in registered:
        return
    given = [obs_keys] if isinstance(obs_keys, str) else list(obs_keys)
    if "image" in given:
        return
    wanted = ",".join(registered)
    policy_hint = ""
    if policy_obs_keys is not None and "image" not in policy_obs_keys:
        policy_hint = (
            f" The policy reads only {list(policy_obs_keys)}: give it one that reads 'image' too "
            "(e.g. policy=cnn)."
        )
    raise ConfigError(
        f"{where}.obs_keys is {given}, but {env_id} is registered to emit {list(registered)}: without "
        f"'image' it would run as a state-only env (obs_keys left over from a config for another env?). "
        f"Delete the key so the env's own keys apply (~{where}.obs_keys) or list the keys you want "
        f"('{where}.obs_keys=[{wanted}]').{policy_hint}"
    )


def packaged_config_dir() -> Path | None:
    """The configs shipped inside the package (``omnigym/configs`` in a wheel), or None.

    A wheel carries a copy of the repository's ``configs/`` (setup.py's ``build_py``); a source
    checkout or an editable install has none and reads the root ``configs/`` itself.
    """
    packaged = importlib.resources.files("omnigym") / "configs"
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    return None


def config_dir() -> Path:
    """The YAML config folder.

    ``$OMNIGYM_CONFIG_DIR`` if set, else the configs packaged in the installed wheel, else the
    repository's root ``configs/`` (a source checkout or an editable install).
    """
    override = os.environ.get("OMNIGYM_CONFIG_DIR")
    if override:
        return Path(override)
    return packaged_config_dir() or REPO_ROOT / "configs"


def list_experiments() -> list[str]:
    """Names of the experiments in ``configs/experiment``."""
    return list_options(config_dir(), "experiment")


def _registry_resolver(base: type, type_name: str, path: str) -> type:
    """Pick a policy/algorithm/world-model config class by its registered ``type`` name."""
    registries: dict[type, Registry] = {
        PolicyConfig: POLICIES,
        AlgorithmConfig: ALGORITHMS,
        WorldModelConfig: WORLD_MODELS,
    }
    registry = next((r for b, r in registries.items() if issubclass(base, b)), None)
    if registry is None:
        return base
    if not type_name:
        raise ConfigError(f"{path}.type is required; one of: {', '.join(registry.names())}")
    try:
        cls = registry.get(type_name).config_class
    except RegistryError as exc:
        raise ConfigError(f"{path}.type: {exc}") from None
    if not issubclass(cls, base):
        raise ConfigError(f"{path}.type: {type_name!r} is not a {base.__name__}")
    return cls


def build_experiment(data: dict) -> ExperimentConfig:
    """Validate a composed config mapping into an :class:`ExperimentConfig`.

    A missing ``policy`` or ``algo`` section means the defaults: an MLP policy trained by PPO.
    """
    data = {"policy": {"type": "mlp"}, "algo": {"type": "ppo"}, **data}
    return build_dataclass(ExperimentConfig, data, path="", resolve_type=_registry_resolver)


def load_experiment(experiment: str | Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Compose ``configs/experiment/<experiment>.yaml`` (or a YAML path) with ``key=value`` overrides."""
    return build_experiment(compose(config_dir(), experiment, overrides))
