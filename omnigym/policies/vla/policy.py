"""``VLAPolicy``: a vision-language-action policy, a VLM backbone conditioning a flow-matching action expert.

π0-style (Black et al., 2024): a pretrained vision-language model reads the image and the
instruction; its representation conditions a flow-matching action expert that outputs chunks of
continuous actions. Here the expert is the ``flow`` policy's FiLM-conditioned 1-D U-Net
(conditional flow matching, Euler sampling) and the conditioning is the VLM's pooled last-layer
hidden state (projected) beside the state MLP's features (:mod:`omnigym.policies.vla.backbone`).
Everything else is :class:`~omnigym.policies.flow.policy.FlowPolicy`'s:

* behaviour cloning (``compute_loss``; ``omnigym bc --policy vla`` / ``imitate_dataset``);
* RL fine-tuning with ``rl_chain: true`` (Flow-GRPO, Liu et al., 2025): every SDE denoising step is
  an action part with its Gaussian log-probability, so ``ppo``, ``grpo`` and ``vldac`` train it;
* receding-horizon acting, normalisers, EMA, ``freeze_chain_prefix``.

The backbone is frozen by default (``freeze_backbone``), LoRA-adapted with ``lora_r`` > 0, or
fully fine-tuned. Saving writes the chunk policy's files plus a standalone Hugging Face copy of
the backbone and its processor in ``hf/`` (as the ``vlm`` policy does), so a saved VLA loads
without the original model directory.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.config import build_dataclass
from omnigym.core.policy import IncompatibleSpacesError, PolicyConfig, describe_space
from omnigym.core.pretrained import CONFIG_FILE, load_weights, read_meta
from omnigym.core.types import OBS_IMAGE, OBS_STATE
from omnigym.policies.chunking.base import ChunkDenoiser, ChunkPolicyBase
from omnigym.policies.chunking.encoders import ObservationEncoder
from omnigym.policies.chunking.unet import ConditionalUnet1D
from omnigym.policies.flow.policy import FlowPolicy
from omnigym.policies.vla.backbone import VLMObservationEncoder
from omnigym.policies.vla.config import VLAPolicyConfig

MAX_FIT_IMAGES = 2048
"""Images :meth:`VLAPolicy.fit_normalizers` passes through the backbone for the feature statistics."""
HF_DIR = "hf"
"""Sub-directory of a saved VLA that holds the backbone (Hugging Face format) and its processor."""
PIXELS_FIX = "render one: omnigym/<Task>Pixels-v0 or env.kwargs.obs_keys=[image,state]"


def _is_image(space: spaces.Space) -> bool:
    """A uint8 ``[H, W, 3]`` Box: what the VLM reads."""
    shape = tuple(space.shape or ())
    return isinstance(space, spaces.Box) and len(shape) == 3 and shape[2] == 3 and space.dtype == np.uint8


def read_keys(observation_space: spaces.Dict, obs_keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys a VLA reads: ``obs_keys``, or ``image`` and ``state`` (those the env has), never text."""
    return obs_keys or tuple(k for k in (OBS_IMAGE, OBS_STATE) if k in observation_space.spaces)


class VLAPolicy(FlowPolicy):
    """A VLM-conditioned flow-matching action-chunk policy (see the module doc)."""

    name: ClassVar[str] = "vla"
    config_class: ClassVar[type[PolicyConfig]] = VLAPolicyConfig
    config: VLAPolicyConfig

    def __init__(
        self, config: VLAPolicyConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        type(self).check_spaces(config, observation_space, action_space)
        super().__init__(config, observation_space, action_space)
        # The chunk base built its CNN encoder; the VLM encoder and a U-Net of its width replace it.
        encoder = VLMObservationEncoder(config, self.state_normalizer.low.shape[0])
        unet = ConditionalUnet1D(
            self.action_dim, encoder.out_dim, config.down_dims, config.kernel_size,
            config.n_groups, config.time_embed_dim, self.num_times,
        )  # fmt: skip
        self.model = ChunkDenoiser(cast(ObservationEncoder, encoder), unet)  # called the same way
        self.ema_model = copy.deepcopy(self.model).requires_grad_(False) if config.use_ema else None
        self.frozen_model = (
            copy.deepcopy(self.model).requires_grad_(False) if config.frozen_chain_prefix else None
        )
        self.apply_encoder_freeze()

    @classmethod
    def check_spaces(
        cls, config: PolicyConfig | None, observation_space: spaces.Space, action_space: spaces.Space
    ) -> None:
        """Refuse non-Box actions and observations without an image, naming the fix (before any weights)."""
        if not isinstance(action_space, spaces.Box):
            raise IncompatibleSpacesError(
                f"policy 'vla' acts in Box action spaces (it outputs continuous action chunks), not "
                f"{describe_space(action_space)}; for text actions use policy=vlm",
                policy=cls.name,
                part="action",
                supported=("Box",),
            )
        super().check_spaces(config, observation_space, action_space)
        assert isinstance(observation_space, spaces.Dict)  # the base check refused any other
        keys = read_keys(observation_space, tuple(getattr(config, "obs_keys", ()) or ()))
        images = [k for k in keys if k in observation_space.spaces and _is_image(observation_space[k])]
        if len(images) != 1:
            found = f"observes {sorted(observation_space.spaces)}" if not images else f"has images {images}"
            raise IncompatibleSpacesError(
                f"policy 'vla' conditions its VLM on one uint8 [H, W, 3] image, but the env {found} "
                f"({PIXELS_FIX})",
                policy=cls.name,
                part="observation",
            )

    @staticmethod
    def _resolve_keys(observation_space: spaces.Dict, keys: tuple[str, ...]) -> tuple[list[str], list[str]]:
        """``image`` and ``state`` by default, skipping ``text`` (the prompt's text is ``instruction``)."""
        return ChunkPolicyBase._resolve_keys(observation_space, read_keys(observation_space, keys))

    @torch.no_grad()
    def fit_normalizers(self, obs: dict[str, Any], actions: Any) -> None:
        """The chunk policy's min-max statistics, and the backbone features' mean and std.

        Args:
            obs: key -> ``[N, ...]`` (the vector keys and, when present, the image key are read; at
                most ``MAX_FIT_IMAGES`` images, evenly spaced, for the feature statistics).
            actions: Shape: [N, *action_shape].
        """
        super().fit_normalizers(obs, actions)
        if self.image_keys[0] not in obs:  # vector statistics only: the features stay as they are
            return
        images = np.asarray(obs[self.image_keys[0]])
        if len(images) > MAX_FIT_IMAGES:
            images = images[np.linspace(0, len(images) - 1, MAX_FIT_IMAGES).round().astype(int)]
        encoder = self.model.encoder
        assert isinstance(encoder, VLMObservationEncoder)
        encoder.fit_features(images)
        for copy_ in (self.ema_model, self.frozen_model):
            if copy_ is not None:
                copy_.encoder.load_state_dict(encoder.state_dict())

    # --- saving ---------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> Path:
        """The chunk policy's ``config.json`` and ``model.safetensors``, plus the backbone in ``path/hf``.

        ``model.safetensors`` holds the exact state (LoRA adapters unmerged); ``hf/`` a standalone
        backbone (adapters merged) and processor. ``config.json`` points ``model`` at ``hf/``
        (absolute), and :meth:`from_pretrained` re-points it at the loaded directory's ``hf/``.
        """
        path = super().save_pretrained(path)
        hf = path / HF_DIR
        encoder = self.model.encoder
        assert isinstance(encoder, VLMObservationEncoder)
        encoder.save_backbone(hf)
        meta = json.loads((path / CONFIG_FILE).read_text())
        meta["config"]["model"] = str(hf.resolve())
        (path / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        return path

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> VLAPolicy:
        """Load a policy written by :meth:`save_pretrained` from ``path`` (its backbone from ``hf/``).

        Raises:
            FileNotFoundError: a file of the saved policy is missing.
            ValueError: its config or weights are corrupt or do not match.
        """
        path = Path(path)
        meta = read_meta(path, "policy")
        if not (path / HF_DIR).is_dir():
            raise FileNotFoundError(f"not a saved vla policy: {path / HF_DIR} is missing")
        if meta["type"] != cls.name:
            raise ValueError(f"corrupt policy config {path / CONFIG_FILE}: type {meta['type']!r}, not 'vla'")
        try:
            config: Any = build_dataclass(
                VLAPolicyConfig, {**meta["config"], "model": str(path / HF_DIR)}, path="policy"
            )
            policy = cls(config, meta["observation_space"], meta["action_space"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"corrupt policy config {path / CONFIG_FILE}: {exc}") from exc
        load_weights(path, policy, "policy")
        return policy.to(device)
