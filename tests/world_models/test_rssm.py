"""The RSSM world model and the imagination actor-critic: maths by hand, contracts, and learning."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.config import build_dataclass, load_yaml
from omnigym.core.policy import Policy
from omnigym.core.registry import WORLD_MODELS
from omnigym.core.types import TransitionBatch
from omnigym.platform.buffers import ReplayBuffer
from omnigym.platform.experiment import config_dir
from omnigym.platform.vec_env import make_env
from omnigym.world_models.base import WorldModel
from omnigym.world_models.fidelity import k_step_errors
from omnigym.world_models.imagination import (
    ImaginationActorCritic,
    ImaginationConfig,
    imagination_actor,
    lambda_returns,
    posterior_states,
    train_dreamer,
    train_in_imagination,
)
from omnigym.world_models.rssm import (
    RSSMConfig,
    RSSMWorldModel,
    kl_loss,
    sample_one_hot,
    symexp,
    symlog,
    unimix_log_probs,
)
from omnigym.world_models.training import fit_world_model, sequence_chunks

ENV_ID = "Pendulum-v1"
SMALL = {"deter_size": 64, "hidden_size": 64, "sequence_length": 16}
"""A smaller model than the default, for the quick tests."""


def pendulum_spaces() -> tuple[spaces.Dict, spaces.Box]:
    env = make_env(ENV_ID)
    env.close()
    return env.observation_space, env.action_space


def random_pendulum(steps: int, seed: int = 0) -> ReplayBuffer:
    """Whole random-action Pendulum episodes (200 steps each), episode ``i`` seeded ``seed + i``."""
    env = make_env(ENV_ID)
    env.action_space.seed(seed)
    buffer = ReplayBuffer(env.observation_space, env.action_space, steps + 200)
    episode = 0
    while len(buffer) < steps:
        obs, _ = env.reset(seed=seed + episode)
        episode += 1
        done = False
        while not done:
            action = env.action_space.sample()
            following, reward, terminated, truncated, _ = env.step(action)
            buffer.add(obs, action[None], [reward], following, [terminated], [truncated])
            obs, done = following, terminated or truncated
    env.close()
    return buffer


def small_model(seed: int = 0, **overrides: object) -> RSSMWorldModel:
    torch.manual_seed(seed)
    return RSSMWorldModel(RSSMConfig(**{**SMALL, **overrides}), *pendulum_spaces())  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fitted() -> tuple[RSSMWorldModel, ReplayBuffer, dict[str, float]]:
    """A small RSSM fitted for 300 steps on 2,000 random real Pendulum steps (~20 s)."""
    buffer = random_pendulum(2000)
    model = small_model()
    metrics = fit_world_model(model, buffer, max_steps=300, batch_size=256, patience=100, seed=0)
    return model.eval(), buffer, metrics


# --- maths by hand ----------------------------------------------------------------------------------
def test_symlog_and_symexp_are_inverse_and_compress() -> None:
    x = torch.tensor([-100.0, -1.0, 0.0, 0.5, 1000.0])
    assert torch.allclose(symexp(symlog(x)), x, rtol=1e-5)
    assert symlog(torch.tensor(math.e - 1)).item() == pytest.approx(1.0)
    assert symlog(torch.tensor(-1000.0)).item() == pytest.approx(-math.log(1001))


def test_kl_with_free_bits_on_a_hand_made_case() -> None:
    q = torch.log(torch.tensor([[0.9, 0.1]]))  # one group of two classes
    p = torch.log(torch.tensor([[0.5, 0.5]]))
    kl = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)  # 0.3681 nats
    loss, dyn, rep = kl_loss(q, p, free_bits=0.1, dyn_scale=0.5, rep_scale=0.1)
    assert dyn.item() == pytest.approx(kl, rel=1e-5) and rep.item() == pytest.approx(kl, rel=1e-5)
    assert loss.item() == pytest.approx(0.6 * kl, rel=1e-5)
    # One nat of free bits: clipped, and nothing left to optimise.
    q1, p1 = q.clone().requires_grad_(), p.clone().requires_grad_()
    loss, dyn, rep = kl_loss(q1, p1, free_bits=1.0, dyn_scale=0.5, rep_scale=0.1)
    assert (loss.item(), dyn.item(), rep.item()) == pytest.approx((0.6, 1.0, 1.0))
    loss.backward()
    assert q1.grad is not None and p1.grad is not None
    assert q1.grad.abs().max() == 0 and p1.grad.abs().max() == 0
    # Free bits clip the KL summed over the groups: 3 groups of 0.368 nats exceed 1 nat together.
    q3, p3 = q.expand(3, 2), p.expand(3, 2)
    _, dyn, _ = kl_loss(q3, p3, free_bits=1.0, dyn_scale=0.5, rep_scale=0.1)
    assert dyn.item() == pytest.approx(3 * kl, rel=1e-5)


def test_kl_balancing_sends_each_term_to_its_side() -> None:
    """``L_dyn`` trains only the prior, ``L_rep`` only the posterior."""
    q = torch.log(torch.tensor([[0.9, 0.1]])).requires_grad_()
    p = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_()
    _, dyn, rep = kl_loss(q, p, free_bits=0.0, dyn_scale=0.5, rep_scale=0.1)
    (dyn_q, dyn_p) = torch.autograd.grad(dyn, (q, p), retain_graph=True, allow_unused=True)
    (rep_q, rep_p) = torch.autograd.grad(rep, (q, p), allow_unused=True)
    assert dyn_q is None or dyn_q.abs().max() == 0
    assert dyn_p is not None and dyn_p.abs().max() > 0.1
    assert rep_p is None or rep_p.abs().max() == 0
    assert rep_q is not None and rep_q.abs().max() > 0.1


def test_unimix_floors_every_probability() -> None:
    logits = torch.tensor([[50.0, 0.0, 0.0, 0.0]])
    probs = unimix_log_probs(logits, 0.01).exp()
    assert probs.sum().item() == pytest.approx(1.0)
    assert probs[0, 1:].min().item() == pytest.approx(0.01 / 4, rel=1e-4)
    assert probs[0, 0].item() == pytest.approx(0.99 + 0.0025, rel=1e-4)


def test_straight_through_samples_are_one_hot_with_the_probabilities_gradient() -> None:
    logits = torch.tensor([[[0.5, -1.0, 2.0]]], requires_grad=True)
    log_probs = unimix_log_probs(logits, 0.01)
    generator = torch.Generator().manual_seed(0)
    sample = sample_one_hot(log_probs, generator=generator)
    assert sorted(sample.detach().flatten().tolist()) == [0.0, 0.0, 1.0]
    weights = torch.tensor([1.0, 2.0, 3.0])
    (grad_sample,) = torch.autograd.grad((sample * weights).sum(), logits, retain_graph=True)
    (grad_probs,) = torch.autograd.grad((log_probs.exp() * weights).sum(), logits)
    torch.testing.assert_close(grad_sample, grad_probs)
    # The draws follow the probabilities; the mode is the argmax.
    many = sample_one_hot(log_probs.detach().expand(20000, 1, 3), generator=generator)
    torch.testing.assert_close(many.mean(0), log_probs.detach().exp()[0], atol=0.015, rtol=0)
    assert sample_one_hot(log_probs, deterministic=True).detach().flatten().tolist() == [0.0, 0.0, 1.0]


def test_lambda_returns_by_hand() -> None:
    rewards = torch.tensor([[1.0], [2.0]])
    values = torch.tensor([[0.0], [10.0], [20.0]])
    discounts = torch.tensor([[0.5], [0.5]])
    # R_1 = 2 + 0.5 * (0.5 * 20 + 0.5 * 20) = 12;  R_0 = 1 + 0.5 * (0.5 * 10 + 0.5 * 12) = 6.5
    assert lambda_returns(rewards, values, discounts, 0.5).flatten().tolist() == [6.5, 12.0]
    # lambda 0 is one-step TD, lambda 1 the discounted sum bootstrapped at the end.
    assert lambda_returns(rewards, values, discounts, 0.0).flatten().tolist() == [6.0, 12.0]
    assert lambda_returns(rewards, values, discounts, 1.0).flatten().tolist() == [1 + 0.5 * 12, 12.0]


# --- the model's contract ---------------------------------------------------------------------------
def test_is_registered_and_the_yaml_is_its_default() -> None:
    assert WORLD_MODELS.get("rssm") is RSSMWorldModel
    data = load_yaml(config_dir() / "world_model" / "rssm.yaml")
    assert build_dataclass(RSSMConfig, data, path="world_model") == RSSMConfig()


def test_shapes_of_reset_step_and_training() -> None:
    model = small_model()
    groups, classes = model.config.stoch_groups, model.config.stoch_classes
    obs = {"state": torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, -3.0]])}
    state = model.reset(obs)
    assert state["h"].shape == (2, 64) and state["z"].shape == (2, groups * classes)
    assert (state["z"].reshape(2, groups, classes).sum(-1) == 1).all()  # one class per group
    state, next_obs, reward, terminated, info = model.step(
        state, torch.zeros(2, 1), generator=torch.Generator().manual_seed(0)
    )
    assert next_obs["state"].shape == (2, 3) and reward.shape == (2,) and reward.dtype == torch.float32
    assert terminated.shape == (2,) and terminated.dtype == torch.bool and info == {}
    assert (next_obs["state"].abs() <= torch.tensor([1.0, 1.0, 8.0])).all()  # clipped to the space
    batch = sequence_chunks(random_pendulum(200), 16)
    assert batch.obs["state"].shape == (13, 16, 3) and batch.actions.shape == (13, 16, 1)
    metrics = model.train_step(batch)
    assert {"train/loss", "train/recon", "train/kl_dyn", "train/kl_rep"} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics["train/kl_dyn"] >= 1.0 and metrics["train/kl_rep"] >= 1.0  # free bits


def test_steps_are_bit_identical_for_equal_generator_seeds() -> None:
    model = small_model()
    start = model.reset({"state": torch.tensor([[1.0, 0.0, 0.0]] * 8)})
    actions = torch.linspace(-2, 2, 8)[:, None]

    def roll(seed: int) -> list[torch.Tensor]:
        generator, state, out = torch.Generator().manual_seed(seed), start, []
        for _ in range(5):
            state, obs, reward, terminated, _ = model.step(state, actions, generator=generator)
            out += [state["z"], obs["state"], reward, terminated]
        return out

    first = roll(1)
    assert all(torch.equal(a, b) for a, b in zip(first, roll(1), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, roll(2), strict=True))
    mode = model.step(start, actions, generator=torch.Generator().manual_seed(1), deterministic=True)
    again = model.step(start, actions, generator=torch.Generator().manual_seed(2), deterministic=True)
    assert torch.equal(mode[1]["state"], again[1]["state"])


def test_saved_model_steps_identically(
    fitted: tuple[RSSMWorldModel, ReplayBuffer, dict], tmp_path: Path
) -> None:
    model = fitted[0]
    loaded = WorldModel.from_pretrained(model.save_pretrained(tmp_path / "rssm"))
    assert isinstance(loaded, RSSMWorldModel) and loaded.config == model.config
    obs = {"state": fitted[1].all().obs["state"][:16]}
    actions = torch.rand(16, 1, generator=torch.Generator().manual_seed(0)) * 4 - 2
    states = [model.reset(obs), loaded.reset(obs)]
    generators = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)]
    for _ in range(10):
        steps = [
            m.step(s, actions, generator=g)
            for m, s, g in zip((model, loaded), states, generators, strict=True)
        ]
        assert torch.equal(steps[0][1]["state"], steps[1][1]["state"])
        assert torch.equal(steps[0][2], steps[1][2])
        states = [steps[0][0], steps[1][0]]


def test_a_corrupt_config_raises(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stoch_classes"):
        RSSMConfig(stoch_classes=1)
    with pytest.raises(ValueError, match="unimix"):
        RSSMConfig(unimix=1.0)
    with pytest.raises(ValueError, match="free_bits"):
        RSSMConfig(free_bits=-1.0)
    path = small_model().save_pretrained(tmp_path / "rssm")
    meta = json.loads((path / "config.json").read_text())
    meta["config"]["deter_size"] = -4
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="corrupt world model config"):
        WorldModel.from_pretrained(path)


# --- sequences ------------------------------------------------------------------------------------
def test_sequence_chunks_tile_episodes_and_keep_their_ends() -> None:
    obs_space = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (1,), np.float32)})
    buffer = ReplayBuffer(obs_space, spaces.Box(-1.0, 1.0, (1,), np.float32), 20)
    for length, first, terminal in ((5, 0.0, True), (3, 100.0, False), (1, 200.0, False)):
        states = np.arange(length + 1, dtype=np.float32)[:, None] + first
        ends = np.zeros(length, dtype=bool)
        ends[-1] = True
        buffer.add(
            {"state": states[:-1]}, np.zeros((length, 1)), states[:-1, 0], {"state": states[1:]},
            ends & terminal, ends & (not terminal),
        )  # fmt: skip
    chunks = sequence_chunks(buffer, 2)
    # Episode of 5: starts 0, 2 and 3 (aligned to the end); of 3: starts 0 and 1; of 1: dropped.
    assert chunks.obs["state"][:, :, 0].tolist() == [[0, 1], [2, 3], [3, 4], [100, 101], [101, 102]]
    assert torch.equal(chunks.next_obs["state"][:, :, 0], chunks.obs["state"][:, :, 0] + 1)
    assert chunks.terminated.tolist() == [[0, 0], [0, 0], [0, 1], [0, 0], [0, 0]]
    with pytest.raises(ValueError, match="6 transitions"):
        sequence_chunks(buffer, 6)


def test_fit_world_model_feeds_sequence_models_chunks() -> None:
    buffer = random_pendulum(400)  # 2 episodes of 200 -> 2 x 13 chunks of 16 (the last aligned to the end)
    model = small_model()
    seen: list[TransitionBatch] = []
    original = model.train_step
    model.train_step = lambda batch: seen.append(batch) or original(batch)  # type: ignore[method-assign]
    metrics = fit_world_model(model, buffer, max_epochs=1, batch_size=64, holdout_fraction=0.2)
    # 5 held-out chunks, 21 to train on, 64 // 16 = 4 chunks per step: 5 steps of 4 and one of 1.
    assert metrics["train/steps"] == 6
    assert [b.rewards.shape for b in seen] == [(4, 16)] * 5 + [(1, 16)]


def test_a_short_fit_predicts_far_better_than_the_mean(
    fitted: tuple[RSSMWorldModel, ReplayBuffer, dict[str, float]],
) -> None:
    """Held-out open-loop errors are a small fraction of predicting the mean (NMSE 1)."""
    model, buffer, metrics = fitted
    variance = buffer.all().next_obs["state"].var(0, correction=0).mean().item()  # predict-the-mean MSE
    assert metrics["eval/obs_mse"] < 0.05 * variance, (metrics, variance)
    assert metrics["eval/reward_mse"] < 0.1 * buffer.all().rewards.var().item()
    # From a reset on one real observation of an unseen episode, as WorldModelVectorEnv starts.
    unseen = list(random_pendulum(200, seed=500).episodes())
    one, five = k_step_errors(model, unseen, (1, 5), seed=0)
    assert one.obs_nmse < 0.05 and five.obs_nmse < 0.2, (one, five)
    untrained = small_model(seed=1)
    assert k_step_errors(untrained, unseen, (1,), seed=0)[0].obs_nmse > 0.5  # the fit made the difference


# --- imagination ----------------------------------------------------------------------------------
def test_imagination_training_lowers_the_critic_loss_and_raises_the_imagined_reward(
    fitted: tuple[RSSMWorldModel, ReplayBuffer, dict[str, float]],
) -> None:
    model, buffer = fitted[0], fitted[1]
    torch.manual_seed(0)
    trainer = ImaginationActorCritic(model, imagination_actor(model), ImaginationConfig(num_starts=128))
    starts = posterior_states(model, buffer)
    assert starts["h"].shape == (len(sequence_chunks(buffer, 16)) * 17, 64)  # every step of every chunk
    before = {k: v.clone() for k, v in model.state_dict().items()}
    history = train_in_imagination(trainer, starts, 60, seed=0)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items()), "the model must stay frozen"
    critic = [m["train/critic_loss"] for m in history]
    reward = [m["train/imagined_reward"] for m in history]
    assert np.mean(critic[-10:]) < 0.5 * np.mean(critic[:10]), critic
    assert np.mean(reward[-10:]) > np.mean(reward[:10]) + 0.3, reward


def test_the_imagination_actor_saves_and_acts_like_any_policy(
    fitted: tuple[RSSMWorldModel, ReplayBuffer, dict[str, float]], tmp_path: Path
) -> None:
    model, buffer = fitted[0], fitted[1]
    torch.manual_seed(0)
    trainer = ImaginationActorCritic(
        model, imagination_actor(model), ImaginationConfig(num_starts=32, horizon=5)
    )
    train_in_imagination(trainer, posterior_states(model, buffer), 3)
    loaded = Policy.from_pretrained(trainer.policy.save_pretrained(tmp_path / "actor"))
    obs = {"state": buffer.all().obs["state"][:8].numpy()}
    actions = trainer.policy.predict(obs)
    assert actions.shape == (8, 1) and np.abs(actions).max() <= 2.0
    np.testing.assert_array_equal(loaded.predict(obs), actions)


@pytest.mark.slow
def test_the_imagination_trained_actor_beats_random_in_the_real_env() -> None:
    result = train_dreamer(ENV_ID, random_pendulum(4000), fit_steps=1500, updates=300, seed=0)
    assert result.real_return > result.random_return + 300, (result.real_return, result.random_return)
