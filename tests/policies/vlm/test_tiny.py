from pathlib import Path

import pytest
import torch
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

from omnigym.policies.vlm.tiny import TAG_TOKENS, make_tiny


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "idefics3"])
def test_make_tiny_loads_back_offline(tiny_models, arch):
    path = tiny_models[arch]
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert model.config.model_type == arch
    assert 3e5 < sum(p.numel() for p in model.parameters()) < 1.0e6
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.padding_side == "left"
    assert tokenizer.eos_token_id == model.generation_config.eos_token_id
    assert AutoImageProcessor.from_pretrained(path) is not None
    if arch == "idefics3":
        assert type(AutoProcessor.from_pretrained(path)).__name__ == "Idefics3Processor"
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "go"}]}]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert "go" in prompt and ("<|image_pad|>" in prompt or "<image>" in prompt)


@pytest.mark.parametrize("arch", ["qwen2_vl", "idefics3"])
def test_tokenizer_covers_the_action_grammars(tiny_models, arch):
    tokenizer = AutoTokenizer.from_pretrained(tiny_models[arch])
    for tag in TAG_TOKENS:
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1
    for text in [
        "<think>ok</think><answer>click(12, 40)</answer>",
        'type("abc")',
        'key("Enter")',
        "(8-2)*4=24 up",
    ]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert tokenizer.unk_token_id not in ids


def test_make_tiny_is_deterministic_in_its_seed(tmp_path):
    weights = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        model = AutoModelForImageTextToText.from_pretrained(make_tiny("idefics3", tmp_path / name, seed=seed))
        weights[name] = model.lm_head.weight
    assert torch.equal(weights["a"], weights["b"])
    assert not torch.equal(weights["a"], weights["c"])
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "c" / "tokenizer.json").read_text()


def test_make_tiny_text_only_qwen2_from_the_cli(tmp_path):
    from transformers import AutoModelForCausalLM

    from omnigym.platform.cli import main

    assert main(["vlm", "make-tiny", "--arch", "qwen2", "--out", str(tmp_path / "qwen2")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "qwen2")
    assert model.config.model_type == "qwen2" and not hasattr(model.config, "vision_config")
    assert 3e5 < sum(p.numel() for p in model.parameters()) < 1.0e6
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "qwen2")
    assert tokenizer.eos_token_id == model.generation_config.eos_token_id
    assert "<|image_pad|>" not in tokenizer.get_vocab()  # text only: no image tokens
    chat = [{"role": "user", "content": "go"}]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n"


def test_tiny_model_spec_builds_once_into_the_cache(tmp_path, monkeypatch):
    from omnigym.policies.vlm.tiny import resolve_model

    monkeypatch.setenv("OMNIGYM_CACHE", str(tmp_path))
    assert resolve_model("HuggingFaceTB/SmolVLM-256M-Instruct") == "HuggingFaceTB/SmolVLM-256M-Instruct"
    path = Path(resolve_model("tiny:qwen2:3"))
    assert path == tmp_path / "tiny" / "qwen2-seed3" and (path / "config.json").exists()
    built = (path / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("tiny:qwen2:3") == str(path)
    assert (path / "model.safetensors").stat().st_mtime_ns == built  # cached, not rebuilt
    assert [p.name for p in (tmp_path / "tiny").iterdir()] == ["qwen2-seed3"]  # no staging left
    for bad in ("tiny:gpt9", "tiny:qwen2:x", "tiny:qwen2:1:2"):
        with pytest.raises(ValueError, match="tiny:ARCH"):
            resolve_model(bad)
