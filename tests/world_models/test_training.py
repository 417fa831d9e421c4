"""fit_world_model: the holdout split, MBPO's early stopping, budgets, seeding and elites."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.types import TransitionBatch
from omnigym.platform.buffers import ReplayBuffer
from omnigym.world_models.ensemble import EnsembleDynamics, EnsembleDynamicsConfig
from omnigym.world_models.training import EarlyStopping, fit_world_model, split_holdout, take_rows

OBS_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (3,), np.float32)


def linear_buffer(n: int, seed: int = 0, learnable: bool = True) -> ReplayBuffer:
    """``next = obs + 0.1 * action + N(0, 0.01^2)``, ``reward = -|obs|^2`` (or pure noise when not
    ``learnable``); observations and actions uniform in [-1, 1]."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 3, generator=g) * 2 - 1
    action = torch.rand(n, 3, generator=g) * 2 - 1
    if learnable:
        next_obs = obs + 0.1 * action + 0.01 * torch.randn(n, 3, generator=g)
        reward = -obs.square().sum(-1)
    else:
        next_obs, reward = torch.randn(n, 3, generator=g), torch.randn(n, generator=g)
    buffer = ReplayBuffer(OBS_SPACE, ACTION_SPACE, capacity=n)
    buffer.add({"state": obs}, action, reward, {"state": next_obs}, torch.zeros(n, dtype=torch.bool))
    return buffer


def small_model(seed: int = 0, **overrides: object) -> EnsembleDynamics:
    torch.manual_seed(seed)
    settings: dict = {
        "num_members": 3,
        "num_elites": 2,
        "hidden_sizes": (64, 64),
        "learning_rate": 3e-3,
        "weight_decay": (1e-5,),
    }
    return EnsembleDynamics(EnsembleDynamicsConfig(**{**settings, **overrides}), OBS_SPACE, ACTION_SPACE)


def test_fitting_a_linear_system_reaches_a_small_holdout_error() -> None:
    buffer = linear_buffer(2000)
    epochs: list[int] = []
    metrics = fit_world_model(
        small_model(), buffer, max_epochs=25, batch_size=128, callback=lambda epoch, _: epochs.append(epoch)
    )
    assert epochs == list(range(1, int(metrics["train/epochs"]) + 1))
    assert metrics["train/steps"] == metrics["train/epochs"] * 15  # ceil(1800 training rows / 128)
    # The obs change varies by ~0.003 of which the noise is 1e-4, the reward by ~0.27.
    assert metrics["eval/obs_mse"] < 2e-4
    assert metrics["eval/reward_mse"] < 5e-3
    assert metrics["eval/termination_accuracy"] == 1.0
    untrained = small_model(seed=1)  # for contrast: the thresholds are far below an unfitted model's
    untrained.set_data_statistics(buffer.all())
    assert untrained.evaluate(buffer.all())["eval/obs_mse"] > 20 * metrics["eval/obs_mse"]


def test_fit_is_reproducible_from_the_seed() -> None:
    buffer = linear_buffer(600)
    first = fit_world_model(small_model(), buffer, max_epochs=2, batch_size=100, seed=3)
    second = fit_world_model(small_model(), buffer, max_epochs=2, batch_size=100, seed=3)
    other = fit_world_model(small_model(), buffer, max_epochs=2, batch_size=100, seed=4)
    assert first == second
    assert first["eval/loss"] != other["eval/loss"]


def test_early_stopping_ends_training_when_the_holdout_loss_stops_improving() -> None:
    metrics = fit_world_model(
        small_model(), linear_buffer(400, learnable=False), max_epochs=200, batch_size=64, patience=3
    )
    assert 4 <= metrics["train/epochs"] < 40  # noise cannot be fitted: held-out loss stalls at once


def test_max_steps_caps_the_optimiser_steps_mid_epoch() -> None:
    steps: list[float] = []
    model = small_model()
    original = model.train_step

    def counting(batch: TransitionBatch) -> dict[str, float]:
        steps.append(1.0)
        return original(batch)

    model.train_step = counting  # type: ignore[method-assign]
    metrics = fit_world_model(model, linear_buffer(1000), max_steps=10, batch_size=100)
    assert len(steps) == 10 and metrics["train/steps"] == 10 and metrics["train/epochs"] == 2


def test_the_elites_are_chosen_on_the_holdout_at_the_end() -> None:
    model = small_model(num_members=4, num_elites=2)
    buffer = linear_buffer(800)
    fit_world_model(model, buffer, max_epochs=3, batch_size=100, seed=1)
    _, holdout = split_holdout(buffer.all(), 0.1, 5000, torch.Generator().manual_seed(1))
    assert holdout is not None
    expected = model.member_losses(holdout).argsort()[:2].sort().values
    assert torch.equal(model.elites, expected)


def test_the_holdout_is_a_capped_fraction_disjoint_from_the_training_rows() -> None:
    data = linear_buffer(300).all()
    train, holdout = split_holdout(data, 0.1, 5000, torch.Generator().manual_seed(0))
    assert holdout is not None and (len(train), len(holdout)) == (270, 30)
    rows = torch.cat([train.rewards, holdout.rewards]).sort().values
    assert torch.equal(rows, data.rewards.sort().values)  # every row once, in one of the two parts
    train, holdout = split_holdout(data, 0.5, 20, torch.Generator().manual_seed(0))
    assert holdout is not None and (len(train), len(holdout)) == (280, 20)
    train, holdout = split_holdout(data, 0.0, 20, torch.Generator().manual_seed(0))
    assert holdout is None and len(train) == 300


def test_take_rows_selects_every_field() -> None:
    data = linear_buffer(10).all()
    idx = torch.tensor([4, 1])
    rows = take_rows(data, idx)
    assert torch.equal(rows.obs["state"], data.obs["state"][idx])
    assert torch.equal(rows.next_obs["state"], data.next_obs["state"][idx])
    assert torch.equal(rows.actions, data.actions[idx]) and torch.equal(rows.rewards, data.rewards[idx])
    assert rows.mc_returns is None


def test_early_stopping_follows_mbpos_one_percent_rule() -> None:
    model = small_model()
    stopper = EarlyStopping(patience=2, min_improvement=0.01)
    assert not stopper.update(torch.tensor([1.0, 1.0]), model)
    assert not stopper.update(torch.tensor([0.995, 0.999]), model)  # < 1 %: no member improved (1)
    assert not stopper.update(torch.tensor([0.98, 1.0]), model)  # member 0 gained 2 %: reset
    assert stopper.best is not None and stopper.best.tolist() == pytest.approx([0.98, 1.0])
    assert not stopper.update(torch.tensor([0.975, 0.995]), model)  # (1)
    assert stopper.update(torch.tensor([0.975, 0.995]), model)  # (2): stop
    assert stopper.best_mean == pytest.approx((0.975 + 0.995) / 2)


def test_fit_needs_something_that_stops_it() -> None:
    with pytest.raises(ValueError, match="max_epochs, max_steps or a holdout"):
        fit_world_model(small_model(), linear_buffer(50), holdout_fraction=0.0)
