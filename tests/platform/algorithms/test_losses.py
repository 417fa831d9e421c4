"""Loss building blocks against the hand numbers of docs/algorithms"""

import math

import pytest
import torch

from omnigym.platform.algorithms.losses import (
    AGGREGATIONS,
    a3po_alpha,
    aggregate,
    aggregation_weights,
    approximate_proximal_logprob,
    clipped_surrogate,
    decoupled_ppo_loss,
    informative_groups,
    k3_kl,
    overlong_penalty,
    staleness_capacity,
)


def close(actual, expected, tol=1e-4):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=0.0)


# --- KL (§0.4) ---------------------------------------------------------------------------------------------
def test_k3_numbers_and_clamps():
    k3 = k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    close(k3, [0.193147], 1e-6)
    assert float(k3_kl(torch.tensor([-1.3]), torch.tensor([-1.3]))) == 0.0
    assert float(k3_kl(torch.tensor([-40.0]), torch.tensor([0.0]))) == 10.0  # exp(20) - 21 clamped to 10
    assert torch.isfinite(k3_kl(torch.tensor([-1e4]), torch.tensor([0.0]))).all()


def test_k3_gradient():
    """d k3 / d lp_new = 1 - exp(x) with x = lp_ref - lp_new."""
    lp_new = torch.tensor([math.log(0.5)], requires_grad=True)
    k3_kl(lp_new, torch.tensor([math.log(0.25)])).sum().backward()
    close(lp_new.grad, [1 - 0.5])


# --- clipped surrogate (§0.3, §3.6) ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "grad"),
    [
        (1.25, 1.0, -1.25, -1.0),  # not clipped by eps_high = 0.28: gradient flows
        (1.30, 1.0, -1.28, 0.0),  # clipped at 1.28: zero gradient
        (0.75, -1.0, 0.8, 0.0),  # A < 0, clipped at 0.8: zero gradient
        (1.5, -1.0, 1.5, 1.0),  # A < 0, not clipped: loss 1.5 |A|
        (1.5, -2.0, 3.0, 2.0),
    ],
)
def test_clip_higher_cases(ratio, adv, loss, grad):
    r = torch.tensor([ratio], requires_grad=True)
    value = clipped_surrogate(r, torch.tensor([adv]), 0.2, 0.28)
    value.sum().backward()
    close(value.detach(), [loss], 1e-6)
    close(r.grad, [grad], 1e-6)


def test_dual_clip():
    r = torch.tensor([5.0, 5.0, 2.0], requires_grad=True)
    adv = torch.tensor([-1.0, 1.0, -1.0])
    loss = clipped_surrogate(r, adv, 0.2, 0.2, dual_clip=3.0)
    loss.sum().backward()
    close(loss.detach(), [3.0, -1.2, 2.0])  # capped at -A*c for A < 0; A > 0 untouched
    close(r.grad, [0.0, 0.0, 1.0])
    close(clipped_surrogate(r.detach(), adv, 0.2, 0.2), [5.0, -1.2, 2.0])
    with pytest.raises(ValueError):
        clipped_surrogate(r, adv, 0.2, 0.2, dual_clip=1.0)


def test_surrogate_broadcasts_sequence_advantages():
    ratio = torch.tensor([[1.0, 1.1], [0.9, 2.0]])
    adv = torch.tensor([[2.0], [-1.0]])
    close(clipped_surrogate(ratio, adv, 0.2, 0.2), [[-2.0, -2.2], [0.9, 2.0]])


# --- aggregation (§0.5) ----------------------------------------------------------------------------------
EXPECTED = {
    "seq-mean-token-mean": 2.5,
    "token-mean": 1.75,
    "seq-mean-token-sum": 3.5,
    "seq-mean-token-sum-norm": 0.875,
}


def two_sequences():
    """Sequence A: one token with loss 4; sequence B: three tokens with loss 1 (padded to L = 4)."""
    loss = torch.tensor([[4.0, 9.0, 9.0, 9.0], [1.0, 1.0, 1.0, 9.0]])
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    return loss, mask, torch.tensor([0, 1])


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregation_numbers(mode):
    loss, mask, ids = two_sequences()
    close(aggregate(loss, mask, ids, mode, max_length=4), EXPECTED[mode], 1e-6)
    weights = aggregation_weights(mask, ids, mode, max_length=4)
    assert (weights[~mask] == 0).all()


def split_rows():
    """The same two sequences, as several rows of L = 2 parts (a multi-step episode), plus an empty one."""
    loss = torch.tensor([[4.0, 9.0], [1.0, 1.0], [9.0, 9.0], [1.0, 9.0], [5.0, 5.0]])
    mask = torch.tensor([[1, 0], [1, 1], [0, 0], [1, 0], [0, 0]], dtype=torch.bool)
    ids = torch.tensor([10, 3, 3, 3, 42])  # sequence 42 has no valid part: not counted
    return loss, mask, ids


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregation_with_sequences_split_across_rows(mode):
    loss, mask, ids = split_rows()
    close(aggregate(loss, mask, ids, mode, max_length=4), EXPECTED[mode], 1e-6)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregation_weights_once_make_minibatches_add_up(mode):
    """Rule a: weights over the whole batch, sliced per minibatch; the partial sums add up to the total."""
    loss, mask, ids = split_rows()
    weights = aggregation_weights(mask, ids, mode, max_length=4)
    minibatches = [torch.tensor([0, 3]), torch.tensor([1, 2, 4])]  # splits both sequences
    partial = [(weights[rows] * torch.where(mask[rows], loss[rows], 0.0)).sum() for rows in minibatches]
    close(partial[0] + partial[1], EXPECTED[mode], 1e-6)
    if mode != "seq-mean-token-sum-norm":  # local normalisers would give a different answer
        local = [aggregate(loss[rows], mask[rows], ids[rows], mode, max_length=4) for rows in minibatches]
        assert abs(float(local[0] + local[1]) - EXPECTED[mode]) > 0.1


def test_aggregation_errors_and_empty_batch():
    loss, mask, ids = two_sequences()
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        aggregation_weights(mask, ids, "sum")
    with pytest.raises(ValueError, match="max_length"):
        aggregation_weights(mask, ids, "seq-mean-token-sum-norm")
    empty = torch.zeros_like(mask)
    for mode in AGGREGATIONS:
        assert float(aggregate(loss, empty, ids, mode, max_length=4)) == 0.0


def test_aggregate_ignores_nan_padding_and_keeps_gradient():
    loss, mask, ids = two_sequences()
    loss = loss.clone().requires_grad_(True)
    padded = torch.where(mask, loss, torch.tensor(float("nan")))
    total = aggregate(padded, mask, ids, "seq-mean-token-mean")
    total.backward()
    close(total.detach(), 2.5, 1e-6)
    close(loss.grad, [[0.5, 0, 0, 0], [1 / 6, 1 / 6, 1 / 6, 0]], 1e-6)


def test_grpo_single_step_gradient_is_reinforce():
    """§2.8: beta = 0, lp_old = sg(lp_new): d loss / d lp_new = -A_i * aggregation weight."""
    lp_new = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([[1.5], [-0.5]])
    ids = torch.tensor([0, 1])
    ratio = (lp_new - lp_new.detach()).exp()
    aggregate(clipped_surrogate(ratio, adv, 0.2, 0.2), mask, ids, "seq-mean-token-mean").backward()
    weights = aggregation_weights(mask, ids, "seq-mean-token-mean")
    close(lp_new.grad, -adv * weights, 1e-6)


# --- DAPO (§3.2, §3.3) -----------------------------------------------------------------------------------
def test_overlong_penalty_numbers():
    lengths = torch.tensor([16000, 16384, 18432, 20480, 20481])
    close(overlong_penalty(lengths, 20480, 4096), [0.0, 0.0, -0.5, -1.0, -1.0], 1e-6)
    close(overlong_penalty(torch.tensor([10, 11]), 10, 0), [0.0, -1.0])
    with pytest.raises(ValueError):
        overlong_penalty(lengths, 100, 200)


def test_dynamic_sampling_keep_drop():
    accuracy = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1], dtype=torch.float32)
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3])
    keep = informative_groups(accuracy, group_ids)
    expected = [False] * 8 + [True] * 4 + [True]  # the size-1 group is kept (verl)
    assert keep.tolist() == expected
    assert informative_groups(torch.tensor([0.0, 0.5]), torch.tensor([7, 7])).all()


# --- AReaL decoupled PPO and A-3PO (§5.2-5.4, §5.8) ------------------------------------------------------
@pytest.mark.parametrize(("pi_theta", "loss", "grad"), [(0.275, -1.375, -1.375), (0.35, -1.5, 0.0)])
def test_decoupled_loss_numbers(pi_theta, loss, grad):
    lp = torch.tensor([math.log(pi_theta)], requires_grad=True)
    value, w = decoupled_ppo_loss(
        lp, torch.tensor([math.log(0.25)]), torch.tensor([math.log(0.2)]), torch.tensor([1.0]), 0.2, 0.2
    )
    value.sum().backward()
    close(w, [1.25])
    close(value.detach(), [loss])
    close(lp.grad, [grad])


def test_decoupled_loss_reduces_to_clipped_surrogate():
    torch.manual_seed(0)
    behaviour = torch.randn(4, 5) - 2
    lp1 = (behaviour + 0.4 * torch.randn(4, 5)).requires_grad_(True)
    lp2 = lp1.detach().clone().requires_grad_(True)
    adv = torch.randn(4, 1)
    decoupled, w = decoupled_ppo_loss(lp1, behaviour, behaviour, adv, 0.2, 0.28, dual_clip=3.0)
    plain = clipped_surrogate((lp2 - behaviour).exp(), adv, 0.2, 0.28, dual_clip=3.0)
    decoupled.sum().backward()
    plain.sum().backward()
    assert torch.equal(w, torch.ones(4, 5))
    close(decoupled.detach(), plain.detach(), 1e-6)
    close(lp1.grad, lp2.grad, 1e-6)
    assert lp1.grad.abs().sum() > 0


def test_decoupled_weight_cap_and_nonfinite():
    lp = torch.tensor([0.0, 0.0, -math.inf], requires_grad=True)
    prox = torch.tensor([0.0, 0.0, -math.inf])
    behav = torch.tensor([-math.log(6.0), -math.log(2.0), -math.inf])  # w = 6, 2, (non-finite -> 1)
    adv = torch.ones(3)
    masked, w_masked = decoupled_ppo_loss(lp, prox, behav, adv, 0.2, 0.2, weight_cap=5.0)
    close(w_masked, [0.0, 2.0, 1.0])
    close(masked.detach(), [0.0, -2.0, -1.0])
    clamped, w_clamped = decoupled_ppo_loss(lp, prox, behav, adv, 0.2, 0.2, weight_cap=5.0, cap_mode="clamp")
    close(w_clamped, [5.0, 2.0, 1.0])
    close(clamped.detach(), [-5.0, -2.0, -1.0])
    clamped.sum().backward()
    assert torch.isfinite(lp.grad).all()
    _, w_raw = decoupled_ppo_loss(lp, prox, behav, adv, 0.2, 0.2)
    close(w_raw, [6.0, 2.0, 1.0])


def test_a3po_alpha_numbers():
    alpha = a3po_alpha(10, torch.tensor([6, 9, 10, 12, -1]))
    close(alpha, [0.75, 0.0, 0.0, 0.0, 0.0], 1e-6)
    close(a3po_alpha(torch.tensor(10), torch.tensor([[2, 8]])), [[7 / 8, 0.5]], 1e-6)


@pytest.mark.parametrize("method", ["loglinear", "linear"])
def test_proximal_approximation_endpoints(method):
    behaviour = torch.tensor([-1.0, -2.5])
    current = torch.tensor([-0.5, -3.0], requires_grad=True)
    zero = approximate_proximal_logprob(behaviour, current, torch.zeros(2), method)
    one = approximate_proximal_logprob(behaviour, current, torch.ones(2), method)
    close(zero, behaviour, 1e-6)
    close(one, current.detach(), 1e-6)
    assert not one.requires_grad  # current_logprob is detached inside
    half = approximate_proximal_logprob(behaviour, current, torch.full((2,), 0.5), method)
    expected = (
        0.5 * (behaviour + current)
        if method == "loglinear"
        else (0.5 * behaviour.exp() + 0.5 * current.exp()).log()
    )
    close(half, expected.detach(), 1e-6)


def test_loglinear_identity_w_times_u_is_full_ratio():
    """§5.7: log u = (1 - alpha) delta, log w = alpha delta, w u = pi_theta / pi_behav, d log u = d lp."""
    torch.manual_seed(0)
    behaviour = torch.randn(3, 4) - 2
    lp = (behaviour + torch.randn(3, 4)).requires_grad_(True)
    alpha = torch.rand(3, 4)
    prox = approximate_proximal_logprob(behaviour, lp, alpha)
    w = (prox - behaviour).exp()
    u = (lp - prox).exp()
    delta = (lp - behaviour).detach()
    close((w * u).detach(), delta.exp(), 1e-5)
    close((u.log()).detach(), (1 - alpha) * delta, 1e-5)
    close(w.log(), alpha * delta, 1e-5)
    u.log().sum().backward()
    close(lp.grad, torch.ones(3, 4), 1e-6)


def test_staleness_capacity():
    assert staleness_capacity(512, 4, 0, 0, 0) == 2560
    assert staleness_capacity(512, 4, 0, 0, 0, max_concurrent=256) == 256
    assert staleness_capacity(512, 4, 0, 2000, 500, max_concurrent=1000) == 60
    assert staleness_capacity(512, 0, 3, 2048, 0) == 0  # synchronous: the current version's batch is in
    assert staleness_capacity(512, 0, 3, 1500, 100) == 448
    with pytest.raises(ValueError):
        staleness_capacity(0, 4, 0, 0, 0)
