"""The VLA's observation encoder: a Hugging Face VLM read as a feature extractor, plus the state MLP.

:class:`VLMObservationEncoder` takes the place of the chunk policies'
:class:`~omnigym.policies.chunking.encoders.ObservationEncoder` (same call, same output), so the
flow action expert, its loss, the ``rl_chain`` of Flow-GRPO and saving all come from
:class:`~omnigym.policies.flow.policy.FlowPolicy`. Per observation step, the prompt "image, then
the instruction" (one user turn of the model's chat template) goes through the VLM in one forward
pass; the last layer's hidden state at the final token (or its mean over the tokens) is the step's
feature, as in π0-style VLAs where the backbone's representation of image and instruction
conditions the action expert (Black et al., 2024). Loading and prompt processing are the ``vlm``
policy's (:class:`~omnigym.policies.vlm.processing.VLMProcessor`).

Speed: the prompt's token ids depend only on the instruction and the image size, so they are
tokenised once per image size and only the pixels are processed per call. A frozen backbone
without LoRA is a fixed function of the image, so its pooled features are cached per image (by a
hash of its bytes): behaviour cloning's epochs over the same demonstrations, and RL's re-scoring of
the images it acted on, run the VLM once per image. The cache is dropped when any backbone weight
changes (loading, ``.to``, an in-place edit).
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from omnigym.policies.layers import MLP
from omnigym.policies.vla.config import VLAPolicyConfig
from omnigym.policies.vlm.policy import DTYPES, VLMPolicy, resolve_model_class
from omnigym.policies.vlm.processing import Message, VLMInputs, VLMProcessor, require_vlm_extra
from omnigym.policies.vlm.tiny import resolve_model


class SharedProcessor:
    """The backbone's processor and prompt ids, shared (not copied) by the EMA and frozen copies.

    Holds no weights: ``copy.deepcopy`` of an encoder keeps this one object.
    """

    def __init__(self, processor: VLMProcessor, instruction: str) -> None:
        self.processor = processor
        self.instruction = instruction
        self._prompt_ids: dict[tuple[int, int], Tensor] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedProcessor:
        return self

    def messages(self) -> list[Message]:
        """The one user turn: the image slot, then the instruction (when there is one)."""
        content: list[dict[str, Any]] = [{"type": "image"}]
        if self.instruction:
            content.append({"type": "text", "text": self.instruction})
        return [{"role": "user", "content": content}]

    def prompt_ids(self, image: np.ndarray) -> Tensor:
        """The prompt's token ids for images of ``image [H, W, 3]``'s size, tokenised once. Shape: [S]."""
        size = (int(image.shape[0]), int(image.shape[1]))
        if size not in self._prompt_ids:
            rows, _ = self.processor.tokenize([self.messages()], [image])
            self._prompt_ids[size] = rows[0]
        return self._prompt_ids[size]

    def inputs(self, images: np.ndarray) -> VLMInputs:
        """Model inputs for ``images [N, H, W, 3]`` (uint8): the cached ids and the processed pixels."""
        ids = self.prompt_ids(images[0]).unsqueeze(0).expand(len(images), -1)
        pixels = self.processor.encode_images(list(images))
        mask = torch.ones(ids.shape, dtype=torch.bool)
        return VLMInputs(ids, mask, pixels, self.processor.mm_token_type_ids(ids))


def load_backbone(config: VLAPolicyConfig) -> tuple[Any, VLMProcessor]:
    """The VLM (``AutoModelForImageTextToText``, with LoRA adapters when ``lora_r`` > 0) and its processor.

    Raises:
        ValueError: the model is a text-only language model (a VLA needs images).
    """
    require_vlm_extra()
    import transformers

    model_dir = resolve_model(config.model)
    if resolve_model_class(model_dir, "auto") != "image_text_to_text":
        raise ValueError(
            f"policy.model {config.model!r} is a text-only language model; the vla policy needs an "
            "image-text-to-text model (e.g. tiny:idefics3, HuggingFaceTB/SmolVLM-256M-Instruct)"
        )
    processor = VLMProcessor(model_dir)
    model = transformers.AutoModelForImageTextToText.from_pretrained(model_dir, dtype=DTYPES[config.dtype])
    if config.freeze_backbone:
        model.requires_grad_(False)
    if config.lora_r > 0:
        # VLMPolicy's LoRA wrapping (it reads only config.lora_*): adapters on the language model.
        model = VLMPolicy._with_lora(config_holder(config), model)
    return model, processor


def config_holder(config: VLAPolicyConfig) -> Any:
    """An object with ``config``, what :meth:`VLMPolicy._with_lora` reads of its policy."""
    holder = type("LoraSettings", (), {})()
    holder.config = config
    return holder


class VLMObservationEncoder(nn.Module):
    """Observation histories -> one conditioning vector: VLM features per step, and the state MLP.

    Called as :class:`~omnigym.policies.chunking.encoders.ObservationEncoder` is (by
    :meth:`~omnigym.policies.chunking.base.ChunkPolicyBase.encode`).

    Args:
        config: the policy's config (backbone, pooling, projection, cache, state MLP).
        state_dim: width of the normalised vector keys of one step (0: none).
    """

    feature_mean: Tensor
    feature_std: Tensor

    def __init__(self, config: VLAPolicyConfig, state_dim: int) -> None:
        super().__init__()
        backbone, processor = load_backbone(config)
        self.backbone = backbone
        self._backbone_params = list(backbone.parameters())  # .to() keeps these objects (their storage moves)
        self.prompt = SharedProcessor(processor, config.instruction)
        self.pooling = config.pooling
        self.micro_batch = config.backbone_micro_batch_size
        self.dtype = DTYPES[config.dtype]
        hidden = int(backbone.config.get_text_config().hidden_size)
        self.register_buffer("feature_mean", torch.zeros(hidden))
        self.register_buffer("feature_std", torch.ones(hidden))
        self.project = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, config.backbone_feature_dim))
        self.state_mlp = (
            MLP(state_dim, tuple(config.state_hidden_sizes), "relu")
            if state_dim and config.state_hidden_sizes
            else None
        )
        self.state_dim = state_dim
        step_dim = config.backbone_feature_dim + (self.state_mlp.out_dim if self.state_mlp else state_dim)
        self.out_dim = config.n_obs_steps * step_dim
        self.cache_size = config.feature_cache_size
        self._cache: OrderedDict[bytes, Tensor] = OrderedDict()
        self._cache_stamp: tuple[int, ...] = ()

    @property
    def backbone_trainable(self) -> bool:
        """Whether any backbone weight (or LoRA adapter) is trained."""
        return any(p.requires_grad for p in self._backbone_params)

    def train(self, mode: bool = True) -> VLMObservationEncoder:
        """Train mode for the projection and state MLP; a frozen backbone stays in eval mode."""
        super().train(mode)
        if not self.backbone_trainable:
            self.backbone.eval()
        return self

    def forward(self, states: Tensor | None, images: Tensor | None, random_crop: bool = False) -> Tensor:
        """Encode a history (``random_crop`` is not used: the VLM's processor sizes the image).

        Args:
            states: concatenated vector keys, normalised. Shape: [B, To, D] (None without).
            images: one image key, floats in [0, 1]. Shape: [B, To, 3, H, W].
            random_crop: ignored.

        Returns:
            The conditioning vector. Shape: [B, out_dim].
        """
        if images is None:
            raise ValueError("the vla policy's encoder needs an image observation")
        batch, steps = images.shape[:2]
        # the chunk policies hand images over as floats in [0, 1]; the VLM's processor takes the uint8 frame
        frames = (images.flatten(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        pooled = self.pooled(frames)
        if self.training and not self.features_fitted and bool((pooled != pooled[0]).any()):
            self.set_feature_statistics(pooled)  # RL from scratch: no demonstrations fitted them
        standardized = (pooled - self.feature_mean) / self.feature_std
        features = self.project(standardized).view(batch, steps, -1)
        parts = [features]
        if states is not None:
            parts.append(self.state_mlp(states) if self.state_mlp is not None else states)
        return torch.cat(parts, dim=-1).flatten(1)

    @torch.no_grad()
    def fit_features(self, frames: np.ndarray) -> None:
        """Standardise the pooled features with their per-dimension mean and std over ``frames [N, H, W, 3]``.

        A VLM's pooled state is mostly the prompt's text, the same in every observation; what
        differs between images is a small part of it (a few percent for a random tiny VLM), which
        the projection sees only once the shared part is removed and each dimension rescaled.
        """
        self.set_feature_statistics(
            torch.cat([self.pooled(frames[i : i + 256]) for i in range(0, len(frames), 256)])
        )

    @property
    def features_fitted(self) -> bool:
        """Whether the standardisation was set (a fresh encoder's mean is exactly zero)."""
        return bool(self.feature_mean.any())

    @torch.no_grad()
    def set_feature_statistics(self, pooled: Tensor) -> None:
        """Standardise with the per-dimension mean and std of ``pooled [N, hidden]`` (:meth:`fit_features`).

        A fresh encoder trained without demonstrations (RL from scratch) takes them from the first
        batch of two or more different images it encodes in training mode: unstandardised, two
        images' features differ by a few percent and the action expert barely sees the image.
        """
        self.feature_mean.copy_(pooled.mean(dim=0))
        if len(pooled) > 1:
            std = pooled.std(dim=0)
            # a dimension (nearly) constant over the demonstrations is scaled like a typical one, not
            # blown up: a new image at acting time would otherwise give it an enormous value
            self.feature_std.copy_(std.clamp(min=float(0.1 * std.mean()) + 1e-6))

    def pooled(self, frames: np.ndarray) -> Tensor:
        """Pooled last-layer hidden states of ``frames [N, H, W, 3]`` (uint8). Shape: [N, hidden], float32.

        Cached per image when the backbone is frozen without adapters (module docstring).
        """
        if self.backbone_trainable or self.cache_size == 0:
            return self._run(frames)
        self._check_stamp()
        keys = [hashlib.blake2b(frame.tobytes(), digest_size=16).digest() for frame in frames]
        missing = [i for i, key in enumerate(keys) if key not in self._cache]
        if missing:
            unique = list(dict.fromkeys(keys[i] for i in missing))
            first = {key: i for i, key in reversed(list(enumerate(keys)))}
            computed = self._run(frames[[first[key] for key in unique]])
            for key, row in zip(unique, computed, strict=True):
                self._cache[key] = row.clone()  # not a view that keeps the whole batch alive
        out = torch.stack([self._cache[key] for key in keys])
        for key in keys:
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out

    def _check_stamp(self) -> None:
        """Drop the cache when a backbone weight changed since it was filled (version or storage)."""
        params = self._backbone_params
        stamp = tuple(value for p in params for value in (p._version, p.data_ptr(), p.dtype.itemsize))
        if stamp != self._cache_stamp:
            self._cache.clear()
            self._cache_stamp = stamp

    def _run(self, frames: np.ndarray) -> Tensor:
        """The backbone over ``frames`` in micro-batches (with gradient when it has trainable weights)."""
        device = next(self.project.parameters()).device
        grad = torch.is_grad_enabled() and self.backbone_trainable
        parts = []
        with torch.set_grad_enabled(grad):
            for start in range(0, len(frames), self.micro_batch):
                inputs = self.prompt.inputs(frames[start : start + self.micro_batch]).to(device, self.dtype)
                out = self.backbone(
                    **inputs.model_kwargs(), use_cache=False, logits_to_keep=1, output_hidden_states=True
                )
                hidden = out.hidden_states[-1]
                parts.append((hidden[:, -1] if self.pooling == "last" else hidden.mean(dim=1)).float())
        return torch.cat(parts)

    def save_backbone(self, folder: Path) -> None:
        """Write a standalone Hugging Face copy (LoRA merged) and the processor to ``folder``."""
        model = self.backbone
        if hasattr(model, "merge_and_unload"):  # a peft model: merge a copy, keep the adapters here
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(folder)
        processor = self.prompt.processor
        if processor.processor is not None:
            processor.processor.save_pretrained(folder)
        else:
            processor.tokenizer.save_pretrained(folder)
            processor.image_processor.save_pretrained(folder)
