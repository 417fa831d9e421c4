"""CQL: the spec's logsumexp-gap sanity values, the critic loss by hand, the Lagrange update, an update."""

import math
from functools import partial

import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.offline.cql import CQL, CQLConfig, cql_logsumexp_gap
from omnigym.platform.vec_env import make_env

OBS_SPACE = spaces.Dict({"state": spaces.Box(-1.0, 1.0, (3,))})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (1,))
LOG_HALF = math.log(0.5)


@pytest.fixture
def make_cql(mlp_agent):
    """``make_cql(obs_space, action_space, **overrides)``: CQL, (32, 32) networks, raw rewards."""
    return partial(mlp_agent, CQL, hidden_sizes=(32, 32), normalize_reward=False)


def sanity_gap(q_data: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The spec's case: d = 1, N = 10, Q = 0 on every sample, pi uniform on [-1, 1]."""
    zeros = torch.zeros(1, 1, 10)
    logp = torch.full((1, 10), LOG_HALF)
    return cql_logsumexp_gap(torch.full((1, 1), q_data), zeros, zeros, zeros, LOG_HALF, logp, logp)


def test_logsumexp_gap_sanity_values():
    lse, gap = sanity_gap(0.0)
    assert float(lse) == pytest.approx(-LOG_HALF + math.log(30))
    assert float(lse) == pytest.approx(4.094345, abs=1e-6)
    assert float(gap) == pytest.approx(4.094345, abs=1e-6)


@pytest.mark.parametrize("c", [0.5, 2.0, -1.0])
def test_raising_q_of_data_action_lowers_gap_by_c(c):
    assert float(sanity_gap(c)[1]) == pytest.approx(4.094345 - c, abs=1e-6)


def test_logsumexp_gap_temperature_and_clip():
    zeros = torch.zeros(1, 1, 10)
    logp = torch.full((1, 10), LOG_HALF)
    # T = 2: 2 * logsumexp(0.693147 / 2 over 30 entries) = 0.693147 + 2 ln 30
    lse, _ = cql_logsumexp_gap(torch.zeros(1, 1), zeros, zeros, zeros, LOG_HALF, logp, logp, temperature=2.0)
    assert float(lse) == pytest.approx(-LOG_HALF + 2 * math.log(30), abs=1e-6)
    _, gap = cql_logsumexp_gap(torch.zeros(1, 1), zeros, zeros, zeros, LOG_HALF, logp, logp, clip=(-1.0, 1.0))
    assert float(gap) == pytest.approx(1.0)


def test_critic_loss_by_hand(monkeypatch, make_cql, constant_q):
    # Q = 0 everywhere and pi uniform: every critic's gap is the sanity value; targets are r (Q_targ = 0)
    cql = make_cql(cql_alpha=10.0)
    assert cql.log_density_uniform == pytest.approx(LOG_HALF)
    zero_q = constant_q([0.0, 0.0])
    monkeypatch.setattr(cql, "q", zero_q)
    monkeypatch.setattr(cql, "q_target", zero_q)

    def rsample(obs, deterministic=False):
        n = obs["state"].shape[0]
        return torch.rand(n, 1) * 2 - 1, torch.full((n,), LOG_HALF)

    monkeypatch.setattr(cql.policy, "rsample", rsample)
    batch = TransitionBatch(
        obs={"state": torch.zeros(2, 3)},
        actions=torch.zeros(2, 1),
        rewards=torch.tensor([1.0, 3.0]),
        next_obs={"state": torch.ones(2, 3)},
        terminated=torch.zeros(2),
    )
    loss, metrics = cql.critic_loss(batch)
    mse = (1.0**2 + 3.0**2) / 2
    assert float(loss) == pytest.approx(2 * (mse + 10 * 4.094345), rel=1e-6)
    assert float(metrics["train/cql_gap"]) == pytest.approx(4.094345, abs=1e-5)
    assert float(metrics["train/critic_loss"]) == pytest.approx(2 * mse)


def test_regulariser_samples_are_scored_at_the_current_state(monkeypatch, make_cql, random_batch):
    # Q(s, a) = s[0]: the regulariser sees only current states (s[0] = 0), the target only next ones
    cql = make_cql(cql_alpha=1.0, backup_entropy=False)
    seen = []

    def q(features, actions):
        seen.append(features[:, 0].clone())
        return features[:, 0].expand(2, -1)

    monkeypatch.setattr(cql, "q", q)
    batch = random_batch(OBS_SPACE, ACTION_SPACE, batch_size=4)
    batch.obs["state"][:, 0] = 0.0
    cql.critic_loss(batch)
    assert len(seen) == 1 and seen[0].shape[0] == 4 + 3 * 4 * 10  # data + 3N samples per state, one call
    assert torch.all(seen[0] == 0)


def test_lagrange_loss_value_and_gradient(make_cql):
    cql = make_cql(cql_lagrange=True, cql_alpha=10.0, cql_target_action_gap=1.0)
    loss = cql.lagrange_loss(torch.tensor([2.0, 4.0]))
    assert float(loss.detach()) == pytest.approx(-(10 * 1 + 10 * 3) / 2)  # alpha' = 1 at start
    loss.backward()
    assert float(cql.alpha_prime.log_alpha.grad) == pytest.approx(-20.0)  # descent raises alpha'


@pytest.mark.parametrize("target_gap, rises", [(-100.0, True), (100.0, False)])
def test_lagrange_multiplier_moves_with_gap(target_gap, rises, make_cql, random_batch):
    cql = make_cql(cql_lagrange=True, cql_target_action_gap=target_gap)
    metrics = cql.update(random_batch(OBS_SPACE, ACTION_SPACE))
    assert (float(cql.alpha_prime.value().detach()) > 1.0) == rises
    assert "train/alpha_prime" in metrics and "log_alpha_prime" in cql.state_dict()["networks"]


def test_update_changes_weights_and_reports_finite_metrics(make_cql, random_batch):
    env = make_env("Pendulum-v1")
    cql = make_cql(env.observation_space, env.action_space, max_target_backup=True)
    before = [p.detach().clone() for p in [*cql.q.parameters(), *cql.policy.parameters()]]
    metrics = cql.update(random_batch(env.observation_space, env.action_space))
    after = [*cql.q.parameters(), *cql.policy.parameters()]
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert {"train/critic_loss", "train/cql_gap", "train/actor_loss", "train/alpha"} <= set(metrics)
    assert all(
        k.startswith("train/") and isinstance(v, float) and math.isfinite(v) for k, v in metrics.items()
    )


def test_defaults_follow_corl_mujoco():
    config = CQLConfig()
    assert (config.cql_alpha, config.cql_n_actions, config.cql_temperature) == (10.0, 10, 1.0)
    assert (config.actor_lr, config.critic_lr, config.hidden_sizes) == (3e-5, 3e-4, (256, 256, 256))
    assert not config.backup_entropy and not config.cql_lagrange and config.normalize_reward
