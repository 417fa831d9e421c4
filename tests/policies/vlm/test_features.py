"""Step-level features for a critic: the last hidden state at the final prompt token."""

import pytest
import torch

L = 6


@pytest.mark.parametrize(
    ("arch", "which"),
    [
        ("qwen2_vl", "gui_batch"),
        ("qwen2_5_vl", "gui_batch"),
        ("idefics3", "game_batch"),
        ("qwen2", "text_batch"),
    ],
)
def test_features_equal_evaluate_with_features_and_carry_gradient(
    tiny_models, arch, which, request, make_policy
):
    envs, obs = request.getfixturevalue(which)
    policy = make_policy(
        tiny_models[arch],
        envs[0],
        obs_keys=tuple(obs),
        max_prompt_tokens=320,
        max_new_tokens=L,
        eval_micro_batch_size=3,
    )
    assert "features" in policy.capabilities and policy.feature_dim == 128
    torch.manual_seed(0)
    step = policy.act(obs)
    features = policy.features(obs)
    assert features.shape == (4, policy.feature_dim) and features.dtype == torch.float32
    assert torch.isfinite(features).all() and not torch.allclose(features[0], features[1])
    evaluation, stored = policy.evaluate_with_features(obs, None, step.extras)
    torch.testing.assert_close(stored, features, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(evaluation.logprob, step.logprob, atol=1e-4, rtol=0)
    features.pow(2).sum().backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
