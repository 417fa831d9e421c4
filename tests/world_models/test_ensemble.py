"""EnsembleDynamics: its loss maths, soft logvar bounds, seeded stepping, elites and saving."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.config import ConfigError, build_dataclass, load_yaml
from omnigym.core.registry import WORLD_MODELS
from omnigym.core.types import TransitionBatch
from omnigym.platform.experiment import config_dir
from omnigym.world_models.base import WorldModel
from omnigym.world_models.ensemble import (
    MEMBER_LOOP_MIN_ROWS,
    EnsembleDynamics,
    EnsembleDynamicsConfig,
    gaussian_nll,
    soft_clamp_logvar,
)

OBS_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
ACTION_SPACE = spaces.Box(-1.0, 1.0, (2,), np.float32)


def small_config(**overrides: object) -> EnsembleDynamicsConfig:
    settings: dict = {"num_members": 4, "num_elites": 2, "hidden_sizes": (32, 32), "weight_decay": (1e-5,)}
    return EnsembleDynamicsConfig(**{**settings, **overrides})


def linear_batch(n: int, seed: int = 0, heteroscedastic: bool = False) -> TransitionBatch:
    """``next = obs + 0.1 * action + noise``, ``reward = -|obs|^2``, terminated when ``obs[0] > 0.5``.

    Observations and actions are uniform in [-1, 1]; the noise std is 0.01, or ``0.05 * |obs|``.
    """
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(n, 2, generator=g) * 2 - 1
    action = torch.rand(n, 2, generator=g) * 2 - 1
    noise_std = 0.05 * obs.norm(dim=-1, keepdim=True) if heteroscedastic else 0.01
    next_obs = obs + 0.1 * action + noise_std * torch.randn(n, 2, generator=g)
    return TransitionBatch(
        obs={"state": obs},
        actions=action,
        rewards=-obs.square().sum(-1),
        next_obs={"state": next_obs},
        terminated=(obs[:, 0] > 0.5).float(),
    )


def trained_model(steps: int, heteroscedastic: bool = False) -> tuple[EnsembleDynamics, TransitionBatch]:
    """A small ensemble after ``steps`` Adam steps on minibatches of 128 of :func:`linear_batch`."""
    torch.manual_seed(0)
    model = EnsembleDynamics(small_config(learning_rate=3e-3), OBS_SPACE, ACTION_SPACE)
    data = linear_batch(1024, heteroscedastic=heteroscedastic)
    model.set_data_statistics(data)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(len(data), (128,), generator=g)
        model.train_step(
            TransitionBatch(
                obs={"state": data.obs["state"][idx]},
                actions=data.actions[idx],
                rewards=data.rewards[idx],
                next_obs={"state": data.next_obs["state"][idx]},
                terminated=data.terminated[idx],
            )
        )
    return model, data


@pytest.fixture(scope="module")
def model_and_data() -> tuple[EnsembleDynamics, TransitionBatch]:
    return trained_model(steps=600)


def test_gaussian_nll_matches_hand_computed_values() -> None:
    mean = torch.tensor([[[0.0, 1.0]], [[1.0, 3.0]]])  # two members, one row, two dims
    logvar = torch.tensor([[[0.0, math.log(4.0)]], [[0.0, 0.0]]])
    target = torch.tensor([[1.0, 3.0]])
    # member 0: 0.5 * (1^2 / 1 + 0) = 0.5 and 0.5 * (2^2 / 4 + ln 4) = 0.5 + ln 2; member 1: exact, 0
    expected = torch.tensor([(0.5 + 0.5 + math.log(2.0)) / 2, 0.0])
    torch.testing.assert_close(gaussian_nll(mean, logvar, target), expected)


def test_soft_clamp_keeps_logvar_within_the_bounds_and_passes_gradients() -> None:
    max_logvar = torch.tensor(0.5, requires_grad=True)
    min_logvar = torch.tensor(-10.0, requires_grad=True)
    raw = torch.linspace(-100.0, 100.0, 401)
    clamped = soft_clamp_logvar(raw, min_logvar, max_logvar)
    overshoot = math.log1p(math.exp(-10.5))  # the documented slack of the second softplus
    assert clamped.min() >= -10.0 and clamped.max() <= 0.5 + overshoot + 1e-6  # float32 rounding
    assert clamped[-1].item() == pytest.approx(0.5, abs=1e-4)
    assert clamped[0].item() == pytest.approx(-10.0, abs=1e-4)
    middle = soft_clamp_logvar(torch.tensor(-5.0), min_logvar, max_logvar)
    assert middle.item() == pytest.approx(-5.0, abs=0.01)  # nearly the identity away from the bounds
    clamped[-1].backward()
    assert max_logvar.grad is not None and max_logvar.grad.item() == pytest.approx(1.0, abs=1e-3)


def test_training_fits_the_linear_system(model_and_data: tuple[EnsembleDynamics, TransitionBatch]) -> None:
    model, _ = model_and_data
    metrics = model.evaluate(linear_batch(512, seed=5))
    assert metrics["eval/obs_mse"] < 5e-4  # the noise alone is 1e-4
    assert metrics["eval/reward_mse"] < 0.02  # reward variance is ~0.18
    assert metrics["eval/termination_accuracy"] > 0.95


def test_train_step_reports_metrics_and_lowers_the_loss() -> None:
    model = EnsembleDynamics(small_config(), OBS_SPACE, ACTION_SPACE)
    data = linear_batch(256)
    model.set_data_statistics(data)
    first = model.train_step(data)
    for _ in range(50):
        last = model.train_step(data)
    assert set(first) == {
        f"train/{k}" for k in ("loss", "nll", "termination_bce", "max_logvar", "min_logvar")
    }
    assert last["train/loss"] < first["train/loss"] - 1.0


def test_step_is_reproducible_from_the_generator_seed(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    model, data = model_and_data
    state = model.reset(data.obs)[:64]
    action = data.actions[:64]

    def rollout(seed: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        next_state, next_obs, reward, terminated, info = model.step(state, action, generator=g)
        return [next_state, next_obs["state"], reward, terminated, info["uncertainty"], info["member"]]

    same_a, same_b, other = rollout(3), rollout(3), rollout(4)
    for a, b in zip(same_a, same_b, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(same_a[0], other[0])
    assert not torch.equal(same_a[5], other[5])  # another member choice
    assert same_a[2].dtype == torch.float32 and same_a[3].dtype == torch.bool
    assert set(same_a[5].tolist()) <= set(model.elites.tolist())


def test_deterministic_step_returns_the_chosen_members_mean(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    model, data = model_and_data
    state, action = model.reset(data.obs)[:32], data.actions[:32]
    g = torch.Generator().manual_seed(0)
    next_state, next_obs, reward, terminated, info = model.step(
        state, action, generator=g, deterministic=True
    )
    prediction = model.predict(state, action)
    chosen = prediction.mean[info["member"], torch.arange(32)]
    end_probability = torch.sigmoid(prediction.termination_logit[info["member"], torch.arange(32)])
    assert torch.equal(terminated, end_probability > 0.5)
    assert 0 < terminated.sum() < 32  # the batch has rows on both sides of obs[0] = 0.5
    torch.testing.assert_close(next_state, state + chosen[:, :2], rtol=0, atol=0)
    torch.testing.assert_close(reward, chosen[:, 2], rtol=0, atol=0)
    assert torch.equal(next_obs["state"], next_state)
    sampled = model.step(state, action, generator=torch.Generator().manual_seed(0))[0]
    assert not torch.equal(sampled, next_state)


def uncertainties(model: EnsembleDynamics, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return model.step(obs, actions, generator=torch.Generator().manual_seed(0))[4]["uncertainty"]


def test_ensemble_std_uncertainty_is_larger_off_the_training_data(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    trained, data = model_and_data
    model = EnsembleDynamics(replace(trained.config, uncertainty="ensemble_std"), OBS_SPACE, ACTION_SPACE)
    model.load_state_dict(trained.state_dict())
    obs, actions = data.obs["state"], data.actions
    inside = uncertainties(model, obs, actions)
    assert (inside >= 0).all()
    for far in (obs * 8 + 10, obs * 8 - 10, obs + 3):  # the training observations lie in [-1, 1]
        assert uncertainties(model, far, actions).median() > 10 * inside.median()


def test_max_aleatoric_uncertainty_is_larger_off_the_data_where_the_noise_grows() -> None:
    """MOPO's measure is the members' learned noise: trained where the noise grows with ``|obs|``,
    it is larger beyond the data, in every direction."""
    model, data = trained_model(steps=300, heteroscedastic=True)
    obs, actions = data.obs["state"], data.actions
    inside = uncertainties(model, obs, actions)
    assert (inside >= 0).all()
    for far in (obs * 8 + 10, obs * 8 - 10, obs * 3):
        outside = uncertainties(model, far, actions)
        assert outside.median() > 2 * inside.median()
        assert (outside > inside).float().mean() > 0.9


def test_uncertainty_is_the_max_over_members_of_the_next_obs_std_norm(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    model, data = model_and_data
    state, action = model.reset(data.obs)[:8], data.actions[:8]
    info = model.step(state, action, generator=torch.Generator().manual_seed(0))[4]
    std = model.predict(state, action).std[..., :2]  # [M, B, 2]: the next obs, not the reward
    expected = torch.stack([std[m].norm(dim=-1) for m in range(std.shape[0])]).max(dim=0).values
    torch.testing.assert_close(info["uncertainty"], expected)


def test_select_elites_picks_the_members_with_the_lowest_holdout_error() -> None:
    model = EnsembleDynamics(small_config(num_members=7, num_elites=5), OBS_SPACE, ACTION_SPACE)
    data = linear_batch(256)
    model.set_data_statistics(data)
    # Each member predicts the constant c_j for every normalised target: its held-out MSE is
    # exactly var + (mean - c_j)^2 = 1 + c_j^2 on the data the statistics were fitted on.
    offsets = torch.tensor([3.0, 0.0, 2.0, 0.5, 1.0, 4.0, 0.2])
    with torch.no_grad():
        model.out.weight.zero_()
        model.out.bias[:, 0, :3] = offsets[:, None]
    torch.testing.assert_close(model.member_losses(data), 1 + offsets.square(), rtol=1e-4, atol=1e-4)
    model.select_elites(data)
    assert model.elites.tolist() == [1, 2, 3, 4, 6]


def test_save_and_load_give_identical_steps(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch], tmp_path: Path
) -> None:
    model, data = model_and_data
    model.select_elites(data)
    model.save_pretrained(tmp_path / "wm")
    loaded = WorldModel.from_pretrained(tmp_path / "wm")
    assert isinstance(loaded, EnsembleDynamics)
    assert loaded.config == model.config
    assert torch.equal(loaded.elites, model.elites) and torch.equal(loaded.target_std, model.target_std)
    state, action = model.reset(data.obs)[:16], data.actions[:16]
    original = model.step(state, action, generator=torch.Generator().manual_seed(7))
    reloaded = loaded.step(loaded.reset(data.obs)[:16], action, generator=torch.Generator().manual_seed(7))
    for a, b in zip(original[:4], reloaded[:4], strict=True):
        a, b = (a["state"], b["state"]) if isinstance(a, dict) else (a, b)
        assert torch.equal(a, b)
    assert torch.equal(original[4]["uncertainty"], reloaded[4]["uncertainty"])


def test_loading_missing_or_corrupt_files_fails_clearly(tmp_path: Path) -> None:
    model = EnsembleDynamics(small_config(), OBS_SPACE, ACTION_SPACE)
    with pytest.raises(FileNotFoundError, match="not a saved world model"):
        WorldModel.from_pretrained(tmp_path / "nowhere")
    path = model.save_pretrained(tmp_path / "wm")
    config_text = (path / "config.json").read_text()

    (path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt world model config"):
        WorldModel.from_pretrained(path)
    (path / "config.json").write_text(json.dumps({**json.loads(config_text), "type": "no_such_model"}))
    with pytest.raises(ValueError, match="corrupt world model config"):
        WorldModel.from_pretrained(path)

    bigger = json.loads(config_text)
    bigger["config"]["hidden_sizes"] = [16]
    (path / "config.json").write_text(json.dumps(bigger))
    with pytest.raises(ValueError, match="do not match"):
        WorldModel.from_pretrained(path)

    (path / "config.json").write_text(config_text)
    (path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt world model weights"):
        WorldModel.from_pretrained(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors is missing"):
        WorldModel.from_pretrained(path)


def test_registry_and_yaml_build_the_default_config() -> None:
    assert WORLD_MODELS.get("ensemble") is EnsembleDynamics
    config = build_dataclass(
        EnsembleDynamicsConfig, load_yaml(config_dir() / "world_model" / "ensemble.yaml")
    )
    assert config == EnsembleDynamicsConfig()
    assert (config.num_members, config.num_elites, config.hidden_sizes) == (7, 5, (200, 200, 200, 200))
    model = WORLD_MODELS.build("ensemble", config, OBS_SPACE, ACTION_SPACE)
    decays = [group["weight_decay"] for group in model.optimizer.param_groups]
    assert decays == [2.5e-5, 5e-5, 7.5e-5, 7.5e-5, 1e-4, 0.0]


def rare_failure_batch(n: int, seed: int = 0) -> TransitionBatch:
    """:func:`linear_batch` whose transitions with ``obs[0] > 0.5`` end with probability 0.2 only."""
    data = linear_batch(n, seed)
    g = torch.Generator().manual_seed(seed + 1)
    data.terminated = data.terminated * (torch.rand(n, generator=g) < 0.2).float()
    return data


def test_termination_pos_weight_ends_rows_whose_failure_probability_exceeds_one_over_one_plus_w() -> None:
    """Failures with probability 0.2 where ``obs[0] > 0.5``: below the 0.5 threshold with weight 1,
    whose head learns the probability itself, and above it with weight 9 (odds 0.25 x 9 = 2.25,
    i.e. 0.69), while the rows outside that region still never end."""
    data, test = rare_failure_batch(4096), linear_batch(2048, seed=7)
    risky = test.obs["state"][:, 0] > 0.6
    safe = test.obs["state"][:, 0] < 0.4
    ended = {}
    for weight in (1.0, 9.0):
        torch.manual_seed(0)
        model = EnsembleDynamics(
            small_config(learning_rate=3e-3, termination_pos_weight=weight, deterministic=True),
            OBS_SPACE, ACTION_SPACE,
        )  # fmt: skip
        model.set_data_statistics(data)
        g = torch.Generator().manual_seed(1)
        for _ in range(500):
            idx = torch.randint(len(data), (256,), generator=g)
            model.train_step(
                TransitionBatch({"state": data.obs["state"][idx]}, data.actions[idx], data.rewards[idx],
                                {"state": data.next_obs["state"][idx]}, data.terminated[idx])
            )  # fmt: skip
        *_, terminated, _ = model.step(
            test.obs["state"], test.actions, generator=torch.Generator().manual_seed(0)
        )
        ended[weight] = terminated
        metrics = model.evaluate(rare_failure_batch(2048, seed=7))
        assert 0 <= metrics["eval/termination_false_rate"] <= metrics["eval/termination_recall"] <= 1
    assert ended[1.0][risky].float().mean() < 0.05
    assert ended[9.0][risky].float().mean() > 0.7  # 0.85 measured (the region's edge is fuzzy)
    assert ended[1.0][safe].float().mean() == 0 and ended[9.0][safe].float().mean() < 0.02


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_elites": 5, "num_members": 4}, "num_elites"),
        ({"weight_decay": (1e-5, 1e-5)}, "weight_decay"),
        ({"activation": "sigmoidish"}, "activation"),
        ({"termination_threshold": 1.0}, "termination_threshold"),
        ({"termination_pos_weight": 0.0}, "termination_pos_weight"),
        ({"uncertainty": "epistemic"}, "uncertainty"),
    ],
)
def test_config_rejects_settings_that_cannot_train(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        small_config(**overrides)
    with pytest.raises(ConfigError, match=message):
        build_dataclass(EnsembleDynamicsConfig, {**vars(small_config()), **overrides})


def test_several_observation_keys_round_trip_and_images_are_refused() -> None:
    obs_space = spaces.Dict(
        {
            "state": spaces.Box(-1, 1, (3,), np.float32),
            "goal": spaces.Box(-1, 1, (2, 2), np.float32),
            "text": spaces.Text(8),
        }
    )
    model = EnsembleDynamics(small_config(), obs_space, ACTION_SPACE)
    obs = {"state": torch.randn(5, 3), "goal": torch.randn(5, 2, 2)}
    flat = model.reset(obs)
    assert flat.shape == (5, 7)
    back = model.unflatten_obs(flat)
    assert torch.equal(back["state"], obs["state"]) and torch.equal(back["goal"], obs["goal"])
    _, next_obs, reward, terminated, _ = model.step(flat, torch.zeros(5, 2), generator=torch.Generator())
    assert next_obs["goal"].shape == (5, 2, 2) and reward.shape == (5,) and terminated.shape == (5,)
    image_space = spaces.Dict({"image": spaces.Box(0, 255, (4, 4, 3), np.uint8)})
    with pytest.raises(TypeError, match="pixel world model"):
        EnsembleDynamics(small_config(), image_space, ACTION_SPACE)


# --- stepping without the uncertainty: only the chosen members run --------------------------


def step_both_ways(
    model: EnsembleDynamics, state: torch.Tensor, action: torch.Tensor, seed: int, **kwargs: object
) -> tuple[tuple, tuple]:
    """One step with and one without the uncertainty, from generators of the same seed."""
    with_u = model.step(state, action, generator=torch.Generator().manual_seed(seed), **kwargs)
    without = model.step(
        state, action, generator=torch.Generator().manual_seed(seed), with_uncertainty=False, **kwargs
    )
    return with_u, without


def assert_same_step(with_u: tuple, without: tuple) -> None:
    """Equal rollouts: same member choice and termination, next obs and reward to float rounding."""
    assert torch.equal(with_u[4]["member"], without[4]["member"])
    torch.testing.assert_close(without[0], with_u[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(without[1]["state"], with_u[1]["state"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(without[2], with_u[2], rtol=1e-5, atol=1e-5)
    assert torch.equal(without[3], with_u[3])
    assert "uncertainty" in with_u[4] and "uncertainty" not in without[4]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("batch", [1, 7, 300, MEMBER_LOOP_MIN_ROWS + 88])  # both predict paths
def test_rollouts_are_equal_with_and_without_uncertainty(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch], deterministic: bool, batch: int
) -> None:
    """Same seed, same draws: five chained steps sample the same rollout either way."""
    model, data = model_and_data
    state = model.reset(data.obs)[:batch]
    g_with, g_without = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    state_with = state_without = state
    used: set[int] = set()
    for t in range(5):
        action = data.actions.roll(100 * t, dims=0)[:batch]
        with_u = model.step(state_with, action, generator=g_with, deterministic=deterministic)
        without = model.step(
            state_without, action, generator=g_without, deterministic=deterministic, with_uncertainty=False
        )
        assert_same_step(with_u, without)
        state_with, state_without = with_u[0], without[0]
        used |= set(without[4]["member"].tolist())
    assert len(used) > 1  # rows really went through different members


@pytest.mark.parametrize("elites", [[1, 3], [2]])
def test_members_no_row_uses_are_skipped(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch], elites: list[int]
) -> None:
    """Elites with gaps (members 0 and 2 unused) and a single elite (every row in one group)."""
    trained, data = model_and_data
    model = EnsembleDynamics(replace(trained.config, num_elites=len(elites)), OBS_SPACE, ACTION_SPACE)
    model.load_state_dict({**trained.state_dict(), "elites": torch.tensor(elites)})
    state, action = model.reset(data.obs)[:64], data.actions[:64]
    with_u, without = step_both_ways(model, state, action, seed=5)
    assert_same_step(with_u, without)
    assert set(without[4]["member"].tolist()) == set(elites)


def test_an_empty_batch_steps_to_empty_outputs(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    model, _ = model_and_data
    next_state, next_obs, reward, terminated, _ = model.step(
        torch.zeros(0, 2), torch.zeros(0, 2), generator=torch.Generator(), with_uncertainty=False
    )
    assert next_state.shape == next_obs["state"].shape == (0, 2)
    assert reward.shape == terminated.shape == (0,)


def test_predict_runs_the_same_network_as_forward(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    """From MEMBER_LOOP_MIN_ROWS rows ``predict`` runs the members one by one; ``forward`` all at once."""
    model, data = model_and_data
    state, action = model.reset(data.obs)[:MEMBER_LOOP_MIN_ROWS], data.actions[:MEMBER_LOOP_MIN_ROWS]
    prediction = model.predict(state, action)
    with torch.no_grad():
        mean, logvar, termination_logit = model(model._inputs(state, action))
    torch.testing.assert_close(prediction.mean, mean * model.target_std + model.target_mean)
    torch.testing.assert_close(prediction.std, torch.exp(0.5 * logvar) * model.target_std)
    torch.testing.assert_close(prediction.termination_logit, termination_logit)


def test_stepping_uses_the_current_weights_and_the_model_still_trains() -> None:
    """Steps between training steps and a weight load see the new weights; outputs need no grad
    but are ordinary tensors that later autograd code may use."""
    model = EnsembleDynamics(small_config(), OBS_SPACE, ACTION_SPACE)
    data = linear_batch(256)
    model.set_data_statistics(data)
    state, action = model.reset(data.obs)[:32], data.actions[:32]
    before = model.step(state, action, generator=torch.Generator().manual_seed(0), with_uncertainty=False)
    assert not before[0].requires_grad and not before[0].is_inference()
    weights = model.out.weight.detach().clone()
    metrics = model.train_step(data)
    assert not torch.equal(model.out.weight, weights)  # the step changed the weights in place
    with_u, without = step_both_ways(model, state, action, seed=0)
    assert_same_step(with_u, without)  # ``with_u`` runs ``predict``: the current weights
    assert not torch.allclose(without[0], before[0])
    assert model.train_step(data)["train/loss"] < metrics["train/loss"]  # stepping left training intact
    (before[0] * torch.ones(2, requires_grad=True)).sum().backward()  # usable in a later graph

    other = EnsembleDynamics(small_config(), OBS_SPACE, ACTION_SPACE)  # another initialisation
    other.set_data_statistics(data)
    seeded = torch.Generator().manual_seed(0)
    assert not torch.allclose(
        other.step(state, action, generator=seeded, with_uncertainty=False)[0], without[0]
    )
    other.load_state_dict(model.state_dict())  # copies into the existing parameters, in place
    loaded_with, loaded_without = step_both_ways(other, state, action, seed=0)
    assert_same_step(loaded_with, loaded_without)
    now = model.step(state, action, generator=torch.Generator().manual_seed(0), with_uncertainty=False)
    torch.testing.assert_close(loaded_without[0], now[0], rtol=0, atol=0)


def test_world_model_env_rollouts_are_equal_with_and_without_reported_uncertainty(
    model_and_data: tuple[EnsembleDynamics, TransitionBatch],
) -> None:
    """The env skips the uncertainty by default; the rollout (with autoresets) is unchanged by it."""
    from omnigym.world_models.env import WorldModelVectorEnv

    model, data = model_and_data
    starts = data.obs["state"][:16].numpy()
    actions = [np.random.default_rng(t).uniform(-1, 1, (8, 2)).astype(np.float32) for t in range(12)]
    rollouts = []
    for report in (False, True):
        envs = WorldModelVectorEnv(model, 8, start_states=starts, horizon=5, report_uncertainty=report)
        steps = [envs.reset(seed=3)[0]["state"]]
        for action in actions:
            obs, reward, terminated, truncated, info = envs.step(action)
            assert ("uncertainty" in info) == report
            steps += [obs["state"], reward, terminated, truncated]
        rollouts.append(steps)
    for plain, reported in zip(*rollouts, strict=True):
        np.testing.assert_allclose(plain, reported, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_uncertainty", [True, False])
def test_predictions_stay_inside_the_observation_space(with_uncertainty: bool) -> None:
    """A model pushed past the space (Pendulum's |thdot| <= 8) is clipped to it, as the env would be."""
    space = spaces.Dict(
        {"state": spaces.Box(np.array([-1.0, -np.inf]), np.array([1.0, np.inf]), dtype=np.float32)}
    )
    model = EnsembleDynamics(small_config(deterministic=True), space, ACTION_SPACE)
    with torch.no_grad():
        model.target_mean[:2] = torch.tensor([10.0, 10.0])  # every member predicts an obs delta of ~+10
        model.target_std.fill_(1e-6)
    state = torch.tensor([[0.5, 0.5], [-0.5, -3.0]])
    next_state, obs, *_ = model.step(state, torch.zeros(2, 2), with_uncertainty=with_uncertainty)
    assert next_state[:, 0].tolist() == [1.0, 1.0]  # bounded key: clipped to its upper bound
    assert next_state[:, 1].tolist() == pytest.approx([10.5, 7.0], abs=1e-3)  # unbounded key: untouched
    assert torch.equal(obs["state"], next_state)
