import shutil

import numpy as np
import pytest
import torch
from gymnasium import spaces
from transformers import AutoModelForImageTextToText

from omnigym.core.types import OnPolicyBatch
from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig, completion_mask
from omnigym.policies.vlm.prompts import default_system_prompt

L = 10
PROMPT = 512


def make_policy(path, env, **overrides):
    config = VLMPolicyConfig(model=str(path), max_prompt_tokens=PROMPT, max_new_tokens=L, **overrides)
    return VLMPolicy(config, env.observation_space, env.action_space)


def batch_of(obs, extras, mask):
    zeros = torch.zeros(mask.shape[0])
    return OnPolicyBatch(obs, zeros, zeros, mask, zeros, zeros, zeros, extras)


@pytest.mark.parametrize("arch", ["qwen2_vl", "idefics3"])
@pytest.mark.parametrize("which", ["gui_batch", "game_batch"])
def test_act_on_real_env_observations(tiny_models, arch, which, request):
    envs, obs = request.getfixturevalue(which)
    policy = make_policy(tiny_models[arch], envs[0])
    step = policy.act(obs)
    assert isinstance(step.action, list) and len(step.action) == 4
    assert all(isinstance(a, str) for a in step.action)
    assert step.logprob.shape == step.mask.shape == (4, L)
    assert step.logprob.dtype == torch.float32 and step.mask.dtype == torch.bool
    assert (step.logprob[step.mask] < 0).all() and (step.logprob[~step.mask] == 0).all()
    assert set(step.extras) == {"prompt_ids", "prompt_mask", "tokens"}
    assert step.extras["prompt_ids"].shape == step.extras["prompt_mask"].shape == (4, PROMPT)
    assert step.extras["prompt_ids"].dtype == step.extras["tokens"].dtype == torch.long
    assert step.extras["prompt_mask"].dtype == torch.bool and step.extras["tokens"].shape == (4, L)
    for env, action in zip(envs, step.action, strict=True):
        _, reward, _, _, info = env.step(action)  # random text: a defined (invalid) outcome, no raise
        assert isinstance(info["action_valid"], bool) and np.isfinite(reward)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "idefics3"])
@pytest.mark.parametrize("deterministic", [False, True])
def test_evaluate_matches_act(tiny_models, gui_batch, arch, deterministic):
    envs, obs = gui_batch
    policy = make_policy(tiny_models[arch], envs[0], temperature=0.7, eval_micro_batch_size=3)
    torch.manual_seed(0)
    step = policy.act(obs, deterministic=deterministic)
    evaluation = policy.evaluate({"image": obs["image"]}, None, step.extras)  # no text: stored obs
    assert evaluation.logprob.requires_grad
    torch.testing.assert_close(evaluation.logprob, step.logprob, atol=1e-4, rtol=0)
    assert (evaluation.entropy[step.mask] > 0).all()


def test_qwen2_5_vl_generate_gets_mm_token_type_ids(tiny_models, gui_batch, monkeypatch):
    envs, obs = gui_batch
    policy = make_policy(tiny_models["qwen2_5_vl"], envs[0])
    seen = {}
    generate = policy.model.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return generate(**kwargs)

    monkeypatch.setattr(policy.model, "generate", spy)
    policy.act(obs, deterministic=True)
    assert torch.equal(
        seen["mm_token_type_ids"], (seen["input_ids"] == policy.processor.image_token_id).long()
    )
    assert seen["mm_token_type_ids"].sum() > 0
    assert policy.processor.image_token_id in seen["suppress_tokens"]  # never generated: it is an image slot
    logprob, _ = policy._token_stats(torch.zeros(1, 1, len(policy.processor.tokenizer)), torch.tensor([[0]]))
    assert torch.allclose(
        logprob.exp() * (len(policy.processor.tokenizer) - len(seen["suppress_tokens"])), torch.ones(1)
    )


def test_completion_mask_keeps_tokens_up_to_and_including_the_first_eos():
    tokens = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 0, 0, 0]])
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]).bool()
    assert torch.equal(completion_mask(tokens, eos_token_id=2), expected)


@pytest.mark.parametrize("arch", ["qwen2_vl", "idefics3"])
def test_sft_raises_the_target_likelihood_and_masks_after_eos(tiny_models, game_batch, arch):
    envs, obs = game_batch
    torch.manual_seed(0)
    policy = make_policy(tiny_models[arch], envs[0])
    target = "<answer>+</answer>"
    extras, mask = policy.encode_targets(obs, [target] * 4)
    assert mask.sum(dim=1).tolist() == [mask[0].sum().item()] * 4 and mask[0].sum() < L
    batch = batch_of(obs, extras, mask)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss, metrics = policy.compute_loss(batch)
        assert torch.isfinite(loss) and "train/sft_nll" in metrics
        optimizer.zero_grad()
        loss.backward()
        assert policy.model.lm_head.weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    step = policy.act(obs, deterministic=True)  # now it writes the target, then EOS
    assert step.action == ["+"] * 4
    assert torch.equal(step.mask, mask) and torch.equal(step.extras["tokens"], extras["tokens"])
    assert (step.extras["tokens"][~step.mask] == policy.processor.pad_token_id).all()
    assert (step.logprob[~step.mask] == 0).all()
    evaluation = policy.evaluate(obs, None, step.extras)
    torch.testing.assert_close(evaluation.logprob, step.logprob, atol=1e-4, rtol=0)
    for env, action in zip(envs, step.action, strict=True):
        assert env.step(action)[4]["action_valid"]


@pytest.mark.parametrize("lora_r", [0, 4])
def test_save_load_round_trip_without_the_original_model(
    tiny_models, gui_batch, tmp_path, lora_r, activate_lora
):
    envs, obs = gui_batch
    source = shutil.copytree(tiny_models["qwen2_vl"], tmp_path / "source")
    policy = make_policy(source, envs[0], lora_r=lora_r)
    if lora_r:
        trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n and "visual" not in n for n in trainable)
        activate_lora(policy)
    step = policy.act(obs, deterministic=True)
    policy.save_pretrained(tmp_path / "saved")
    shutil.rmtree(source)
    loaded = VLMPolicy.from_pretrained(tmp_path / "saved")
    again = loaded.act(obs, deterministic=True)
    assert again.action == step.action
    assert torch.equal(again.extras["tokens"], step.extras["tokens"])
    torch.testing.assert_close(again.logprob, step.logprob, atol=1e-5, rtol=0)
    merged = AutoModelForImageTextToText.from_pretrained(tmp_path / "saved" / "hf")  # a standalone HF model
    inputs = loaded.encode_obs(obs).model_kwargs()
    with torch.no_grad():
        torch.testing.assert_close(merged(**inputs).logits, loaded.model(**inputs).logits, atol=1e-4, rtol=0)


def test_config_and_prompts(tiny_models, gui_batch):
    with pytest.raises(ValueError, match=r"policy\.model"):
        VLMPolicyConfig()
    with pytest.raises(ValueError, match="obs_keys"):
        VLMPolicyConfig(model="m", obs_keys=("state",))
    assert "game" in default_system_prompt("game: NumberLine\n").lower()
    assert "click(x, y)" in default_system_prompt("instruction: Click OK.")
    assert "move_to(x, y, z)" in default_system_prompt("Task: Pick up the cube and bring it to the target.")
    envs, obs = gui_batch
    with pytest.raises(TypeError, match="Text"):
        VLMPolicy(
            VLMPolicyConfig(model=str(tiny_models["idefics3"])), envs[0].observation_space, spaces.Discrete(2)
        )
    policy = make_policy(tiny_models["idefics3"], envs[0], obs_keys=("image",), system_prompt="Act.")
    messages = policy.messages("ignored")
    assert messages[0]["content"] == "Act." and messages[1]["content"] == [{"type": "image"}]
    step = policy.act({"image": obs["image"]})
    assert step.logprob.shape == (4, L)


def test_corrupt_or_missing_saves_are_clear_errors(tmp_path) -> None:
    import pytest

    from omnigym.core.policy import Policy
    from omnigym.core.pretrained import CONFIG_FILE, WEIGHTS_FILE

    with pytest.raises(FileNotFoundError, match="missing"):
        Policy.from_pretrained(tmp_path / "nothing")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / CONFIG_FILE).write_text('{"type": "vlm"}')
    (saved / WEIGHTS_FILE).write_bytes(b"not safetensors")
    (saved / "hf").mkdir()
    with pytest.raises(ValueError, match="corrupt policy config"):
        Policy.from_pretrained(saved)
    (saved / CONFIG_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="corrupt policy config"):
        Policy.from_pretrained(saved)


def test_eval_agent_runs_a_tiny_vlm_from_its_model_dir(tmp_path) -> None:
    """A Hugging Face model directory is an agent: untrained, it answers with invalid text."""
    import json

    from omnigym.platform.cli import main
    from omnigym.policies.vlm.tiny import make_tiny

    model = make_tiny("idefics3", tmp_path / "model")
    code = main([
        "eval-agent", "--suite", "omnigym/NumberLine-v0", "--policy", str(model), "--episodes", "2",
        "--out", str(tmp_path / "results"), "--no-reference",
    ])  # fmt: skip
    assert code == 0
    (row,) = json.loads((tmp_path / "results" / "results.json").read_text())
    assert row["agent"] == str(model) and row["episodes"] == 2 and not row["error"]
    assert row["parts_per_step"] > 1  # generated tokens per step
    assert 0.0 <= row["invalid_action_rate"] <= 1.0
