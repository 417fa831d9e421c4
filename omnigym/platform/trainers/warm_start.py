"""Start an on-policy run from pretrained weights (``init_from``): a saved policy, a run or a checkpoint.

The usual way to fine-tune a cloned policy with RL: ``omnigym bc ... --out runs/vla-bc``, then
``omnigym train grpo_vla_pushcube init_from=runs/vla-bc``. The run's policy is built from its own
config (which adds what RL needs, e.g. ``rl_chain``), then takes the pretrained weights; a
mismatch of type or shapes is one clear error naming the setting to change.
"""

from __future__ import annotations

from pathlib import Path

import torch

from omnigym.core.policy import Policy
from omnigym.core.pretrained import CONFIG_FILE
from omnigym.platform.checkpoint import latest_checkpoint, load_checkpoint

OPTIONAL_PREFIXES = ("ema_model.", "frozen_model.")
"""Weights one side may have and the other not (an EMA copy, a frozen chain prefix)."""


def pretrained_policy_dir(source: str | Path) -> Path:
    """The ``save_pretrained`` folder ``source`` names: itself, or a run's or checkpoint's policy.

    Raises:
        FileNotFoundError: ``source`` is none of these.
    """
    path = Path(source)
    if (path / CONFIG_FILE).is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"init_from: {source} does not exist")
    checkpoint = path if (path / "manifest.json").is_file() else latest_checkpoint(path)
    if checkpoint is None:
        raise FileNotFoundError(
            f"init_from: {source} is neither a saved policy (omnigym bc --out) nor a run or "
            "checkpoint directory"
        )
    return load_checkpoint(checkpoint).policy_dir


def load_pretrained_policy(policy: Policy, source: str | Path, device: torch.device | str = "cpu") -> Path:
    """Load the weights saved at ``source`` into ``policy``, then its :meth:`~Policy.start_fine_tuning`.

    Returns:
        The policy folder the weights came from.

    Raises:
        FileNotFoundError: nothing loadable at ``source``.
        ValueError: another policy type, or weights that do not fit ``policy``'s settings.
    """
    folder = pretrained_policy_dir(source)
    loaded = Policy.from_pretrained(folder, device=device)
    if loaded.name != policy.name:
        raise ValueError(
            f"init_from: {folder} holds a {loaded.name!r} policy but the run's policy.type is "
            f"{policy.name!r}; set policy.type={loaded.name} (with the settings it was trained with)"
        )
    theirs, own = loaded.state_dict(), policy.state_dict()
    for key, value in theirs.items():
        if key in own and own[key].shape != value.shape:
            raise ValueError(
                f"init_from: {folder}'s weights do not fit the run's policy ({key}: "
                f"{tuple(value.shape)} saved, {tuple(own[key].shape)} here); give policy.* the "
                "settings the pretrained policy was trained with"
            )
    missing = [k for k in own if k not in theirs and not k.startswith(OPTIONAL_PREFIXES)]
    extra = [k for k in theirs if k not in own and not k.startswith(OPTIONAL_PREFIXES)]
    if missing or extra:
        name, where = (
            (missing[0], "missing from the saved policy") if missing else (extra[0], "not in the run's")
        )
        raise ValueError(
            f"init_from: {folder}'s weights do not fit the run's policy ({name} is {where}); give "
            "policy.* the settings the pretrained policy was trained with"
        )
    policy.load_state_dict({k: v for k, v in theirs.items() if k in own}, strict=False)
    policy.start_fine_tuning(loaded)
    return folder
