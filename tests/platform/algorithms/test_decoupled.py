"""Decoupled PPO and A-3PO: docs/algorithms hand numbers through compute_loss, equality with PPO on
fresh data, version bookkeeping, and learning CartPole."""

import math

import numpy as np
import pytest
import torch

from omnigym.core.types import Evaluation, OnPolicyBatch
from omnigym.platform.algorithms.decoupled import (
    A3PO,
    BEHAVIOUR_VERSION_KEY,
    PROXIMAL_LOGPROB_KEY,
    A3POConfig,
    DecoupledPPO,
    DecoupledPPOConfig,
    behaviour_kl,
    normalized_ess,
)
from omnigym.platform.algorithms.ppo import PPO, PPOConfig
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.vec_env import EnvConfig, make_vec_env
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

LOSS_ONLY = {"norm_adv": False, "clip_vloss": False, "vf_coef": 0.0, "ent_coef": 0.0}


@pytest.fixture
def envs():
    envs = make_vec_env(EnvConfig(id="CartPole-v1", num_envs=2))
    yield envs
    envs.close()


def build(cls, config, envs, seed=0):
    torch.manual_seed(seed)
    policy = MLPPolicy(MLPPolicyConfig(), envs.single_observation_space, envs.single_action_space)
    return cls(config, policy, envs.single_observation_space, envs.single_action_space)


def fix_logprob(policy, logprob):
    """Make the policy's evaluation (alone or with its features) return chosen log-probabilities."""
    evaluation = Evaluation(logprob, torch.zeros_like(logprob))
    policy.evaluate = lambda obs, actions, extras=None: evaluation
    policy.evaluate_with_features = lambda obs, actions, extras=None: (evaluation, policy.features(obs))


def hand_batch(behaviour, advantages, aux):
    n = len(behaviour)
    return OnPolicyBatch(
        obs={"state": torch.zeros(n, 4)},
        actions=torch.zeros(n, dtype=torch.long),
        logprob=torch.log(torch.tensor(behaviour)).unsqueeze(-1),
        mask=torch.ones(n, 1, dtype=torch.bool),
        values=torch.zeros(n),
        advantages=torch.tensor(advantages),
        returns=torch.zeros(n),
        aux=aux,
    )


def rollout_of(algo, envs, num_steps=32):
    collector = RolloutCollector(envs, algo.policy, num_steps)
    collector.reset(seed=0)
    return collector.collect()[0]


# --- decoupled PPO --------------------------------------------------------------------------------
@pytest.mark.parametrize(("pi_theta", "loss", "grad"), [(0.275, -1.375, -1.375), (0.35, -1.5, 0.0)])
def test_decoupled_loss_hand_numbers(envs, pi_theta, loss, grad):
    """§5.8: eps 0.2, A = +1, pi_behav 0.2, pi_prox 0.25 -> w = 1.25; u = 1.1 -> -1.375 (gradient
    w.r.t. log pi_theta -1.375); u = 1.4 is clipped -> -1.5 with zero gradient."""
    algo = build(DecoupledPPO, DecoupledPPOConfig(clip_coef=0.2, **LOSS_ONLY), envs)
    lp = torch.tensor([[math.log(pi_theta)]], requires_grad=True)
    fix_logprob(algo.policy, lp)
    batch = hand_batch([0.2], [1.0], {PROXIMAL_LOGPROB_KEY: torch.tensor([[math.log(0.25)]])})
    total, metrics = algo.compute_loss(batch)
    assert float(metrics["train/importance_weight"]) == pytest.approx(1.25, abs=1e-6)
    assert float(metrics["train/loss_policy"]) == pytest.approx(loss, abs=1e-5)
    assert float(metrics["train/clipfrac"]) == (1.0 if grad == 0.0 else 0.0)
    total.backward()
    assert float(lp.grad) == pytest.approx(grad, abs=1e-5)


def test_weight_cap_masks_without_reinflating_and_dual_clip(envs):
    """w = 2 > cap 1.5 is masked: the other part's loss is divided by 2 parts, not 1. Dual clip c = 3
    caps a negative-advantage loss at -A * c."""
    algo = build(DecoupledPPO, DecoupledPPOConfig(weight_cap=1.5, **LOSS_ONLY), envs)
    fix_logprob(algo.policy, torch.log(torch.tensor([[0.2], [0.2]])))
    prox = torch.log(torch.tensor([[0.4], [0.2]]))
    batch = hand_batch([0.2, 0.2], [1.0, 1.0], {PROXIMAL_LOGPROB_KEY: prox})
    _, metrics = algo.compute_loss(batch)
    # row 0: w = 2 masked (0); row 1: w = 1, u = 1 -> -1. Mean over 2 valid parts: -0.5.
    assert float(metrics["train/loss_policy"]) == pytest.approx(-0.5, abs=1e-6)
    algo.config.cap_mode = "clamp"
    _, metrics = algo.compute_loss(batch)  # row 0: w = 1.5, u = 0.5 -> 1.5 * -0.5 = -0.75; row 1: -1
    assert float(metrics["train/loss_policy"]) == pytest.approx(-0.875, abs=1e-6)

    algo = build(DecoupledPPO, DecoupledPPOConfig(dual_clip=3.0, **LOSS_ONLY), envs)
    fix_logprob(algo.policy, torch.log(torch.tensor([[5.0]])))  # u = 5 on A = -1: clipped loss 5, capped 3
    batch = hand_batch([1.0], [-1.0], {PROXIMAL_LOGPROB_KEY: torch.zeros(1, 1)})
    _, metrics = algo.compute_loss(batch)
    assert float(metrics["train/loss_policy"]) == pytest.approx(3.0, abs=1e-5)


def test_fresh_data_gives_exactly_ppo(envs):
    """With pi_prox == pi_behav, loss and gradients are PPO's bit for bit; with the recomputed
    proximal log-probs of a real rollout they agree to float round-off."""
    config = {"num_steps": 32, "ent_coef": 0.01}
    ppo = build(PPO, PPOConfig(**config), envs, seed=0)
    dec = build(DecoupledPPO, DecoupledPPOConfig(**config), envs, seed=0)
    rollout = rollout_of(ppo, envs)
    ppo_batch = ppo.process_rollout(rollout).flatten()
    dec_batch = dec.process_rollout(rollout).flatten()
    recomputed = dec_batch.aux[PROXIMAL_LOGPROB_KEY]
    torch.testing.assert_close(recomputed, dec_batch.logprob, rtol=0, atol=1e-6)

    def loss_and_grad(algo, batch):
        loss, metrics = algo.compute_loss(batch)
        algo.flat.zero_grad()
        loss.backward()
        return loss.detach(), algo.flat.collect_grads().clone(), metrics

    ppo_loss, ppo_grad, ppo_metrics = loss_and_grad(ppo, ppo_batch)
    dec_batch.aux[PROXIMAL_LOGPROB_KEY] = dec_batch.logprob.clone()
    dec_loss, dec_grad, dec_metrics = loss_and_grad(dec, dec_batch)
    assert torch.equal(ppo_loss, dec_loss) and torch.equal(ppo_grad, dec_grad)
    assert float(dec_metrics["train/importance_weight"]) == 1.0
    for key in ("train/loss_policy", "train/loss_value", "train/approx_kl", "train/clipfrac"):
        assert torch.equal(ppo_metrics[key], dec_metrics[key]), key

    dec_batch.aux[PROXIMAL_LOGPROB_KEY] = recomputed
    dec_loss, dec_grad, _ = loss_and_grad(dec, dec_batch)
    torch.testing.assert_close(dec_loss, ppo_loss, rtol=0, atol=1e-5)
    torch.testing.assert_close(dec_grad, ppo_grad, rtol=0, atol=1e-5)


def test_proximal_is_the_policy_at_the_start_of_the_update(envs):
    """Processing a rollout after an update re-scores it with the updated weights (w != 1), and the
    algorithm's aux data never reaches the policy."""
    algo = build(DecoupledPPO, DecoupledPPOConfig(num_steps=32, num_epochs=2, num_minibatches=2), envs)
    seen = []
    evaluate = algo.policy.evaluate
    algo.policy.evaluate = lambda obs, actions, extras=None: (
        seen.append(set(extras or {})),
        evaluate(obs, actions),
    )[1]
    rollout = rollout_of(algo, envs)
    algo.update(algo.process_rollout(rollout))
    processed = algo.process_rollout(rollout)
    with torch.no_grad():
        expected = evaluate({"state": processed.obs["state"].reshape(64, 4)}, processed.actions.reshape(64))
    torch.testing.assert_close(processed.aux[PROXIMAL_LOGPROB_KEY].reshape(64, 1), expected.logprob)
    assert not torch.allclose(processed.aux[PROXIMAL_LOGPROB_KEY], processed.logprob, atol=1e-4)
    assert seen and all(
        PROXIMAL_LOGPROB_KEY not in keys and BEHAVIOUR_VERSION_KEY not in keys for keys in seen
    )


def test_version_and_staleness_metrics(envs):
    algo = build(DecoupledPPO, DecoupledPPOConfig(num_steps=32, num_epochs=1, num_minibatches=2), envs)
    rollout = rollout_of(algo, envs)
    metrics = algo.update(algo.process_rollout(rollout))
    assert algo.version == 1 and metrics["train/staleness"] == 0.0 and metrics["train/staleness_max"] == 0.0
    assert metrics["train/importance_weight"] == pytest.approx(1.0, abs=1e-5)
    # Current version 1; env 0 collected by version 0, env 1 by version -2 (three updates old).
    rollout.policy_version[:, 1] = -2
    metrics = algo.update(algo.process_rollout(rollout))
    assert metrics["train/staleness"] == pytest.approx(2.0) and metrics["train/staleness_max"] == 3.0
    assert metrics["train/importance_weight_max"] > 1.0  # the policy moved since collection
    assert algo.version == 2 and algo.state_dict()["version"] == 2
    # the batch's staleness histogram: env 0 is 1 version old, env 1 is 3
    assert (metrics["train/staleness_frac_0"], metrics["train/staleness_frac_2"]) == (0.0, 0.0)
    assert metrics["train/staleness_frac_1"] == pytest.approx(0.5) == metrics["train/staleness_frac_3"]
    assert metrics["train/ess"] < 1.0 and metrics["train/behaviour_kl"] > 0.0
    algo.load_state_dict({**algo.state_dict(), "version": 7})
    assert algo.version == 7


@pytest.mark.parametrize(
    "bad",
    [
        {"simulated_staleness": -1},
        {"dual_clip": 1.0},
        {"weight_cap": 0.0},
        {"cap_mode": "drop"},
        {"clip_coef_high": -0.1},
        {"ess_warning": 0.0},
        {"ess_warning": 1.5},
    ],
)
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        DecoupledPPOConfig(**bad)


def test_ess_and_behaviour_kl_hand_numbers():
    # weights 1 and 3: ESS = (1 + 3)^2 / (2 * (1 + 9)) = 0.8; k3 KL = ((1 - 1 - 0) + (3 - 1 - ln 3)) / 2
    log_w = torch.log(torch.tensor([[1.0], [3.0]]))
    assert float(normalized_ess(log_w, None)) == pytest.approx(0.8)
    assert float(behaviour_kl(log_w, None)) == pytest.approx((2 - math.log(3)) / 2)
    # a masked-out part does not count; equal weights give 1 and KL 0 (fresh data)
    padded = torch.log(torch.tensor([[1.0, 50.0], [3.0, 1.0]]))
    mask = torch.tensor([[True, False], [True, False]])
    assert float(normalized_ess(padded, mask)) == pytest.approx(0.8)
    assert float(normalized_ess(torch.full((4, 1), 0.7), None)) == pytest.approx(1.0)
    assert float(behaviour_kl(torch.zeros(4, 1), None)) == 0.0
    # one weight dominating: ESS tends to 1 / n
    assert float(normalized_ess(torch.tensor([[40.0], [0.0], [0.0], [0.0]]), None)) == pytest.approx(0.25)


def test_low_ess_warns_with_the_way_out(envs, caplog):
    algo = build(DecoupledPPO, DecoupledPPOConfig(num_steps=32, num_epochs=1, ess_warning=1.0), envs)
    rollout = rollout_of(algo, envs)
    algo.update(algo.process_rollout(rollout))
    assert not caplog.records  # fresh data: ESS is exactly 1
    rollout.policy_version[:] = -5
    algo.update(algo.process_rollout(rollout))
    algo.update(algo.process_rollout(rollout))  # within 50 updates of the last warning: quiet
    warnings = [r.getMessage() for r in caplog.records if "effective sample size" in r.getMessage()]
    assert len(warnings) == 1 and "lower runtime.max_staleness" in warnings[0]


def test_clip_coef_high_is_asymmetric(envs):
    """clip_coef_high 0.28 (DAPO-style): u = 1.25 is inside [0.8, 1.28], so not clipped."""
    algo = build(DecoupledPPO, DecoupledPPOConfig(clip_coef_high=0.28, **LOSS_ONLY), envs)
    fix_logprob(algo.policy, torch.tensor([[math.log(1.25)]]))
    batch = hand_batch([1.0], [1.0], {PROXIMAL_LOGPROB_KEY: torch.zeros(1, 1)})
    _, metrics = algo.compute_loss(batch)
    assert float(metrics["train/loss_policy"]) == pytest.approx(-1.25, abs=1e-6)
    assert float(metrics["train/clipfrac"]) == 0.0


# --- A-3PO ----------------------------------------------------------------------------------------
def test_a3po_alpha_and_interpolation_endpoints(envs):
    """§5.8: v_theta = 10 -> alpha 0.75 for v_behave 6, 0 for 9 and 10. With pi_behav 0.2, pi_theta 0.4
    (Delta = ln 2): alpha 0.75 -> w = 2^0.75, u = 2^0.25 (unclipped), loss -w*u = -2 = -pi_theta/pi_behav,
    gradient -2; alpha 0 -> lp_prox = lp_behav, u = 2 clipped: loss -1.2, zero gradient."""
    algo = build(A3PO, A3POConfig(**LOSS_ONLY), envs)
    algo.version = 10
    lp = torch.log(torch.tensor([[0.4], [0.4], [0.4]])).requires_grad_(True)
    fix_logprob(algo.policy, lp)
    batch = hand_batch([0.2] * 3, [1.0] * 3, {BEHAVIOUR_VERSION_KEY: torch.tensor([6, 9, 10])})
    torch.testing.assert_close(algo.alpha(batch), torch.tensor([0.75, 0.0, 0.0]))
    prox = algo.proximal_logprob(batch, lp)
    assert not prox.requires_grad
    torch.testing.assert_close(prox[:, 0], torch.log(torch.tensor([0.2 * 2**0.75, 0.2, 0.2])))
    total, metrics = algo.compute_loss(batch)
    assert float(metrics["train/prox_alpha"]) == pytest.approx(0.25)
    assert float(metrics["train/importance_weight_max"]) == pytest.approx(2**0.75, abs=1e-5)
    assert float(metrics["train/loss_policy"]) == pytest.approx((-2.0 - 1.2 - 1.2) / 3, abs=1e-5)
    total.backward()
    torch.testing.assert_close(lp.grad[:, 0], torch.tensor([-2.0 / 3, 0.0, 0.0]), rtol=0, atol=1e-5)

    algo.config.prox_method = "linear"  # log((1 - a) * 0.2 + a * 0.4) = log(0.35) for a = 0.75
    assert float(algo.proximal_logprob(batch, lp)[0, 0]) == pytest.approx(math.log(0.35), abs=1e-6)


def test_a3po_on_fresh_data_is_ppo(envs):
    """Behaviour version == current version -> alpha = 0 -> loss and gradients equal PPO's exactly."""
    config = {"num_steps": 32, "ent_coef": 0.01}
    ppo = build(PPO, PPOConfig(**config), envs, seed=0)
    a3po = build(A3PO, A3POConfig(**config), envs, seed=0)
    rollout = rollout_of(ppo, envs)
    ppo_batch, a3po_batch = ppo.process_rollout(rollout).flatten(), a3po.process_rollout(rollout).flatten()
    assert PROXIMAL_LOGPROB_KEY not in a3po_batch.aux  # no recompute
    assert bool((a3po.alpha(a3po_batch) == 0).all())
    losses, grads = [], []
    for algo, batch in ((ppo, ppo_batch), (a3po, a3po_batch)):
        loss, _ = algo.compute_loss(batch)
        algo.flat.zero_grad()
        loss.backward()
        losses.append(loss.detach())
        grads.append(algo.flat.collect_grads().clone())
    assert torch.equal(losses[0], losses[1]) and torch.equal(grads[0], grads[1])


def test_a3po_tracks_versions_across_updates(envs):
    algo = build(A3PO, A3POConfig(num_steps=32, num_epochs=1, num_minibatches=1), envs)
    rollout = rollout_of(algo, envs)
    for _ in range(3):
        algo.update(algo.process_rollout(rollout))  # the same (version 0) data, ever staler
    batch = algo.process_rollout(rollout).flatten()
    # v_theta = 3, v_behave = 0: alpha = (2 - 0) / (3 - 0)
    torch.testing.assert_close(algo.alpha(batch), torch.full((len(batch),), 2 / 3))


# --- learning -------------------------------------------------------------------------------------
def test_decoupled_ppo_learns_cartpole(cartpole_learning):
    untrained, trained = cartpole_learning(
        "decoupled_ppo",
        "omnigym.platform.algorithms.decoupled:DecoupledPPO",
        15000,
        {"num_steps": 32, "num_epochs": 20, "num_minibatches": 1, "learning_rate": 1e-3,
         "gamma": 0.98, "gae_lambda": 0.8, "ent_coef": 0.0},
    )  # fmt: skip
    assert untrained["return_mean"] < 30, untrained
    assert trained["return_mean"] > untrained["return_mean"] + 60, (trained, untrained)
    assert np.isfinite(trained["return_std"])


def test_max_staleness_leaves_too_stale_steps_out(envs):
    algo = build(
        DecoupledPPO, DecoupledPPOConfig(num_steps=32, num_epochs=1, num_minibatches=2, max_staleness=2), envs
    )
    rollout = rollout_of(algo, envs)
    rollout.policy_version[:16] = -5  # the first half is 5 versions old (> 2), the rest fresh
    algo.version = 0
    processed = algo.process_rollout(rollout)
    assert not processed.valid[:16].any() and processed.valid[16:].all()
    metrics = algo.update(processed)
    assert metrics["train/stale_dropped"] == pytest.approx(0.5)
    rollout = rollout_of(algo, envs)
    rollout.policy_version[:] = -10
    metrics = algo.update(algo.process_rollout(rollout))
    assert metrics == {"train/num_updates": 0.0, "train/stale_dropped": 1.0}
    with pytest.raises(ValueError, match="max_staleness"):
        DecoupledPPOConfig(max_staleness=-1)
