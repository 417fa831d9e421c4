"""The loops that drive collection and learning; :func:`build_trainer` picks one by ``config.trainer``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omnigym.platform.experiment import ExperimentConfig


def build_trainer(
    config: ExperimentConfig, run_dir: Path, *, resume: bool = False, existing_ok: bool = False
) -> Any:
    """The trainer ``config.trainer`` names: ``on_policy``, ``off_policy``, ``offline`` or ``model_based``.

    A new run refuses a ``run_dir`` that holds anything unless ``existing_ok`` (a model-based run's
    inner trainer, which shares its directory).
    """
    if config.trainer == "model_based":
        from omnigym.platform.trainers.model_based import ModelBasedTrainer

        return ModelBasedTrainer(config, run_dir, resume=resume)
    if config.trainer == "offline":
        from omnigym.platform.trainers.offline import OfflineTrainer

        return OfflineTrainer(config, run_dir, resume=resume, existing_ok=existing_ok)
    if config.trainer == "off_policy":
        from omnigym.platform.trainers.off_policy import OffPolicyTrainer

        return OffPolicyTrainer(config, run_dir, resume=resume, existing_ok=existing_ok)
    from omnigym.platform.trainers.on_policy import OnPolicyTrainer

    return OnPolicyTrainer(config, run_dir, resume=resume, existing_ok=existing_ok)
