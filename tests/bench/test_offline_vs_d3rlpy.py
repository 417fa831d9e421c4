"""The offline bench configures d3rlpy as omnigym's YAMLs say (CQL: fixed gap weight, CORL's sizes)."""

import numpy as np
import pytest

pytest.importorskip("d3rlpy")


@pytest.fixture(scope="module")
def bench(bench_module):
    return bench_module("offline_vs_d3rlpy")


def test_d3rlpy_cql_matches_cql_yaml(bench):
    cfg, policy_cfg = bench.load_configs("cql")
    states = np.random.default_rng(0).normal(size=(100, 17)).astype(np.float32)
    model = bench.d3rlpy_algo("cql", states, returns=[100.0, 600.0])
    config = model.config
    assert config.conservative_weight == cfg["cql_alpha"] == 10.0
    assert config.alpha_learning_rate == 0.0 and config.initial_alpha == 1.0  # weight fixed at 10
    assert config.n_action_samples == cfg["cql_n_actions"] == 10
    assert config.temp_learning_rate == cfg["alpha_lr"] and config.initial_temperature == 1.0
    assert config.actor_learning_rate == cfg["actor_lr"] == 3e-5
    assert config.critic_learning_rate == cfg["critic_lr"]
    assert not config.soft_q_backup and not config.max_q_backup
    assert config.critic_encoder_factory.hidden_units == [256, 256, 256] == cfg["hidden_sizes"]
    assert config.actor_encoder_factory.hidden_units == [256, 256] == policy_cfg["hidden_sizes"]
    # omnigym's normalize_reward: rewards x 1000 / (max - min episode return), here x 2
    assert cfg["normalize_reward"]
    scaler = config.reward_scaler
    assert scaler.multiplier == 1000.0 and scaler.return_max - scaler.return_min == 500.0


@pytest.mark.parametrize(("algo", "scaled"), [("iql", True), ("td3bc", False)])
def test_d3rlpy_reward_scaling_follows_normalize_reward(bench, algo, scaled):
    cfg, _ = bench.load_configs(algo)
    assert cfg["normalize_reward"] is scaled  # iql.yaml scales rewards, td3bc.yaml does not
    states = np.random.default_rng(0).normal(size=(100, 11)).astype(np.float32)
    scaler = bench.d3rlpy_algo(algo, states, returns=[100.0, 600.0]).config.reward_scaler
    if scaled:  # x 1000 / (600 - 100)
        assert scaler.multiplier == 1000.0 and scaler.return_max - scaler.return_min == 500.0
    else:
        assert scaler is None
