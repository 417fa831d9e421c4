"""The settings of the ``vla`` policy: the flow action expert's, plus the VLM backbone's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from omnigym.policies.flow.policy import FlowPolicyConfig


@dataclass
class VLAPolicyConfig(FlowPolicyConfig):
    """A VLM backbone whose pooled hidden state conditions :class:`FlowPolicyConfig`'s action expert.

    The chunk fields keep their meaning; their defaults are smaller than ``flow``'s (one observation
    step: a VLM forward pass per step, not per history frame; a CPU-sized U-Net) and re-plan every
    step (``n_action_steps`` 1), so the default policy acts closed-loop on each new image.
    ``image_widths``, ``num_keypoints``, ``image_feature_dim`` and ``crop_ratio`` are not read: the
    VLM encodes the image.
    """

    type: str = "vla"
    n_obs_steps: int = 1
    horizon: int = 8
    n_action_steps: int = 1
    down_dims: tuple[int, ...] = (32, 64)
    time_embed_dim: int = 32
    state_hidden_sizes: tuple[int, ...] = (64, 64)
    use_ema: bool = False
    """Off by default: the EMA copy would hold a second copy of the VLM backbone."""
    model: str = "tiny:idefics3"
    """Hugging Face image-text-to-text model directory or hub id, or ``tiny:ARCH[:SEED]`` (a tiny
    random VLM built offline on first use, ``omnigym.policies.vlm.tiny``)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Backbone weight dtype; its pooled features and the action expert are float32."""
    instruction: str = ""
    """The text of the prompt after the image (the task instruction, e.g. PushCube's "Push the cube
    to the red target."); empty: the image alone. Per-step text observations are not read."""
    pooling: Literal["last", "mean"] = "last"
    """Backbone feature: the last layer's hidden state at the prompt's final token (``last``, the
    state a VLM generates its reply from) or its mean over the prompt's tokens (``mean``)."""
    backbone_feature_dim: int = 64
    """Width of the projection (LayerNorm, Linear) of the pooled hidden state per observation step."""
    freeze_backbone: bool = True
    """Keep the backbone's own weights fixed (LoRA adapters, with ``lora_r`` > 0, still train). Frozen
    without LoRA, features are cached per image (``feature_cache_size``)."""
    lora_r: int = 0
    """LoRA rank on the language model's ``lora_target_modules`` (0: no adapters)."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA input."""
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Linear layer names that get adapters, in the language model only (vision tower excluded)."""
    backbone_micro_batch_size: int = 64
    """Images per backbone forward pass (memory); gradients accumulate across them."""
    feature_cache_size: int = 8192
    """Images whose pooled features a frozen backbone without LoRA remembers (0: no cache); the
    cache is dropped whenever a backbone weight changes."""

    def __post_init__(self) -> None:
        """Check the backbone settings besides the flow ones."""
        super().__post_init__()
        self.lora_target_modules = tuple(self.lora_target_modules)
        if not self.model:
            raise ValueError("policy.model must name a Hugging Face image-text-to-text model or tiny:ARCH")
        if self.lora_r < 0:
            raise ValueError(f"policy.lora_r must be >= 0, got {self.lora_r}")
        if self.lora_r > 0 and not self.freeze_backbone:
            raise ValueError(
                "policy.lora_r > 0 trains adapters over frozen backbone weights: set freeze_backbone=true "
                "(or lora_r=0 to fine-tune the whole backbone)"
            )
        for name in ("backbone_feature_dim", "backbone_micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"policy.{name} must be >= 1, got {getattr(self, name)}")
        if self.feature_cache_size < 0:
            raise ValueError(f"policy.feature_cache_size must be >= 0, got {self.feature_cache_size}")
