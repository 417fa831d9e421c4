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


class EndAfter:
    """A logits processor that ends every reply after ``n`` tokens (EOS forbidden before, forced at n)."""

    def __init__(self, eos: int, n: int) -> None:
        self.eos, self.n, self.start = eos, n, None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.start is None:
            self.start = input_ids.shape[1]
        scores = scores.clone()
        if input_ids.shape[1] - self.start + 1 < self.n:
            scores[:, self.eos] = -torch.inf
        else:
            scores[:] = -torch.inf
            scores[:, self.eos] = 0.0
        return scores


def test_logits_processors_shape_replies_and_logprobs_stay_the_models(text_batch, text_policy):
    _, obs = text_batch
    policy = text_policy(temperature=0.7)
    eos = policy.processor.eos_token_id
    policy.logits_processors = [EndAfter(eos, 3)]
    torch.manual_seed(0)
    step = policy.act(obs)
    assert step.mask.sum(dim=1).tolist() == [3] * len(obs["text"])  # 2 tokens, then EOS
    assert (step.extras["tokens"][:, 2] == eos).all() and (step.extras["tokens"][:, :2] != eos).all()
    evaluation = policy.evaluate({}, None, step.extras)  # the model's own log-probabilities
    torch.testing.assert_close(evaluation.logprob, step.logprob, atol=1e-4, rtol=0)
    assert float(step.logprob[:, 2].max()) < -1.0  # the forced EOS was unlikely under the model


@pytest.mark.parametrize("arch", ["qwen2", "qwen2_vl"])
def test_segmented_generation_records_versions_and_matches_evaluate(
    tiny_models, text_batch, gui_batch, make_policy, arch
):
    envs, obs = text_batch if arch == "qwen2" else gui_batch
    keys = ("text",) if arch == "qwen2" else ("image", "text")
    policy = make_policy(
        tiny_models[arch], envs[0], obs_keys=keys, max_prompt_tokens=PROMPT * 3, max_new_tokens=L
    )
    policy.segment_tokens, policy.segment_hook = 3, lambda: 7  # unchanged weights: as one call
    torch.manual_seed(0)
    step = policy.act(obs)
    assert step.extras["token_version"].shape == (len(obs["text"]), L)
    assert (step.extras["token_version"] == 7).all()
    evaluation = policy.evaluate({k: v for k, v in obs.items() if k == "image"}, None, step.extras)
    torch.testing.assert_close(evaluation.logprob, step.logprob, atol=1e-4, rtol=0)


def test_weights_swapped_between_segments_score_each_part_under_its_own_version(text_batch, text_policy):
    _, obs = text_batch
    policy = text_policy(temperature=1.0)
    old = {k: v.clone() for k, v in policy.state_dict().items()}
    calls = []

    def hook() -> int:  # the worker's "load the learner's newest weights" at the second segment
        calls.append(len(calls))
        if len(calls) == 2:
            with torch.no_grad():
                for parameter in policy.model.parameters():
                    parameter.add_(0.05 * torch.randn_like(parameter))
        return 10 + min(len(calls), 2)

    policy.segment_tokens, policy.segment_hook = 3, hook
    torch.manual_seed(1)
    step = policy.act(obs)
    versions = step.extras["token_version"]
    assert (versions[:, :3] == 11).all() and (versions[:, 3:] == 12).all()
    later = step.mask[:, 3:]
    assert later.any(), "every reply ended in the first segment"
    new_scores = policy.evaluate({}, None, step.extras).logprob
    torch.testing.assert_close(new_scores[:, 3:][later], step.logprob[:, 3:][later], atol=1e-4, rtol=0)
    assert not torch.allclose(new_scores[:, :3], step.logprob[:, :3], atol=1e-3)
    policy.load_state_dict(old)
    old_scores = policy.evaluate({}, None, step.extras).logprob
    torch.testing.assert_close(old_scores[:, :3], step.logprob[:, :3], atol=1e-4, rtol=0)
