"""WSRL: its defaults, warm-starting from a CQL agent (and the shape-mismatch error), an update."""

import math
from functools import partial

import pytest
import torch
from gymnasium import spaces

from omnigym.platform.algorithms.offline.cql import CQL
from omnigym.platform.algorithms.offline.wsrl import WSRL, WSRLConfig
from omnigym.platform.vec_env import make_env

OBS_SPACE = spaces.Dict({"state": spaces.Box(-1.0, 1.0, (3,))})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (1,))


@pytest.fixture
def make_wsrl(mlp_agent):
    """``make_wsrl(obs_space, action_space, **overrides)``: WSRL with (32, 32) critics and policy."""
    return partial(mlp_agent, WSRL, hidden_sizes=(32, 32))


@pytest.fixture
def make_cql(mlp_agent):
    """``make_cql(**overrides)``: the CQL agent WSRL warm-starts from, raw rewards."""
    return partial(mlp_agent, CQL, hidden_sizes=(32, 32), normalize_reward=False)


def test_defaults_follow_wsrl():
    config = WSRLConfig()
    assert (config.num_critics, config.critic_subset, config.layer_norm) == (10, 2, True)
    assert (config.updates_per_step, config.batch_size, config.policy_delay) == (4, 256, 4)
    assert (config.actor_lr, config.critic_lr, config.alpha_lr) == (1e-4, 3e-4, 1e-4)
    assert (config.warmup_steps, config.offline_data_ratio) == (5000, 0.0)
    with pytest.raises(ValueError):
        WSRLConfig(offline_data_ratio=1.5)


def test_load_pretrained_round_trip(make_wsrl, make_cql, random_batch):
    cql = make_cql(num_critics=10, layer_norm=True)
    cql.update(random_batch(OBS_SPACE, ACTION_SPACE))
    cql.reward_scale = 0.25
    state = cql.state_dict()
    wsrl = make_wsrl()
    loaded = wsrl.load_pretrained(state)
    assert loaded == ["q", "q_target", "log_alpha", "reward_scale"]
    for name in ("q", "q_target", "log_alpha"):
        theirs = cql.networks[name].state_dict()
        for key, value in wsrl.networks[name].state_dict().items():
            assert torch.equal(value, theirs[key]), f"{name}.{key}"
    assert wsrl.reward_scale == 0.25
    assert wsrl.updates == 0  # a fresh online agent: counters and optimisers are not taken


def test_a_fixed_temperature_is_kept_and_a_tuned_one_continues_from_the_pretrained(make_wsrl, make_cql):
    cql = make_cql(num_critics=10, layer_norm=True, ent_coef="auto_0.5")
    state = cql.state_dict()
    fixed = make_wsrl(ent_coef=0.05)
    assert "log_alpha" not in fixed.load_pretrained(state)
    assert fixed.alpha.item() == pytest.approx(0.05)
    tuned = make_wsrl(ent_coef="auto_0.1")
    assert "log_alpha" in tuned.load_pretrained(state)
    assert tuned.alpha.item() == pytest.approx(0.5)


def test_load_pretrained_without_target_copies_critics(make_wsrl, make_cql):
    cql = make_cql(num_critics=10, layer_norm=True)
    state = cql.state_dict()
    del state["networks"]["q_target"], state["networks"]["log_alpha"]
    wsrl = make_wsrl()
    assert wsrl.load_pretrained(state)[:2] == ["q", "q_target"]
    assert all(
        torch.equal(a, b) for a, b in zip(wsrl.q.parameters(), wsrl.q_target.parameters(), strict=True)
    )


def test_load_pretrained_shape_mismatch_names_the_parameters(make_wsrl, make_cql):
    with pytest.raises(ValueError, match=r"q\.layers\.0\.weight: \(2, 4, 32\) vs \(10, 4, 32\)"):
        make_wsrl().load_pretrained(make_cql(layer_norm=True).state_dict())  # twin critics, not 10
    with pytest.raises(ValueError, match=r"q\.norms\.0: missing"):
        make_wsrl().load_pretrained(make_cql(num_critics=10).state_dict())  # no layer norm
    with pytest.raises(ValueError, match="no critics"):
        make_wsrl().load_pretrained({"networks": {}})


def test_updates_train_critics_every_step_and_the_actor_every_fourth(make_wsrl, random_batch):
    env = make_env("Pendulum-v1")
    wsrl = make_wsrl(env.observation_space, env.action_space)
    q_before = [p.detach().clone() for p in wsrl.q.parameters()]
    policy_before = [p.detach().clone() for p in wsrl.policy.parameters()]
    batch = random_batch(env.observation_space, env.action_space)
    for _ in range(3):
        metrics = wsrl.update(batch)
    assert all(not torch.equal(a, b) for a, b in zip(q_before, wsrl.q.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(policy_before, wsrl.policy.parameters(), strict=True))
    assert "train/actor_loss" not in metrics
    metrics = wsrl.update(batch)
    assert any(not torch.equal(a, b) for a, b in zip(policy_before, wsrl.policy.parameters(), strict=True))
    assert {"train/critic_loss", "train/actor_loss", "train/alpha"} <= set(metrics)
    assert all(
        k.startswith("train/") and isinstance(v, float) and math.isfinite(v) for k, v in metrics.items()
    )
