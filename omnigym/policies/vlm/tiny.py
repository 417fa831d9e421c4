"""Tiny random vision-language models built offline, for tests and smoke runs.

:func:`make_tiny` writes a Hugging Face model directory (config, random weights, a byte-level
BPE tokenizer trained here on a small corpus of omnigym prompts and actions, the image
processor or processor, a chat template) that ``AutoModelForImageTextToText.from_pretrained``
loads back with no hub access (``qwen2``, a text-only language model, loads with
``AutoModelForCausalLM`` and has only the tokenizer). The models have the real architectures
(Qwen2-VL, Qwen2.5-VL, Idefics3/SmolVLM-v1, Qwen2) at ~0.5-1 M parameters, so every code path a
2-7 B model takes (M-RoPE, image-token expansion, KV-cached generation, LoRA) runs on CPU in
milliseconds.

Built from a config with ``from_config`` and saved with ``save_pretrained`` (docs/policies.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

TinyArch = Literal["qwen2_vl", "qwen2_5_vl", "idefics3", "qwen2"]
TINY_ARCHS: tuple[TinyArch, ...] = ("qwen2_vl", "qwen2_5_vl", "idefics3", "qwen2")

QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>",
)  # fmt: skip
QWEN2_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""The text-only Qwen2's special tokens: no image tokens."""
IDEFICS3_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<end_of_utterance>",
    "<fake_token_around_image>", "<image>", "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)  # fmt: skip
# Plain (not special) tokens: the reasoning/answer tags are learned text, as in real models.
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

# Qwen2-VL's chat format (system/user/assistant turns between <|im_start|> and <|im_end|>,
# images as <|vision_start|><|image_pad|><|vision_end|>), without the default system turn.
QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif item['type'] == 'text' %}{{ item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|im_end|>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# SmolVLM-v1's chat format ("User:<image>text<end_of_utterance>\nAssistant:").
IDEFICS3_CHAT_TEMPLATE = (
    "<|im_start|>{%- for message in messages %}{{ message['role'] | capitalize }}:"
    "{%- if message['content'] is string %} {{ message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'text' %} {{ item['text'] }}"
    "{%- elif item['type'] == 'image' %}<image>{%- endif %}"
    "{%- endfor %}{%- endif %}<end_of_utterance>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}Assistant:{% endif %}"
)


def tiny_corpus() -> list[str]:
    """Sentences that cover omnigym's prompts and action grammars (deterministic)."""
    moves = ["up", "down", "left", "right", "stand", "hit", "+", "-", "noop", "fire"]
    keys = ["Enter", "Tab", "Backspace", "Escape", "Space", "ArrowUp", "ArrowDown"]
    words = ["alice", "bob", "OK", "Next", "Open", "Back", "Submit", "Close", "Cancel", "abc"]
    lines = [
        "game: NumberLine", "rules: Move the current number to the target number.",
        "actions: up | down | left | right", "range: 0..5", "target: 4", "current: 3",
        "instruction: Click the button \"Back\".", "elements:", "[0] window \"\" (0, 0, 160, 210)",
        "[1] button \"OK\" (22, 180, 31, 21)", "[2] textbox \"Name\" (10, 40, 120, 20) focused",
        "You are playing a game. Think, then answer with one action.",
        "You operate a graphical user interface. Think, then answer with one call.",
        "(1 + 2) * 3 - 4 / 2 = 7", "24 = (8 - 2) * 4", "reward 1 when the game is won; other steps give 0.",
    ]  # fmt: skip
    for i, move in enumerate(moves):
        lines.append(f"<think>the target is {i}, so I go {move}</think><answer>{move}</answer>")
    for x in range(0, 200, 7):
        lines.append(f"<answer>click({x}, {(3 * x) % 210})</answer> double_click({x}, {x + 1})")
        lines.append(f"scroll({x}, {x}, -{x % 50}) drag({x}, 1, 2, {x})")
    for word in words:
        lines.append(f'<think>type it</think><answer>type("{word}")</answer> click the button "{word}"')
    for key in keys:
        lines.append(f'<answer>key("{key}")</answer>')
    lines.extend(" ".join(str(n) for n in range(start, start + 25)) for start in range(0, 250, 25))
    return lines


def _train_bpe(special_tokens: tuple[str, ...], vocab_size: int) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on :func:`tiny_corpus` (deterministic)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tiny_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    return tok


def _qwen_tokenizer(vocab_size: int, special_tokens: tuple[str, ...] = QWEN_SPECIAL_TOKENS) -> Any:
    from transformers import Qwen2Tokenizer

    tok = Qwen2Tokenizer(
        tokenizer_object=_train_bpe(special_tokens, vocab_size),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
    )
    tok.chat_template = QWEN_CHAT_TEMPLATE
    return tok


def _idefics3_tokenizer(vocab_size: int) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=_train_bpe(IDEFICS3_SPECIAL_TOKENS, vocab_size),
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
        padding_side="left",
    )
    tok.chat_template = IDEFICS3_CHAT_TEMPLATE
    return tok


def _text_config(vocab_size: int, **extra: Any) -> dict[str, Any]:
    """The shared tiny decoder: 2 layers, width 128, GQA 4/2 heads."""
    return dict(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=256,
        vocab_size=vocab_size,
        max_position_embeddings=2048,
        **extra,
    )


def _make_qwen(arch: TinyArch, out: Path, vocab_size: int) -> None:
    from transformers import (
        AutoModelForImageTextToText,
        Qwen2_5_VLConfig,
        Qwen2VLConfig,
        Qwen2VLImageProcessorPil,
    )

    tok = _qwen_tokenizer(vocab_size)
    ids = {name: tok.convert_tokens_to_ids(t) for name, t in _QWEN_ID_TOKENS.items()}
    # mrope_section halves sum to head_dim / 2 = 128 / 4 / 2 = 16.
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 6, 6]}
    text = _text_config(
        len(tok), rope_parameters=rope, eos_token_id=ids["eos"], pad_token_id=ids["pad"], bos_token_id=None
    )
    if arch == "qwen2_vl":
        vision: dict[str, Any] = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2)
        config: Any = Qwen2VLConfig(text_config=text, vision_config=vision, **_qwen_token_ids(ids))
    else:
        vision = dict(
            depth=2,
            hidden_size=64,
            intermediate_size=128,
            num_heads=4,
            out_hidden_size=128,
            window_size=112,
            fullatt_block_indexes=[1],
        )
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **_qwen_token_ids(ids))
    model = AutoModelForImageTextToText.from_config(config)
    _set_generation_ids(model, ids["eos"], ids["pad"])
    # At most 112x112 pixels: 8x8 patches of 14 -> at most 16 image tokens after the 2x2 merge.
    image_processor = Qwen2VLImageProcessorPil(size={"shortest_edge": 56 * 56, "longest_edge": 112 * 112})
    model.save_pretrained(out)
    tok.save_pretrained(out)
    image_processor.save_pretrained(out)


_QWEN_ID_TOKENS = {
    "eos": "<|im_end|>",
    "pad": "<|endoftext|>",
    "image": "<|image_pad|>",
    "video": "<|video_pad|>",
    "vision_start": "<|vision_start|>",
    "vision_end": "<|vision_end|>",
}


def _qwen_token_ids(ids: dict[str, int]) -> dict[str, Any]:
    return {
        "image_token_id": ids["image"],
        "video_token_id": ids["video"],
        "vision_start_token_id": ids["vision_start"],
        "vision_end_token_id": ids["vision_end"],
    }


def _make_qwen2(out: Path, vocab_size: int) -> None:
    """A text-only Qwen2 causal LM (``AutoModelForCausalLM``) with the Qwen chat template."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    tok = _qwen_tokenizer(vocab_size, QWEN2_SPECIAL_TOKENS)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(**_text_config(len(tok), eos_token_id=eos, pad_token_id=pad, bos_token_id=None))
    model = AutoModelForCausalLM.from_config(config)
    _set_generation_ids(model, eos, pad)
    model.save_pretrained(out)
    tok.save_pretrained(out)


def _make_idefics3(out: Path, vocab_size: int) -> None:
    from transformers import (
        AutoModelForImageTextToText,
        Idefics3Config,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    tok = _idefics3_tokenizer(vocab_size)
    eos, pad = tok.convert_tokens_to_ids("<end_of_utterance>"), tok.convert_tokens_to_ids("<|endoftext|>")
    text = _text_config(len(tok), model_type="llama", eos_token_id=eos, pad_token_id=pad, bos_token_id=None)
    vision = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=16,
    )
    config = Idefics3Config(
        text_config=text,
        vision_config=vision,
        scale_factor=2,
        image_token_id=tok.convert_tokens_to_ids("<image>"),
    )
    model = AutoModelForImageTextToText.from_config(config)
    _set_generation_ids(model, eos, pad)
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False, size={"longest_edge": 64}, max_image_size={"longest_edge": 64}
    )
    # (64 / 16)^2 patches / scale_factor^2 = 4 image tokens per image.
    processor = Idefics3Processor(image_processor, tok, image_seq_len=4, chat_template=IDEFICS3_CHAT_TEMPLATE)
    model.save_pretrained(out)
    processor.save_pretrained(out)


def _set_generation_ids(model: Any, eos: int, pad: int) -> None:
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    model.generation_config.bos_token_id = None


def make_tiny(arch: TinyArch, out: str | Path, seed: int = 0, vocab_size: int = 640) -> Path:
    """Build a tiny random VLM (or text-only LM) of architecture ``arch``; save it (HF format) to ``out``.

    Args:
        arch: ``"qwen2_vl"``, ``"qwen2_5_vl"``, ``"idefics3"`` (SmolVLM-v1) or ``"qwen2"`` (a
            text-only causal LM, loaded by ``AutoModelForCausalLM``).
        out: directory to write (created); loads back with ``from_pretrained(out)`` offline.
        seed: seeds the random weights; the tokenizer is trained deterministically.
        vocab_size: BPE vocabulary target (the corpus may give fewer tokens).

    Returns:
        ``out`` as a ``Path``.
    """
    import torch

    from omnigym.policies.vlm.processing import require_vlm_extra

    require_vlm_extra()
    if arch not in TINY_ARCHS:
        raise ValueError(f"arch must be one of {TINY_ARCHS}, got {arch!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        if arch == "idefics3":
            _make_idefics3(out, vocab_size)
        elif arch == "qwen2":
            _make_qwen2(out, vocab_size)
        else:
            _make_qwen(arch, out, vocab_size)
    return out


TINY_PREFIX = "tiny:"
"""``policy.model: tiny:ARCH[:SEED]`` names a tiny model that :func:`resolve_model` builds on demand."""


def tiny_cache_dir() -> Path:
    """Where on-demand tiny models live: ``$OMNIGYM_CACHE/tiny`` or ``~/.cache/omnigym/tiny``."""
    import os

    return Path(os.environ.get("OMNIGYM_CACHE") or Path.home() / ".cache" / "omnigym") / "tiny"


def resolve_model(model: str) -> str:
    """A model directory or hub id as given; ``tiny:ARCH[:SEED]`` is built once and cached.

    Lets configs and tests name an offline model (``tiny:idefics3``) the way they would name a
    real one (``HuggingFaceTB/SmolVLM-256M-Instruct``).

    Raises:
        ValueError: a malformed ``tiny:`` spec or an unknown architecture.
    """
    if not model.startswith(TINY_PREFIX):
        return model
    parts = model[len(TINY_PREFIX) :].split(":")
    arch, seed_text = parts[0], parts[1] if len(parts) > 1 else "0"
    if len(parts) > 2 or arch not in TINY_ARCHS or not seed_text.isdigit():
        raise ValueError(f"bad tiny model {model!r}: use tiny:ARCH[:SEED], ARCH one of {TINY_ARCHS}")
    target = tiny_cache_dir() / f"{arch}-seed{seed_text}"
    if not (target / "config.json").exists():
        import shutil
        import tempfile

        tiny_cache_dir().mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=tiny_cache_dir(), prefix=f".{arch}-"))
        make_tiny(arch, staging, seed=int(seed_text))  # type: ignore[arg-type]
        try:
            staging.rename(target)  # atomic: a concurrent builder's copy is kept, this one dropped
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return str(target)
