"""The settings every action-chunk policy shares (``diffusion``, ``flow``, ``meanflow``).

A config of its own so that the subclasses' configs, the imitation loop and the policies can
import it without the policy machinery of :mod:`omnigym.policies.chunking.policy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnigym.core.policy import PolicyConfig


@dataclass
class ChunkPolicyConfig(PolicyConfig):
    """What the chunk policies share; defaults follow Diffusion Policy with a CPU-sized U-Net."""

    obs_keys: tuple[str, ...] = ()
    """Observation keys to read (Box spaces); empty: ``image`` and ``state``, those the env has."""
    n_obs_steps: int = 2
    """Observation history length (To)."""
    horizon: int = 16
    """Predicted actions per chunk (Tp); divisible by 2^(len(down_dims) - 1)."""
    n_action_steps: int = 8
    """Actions executed from each chunk before re-planning (Ta); at most horizon - To + 1."""
    down_dims: tuple[int, ...] = (64, 128, 256)
    """U-Net channels per level (the paper's (512, 1024, 2048) is ~60x the compute)."""
    kernel_size: int = 5
    """U-Net temporal kernel."""
    n_groups: int = 8
    """GroupNorm groups in the U-Net (must divide every down_dims entry)."""
    time_embed_dim: int = 128
    """Width of the sinusoidal time embedding."""
    state_hidden_sizes: tuple[int, ...] = (256, 256)
    """MLP over the normalised vector keys of one step (empty: the vector itself)."""
    image_widths: tuple[int, ...] = (32, 64, 128)
    """Image encoder: stem width, then one stride-2 residual block per further width."""
    num_keypoints: int = 32
    """Spatial-softmax keypoints of the image encoder."""
    image_feature_dim: int = 64
    """Width of one image encoding."""
    crop_ratio: float = 0.9
    """Image crop side / image side: random crop in training, centre crop when acting (1: none)."""
    use_ema: bool = True
    """Act with an exponential moving average of the weights."""
    ema_power: float = 0.75
    """EMA decay warm-up power: decay = 1 - (1 + step)^-power."""
    ema_max_decay: float = 0.9999
    """Largest EMA decay."""
    noise_seed: int = 0
    """Seed of the fixed initial noise used by deterministic acting."""
    temporal_ensemble: bool = False
    """Re-plan every step and act with the weighted mean of every chunk's prediction for the
    step (ACT's temporal ensembling, Zhao et al. 2023); needs n_action_steps 1."""
    ensemble_coeff: float = 0.01
    """Temporal-ensembling weight exp(-ensemble_coeff * i) of the i-th oldest prediction."""
    frozen_chain_prefix: bool = False
    """The policy holds a frozen copy of its network for the chain's deterministic first steps
    (set by :meth:`ChunkPolicy.freeze_chain_prefix`, so that a saved fine-tuned policy loads with
    its copy); not a setting to choose by hand."""

    def __post_init__(self) -> None:
        """Reject horizons and widths the U-Net and the receding horizon cannot use."""
        self.obs_keys = tuple(self.obs_keys)
        self.down_dims = tuple(self.down_dims)
        if self.n_obs_steps < 1 or self.n_action_steps < 1:
            raise ValueError("policy.n_obs_steps and n_action_steps must be >= 1")
        if self.n_obs_steps - 1 + self.n_action_steps > self.horizon:
            raise ValueError(
                f"policy.horizon {self.horizon} is shorter than n_obs_steps - 1 + n_action_steps "
                f"= {self.n_obs_steps - 1 + self.n_action_steps}"
            )
        if not self.down_dims or self.horizon % 2 ** (len(self.down_dims) - 1):
            raise ValueError(
                f"policy.horizon {self.horizon} must be divisible by 2^(len(down_dims) - 1) "
                f"for down_dims {self.down_dims}"
            )
        if any(d % self.n_groups for d in self.down_dims):
            raise ValueError(f"policy.n_groups {self.n_groups} must divide every down_dims {self.down_dims}")
        if not 0 < self.crop_ratio <= 1:
            raise ValueError(f"policy.crop_ratio must be in (0, 1], got {self.crop_ratio}")
        if self.temporal_ensemble and self.n_action_steps != 1:
            raise ValueError("policy.temporal_ensemble re-plans every step: set n_action_steps to 1")
