"""VL-DAC: docs/algorithms hand numbers, the stop-gradient critic, value warm-up, advantage
normalisation once per rollout, step-mean of part losses, the KL to the frozen reference, and learning."""

import math

import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import Evaluation, OnPolicyBatch, Rollout
from omnigym.platform.algorithms.ppo import PPO, PPOConfig
from omnigym.platform.algorithms.vldac import REFERENCE_LOGPROB_KEY, VLDAC, VLDACConfig
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.vec_env import EnvConfig, make_vec_env
from omnigym.policies.cnn import CNNPolicy, CNNPolicyConfig
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

SMALL = {"num_steps": 32, "num_epochs": 1, "num_minibatches": 2, "learning_rate": 1e-3, "max_grad_norm": 0.5}


@pytest.fixture
def envs():
    envs = make_vec_env(EnvConfig(id="CartPole-v1", num_envs=2))
    yield envs
    envs.close()


def build(envs, cls=VLDAC, config_cls=VLDACConfig, seed=0, **config):
    torch.manual_seed(seed)
    policy = MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    return cls(config_cls(**config), policy, envs.single_observation_space, envs.single_action_space)


def fix_logprob(policy, logprob):
    evaluation = Evaluation(logprob, torch.zeros_like(logprob))
    policy.evaluate = lambda obs, actions, extras=None: evaluation
    policy.evaluate_with_features = lambda obs, actions, extras=None: (evaluation, policy.features(obs))


def part_batch(old_logprob, mask, advantages, ref_logprob=None):
    n = len(advantages)
    aux = {} if ref_logprob is None else {REFERENCE_LOGPROB_KEY: torch.tensor(ref_logprob)}
    return OnPolicyBatch(
        obs={"state": torch.zeros(n, 4)}, actions=torch.zeros(n, dtype=torch.long),
        logprob=torch.tensor(old_logprob), mask=torch.tensor(mask), values=torch.zeros(n),
        advantages=torch.tensor(advantages), returns=torch.zeros(n), aux=aux,
    )  # fmt: skip


def collect(algo, envs, num_steps=32):
    collector = RolloutCollector(envs, algo.policy, num_steps)
    collector.reset(seed=0)
    return collector.collect()[0]


# --- advantages ----------------------------------------------------------------------------------
def test_step_level_gae_hand_numbers(envs):
    """§6.5: rewards [0, 1], V [0.5, 0.8], terminated after step 2, gamma 0.9, lambda 0.95 ->
    A = [0.391, 0.2] before normalisation; normalised once over the rollout: [+0.70711, -0.70711]."""
    T = 2
    obs = torch.zeros(T, 1, 4)
    obs[:, 0, 0] = torch.tensor([0.5, 0.8])
    rollout = Rollout(
        obs={"state": obs}, actions=torch.zeros(T, 1, dtype=torch.long), rewards=torch.tensor([[0.0], [1.0]]),
        reward_components=torch.zeros(T, 1, 0), terminated=torch.tensor([[False], [True]]),
        truncated=torch.zeros(T, 1, dtype=torch.bool), valid=torch.ones(T, 1, dtype=torch.bool),
        logprob=torch.zeros(T, 1, 1), mask=torch.ones(T, 1, 1, dtype=torch.bool),
        policy_version=torch.zeros(T, 1, dtype=torch.long), extras={}, next_obs={"state": torch.zeros(1, 4)},
        final_obs={"state": torch.zeros(0, 4)}, final_index=torch.zeros(0, 2, dtype=torch.long),
    )  # fmt: skip
    for norm_adv, expected in ((False, [0.391, 0.2]), (True, [1 / math.sqrt(2), -1 / math.sqrt(2)])):
        algo = build(envs, norm_adv=norm_adv)
        algo.value_from_features = lambda features: features[:, 0]
        processed = algo.process_rollout(rollout)
        assert processed.advantages[:, 0].tolist() == pytest.approx(expected, abs=1e-4)
        # value targets keep the raw advantages: R = A + V
        assert processed.returns[:, 0].tolist() == pytest.approx([0.891, 1.0], abs=1e-4)


def test_advantages_normalised_once_per_rollout_not_per_minibatch(envs):
    """The rollout's valid advantages have mean 0 and std 1 and equal PPO's GAE, normalised globally;
    a minibatch is not renormalised (A = [2, 0] at ratio 1 gives policy loss -1, not 0)."""
    config = {**SMALL, "gamma": 0.9, "gae_lambda": 0.95}
    algo = build(envs, **config)
    ppo = build(envs, cls=PPO, config_cls=PPOConfig, **config)
    rollout = collect(ppo, envs)
    processed = algo.process_rollout(rollout)
    raw = ppo.process_rollout(rollout).advantages
    torch.testing.assert_close(processed.advantages, (raw - raw.mean()) / (raw.std() + 1e-8))
    assert float(processed.advantages.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(processed.advantages.std()) == pytest.approx(1.0, abs=1e-5)

    algo = build(envs, kl_coef=0.0, value_warmup_updates=0)
    fix_logprob(algo.policy, torch.zeros(2, 1))
    _, metrics = algo.compute_loss(part_batch([[0.0], [0.0]], [[True], [True]], [2.0, 0.0]))
    assert float(metrics["train/loss_policy"]) == pytest.approx(-1.0)


# --- loss ----------------------------------------------------------------------------------------
def test_equal_logprobs_give_minus_advantage_and_zero_kl(envs):
    """§6.5: lp_new = lp_old = lp_ref -> policy loss -A_t per step, KL 0. Two steps with 2 and 1 valid
    parts, A = [1, -2]: step-mean gives (-1 + 2) / 2 = 0.5 (a token-mean would give 0)."""
    algo = build(envs, value_warmup_updates=0)
    lp = torch.log(torch.full((2, 3), 0.5))
    fix_logprob(algo.policy, lp)
    mask = [[True, True, False], [True, False, False]]
    _, metrics = algo.compute_loss(part_batch(lp.tolist(), mask, [1.0, -2.0], ref_logprob=lp.tolist()))
    assert float(metrics["train/loss_policy"]) == pytest.approx(0.5, abs=1e-6)
    assert float(metrics["train/kl_ref"]) == pytest.approx(0.0, abs=1e-7)


def test_k3_kl_to_reference_hand_number(envs):
    """pi_theta 0.5, pi_ref 0.25 on every part: k3 = 0.5 - ln 0.5 - 1 = 0.193147 (§0.4), weighted 0.04."""
    algo = build(envs, value_warmup_updates=0, vf_coef=0.0)
    lp = torch.full((1, 2), math.log(0.5), requires_grad=True)
    fix_logprob(algo.policy, lp)
    batch = part_batch([[math.log(0.5)] * 2], [[True, True]], [0.0], ref_logprob=[[math.log(0.25)] * 2])
    loss, metrics = algo.compute_loss(batch)
    assert float(metrics["train/kl_ref"]) == pytest.approx(0.193147, abs=1e-5)
    assert float(loss.detach()) == pytest.approx(0.04 * 0.193147, abs=1e-6)


@pytest.mark.parametrize(("guard", "expected"), [(10.0, (1.1 + 1.0) / 2), (None, (11.0 + 1.0) / 2)])
def test_ratio_guard_uses_only_the_clipped_term(envs, guard, expected):
    """A step with part ratios [11, 1] and A = -1, clip 0.1: the guard (any ratio > 10) takes the
    clipped term for every part of the step, -A * clip(ratio) = [1.1, 1.0]; without it max(...) = [11, 1]."""
    algo = build(envs, value_warmup_updates=0, kl_coef=0.0, ratio_guard=guard)
    fix_logprob(algo.policy, torch.tensor([[math.log(11.0), 0.0]]))
    _, metrics = algo.compute_loss(part_batch([[0.0, 0.0]], [[True, True]], [-1.0]))
    assert float(metrics["train/loss_policy"]) == pytest.approx(expected, abs=1e-5)
    assert float(metrics["train/ratio_guard_frac"]) == (1.0 if guard else 0.0)


def test_value_loss_is_clipped_without_half(envs):
    """VL-DAC: max((V - R)^2, (V_clip - R)^2) with clip 0.1 and no 0.5: V_old 0, V 1, R 1 -> 0.81."""
    algo = build(envs, kl_coef=0.0)
    fix_logprob(algo.policy, torch.zeros(1, 1))
    algo.value_from_features = lambda features: torch.ones(1)
    batch = part_batch([[0.0]], [[True]], [0.0])
    batch.returns = torch.ones(1)
    _, metrics = algo.compute_loss(batch)
    assert float(metrics["train/loss_value"]) == pytest.approx(0.81, abs=1e-6)


def test_value_loss_never_reaches_the_policy():
    """Stop-gradient: with a CNN encoder (the policy's features have parameters), VL-DAC's value loss
    gives the policy exactly zero gradient and the critic a non-zero one; PPO's (control) reaches the
    encoder."""
    obs_space = spaces.Dict({"image": spaces.Box(0, 255, (16, 16, 3), dtype="uint8")})
    act_space = spaces.Discrete(3)
    cnn = CNNPolicyConfig(channels=(4,), kernel_sizes=(4,), strides=(2,), paddings=(0,), feature_size=8)
    batch = OnPolicyBatch(
        obs={"image": torch.randint(0, 255, (6, 16, 16, 3), dtype=torch.uint8)},
        actions=torch.randint(0, 3, (6,)), logprob=torch.full((6, 1), -math.log(3)),
        mask=torch.ones(6, 1, dtype=torch.bool), values=torch.zeros(6), advantages=torch.zeros(6),
        returns=torch.linspace(-1, 1, 6), aux={REFERENCE_LOGPROB_KEY: torch.full((6, 1), -math.log(3))},
    )  # fmt: skip
    for cls, config in ((VLDAC, VLDACConfig(value_warmup_updates=1, clip_vloss=False)), (PPO, PPOConfig())):
        torch.manual_seed(0)
        algo = cls(config, CNNPolicy(cnn, obs_space, act_space), obs_space, act_space)
        loss, _ = algo.compute_loss(batch)  # VL-DAC in warm-up: the value loss alone; PPO: A = 0
        loss.backward()
        policy_grads = [p.grad for p in algo.policy.parameters()]
        encoder_grad = sum(float(g.abs().sum()) for g in policy_grads if g is not None)
        assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in algo.critic.parameters())
        if cls is VLDAC:
            assert all(g is None or not bool(g.any()) for g in policy_grads)
        else:
            assert encoder_grad > 0  # the control: without the detach, the value loss trains the encoder


# --- update --------------------------------------------------------------------------------------
def test_value_warmup_keeps_the_policy_fixed(envs):
    algo = build(envs, value_warmup_updates=2, **SMALL)
    rollout = collect(algo, envs)
    for update in range(3):
        policy_before = [p.detach().clone() for p in algo.policy.parameters()]
        critic_before = [p.detach().clone() for p in algo.critic.parameters()]
        metrics = algo.update(algo.process_rollout(rollout))
        policy_same = all(
            torch.equal(a, b) for a, b in zip(policy_before, algo.policy.parameters(), strict=True)
        )
        critic_same = all(
            torch.equal(a, b) for a, b in zip(critic_before, algo.critic.parameters(), strict=True)
        )
        assert not critic_same
        assert policy_same == (update < 2), update
        assert metrics["train/value_warmup"] == (1.0 if update < 2 else 0.0)
    assert algo.version == 3


def test_reference_is_frozen_and_resumable(envs):
    algo = build(envs, value_warmup_updates=0, **SMALL)
    initial = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    rollout = collect(algo, envs)
    algo.update(algo.process_rollout(rollout))
    assert not all(torch.equal(v, algo.policy.state_dict()[k]) for k, v in initial.items())
    for key, value in algo.reference.state_dict().items():
        assert torch.equal(value, initial[key]), key  # the reference is the initial policy, unchanged
    assert not any(p.requires_grad for p in algo.reference.parameters())
    state = algo.state_dict()
    assert state["version"] == 1 and state["reference"] is not None
    processed = algo.process_rollout(rollout)
    assert float(processed.aux[REFERENCE_LOGPROB_KEY].sub(processed.logprob).abs().max()) < 1e-6

    other = build(envs, seed=1, value_warmup_updates=0, **SMALL)
    other.load_state_dict(state)
    assert other.version == 1
    for key, value in other.reference.state_dict().items():
        assert torch.equal(value, initial[key]), key

    no_kl = build(envs, kl_coef=0.0)
    assert no_kl.reference is None and REFERENCE_LOGPROB_KEY not in no_kl.process_rollout(rollout).aux


@pytest.mark.parametrize("bad", [{"kl_coef": -1.0}, {"value_warmup_updates": -1}, {"ratio_guard": 1.0}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        VLDACConfig(**bad)


def test_vldac_learns_cartpole(cartpole_learning):
    untrained, trained = cartpole_learning(
        "vldac",
        "omnigym.platform.algorithms.vldac:VLDAC",
        12000,
        {"num_steps": 32, "num_epochs": 10, "num_minibatches": 1, "learning_rate": 1e-3, "adam_eps": 1e-5,
         "max_grad_norm": 0.5, "gamma": 0.98, "gae_lambda": 0.8},
    )  # fmt: skip
    assert untrained["return_mean"] < 30, untrained
    assert trained["return_mean"] > untrained["return_mean"] + 60, (trained, untrained)
