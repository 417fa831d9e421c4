"""Text-only causal language models (``AutoModelForCausalLM``) as VLM policies."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from omnigym.core.policy import Policy
from omnigym.policies.vlm.policy import VLMPolicy, resolve_model_class

L = 8
PROMPT = 256


@pytest.fixture
def text_policy(tiny_models, text_batch, make_policy):
    """``text_policy(**config)``: the tiny text-only Qwen2 on NumberLine's text observations."""
    env = text_batch[0][0]
    return lambda **config: make_policy(
        tiny_models["qwen2"], env, obs_keys=("text",), max_prompt_tokens=PROMPT, max_new_tokens=L, **config
    )


def test_text_only_lm_loads_as_causal_lm_acts_and_evaluate_matches(tiny_models, text_batch, text_policy):
    envs, obs = text_batch
    assert resolve_model_class(str(tiny_models["qwen2"]), "auto") == "causal_lm"
    assert resolve_model_class(str(tiny_models["qwen2_vl"]), "auto") == "image_text_to_text"
    policy = text_policy(temperature=0.7, eval_micro_batch_size=3)
    assert policy.text_only and type(policy.model).__name__ == "Qwen2ForCausalLM"
    assert policy.processor.image_processor is None and policy.processor.processor is None
    torch.manual_seed(0)
    step = policy.act(obs)
    assert len(step.action) == 4 and all(isinstance(a, str) for a in step.action)
    assert step.logprob.shape == step.mask.shape == (4, L)
    prompt = policy.processor.tokenizer.decode(step.extras["prompt_ids"][0][step.extras["prompt_mask"][0]])
    assert obs["text"][0] in prompt and prompt.endswith("<|im_start|>assistant\n")
    evaluation = policy.evaluate(obs, None, step.extras)
    torch.testing.assert_close(evaluation.logprob, step.logprob, atol=1e-4, rtol=0)
    for env, action in zip(envs, step.action, strict=True):
        assert "action_valid" in env.step(action)[4]


def test_text_only_save_load_round_trip_with_lora(text_batch, text_policy, tmp_path, activate_lora):
    _, obs = text_batch
    policy = text_policy(lora_r=4)
    activate_lora(policy)
    step = policy.act(obs, deterministic=True)
    policy.save_pretrained(tmp_path / "saved")
    loaded = Policy.from_pretrained(tmp_path / "saved")
    assert isinstance(loaded, VLMPolicy) and loaded.text_only
    again = loaded.act(obs, deterministic=True)
    assert again.action == step.action
    torch.testing.assert_close(again.logprob, step.logprob, atol=1e-5, rtol=0)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "saved" / "hf")  # standalone, adapters merged
    inputs = loaded.encode_obs(obs).model_kwargs()
    with torch.no_grad():
        torch.testing.assert_close(merged(**inputs).logits, loaded.model(**inputs).logits, atol=1e-4, rtol=0)


def test_text_only_lm_refuses_image_observations(tiny_models, game_batch, make_policy):
    env = game_batch[0][0]  # image + text observations
    for obs_keys in (("image", "text"), ("image",)):
        with pytest.raises(ValueError, match=r"text-only language model.*obs_keys must be \('text',\)"):
            make_policy(tiny_models["qwen2"], env, obs_keys=obs_keys)
    with pytest.raises(ValueError, match="text-only"):  # the explicit override is checked the same way
        make_policy(tiny_models["qwen2_vl"], env, model_class="causal_lm")
