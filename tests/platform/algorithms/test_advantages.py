"""Group-relative, GDPO and V-trace advantages against hand-computed numbers (docs/algorithms)."""

import math

import pytest
import torch

from omnigym.platform import returns
from omnigym.platform.algorithms.advantages import (
    ADVANTAGE_EPS,
    gae,
    group_advantages,
    process_advantages,
    reward_decoupled_advantages,
    vtrace,
)


def close(actual, expected, tol=1e-4):
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=0.0, equal_nan=False
    )


ONE_GROUP = torch.zeros(4, dtype=torch.long)


def test_gae_is_reexported_not_copied():
    assert gae is returns.gae
    assert ADVANTAGE_EPS == 1e-4


def test_grpo_sample_std_numbers():
    """§2.8: [1, 0, 0, 0], mean 0.25, sample std 0.5."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    close(group_advantages(rewards, ONE_GROUP), [1.49970, -0.49990, -0.49990, -0.49990])
    close(group_advantages(rewards, ONE_GROUP, eps=1e-6), [1.499997, -0.499999, -0.499999, -0.499999], 1e-6)


def test_grpo_is_not_population_std():
    """§2.8 pins the std: the population-std numbers [1.7316, -0.5772, ...] are not the default."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    population = torch.tensor([1.7316, -0.5772, -0.5772, -0.5772])
    assert not torch.allclose(group_advantages(rewards, ONE_GROUP), population, atol=1e-2)
    close(group_advantages(rewards, ONE_GROUP, ddof=0), population, 1e-3)


def test_dr_grpo_numbers():
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), ONE_GROUP, scale="none")
    close(advantages, [0.75, -0.25, -0.25, -0.25], 1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("value", [1.0, 0.1, -3.7, 2.9])
@pytest.mark.parametrize("size", [4, 7])
def test_all_equal_group_is_exactly_zero(scale, value, size):
    """No NaN and no round-off noise (the float32 mean of seven 2.9s is not 2.9)."""
    advantages = group_advantages(
        torch.full((size,), value), torch.zeros(size, dtype=torch.long), scale=scale
    )
    assert torch.equal(advantages, torch.zeros(size))


@pytest.mark.parametrize("scale", ["group", "none"])
def test_advantages_sum_to_zero_per_group(scale):
    torch.manual_seed(0)
    group_ids = torch.tensor([5, 9, 5, 9, 5, 9, 5, 9, 2, 2, 2, 2])  # arbitrary, interleaved labels
    rewards = torch.randn(12)
    advantages = group_advantages(rewards, group_ids, scale=scale)
    for g in (5, 9, 2):
        assert abs(float(advantages[group_ids == g].sum())) < 1e-5
        assert advantages[group_ids == g].abs().sum() > 0.1


def test_groups_are_independent_and_labels_arbitrary():
    """Each group normalised by its own stats, whatever the labels and order."""
    rewards = torch.tensor([1.0, 0.0, 3.0, 0.0, 0.0, 1.0])
    group_ids = torch.tensor([-4, -4, 100, 100, -4, 100])
    advantages = group_advantages(rewards, group_ids)
    close(advantages[group_ids == -4], group_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3)))
    close(advantages[group_ids == 100], group_advantages(torch.tensor([3.0, 0.0, 1.0]), torch.zeros(3)))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_of_size_one_gets_zero(scale):
    advantages = group_advantages(torch.tensor([5.0, 1.0, 0.0]), torch.tensor([0, 1, 1]), scale=scale)
    assert float(advantages[0]) == 0.0
    assert float(advantages[1]) > 0.0


def test_batch_scale_uses_the_batch_std():
    """Flow-GRPO: centre per group, divide by the std of all rewards, sample std of [0, 1, 0, 2] 0.957427."""
    rewards = torch.tensor([0.0, 1.0, 0.0, 2.0])
    advantages = group_advantages(rewards, torch.tensor([0, 0, 1, 1]), scale="batch")
    close(advantages, torch.tensor([-0.5, 0.5, -1.0, 1.0]) / (0.957427 + 1e-4))


def test_nan_rewards_excluded_and_zero():
    """TRL: an unscorable response is left out of its group's mean/std and gets advantage 0."""
    rewards = torch.tensor([1.0, 0.0, float("nan"), 0.0, 2.0, float("nan")])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1])
    advantages = group_advantages(rewards, group_ids)
    assert not torch.isnan(advantages).any()
    # group 0 behaves as [1, 0, 0]: mean 1/3, sample std sqrt(1/3)
    std = math.sqrt(1 / 3)
    close(advantages[[0, 1, 3]], [(2 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4)])
    assert float(advantages[2]) == 0.0
    # group 1 has a single scored response -> 0
    assert advantages[4:].abs().sum() == 0.0


def test_nan_rewards_with_dr_grpo_and_batch_scale():
    rewards = torch.tensor([1.0, 0.0, float("nan"), 0.0])
    close(group_advantages(rewards, ONE_GROUP, scale="none"), [2 / 3, -1 / 3, 0.0, -1 / 3])
    assert not torch.isnan(group_advantages(rewards, ONE_GROUP, scale="batch")).any()


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), scale="batchnorm")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long))


# --- GDPO (§4.6) -----------------------------------------------------------------------------------------
GDPO_COMPONENTS = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
GDPO_GROUPS = torch.tensor([0, 0, 1, 1])


def test_grpo_on_summed_rewards_collapses():
    grpo = group_advantages(GDPO_COMPONENTS.sum(1), GDPO_GROUPS)
    close(grpo, [-0.70700, 0.70700, -0.70706, 0.70706])
    assert len(set(grpo.abs().round(decimals=3).tolist())) == 1  # with the zero group: 2 distinct groups


def test_gdpo_numbers_keep_three_magnitudes():
    gdpo = reward_decoupled_advantages(GDPO_COMPONENTS, GDPO_GROUPS)
    close(gdpo, [-0.54768, 0.54768, -1.09536, 1.09536])
    # group 2's advantages are exactly twice group 1's (GRPO's are practically equal)
    close(gdpo[2:], 2 * gdpo[:2], 1e-5)
    # paper's count, before the batch step: {0,0}, {+-0.7071}, {+-1.4142} vs GRPO's {0,0}, {+-0.7071}
    per_reward = torch.stack([group_advantages(GDPO_COMPONENTS[:, k], GDPO_GROUPS) for k in range(2)], 1)
    summed = per_reward.sum(1)
    close(summed, [-0.70700, 0.70700, -1.41401, 1.41401])
    grpo = group_advantages(GDPO_COMPONENTS.sum(1), GDPO_GROUPS)
    gdpo_magnitudes = {0.0, *summed.abs().round(decimals=3).tolist()}
    grpo_magnitudes = {0.0, *grpo.abs().round(decimals=3).tolist()}
    assert len(gdpo_magnitudes) == 3
    assert len(grpo_magnitudes) == 2


def test_gdpo_single_group_batch():
    gdpo = reward_decoupled_advantages(GDPO_COMPONENTS[2:], GDPO_GROUPS[2:])
    close(gdpo, [-0.70707, 0.70707])


def test_gdpo_weights_and_degenerate_cases():
    # weight 0 on r2: S = r1's group advantages, then whitened
    weighted = reward_decoupled_advantages(GDPO_COMPONENTS, GDPO_GROUPS, weights=[1.0, 0.0])
    s = group_advantages(GDPO_COMPONENTS[:, 0], GDPO_GROUPS)
    close(weighted, (s - s.mean()) / (s.std() + 1e-4))
    assert not torch.allclose(weighted, reward_decoupled_advantages(GDPO_COMPONENTS, GDPO_GROUPS))
    # every reward constant in every group -> zeros, no NaN
    constant = reward_decoupled_advantages(torch.ones(4, 3), GDPO_GROUPS)
    assert torch.equal(constant, torch.zeros(4))
    with pytest.raises(ValueError, match="weights"):
        reward_decoupled_advantages(GDPO_COMPONENTS, GDPO_GROUPS, weights=[1.0, 1.0, 1.0])


def test_gdpo_single_reward_is_whitened_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, 1.0, 2.0])
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1])
    a = group_advantages(rewards, group_ids)
    close(reward_decoupled_advantages(rewards[:, None], group_ids), (a - a.mean()) / (a.std() + 1e-4))


def test_gdpo_all_nan_row_is_zero():
    components = torch.tensor([[0.0, 0.0], [1.0, 0.0], [float("nan"), float("nan")], [1.0, 1.0], [0.0, 1.0]])
    advantages = reward_decoupled_advantages(components, torch.tensor([0, 0, 0, 1, 1]))
    assert not torch.isnan(advantages).any()
    assert float(advantages[2]) == 0.0
    assert abs(float(advantages[[0, 1, 3, 4]].sum())) < 1e-5  # whitened over the scored rows only


# --- V-trace (§5.5, §5.8) --------------------------------------------------------------------------------
def run_vtrace(rhos, rewards, values, next_values, terminated=None, dones=None, gamma=0.9):
    rhos = torch.tensor(rhos)[:, None]
    shape = rhos.shape
    terminated = (
        torch.zeros(shape, dtype=torch.bool) if terminated is None else torch.tensor(terminated)[:, None]
    )
    dones = terminated.clone() if dones is None else torch.tensor(dones)[:, None]
    vs, adv = vtrace(
        rhos.log(),
        torch.tensor(rewards)[:, None],
        torch.tensor(values)[:, None],
        torch.tensor(next_values)[:, None],
        terminated,
        dones,
        gamma,
    )
    return vs[:, 0], adv[:, 0]


@pytest.mark.parametrize(("rho", "expected"), [(2.0, 1.9), (0.5, 0.95)])
def test_vtrace_single_step(rho, expected):
    vs, adv = run_vtrace([rho], [1.0], [0.0], [1.0])
    close(vs, [expected])
    close(adv, [expected])


def test_vtrace_two_steps():
    vs, adv = run_vtrace([2.0, 0.5], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0])
    close(vs, [1.405, 0.45])
    close(adv, [1.405, 0.45])


def test_vtrace_terminated_inside_segment():
    """Hand computation: the episode terminates after step 1; step 2 starts a new one."""
    vs, adv = run_vtrace(
        [2.0, 0.5, 0.8], [1.0, 2.0, 3.0], [0.5, 1.0, 2.0], [1.0, 7.0, 4.0], terminated=[False, True, False]
    )
    # t=2: 0.8*(3+0.9*4-2)=3.68; t=1: gamma_1=0, 0.5*(2-1)=0.5, cut; t=0: 1.4 + 0.9*1*0.5 = 1.85
    close(vs, [2.35, 1.5, 5.68])
    close(adv, [1.85, 0.5, 3.68])


def test_vtrace_truncated_inside_segment():
    """Truncated after step 1: bootstrap from V(final obs)=7, but cut the trace."""
    vs, adv = run_vtrace(
        [2.0, 0.5, 0.8],
        [1.0, 2.0, 3.0],
        [0.5, 1.0, 2.0],
        [1.0, 7.0, 4.0],
        terminated=[False, False, False],
        dones=[False, True, False],
    )
    # t=1: 0.5*(2+0.9*7-1)=3.65; t=0: 1.4 + 0.9*3.65 = 4.685
    close(vs, [5.185, 4.65, 5.68])
    close(adv, [4.685, 3.65, 3.68])


def test_vtrace_on_policy_equals_lambda_one_gae():
    torch.manual_seed(1)
    T, N = 7, 3
    rewards, values = torch.randn(T, N), torch.randn(T, N)
    bootstrap = torch.randn(N)
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    terminated[2, 0] = True
    truncated[4, 1] = True
    terminated[5, 2] = True
    dones = terminated | truncated
    next_values = torch.cat([values[1:], bootstrap[None]])
    next_values[4, 1] = 2.5  # the true final observation's value at the truncation
    vs, adv = vtrace(torch.zeros(T, N), rewards, values, next_values, terminated, dones, 0.95)
    _, gae_ret = gae(rewards, values, next_values, terminated, dones, 0.95, 1.0)
    close(vs, gae_ret, 1e-5)
    # on-policy, the pg advantage is the one-step TD error with the V-trace target: r + gamma * v_{t+1} - V
    v_next = torch.cat([vs[1:], bootstrap[None]])
    v_next = torch.where(dones, next_values, v_next)
    expected = rewards + 0.95 * (~terminated) * v_next - values
    close(adv, expected, 1e-5)


def test_vtrace_truncation_levels():
    """rho_bar, c_bar, rho_pg_bar act separately: rho = 2 with bars of 3 is not truncated."""
    log_rho = torch.full((1, 1), math.log(2.0))
    args = (torch.ones(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.bool))
    vs, adv = vtrace(log_rho, *args, args[-1], 0.9, rho_bar=3.0, c_bar=3.0, rho_pg_bar=1.0)
    close(vs, [[3.8]])
    close(adv, [[1.9]])


def test_process_supervision_numbers():
    """Steps {1, 0, 2} and {0, 1}: mean 0.8, sample std sqrt(0.7); advantage = normalised reward-to-go."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 99.0]])  # 99: after episode 1 ended
    valid = torch.tensor([[True, True], [True, True], [True, False]])
    advantages = process_advantages(rewards, valid, torch.zeros(2, dtype=torch.long), eps=0.0)
    # normalised: (r - 0.8) / 0.836660 = [0.239046, -0.956183, 1.434274] and [-0.956183, 0.239046]
    close(advantages, [[0.717137, -0.717137], [0.478091, 0.239046], [1.434274, 0.0]], 1e-5)


def test_process_supervision_groups_are_separate_and_constant_groups_give_zero():
    rewards = torch.tensor([[0.5, 0.5, 1.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    valid = torch.ones(2, 4, dtype=torch.bool)
    advantages = process_advantages(rewards, valid, torch.tensor([0, 0, 1, 1]))
    assert torch.equal(advantages[:, :2], torch.zeros(2, 2))  # every step of group 0 scored 0.5
    # group 1: steps {1, 0, 0, 0}, mean 0.25, std 0.5: normalised 1.4997 then -0.4999 (eps 1e-4)
    close(advantages[:, 2:], [[1.49970 - 0.49990, -0.99980], [-0.49990, -0.49990]])


def test_process_supervision_equals_outcome_supervision_for_one_step_episodes():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    process = process_advantages(rewards, torch.ones(1, 4, dtype=torch.bool), ONE_GROUP)
    close(process[0], group_advantages(rewards[0], ONE_GROUP))


def test_process_supervision_shape_errors():
    groups = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\[T, N\]"):
        process_advantages(torch.zeros(3), torch.ones(3, dtype=torch.bool), groups)
    with pytest.raises(ValueError, match="group_ids"):
        process_advantages(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), groups[:2])
