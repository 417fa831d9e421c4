"""Flow-GRPO log-probabilities of the flow policy (``rl_chain``, docs/algorithms)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omnigym.core.policy import Policy
from omnigym.platform.algorithms.grpo import GRPO
from omnigym.platform.algorithms.ppo import PPO
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.groups import GroupCollector
from omnigym.policies.chunking.policy import EXTRA_CHAIN, EXTRA_HISTORY
from omnigym.policies.diffusion.policy import DiffusionPolicy, DiffusionPolicyConfig
from omnigym.policies.flow.policy import TIME_SCALE, FlowPolicy, FlowPolicyConfig


@pytest.fixture
def make(chunk_policy: Callable[..., Any]) -> Callable[..., Any]:
    """A tiny ``FlowPolicy`` with these overrides (see tests/policies/conftest.py)."""
    return functools.partial(chunk_policy, FlowPolicy, num_inference_steps=4)


def test_switch_off_keeps_behaviour_cloning_acting(make: Callable[..., Any]) -> None:
    plain, tuned = make(), make(sde_noise_level=0.3, logprob_reduce="sum")
    assert "evaluate" not in plain.capabilities
    for _ in range(3):
        obs = {"state": torch.randn(4, 3)}
        torch.manual_seed(1)
        a = plain.act(obs)
        torch.manual_seed(1)
        b = tuned.act(obs)
        assert torch.equal(a.action, b.action) and a.extras == {} == b.extras
        assert a.logprob.shape == (4, 1) and not a.logprob.any() and a.mask.all()


def test_sde_sigma_matches_the_reference_numbers(make: Callable[..., Any]) -> None:
    """§7.4: σ_t with a = 0.7 is 2.1 at t = 0.9, 0.7 at t = 0.5, 0.2333 at t = 0.1 (std = σ sqrt(-Δt))."""
    policy = make(rl_chain=True, num_inference_steps=10)
    x, cond = torch.zeros(1, 8, 2), torch.zeros(1, policy.model.encoder.out_dim)
    for step, sigma in ((1, 2.1), (5, 0.7), (9, 0.7 / 3)):
        _, std, logprob_std = policy.chain_transition(x, step, cond, policy.model.unet, True)
        assert float(std) == pytest.approx(sigma * math.sqrt(0.1), rel=1e-6)
        assert float(logprob_std) == float(std)
    # at t = 1 the denominator uses t_1 = 0.9 (the reference code): σ = 0.7 sqrt(1 / 0.1)
    _, std, _ = policy.chain_transition(x, 0, cond, policy.model.unet, True)
    assert float(std) == pytest.approx(0.7 * math.sqrt(10) * math.sqrt(0.1), rel=1e-6)


def test_chain_logprob_is_the_per_step_gaussian_by_hand(make: Callable[..., Any]) -> None:
    """Each part: the mean over the chunk of log N(x_{t+Δt}; μ, (σ_t sqrt(-Δt))^2), μ as in §7.1."""
    policy = make(rl_chain=True)
    assert "evaluate" in policy.capabilities
    obs = {"state": torch.randn(3, 3)}
    step = policy.act(obs)
    chain = step.extras[EXTRA_CHAIN]
    assert chain.shape == (3, 5, 8, 2) and step.logprob.shape == (3, 4) and step.mask.all()
    a, dt = 0.7, -0.25
    with torch.no_grad():
        cond = policy.encode({"state": step.extras[EXTRA_HISTORY + "state"]}, policy.model)
        for k in range(4):
            t = 1.0 - k / 4
            x = chain[:, k]
            v = policy.model.unet(x, torch.full((3,), t * TIME_SCALE), cond)
            sigma = a * math.sqrt(t / (1 - (t if t < 1 else 0.75)))
            mean = x * (1 + sigma**2 * dt / (2 * t)) + v * (1 + sigma**2 * (1 - t) / (2 * t)) * dt
            normal = torch.distributions.Normal(mean, sigma * math.sqrt(-dt))
            by_hand = normal.log_prob(chain[:, k + 1]).mean(dim=(1, 2))
            torch.testing.assert_close(step.logprob[:, k], by_hand, rtol=0, atol=1e-5)
            entropy = normal.entropy().mean(dim=(1, 2))
            torch.testing.assert_close(policy.evaluate(obs, step.action, step.extras).entropy[:, k], entropy)


def test_evaluate_matches_act_with_gradient_and_zero_noise_level_is_the_ode(make: Callable[..., Any]) -> None:
    policy = make(rl_chain=True, n_action_steps=2)
    obs = {"state": torch.randn(4, 3)}
    first = policy.act(obs)
    second = policy.act(obs)  # pops: no part counts
    for step in (first, second):
        evaluation = policy.evaluate(obs, step.action, step.extras)
        torch.testing.assert_close(evaluation.logprob, step.logprob, rtol=0, atol=1e-5)
    assert first.mask.all() and not second.mask.any() and not second.logprob.any()
    policy.evaluate(obs, first.action, first.extras).logprob.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())
    # §7.4: with a -> 0 the SDE mean is the Euler ODE step x + v Δt
    x, cond = torch.randn(2, 8, 2), torch.randn(2, policy.model.encoder.out_dim)
    quiet = make(rl_chain=True, sde_noise_level=1e-6)
    with torch.no_grad():
        sde_mean, _, _ = quiet.chain_transition(x, 1, cond, quiet.model.unet, True)
        ode, _, _ = quiet.chain_transition(x, 1, cond, quiet.model.unet, False)
    torch.testing.assert_close(sde_mean, ode)


def test_ft_denoising_steps_scores_only_the_last_sde_steps(make: Callable[..., Any]) -> None:
    """K = 2 of 4: the first two steps are Euler ODE steps (not parts), the last two SDE parts."""
    policy = make(rl_chain=True, ft_denoising_steps=2)
    obs = {"state": torch.randn(3, 3)}
    torch.manual_seed(5)
    step = policy.act(obs)
    chain = step.extras[EXTRA_CHAIN]
    assert chain.shape == (3, 3, 8, 2) and step.logprob.shape == step.mask.shape == (3, 2)
    a, dt = 0.7, -0.25
    with torch.no_grad():
        cond = policy.encode({"state": step.extras[EXTRA_HISTORY + "state"]}, policy.model)
        torch.manual_seed(5)
        x = torch.randn(3, 8, 2)  # the chain's noise: the first draw of act
        for t in (1.0, 0.75):
            x = x + dt * policy.model.unet(x, torch.full((3,), t * TIME_SCALE), cond)
        torch.testing.assert_close(chain[:, 0], x, rtol=0, atol=1e-5)
        for k, t in enumerate((0.5, 0.25)):
            x = chain[:, k]
            v = policy.model.unet(x, torch.full((3,), t * TIME_SCALE), cond)
            sigma = a * math.sqrt(t / (1 - t))
            mean = x * (1 + sigma**2 * dt / (2 * t)) + v * (1 + sigma**2 * (1 - t) / (2 * t)) * dt
            by_hand = torch.distributions.Normal(mean, sigma * math.sqrt(-dt)).log_prob(chain[:, k + 1])
            torch.testing.assert_close(step.logprob[:, k], by_hand.mean(dim=(1, 2)), rtol=0, atol=1e-5)
    evaluation = policy.evaluate(obs, step.action, step.extras)
    torch.testing.assert_close(evaluation.logprob, step.logprob, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="ft_denoising_steps"):
        FlowPolicyConfig(num_inference_steps=4, ft_denoising_steps=5)


def test_frozen_prefix_keeps_the_first_steps_when_the_weights_move(make: Callable[..., Any]) -> None:
    """After ``freeze_chain_prefix`` the deterministic first N - K steps (sampled and deterministic
    acting) run the frozen copy: moving the trained weights changes only the fine-tuned steps."""
    policy, unfrozen = make(rl_chain=True, ft_denoising_steps=2), make(rl_chain=True, ft_denoising_steps=2)
    policy.freeze_chain_prefix()
    assert policy.frozen_model is not None
    assert not any(p.requires_grad for p in policy.frozen_model.parameters())
    assert any(k.startswith("frozen_model.") for k in policy.state_dict())
    obs = {"state": torch.randn(3, 3)}

    def act(p: Any, deterministic: bool = False) -> Any:
        p.reset()
        torch.manual_seed(7)
        return p.act(obs, deterministic=deterministic)

    before = {d: act(policy, d) for d in (False, True)}
    with torch.no_grad():
        for p in (policy, unfrozen):
            for param in p.model.parameters():
                param.add_(0.05 * torch.randn_like(param))
    after = act(policy)
    torch.testing.assert_close(after.extras[EXTRA_CHAIN][:, 0], before[False].extras[EXTRA_CHAIN][:, 0])
    assert not torch.allclose(after.extras[EXTRA_CHAIN][:, -1], before[False].extras[EXTRA_CHAIN][:, -1])
    moved = act(unfrozen).extras[EXTRA_CHAIN][:, 0]  # without the copy the prefix moves too
    assert not torch.allclose(moved, before[False].extras[EXTRA_CHAIN][:, 0])
    # deterministic acting: the frozen prefix, then the trained steps, from the fixed noise
    with torch.no_grad():
        x = policy.fixed_noise.expand(3, -1, -1)
        history = {"state": after.extras[EXTRA_HISTORY + "state"]}
        for step, model in enumerate([policy.frozen_model] * 2 + [policy.model] * 2):
            cond = policy.encode(history, model)
            x, _, _ = policy.chain_transition(x, step, cond, model.unet, False)
    expected = policy.action_normalizer.unnormalize(x.clamp(-1, 1))[:, 1].clamp(-1, 1)
    torch.testing.assert_close(act(policy, True).action, expected)
    assert not torch.allclose(act(policy, True).action, before[True].action)
    assert not act(policy, True).mask.any()


def test_frozen_prefix_saves_and_loads_with_the_policy(make: Callable[..., Any], tmp_path: Path) -> None:
    policy = make(rl_chain=True, ft_denoising_steps=2)
    policy.freeze_chain_prefix()
    with torch.no_grad():
        for param in policy.model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    policy.save_pretrained(tmp_path / "tuned")
    loaded = Policy.from_pretrained(tmp_path / "tuned")
    assert loaded.config.frozen_chain_prefix and loaded.frozen_model is not None
    obs = {"state": torch.randn(3, 3)}
    for deterministic in (False, True):
        steps = []
        for p in (policy, loaded):
            p.reset()
            torch.manual_seed(3)
            steps.append(p.act(obs, deterministic=deterministic))
        torch.testing.assert_close(steps[1].action, steps[0].action, rtol=0, atol=0)


def test_rejects_rl_chain_with_heun() -> None:
    with pytest.raises(ValueError, match="euler"):
        FlowPolicyConfig(rl_chain=True, integrator="heun")


def test_grpo_on_the_sde_chain_raises_a_bandit_reward(
    make: Callable[..., Any], chain_bandit: Callable[..., tuple[float, float]]
) -> None:
    """Clipped-surrogate steps (epsilon 0.2, batch-normalised rewards) on a one-step bandit."""
    before, after = chain_bandit(make(rl_chain=True, use_ema=False, n_action_steps=1))
    print(f"flow bandit: before {before:.3f} after {after:.3f}")
    assert after > before + 0.5, (before, after)


def chain_policy(policy_name: str, tiny_chunk_config: dict[str, Any], envs: Any) -> Any:
    """A tiny ``flow`` or ``diffusion`` policy with ``rl_chain`` on that re-plans every step."""
    config_class = FlowPolicyConfig if policy_name == "flow" else DiffusionPolicyConfig
    policy_class = FlowPolicy if policy_name == "flow" else DiffusionPolicy
    config = config_class(**{**tiny_chunk_config, "n_action_steps": 1, "rl_chain": True, "use_ema": False})
    return policy_class(config, envs.single_observation_space, envs.single_action_space)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy_name", ["flow", "diffusion"])
def test_omnigym_grpo_fine_tunes_the_chain_on_a_box_bandit(
    policy_name: str, tiny_chunk_config: dict[str, Any], bandit_envs: Callable[[int], Any]
) -> None:
    """The platform's GRPO (group advantages, clipped ratio over the masked parts) on the chain."""
    torch.manual_seed(0)
    envs = bandit_envs(32)
    policy = chain_policy(policy_name, tiny_chunk_config, envs)
    algorithm = GRPO(
        GRPO.config_class(group_size=8, learning_rate=3e-3, num_epochs=2),
        policy, envs.observation_space, envs.action_space,
    )  # fmt: skip
    collector = GroupCollector(envs, policy, group_size=8, max_steps=1, seed=0)
    rewards = []
    for _ in range(12):
        rollout, _ = collector.collect()
        rewards.append(float(rollout.rewards.sum(0).mean()))
        assert rollout.mask.all() and rollout.mask.shape[-1] == policy.num_chain_parts
        algorithm.update(algorithm.process_rollout(rollout))
    print(f"{policy_name} GRPO: mean reward {rewards[0]:.3f} -> {rewards[-1]:.3f}")
    assert np.mean(rewards[-3:]) > rewards[0] + 0.3, rewards


def test_chain_features_are_detached_encoder_outputs(make: Callable[..., Any]) -> None:
    """A critic's input: the encoder on the repeated observation, without a path into the actor."""
    plain, policy = make(), make(rl_chain=True)
    assert "features" not in plain.capabilities and "features" in policy.capabilities
    obs = {"state": torch.randn(5, 3)}
    features = policy.features(obs)
    assert features.shape == (5, policy.feature_dim) and not features.requires_grad
    history = {"state": obs["state"].unsqueeze(1).expand(-1, policy.config.n_obs_steps, -1)}
    with torch.no_grad():
        torch.testing.assert_close(features, policy.encode(history, policy.model))
    policy.freeze_chain_prefix()  # the frozen copy encodes from then on, whatever the trained weights do
    with torch.no_grad():
        for p in policy.model.encoder.parameters():
            p.add_(0.1)
    torch.testing.assert_close(policy.features(obs), features)


@pytest.mark.parametrize("policy_name", ["flow", "diffusion"])
def test_omnigym_ppo_with_a_critic_fine_tunes_the_chain_on_a_box_bandit(
    policy_name: str, tiny_chunk_config: dict[str, Any], bandit_envs: Callable[[int], Any]
) -> None:
    """DPPO proper: the platform's PPO (critic on the chain policy's features, GAE) on the chain."""
    torch.manual_seed(0)
    envs = bandit_envs(32)
    policy = chain_policy(policy_name, tiny_chunk_config, envs)
    algorithm = PPO(
        PPO.config_class(
            num_steps=2, learning_rate=3e-3, critic_learning_rate=1e-2, num_epochs=2, num_minibatches=1,
            anneal_lr=False,
        ),
        policy, envs.observation_space, envs.action_space,
    )  # fmt: skip
    collector = RolloutCollector(envs, policy, 2)
    collector.reset(seed=0)
    rewards, value_errors = [], []
    for _ in range(12):
        rollout, _ = collector.collect()
        assert rollout.mask.all() and rollout.mask.shape[-1] == policy.num_chain_parts
        processed = algorithm.process_rollout(rollout)
        rewards.append(float(rollout.rewards.mean()))
        value_errors.append(abs(float(processed.values.mean() - rollout.rewards.mean())))
        algorithm.update(processed)
    print(f"{policy_name} PPO: mean reward {rewards[0]:.3f} -> {rewards[-1]:.3f}, |V - r| {value_errors}")
    assert np.mean(rewards[-3:]) > rewards[0] + 0.3, rewards
    assert np.mean(value_errors[-3:]) < 0.5 * value_errors[0], value_errors  # the critic tracks the reward
