"""The GRPO family on hand-built group rollouts: hand-computed numbers through the algorithm."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import Evaluation, Rollout
from omnigym.platform.algorithms.grpo import AUX_REF_LOGPROB, AUX_WEIGHTS, DAPO, GDPO, GRPO, MDPO, DrGRPO
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

OBS_SPACE = spaces.Dict({"state": spaces.Box(-1, 1, (3,), np.float32)})
ACTION_SPACE = spaces.Discrete(2)


def group_rollout(
    returns: list[float], lengths: list[int] | None = None, components: list[list[float]] | None = None
) -> Rollout:
    """Columns = episodes; episode n has ``lengths[n]`` valid steps and return ``returns[n]``
    (paid on its last step); T = the longest episode."""
    N = len(returns)
    lengths = lengths or [1] * N
    T = max(lengths)
    valid = torch.zeros(T, N, dtype=torch.bool)
    rewards = torch.zeros(T, N)
    terminated = torch.zeros(T, N, dtype=torch.bool)
    comps = torch.zeros(T, N, len(components[0]) if components else 0)
    for n, length in enumerate(lengths):
        valid[:length, n] = True
        rewards[length - 1, n] = returns[n]
        terminated[length - 1, n] = True
        if components:
            comps[length - 1, n] = torch.tensor(components[n])
    generator = torch.Generator().manual_seed(0)
    return Rollout(
        obs={"state": torch.randn(T, N, 3, generator=generator)},
        actions=torch.randint(0, 2, (T, N), generator=generator),
        rewards=rewards,
        reward_components=comps,
        terminated=terminated,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        valid=valid,
        logprob=torch.full((T, N, 1), float(np.log(0.5))),
        mask=valid.unsqueeze(-1).clone(),
        policy_version=torch.zeros(T, N, dtype=torch.int64),
        extras={},
        next_obs={"state": torch.zeros(N, 3)},
        final_obs={"state": torch.zeros(0, 3)},
        final_index=torch.zeros(0, 2, dtype=torch.int64),
        reward_component_names=("easy", "hard") if components else (),
    )


def build(cls: type[GRPO] = GRPO, **overrides: object) -> GRPO:
    torch.manual_seed(0)
    policy = MLPPolicy(MLPPolicyConfig(), OBS_SPACE, ACTION_SPACE)
    config = cls.config_class(**{"group_size": 4, **overrides})
    return cls(config, policy, OBS_SPACE, ACTION_SPACE)


def fix_logprob(algorithm: GRPO, logprob: torch.Tensor) -> None:
    """Make the policy's evaluation return chosen log-probabilities (and zero entropy)."""
    algorithm.policy.evaluate = lambda obs, actions, extras=None: Evaluation(
        logprob, torch.zeros_like(logprob)
    )


def test_grpo_and_dr_grpo_advantages_are_broadcast_to_valid_steps() -> None:
    rollout = group_rollout([1.0, 0.0, 0.0, 0.0], lengths=[2, 1, 3, 1])
    processed = build().process_rollout(rollout)
    expected = torch.tensor([1.49970, -0.49990, -0.49990, -0.49990])  # §2.8, eps 1e-4, sample std
    assert processed.advantages is not None
    torch.testing.assert_close(processed.advantages[0], expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(
        processed.advantages[1], expected * torch.tensor([1.0, 0, 1, 0]), atol=1e-4, rtol=0
    )
    assert float(processed.advantages[2, 0]) == 0.0 and float(processed.advantages[2, 2]) == pytest.approx(
        -0.4999, abs=1e-4
    )
    dr = build(DrGRPO).process_rollout(group_rollout([1.0, 0.0, 0.0, 0.0]))
    assert dr.advantages is not None
    torch.testing.assert_close(dr.advantages[0], torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_process_supervision_credits_each_step_with_the_rewards_after_it() -> None:
    rollout = group_rollout([0.0, 0.0, 0.0, 0.0], lengths=[2, 2, 2, 2])
    rollout.rewards[:] = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    outcome = build().process_rollout(group_rollout([1.0, 0.0, 0.0, 1.0], lengths=[2, 2, 2, 2]))
    assert outcome.advantages is not None  # returns 1, 0, 0, 1: episodes 0 and 3 tie
    assert float(outcome.advantages[0, 0]) == pytest.approx(float(outcome.advantages[0, 3]))
    processed = build(supervision="process").process_rollout(rollout)
    assert processed.advantages is not None
    # 8 steps, two of reward 1: mean 0.25, sample std sqrt(1.5 / 7) = 0.462910; normalised 1.61984, -0.53995
    hi, lo = 1.61984, -0.53995
    expected = torch.tensor([[hi + lo, 2 * lo, 2 * lo, lo + hi], [lo, lo, lo, hi]])
    torch.testing.assert_close(processed.advantages, expected, atol=1e-4, rtol=0)
    # the reward came before episode 0's second step, so that step is not credited with it
    assert float(processed.advantages[1, 0]) < 0 < float(processed.advantages[1, 3])


def test_all_equal_groups_give_zero_advantage_and_dapo_drops_them() -> None:
    rollout = group_rollout([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    processed = build().process_rollout(rollout)
    assert processed.advantages is not None
    assert torch.equal(processed.advantages[0, :4], torch.zeros(4))
    keep = build(DAPO).keep_groups(rollout)
    assert keep.tolist() == [False] * 4 + [True] * 4


def test_seq_mean_token_mean_weights_each_episode_equally() -> None:
    rollout = group_rollout([1.0, 0.0, 0.0, 0.0], lengths=[1, 3, 1, 1])
    weights = build().process_rollout(rollout).aux[AUX_WEIGHTS][..., 0]
    torch.testing.assert_close(weights.sum(0), torch.full((4,), 0.25))  # 1 / B per episode
    torch.testing.assert_close(weights[:, 1], torch.full((3,), 0.25 / 3))  # split over its 3 steps
    token_mean = build(DAPO).process_rollout(rollout).aux[AUX_WEIGHTS][..., 0]
    torch.testing.assert_close(token_mean[rollout.valid], torch.full((6,), 1 / 6))
    dr = build(DrGRPO).process_rollout(rollout).aux[AUX_WEIGHTS][..., 0]
    torch.testing.assert_close(dr[rollout.valid], torch.full((6,), 1 / (4 * 3)))  # B * L_max, L_max = T


def test_loss_at_ratio_one_is_the_reinforce_gradient() -> None:
    """§2.8: beta 0, lp_old = sg(lp_new), one step: d loss / d lp_i = -w_i * A_i."""
    algorithm = build()
    batch = algorithm.process_rollout(group_rollout([1.0, 0.0, 0.0, 0.0])).flatten()
    lp = torch.full((4, 1), float(np.log(0.5)), requires_grad=True)
    fix_logprob(algorithm, lp)
    loss, metrics = algorithm.compute_loss(batch)
    loss.backward()
    advantages = torch.tensor([1.49970, -0.49990, -0.49990, -0.49990])
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-5)  # advantages of a group sum to 0
    torch.testing.assert_close(lp.grad[:, 0], -0.25 * advantages, atol=1e-4, rtol=0)
    assert float(metrics["train/clipfrac"]) == 0.0


@pytest.mark.parametrize(
    ("ratio", "advantage_sign", "clipped"),
    [(1.25, 1, False), (1.30, 1, True), (0.75, -1, True), (1.5, -1, False)],
)
def test_dapo_clips_higher_only_above_1_28(ratio: float, advantage_sign: int, clipped: bool) -> None:
    """§3.6 through the algorithm: a clipped part gets no gradient."""
    algorithm = build(DAPO)
    returns = [1.0, 0.0, 0.0, 0.0] if advantage_sign > 0 else [0.0, 1.0, 1.0, 1.0]
    batch = algorithm.process_rollout(group_rollout(returns)).flatten()
    lp = (batch.logprob + float(np.log(ratio))).clone().requires_grad_(True)
    fix_logprob(algorithm, lp)
    loss, _ = algorithm.compute_loss(batch)
    loss.backward()
    assert (float(lp.grad[0, 0]) == 0.0) == clipped


def test_gdpo_keeps_reward_combinations_distinct() -> None:
    """§4.6: groups [(0,0), (1,0)] and [(0,0), (1,1)]: GRPO sees totals (0, 1) and (0, 2) alike,
    GDPO gives group 2 twice group 1's advantages."""
    components = [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    rollout = group_rollout([sum(c) for c in components], components=components)
    grpo = build(group_size=2).process_rollout(rollout)
    gdpo = build(GDPO, group_size=2).process_rollout(
        group_rollout([sum(c) for c in components], components=components)
    )
    assert grpo.advantages is not None and gdpo.advantages is not None
    torch.testing.assert_close(grpo.advantages[0, :2], grpo.advantages[0, 2:], atol=1e-3, rtol=0)
    torch.testing.assert_close(
        gdpo.advantages[0], torch.tensor([-0.54768, 0.54768, -1.09536, 1.09536]), atol=1e-4, rtol=0
    )


def test_mdpo_needs_the_driving_metrics() -> None:
    components = [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match="component_weights names"):
        build(MDPO, group_size=2).process_rollout(group_rollout([0, 1, 0, 2], components=components))
    with pytest.raises(ValueError, match="reports none"):
        build(GDPO).process_rollout(group_rollout([1.0, 0.0, 0.0, 0.0]))
    weighted = build(GDPO, group_size=2, component_weights={"hard": 1.0})
    processed = weighted.process_rollout(group_rollout([0, 1, 0, 2], components=components))
    assert processed.advantages is not None
    torch.testing.assert_close(processed.advantages[0, :2], torch.zeros(2))  # 'hard' is 0 in group 1


def test_kl_to_the_frozen_reference_starts_at_zero_and_grows_with_updates() -> None:
    algorithm = build(kl_coef=0.04, learning_rate=0.05)
    rollout = group_rollout([1.0, 0.0, 0.0, 0.0])
    with torch.no_grad():
        flat = {"state": rollout.obs["state"].reshape(-1, 3)}
        rollout.logprob = algorithm.policy.evaluate(flat, rollout.actions.reshape(-1)).logprob.reshape(
            1, 4, 1
        )
    processed = algorithm.process_rollout(rollout)
    torch.testing.assert_close(processed.aux[AUX_REF_LOGPROB], rollout.logprob)
    first = algorithm.update(processed)
    assert first["train/kl_ref"] == pytest.approx(0.0, abs=1e-3)
    second = algorithm.update(algorithm.process_rollout(rollout))
    assert second["train/kl_ref"] > 1e-4


def test_minibatch_losses_add_up_to_the_batch_loss() -> None:
    algorithm = build(num_minibatches=2)
    batch = algorithm.process_rollout(group_rollout([1.0, 0.0, 0.5, 0.0], lengths=[2, 1, 3, 1])).flatten()
    fix_logprob(algorithm, batch.logprob + 0.1)  # every ratio exp(0.1): unclipped
    full, _ = algorithm.compute_loss(batch)
    halves = []
    for rows in (torch.arange(0, 4), torch.arange(4, len(batch))):
        part = batch.index(rows)
        fix_logprob(algorithm, part.logprob + 0.1)
        halves.append(algorithm.compute_loss(part)[0])
    assert float(sum(halves)) == pytest.approx(float(full), abs=1e-6)  # weights cover the whole batch


def test_config_errors() -> None:
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        build(group_size=1)
    with pytest.raises(ValueError, match="loss_aggregation"):
        build(loss_aggregation="sum")
    with pytest.raises(ValueError, match="multiple of group_size"):
        build().process_rollout(group_rollout([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="supervision"):
        build(supervision="steps")
    with pytest.raises(ValueError, match="reward_source: return"):
        build(GDPO, supervision="process")


@pytest.mark.parametrize("anneal", [False, True])
def test_learning_rate_anneals_linearly_only_when_asked(anneal: bool) -> None:
    algorithm = build(learning_rate=1e-3, anneal_lr=anneal)
    for fraction, annealed in [(0.0, 1e-3), (0.25, 7.5e-4), (1.0, 0.0)]:
        algorithm.set_progress(fraction)
        lr = algorithm.optimizer.param_groups[0]["lr"]
        assert lr == pytest.approx(annealed if anneal else 1e-3)
