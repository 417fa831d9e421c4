"""Chat prompts with images -> fixed-length, left-padded model inputs for any supported VLM.

:class:`VLMProcessor` wraps a model directory's processor. It uses the official
``AutoProcessor`` when it builds (Idefics3; Qwen2-VL/Qwen2.5-VL where torchvision is installed)
and otherwise (Qwen2-VL/Qwen2.5-VL's processor needs torchvision for its video half) falls back
to the image processor plus the same text expansion the official processor does: each
``<|image_pad|>`` becomes ``grid_t * grid_h * grid_w / merge_size**2`` copies.

Qwen-family models in transformers 5.x also need ``mm_token_type_ids`` (1 at image tokens):
Qwen2-VL raises without it and Qwen2.5-VL silently falls back to 1-D positions. It is derived
from the token ids (``input_ids == image_token_id``), so it is identical whether the prompt was
just built or read back from a rollout's stored ``prompt_ids``.

Every prompt is left-padded (or truncated) to exactly ``max_prompt_tokens`` so prompts of
different steps stack into one ``[T, N, max_prompt_tokens]`` tensor.

A text-only causal language model (``text_only=True``) has only its tokenizer and chat template.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

QWEN_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")
MULTIMODAL_TOKENS = (
    "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>",
    "<image>", "<fake_token_around_image>", "<global-img>",
)  # fmt: skip
Message = dict[str, Any]
"""One chat message: ``{"role": ..., "content": str | [{"type": "image"}, {"type": "text", ...}]}``."""


@dataclass
class VLMInputs:
    """A batch of prompts ready for ``model(**inputs.model_kwargs())`` or ``generate``.

    Attributes:
        input_ids: left-padded prompt token ids. Shape: [B, S].
        attention_mask: True on prompt tokens, False on padding. Shape: [B, S].
        pixel_inputs: the image processor's tensors (``pixel_values`` plus ``image_grid_thw``
            for Qwen or ``pixel_attention_mask`` for Idefics3); empty without images.
        mm_token_type_ids: 1 at image tokens, else 0 (Qwen family only). Shape: [B, S].
    """

    input_ids: Tensor
    attention_mask: Tensor
    pixel_inputs: dict[str, Tensor] = field(default_factory=dict)
    mm_token_type_ids: Tensor | None = None

    def model_kwargs(self) -> dict[str, Tensor]:
        """Keyword arguments of the model's ``forward``/``generate``."""
        kwargs = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask.long(),
            **self.pixel_inputs,
        }
        if self.mm_token_type_ids is not None:
            kwargs["mm_token_type_ids"] = self.mm_token_type_ids
        return kwargs

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> VLMInputs:
        """A copy on ``device``; floating pixel tensors are cast to ``dtype`` when given."""

        def move(t: Tensor) -> Tensor:
            return t.to(device, dtype) if dtype is not None and t.is_floating_point() else t.to(device)

        return VLMInputs(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            {k: move(v) for k, v in self.pixel_inputs.items()},
            None if self.mm_token_type_ids is None else self.mm_token_type_ids.to(device),
        )


def require_vlm_extra() -> None:
    """Raise a helpful ``ImportError`` when the ``vlm`` extra (transformers, peft) is missing."""
    try:
        import peft  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"VLM policies need transformers and peft: install omnigym[vlm] ({exc})") from exc


def to_pil(image: Any) -> Any:
    """A PIL RGB image from a PIL image, a uint8 ``[H, W, 3]`` array or tensor."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, Tensor):
        image = image.detach().cpu().numpy()
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [H, W, 3], got {array.dtype} {list(array.shape)}")
    return Image.fromarray(array, "RGB")


class VLMProcessor:
    """Builds :class:`VLMInputs` from chat messages for the model saved at ``path``.

    Args:
        path: a Hugging Face model directory (or hub id) with tokenizer and image processor.
        text_only: the model is a text-only causal language model: load only its tokenizer (no
            image processor, no image tokens).
    """

    def __init__(self, path: str | Path, text_only: bool = False) -> None:
        require_vlm_extra()
        from transformers import AutoConfig

        self.path = str(path)
        self.text_only = text_only
        self.model_type: str = AutoConfig.from_pretrained(self.path).model_type
        self.is_qwen = self.model_type in QWEN_MODEL_TYPES
        self.processor: Any = None
        self.image_processor: Any = None
        if text_only:
            self._load_tokenizer()
        else:
            self._load_processor(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.pad_token_id: int = int(self.tokenizer.pad_token_id)
        self.eos_token_id: int = int(self.tokenizer.eos_token_id)
        # The token that closes an image block: truncation never cuts at or before it.
        closing = "<|vision_end|>" if self.is_qwen else "<fake_token_around_image>"
        image = "<|image_pad|>" if self.is_qwen else "<image>"
        # A text-only model has no image tokens: -1 matches no token id.
        self.image_end_token_id: int = -1 if text_only else int(self.tokenizer.convert_tokens_to_ids(closing))
        self.image_token_id: int = -1 if text_only else int(self.tokenizer.convert_tokens_to_ids(image))

    def _load_tokenizer(self) -> None:
        """The tokenizer alone (a text-only causal LM: no processor, no images)."""
        from transformers import AutoTokenizer

        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.path)

    def _load_processor(self, path: str | Path) -> None:
        """The official processor, or (without torchvision) tokenizer plus image processor."""
        from transformers import AutoImageProcessor, AutoProcessor

        try:
            self.processor = AutoProcessor.from_pretrained(self.path)
        except (ImportError, ValueError, OSError, TypeError) as exc:
            # Qwen2-VL's processor builds a video processor that needs torchvision.
            logger.info("official processor of %s unavailable (%s); using the manual path", path, exc)
        if self.processor is not None and hasattr(self.processor, "tokenizer"):
            self.tokenizer = self.processor.tokenizer
            self.image_processor = self.processor.image_processor
        else:
            self.processor = None
            self._load_tokenizer()
            self.image_processor = AutoImageProcessor.from_pretrained(self.path)

    @property
    def multimodal_token_ids(self) -> list[int]:
        """Ids of the image-structure tokens (pads, image delimiters, tile tags) in the vocabulary.

        A completion must never contain them: the model would take a generated one for an image
        slot when the completion is re-scored.
        """
        names = [*MULTIMODAL_TOKENS, *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))]
        vocab = self.tokenizer.get_vocab()
        return sorted({int(vocab[name]) for name in names if name in vocab})

    @property
    def uses_official_processor(self) -> bool:
        """Whether prompts go through ``AutoProcessor`` (False: the manual Qwen path)."""
        return self.processor is not None

    # --- prompts ------------------------------------------------------------------------------
    def chat_text(self, messages: Sequence[Message]) -> str:
        """The prompt string of one conversation, ending with the assistant's turn opening."""
        owner = self.processor if self.processor is not None else self.tokenizer
        return str(owner.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))

    def encode_images(self, images: Sequence[Any]) -> dict[str, Tensor]:
        """Pixel tensors of one image per prompt (``pixel_values`` and grid or mask)."""
        pil = [to_pil(image) for image in images]
        if not pil:
            return {}
        batch = self.image_processor(pil if self.is_qwen else [[image] for image in pil], return_tensors="pt")
        keys = ("pixel_values", "image_grid_thw", "pixel_attention_mask")
        return {k: batch[k] for k in keys if k in batch}

    def image_token_counts(self, pixel_inputs: dict[str, Tensor]) -> list[int]:
        """Image tokens per image on the manual Qwen path: ``t * h * w / merge_size**2``."""
        merge = int(getattr(self.image_processor, "merge_size", 2))
        return [int(grid.prod()) // merge**2 for grid in pixel_inputs["image_grid_thw"]]

    def encode(
        self,
        messages: Sequence[Sequence[Message]],
        images: Sequence[Any] | None,
        max_prompt_tokens: int,
    ) -> VLMInputs:
        """Tokenise ``B`` conversations (at most one image each) to exactly ``max_prompt_tokens``.

        Args:
            messages: one conversation per prompt; an image slot is ``{"type": "image"}``.
            images: one image per prompt (PIL or uint8 ``[H, W, 3]``), or None for text only.
            max_prompt_tokens: the length every prompt is left-padded or truncated to.

        Returns:
            Inputs with ``input_ids`` and ``attention_mask`` of shape ``[B, max_prompt_tokens]``.
        """
        rows, pixel_inputs = self.tokenize(messages, images)
        return self.pad(rows, pixel_inputs, max_prompt_tokens)

    def tokenize(
        self, messages: Sequence[Sequence[Message]], images: Sequence[Any] | None
    ) -> tuple[list[Tensor], dict[str, Tensor]]:
        """The unpadded, untruncated token ids of each conversation (images expanded) and pixels."""
        texts = [self.chat_text(m) for m in messages]
        pil = [to_pil(image) for image in images] if images is not None else []
        if self.processor is not None:
            kwargs: dict[str, Any] = (
                {"images": [[i] for i in pil] if not self.is_qwen else pil} if pil else {}
            )
            batch = self.processor(text=texts, return_tensors="pt", padding=True, **kwargs)
            rows = [
                ids[mask.bool()]
                for ids, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True)
            ]
            keys = ("pixel_values", "image_grid_thw", "pixel_attention_mask")
            return rows, {k: batch[k] for k in keys if k in batch}
        pixel_inputs = self.encode_images(pil)
        if pil:
            pad = "<|image_pad|>"
            counts = self.image_token_counts(pixel_inputs)
            texts = [t.replace(pad, pad * n, 1) for t, n in zip(texts, counts, strict=True)]
        rows = [torch.tensor(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        return rows, pixel_inputs

    def pad(
        self, rows: Sequence[Tensor], pixel_inputs: dict[str, Tensor], max_prompt_tokens: int
    ) -> VLMInputs:
        """Rows from :meth:`tokenize`, truncated and left-padded to exactly ``max_prompt_tokens``."""
        input_ids, attention_mask = self._pad_left(
            [self._truncate(r, max_prompt_tokens) for r in rows], max_prompt_tokens
        )
        return VLMInputs(input_ids, attention_mask, pixel_inputs, self.mm_token_type_ids(input_ids))

    def mm_token_type_ids(self, input_ids: Tensor) -> Tensor | None:
        """1 at image tokens, else 0, for Qwen-family models (None for others). Shape: ids'."""
        return (input_ids == self.image_token_id).long() if self.is_qwen else None

    def _truncate(self, ids: Tensor, max_tokens: int) -> Tensor:
        """Drop the oldest text tokens after the image block so ``ids`` fits ``max_tokens``."""
        excess = len(ids) - max_tokens
        if excess <= 0:
            return ids
        ends = (ids == self.image_end_token_id).nonzero()
        keep_head = int(ends[-1]) + 1 if len(ends) else 0
        if keep_head + excess > len(ids) - 8:  # keep at least the assistant-turn opening and a little text
            raise ValueError(
                f"a prompt of {len(ids)} tokens does not fit max_prompt_tokens={max_tokens} without cutting "
                "into its image; raise max_prompt_tokens"
            )
        logger.warning("prompt of %d tokens truncated to max_prompt_tokens=%d", len(ids), max_tokens)
        return torch.cat([ids[:keep_head], ids[keep_head + excess :]])

    def _pad_left(self, rows: list[Tensor], length: int) -> tuple[Tensor, Tensor]:
        ids = torch.full((len(rows), length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.bool)
        for i, row in enumerate(rows):
            if len(row):
                ids[i, -len(row) :] = row
                mask[i, -len(row) :] = True
        return ids, mask

    def batch_decode(self, tokens: Tensor, mask: Tensor) -> list[str]:
        """Completion strings of ``tokens [B, L]``, keeping only ``mask``ed tokens, specials dropped."""
        return [
            str(self.tokenizer.decode(row[keep].tolist(), skip_special_tokens=True))
            for row, keep in zip(tokens, mask.bool(), strict=True)
        ]
