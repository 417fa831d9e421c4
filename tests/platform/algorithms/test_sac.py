"""SAC: the soft TD target and critic loss by hand, the REDQ subset, entropy tuning, an update."""

import math
from functools import partial

import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.sac import SAC, SACConfig, parse_ent_coef, temperature_loss
from omnigym.platform.vec_env import make_env

OBS_SPACE = spaces.Dict({"state": spaces.Box(-1.0, 1.0, (3,))})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (1,))


@pytest.fixture
def make_sac(mlp_agent):
    """``make_sac(obs_space, action_space, **overrides)``: SAC with (32, 32) critics and policy."""
    return partial(mlp_agent, SAC, hidden_sizes=(32, 32))


def crafted_batch() -> TransitionBatch:
    return TransitionBatch(
        obs={"state": torch.zeros(2, 3)},
        actions=torch.zeros(2, 1),
        rewards=torch.tensor([1.0, 2.0]),
        next_obs={"state": torch.ones(2, 3)},
        terminated=torch.tensor([0.0, 1.0]),
    )


def patch_policy(monkeypatch, sac: SAC, logp: float) -> None:
    """``rsample`` returns zero actions with log-probability ``logp``."""

    def rsample(obs, deterministic=False):
        n = obs["state"].shape[0]
        return torch.zeros(n, 1), torch.full((n,), logp)

    monkeypatch.setattr(sac.policy, "rsample", rsample)


@pytest.mark.parametrize("backup_entropy, expected", [(True, 1 + 0.99 * 3.5), (False, 1 + 0.99 * 3.0)])
def test_soft_td_target_by_hand(monkeypatch, backup_entropy, expected, make_sac, constant_q):
    # min_j Q_targ = min(3, 5) = 3; alpha = 0.5, log pi = -1: soft value 3 + 0.5 = 3.5; terminal: r only
    sac = make_sac(ent_coef=0.5, backup_entropy=backup_entropy)
    monkeypatch.setattr(sac, "q_target", constant_q([3.0, 5.0]))
    patch_policy(monkeypatch, sac, logp=-1.0)
    target = sac.td_target(crafted_batch(), *sac.next_actions(crafted_batch()))
    torch.testing.assert_close(target, torch.tensor([expected, 2.0]))


def test_critic_loss_by_hand(monkeypatch, make_sac, constant_q):
    sac = make_sac(ent_coef=0.5)
    monkeypatch.setattr(sac, "q_target", constant_q([3.0, 5.0]))
    monkeypatch.setattr(sac, "q", constant_q([0.0, 1.0]))
    patch_policy(monkeypatch, sac, logp=-1.0)
    y = [1 + 0.99 * 3.5, 2.0]
    expected = ((0 - y[0]) ** 2 + (0 - y[1]) ** 2) / 2 + ((1 - y[0]) ** 2 + (1 - y[1]) ** 2) / 2
    loss, metrics = sac.critic_loss(crafted_batch())
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(metrics["train/q_mean"]) == pytest.approx(0.5)


def test_max_target_backup_takes_best_of_samples(monkeypatch, make_sac):
    sac = make_sac(ent_coef=0.5, backup_entropy=False, max_target_backup=True, backup_samples=3)
    # the target critic scores an action by its value; samples -0.5, 0.25, 0.75 per state -> max 0.75
    monkeypatch.setattr(sac, "q_target", lambda f, a: a[:, 0].expand(2, -1))

    def rsample(obs, deterministic=False):
        n = obs["state"].shape[0]
        return torch.tensor([-0.5, 0.75, 0.25]).repeat(n // 3).unsqueeze(1), torch.zeros(n)

    monkeypatch.setattr(sac.policy, "rsample", rsample)
    target = sac.td_target(crafted_batch(), *sac.next_actions(crafted_batch()))
    torch.testing.assert_close(target, torch.tensor([1 + 0.99 * 0.75, 2.0]))


def test_critic_subset_takes_min_over_random_pairs(make_sac):
    q = torch.tensor([1.0, 2.0, 3.0, 4.0]).unsqueeze(1)
    assert float(make_sac(num_critics=4).target_min(q)) == 1.0
    sac = make_sac(num_critics=4, critic_subset=2)
    torch.manual_seed(0)
    seen = {float(sac.target_min(q)) for _ in range(200)}
    assert seen == {1.0, 2.0, 3.0}  # the min of a random pair: never the largest member


def test_actor_loss_by_hand_and_only_policy_gradients(monkeypatch, make_sac):
    sac = make_sac(ent_coef=0.5)
    obs = crafted_batch().obs
    actions, logp = sac.policy.rsample(obs)
    monkeypatch.setattr(sac.policy, "rsample", lambda o, deterministic=False: (actions, logp))
    q = sac.q(sac.critic_input(obs), actions).detach().min(0).values
    loss, metrics = sac.actor_loss(crafted_batch())
    assert float(loss.detach()) == pytest.approx(float((0.5 * logp.detach() - q).mean()), rel=1e-5)
    assert float(metrics["train/entropy"]) == pytest.approx(float(-logp.detach().mean()), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in sac.q.parameters())  # the critics are not trained by the actor
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in sac.policy.parameters())


def test_temperature_loss_gradient_direction():
    log_alpha = torch.zeros((), requires_grad=True)
    temperature_loss(log_alpha, torch.tensor(-2.0), target_entropy=-1.0).backward()
    assert float(log_alpha.grad) == pytest.approx(-1.0)  # entropy below target: descent raises alpha


@pytest.mark.parametrize("target_entropy, rises", [(5.0, True), (-5.0, False)])
def test_entropy_tuning_moves_alpha_towards_target(target_entropy, rises, make_sac, random_batch):
    # a 1-d squashed Gaussian's entropy is well below 5 and well above -5 at initialisation
    sac = make_sac(target_entropy=target_entropy, alpha_lr=1e-2)
    before = float(sac.alpha)
    for seed in range(3):
        sac.update(random_batch(OBS_SPACE, ACTION_SPACE, seed=seed))
    assert (float(sac.alpha) > before) == rises


def test_ent_coef_settings(make_sac):
    assert parse_ent_coef("auto") == 1.0
    assert parse_ent_coef("auto_0.1") == pytest.approx(0.1)
    with pytest.raises(ValueError):
        SACConfig(ent_coef="often")
    fixed = make_sac(ent_coef=0.2)
    assert float(fixed.alpha) == pytest.approx(0.2) and "alpha" not in fixed.optimizers
    assert float(make_sac().target_entropy) == -1.0  # "auto": -|A|
    assert float(make_sac(ent_coef=0.0).alpha) == 0.0


def test_update_changes_weights_and_reports_finite_metrics(make_sac, random_batch):
    env = make_env("Pendulum-v1")
    sac = make_sac(env.observation_space, env.action_space)
    params = {
        name: [p.detach().clone() for p in module.parameters()]
        for name, module in [
            ("q", sac.q),
            ("q_target", sac.q_target),
            ("policy", sac.policy),
            ("alpha", sac.temperature),
        ]
    }
    metrics = sac.update(random_batch(env.observation_space, env.action_space))
    for name, module in [
        ("q", sac.q),
        ("q_target", sac.q_target),
        ("policy", sac.policy),
        ("alpha", sac.temperature),
    ]:
        assert any(not torch.equal(a, b) for a, b in zip(params[name], module.parameters(), strict=True)), (
            name
        )
    assert metrics and all(k.startswith("train/") for k in metrics)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert {"train/critic_loss", "train/actor_loss", "train/alpha", "train/entropy"} <= set(metrics)


def test_state_round_trip_includes_temperature(make_sac, random_batch):
    sac = make_sac()
    sac.update(random_batch(OBS_SPACE, ACTION_SPACE))
    state = sac.state_dict()
    assert {"q", "q_target", "log_alpha"} <= set(state["networks"])
    assert {"critic", "actor", "alpha"} <= set(state["optimizers"])
    other = make_sac()
    other.load_state_dict(state)
    assert float(other.alpha) == float(sac.alpha) and other.updates == 1
