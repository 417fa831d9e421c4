"""WorldModelVectorEnv with a hand-checkable world model: linear dynamics on Pendulum's spaces.

The fake model moves every observation by ``gain * action`` (``gain = 0.1``), rewards
``-|next_obs|^2``, terminates where ``|next_obs| > 3`` and reports ``uncertainty = |action|``;
with ``noise > 0`` it adds Gaussian noise drawn from the step's generator.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.core.registry import POLICIES, WORLD_MODELS
from omnigym.core.types import Obs
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.vec_env import EnvConfig, WorldModelEnvConfig, make_env, make_vec_env
from omnigym.world_models.base import WorldModel, WorldModelConfig
from omnigym.world_models.env import WorldModelEnv, WorldModelVectorEnv
from omnigym.world_models.known import pendulum_reward

ENV_ID = "Pendulum-v1"
NAME = "test_linear"


@dataclass
class LinearConfig(WorldModelConfig):
    type: str = NAME
    noise: float = 0.0


class LinearWorldModel(WorldModel):
    """``next = obs + gain * action (+ noise)``; reward ``-|next|^2``; terminated ``|next| > 3``."""

    name = NAME
    config_class = LinearConfig

    def __init__(
        self, config: LinearConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        self.noise = config.noise
        self.register_buffer("gain", torch.tensor(0.1))
        self.asked_for_uncertainty: bool | None = None

    def reset(self, obs: Obs) -> dict[str, Tensor]:
        return {"state": obs["state"].clone()}

    def step(
        self,
        state: Any,
        action: Tensor,
        *,
        generator: torch.Generator | None = None,
        with_uncertainty: bool = True,
    ) -> Any:
        self.asked_for_uncertainty = with_uncertainty  # what the env asked for, for the tests to read
        nxt = state["state"] + self.gain * action
        if self.noise > 0:
            nxt = nxt + self.noise * torch.randn(nxt.shape, generator=generator, device=nxt.device)
        norm = nxt.norm(dim=1)
        info = {"uncertainty": action.abs().sum(dim=1)}
        return {"state": nxt}, {"state": nxt}, -norm.square(), norm > 3.0, info


@pytest.fixture(scope="module")
def pendulum_spaces() -> tuple[spaces.Dict, spaces.Box]:
    env = make_env(ENV_ID)
    env.close()
    return env.observation_space, env.action_space


def linear_model(pendulum_spaces: tuple[spaces.Dict, spaces.Box], noise: float = 0.0) -> LinearWorldModel:
    return LinearWorldModel(LinearConfig(noise=noise), *pendulum_spaces)


@pytest.fixture
def model(pendulum_spaces: tuple[spaces.Dict, spaces.Box]) -> LinearWorldModel:
    return linear_model(pendulum_spaces)


STARTS = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [-1.0, 0.0, -1.0], [0.6, 0.8, 2.0]], dtype=np.float32)


def make(model: WorldModel | str, num_envs: int = 4, **kwargs: Any) -> WorldModelVectorEnv:
    kwargs.setdefault("start_states", STARTS)
    kwargs.setdefault("horizon", 100)
    return WorldModelVectorEnv(model, num_envs, **kwargs)


def full(value: float, num_envs: int = 4) -> np.ndarray:
    return np.full((num_envs, 1), value, dtype=np.float32)


def rollout(envs: gym.vector.VectorEnv, actions: list[np.ndarray], seed: int) -> list[tuple]:
    out: list[tuple] = [envs.reset(seed=seed)[0]]
    for action in actions:
        out.append(envs.step(action)[:4])
    return out


def assert_same_rollouts(a: list[tuple], b: list[tuple]) -> None:
    for step_a, step_b in zip(a, b, strict=True):
        for x, y in zip(step_a, step_b, strict=True):
            if isinstance(x, dict):
                for key in x:
                    np.testing.assert_array_equal(x[key], y[key])
            else:
                np.testing.assert_array_equal(x, y)


@pytest.fixture
def registered() -> Iterator[None]:
    """The fake model registered for ``from_pretrained`` for one test only."""
    WORLD_MODELS.register(NAME, LinearWorldModel)
    yield
    WORLD_MODELS._loaded.pop(NAME)


# --- spaces, inputs, seeding ----------------------------------------------------------------


def test_spaces_are_the_real_envs(model: LinearWorldModel) -> None:
    envs = make(model, env_id=ENV_ID, horizon=None)
    real = make_env(ENV_ID)
    assert envs.single_observation_space == real.observation_space
    assert envs.single_action_space == real.action_space
    assert envs.observation_space == gym.vector.utils.batch_space(real.observation_space, 4)
    obs, info = envs.reset(seed=0)
    assert obs["state"].dtype == np.float32 and obs["state"].shape == (4, 3) and info == {}
    assert envs.horizon == 200  # Pendulum's time limit


def test_a_model_of_other_spaces_is_refused() -> None:
    space = spaces.Dict({"state": spaces.Box(-1, 1, (4,), np.float32)})
    other = LinearWorldModel(LinearConfig(), space, spaces.Box(-2, 2, (1,), np.float32))
    with pytest.raises(ValueError, match=r"trained on observation space .* but Pendulum-v1 has"):
        make(other, env_id=ENV_ID, start_states=np.zeros((2, 4), np.float32))


def test_bad_actions_are_value_errors(model: LinearWorldModel) -> None:
    envs = make(model)
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(full(0.0))
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        envs.step(np.array([[0.0], [np.nan], [0.0], [0.0]], dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(4, 1\)"):
        envs.step(np.zeros((4,), dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(4, 1\)"):
        envs.step(np.zeros((3, 1), dtype=np.float32))


def test_actions_are_clipped_to_the_box(model: LinearWorldModel) -> None:
    envs = make(model)
    obs, _ = envs.reset(seed=0)
    next_obs, *_ = envs.step(full(5.0))  # the box is [-2, 2]
    np.testing.assert_allclose(next_obs["state"], obs["state"] + 0.2, rtol=1e-6)


def test_same_seed_same_trajectory_other_seed_another(pendulum_spaces: tuple) -> None:
    envs = make(linear_model(pendulum_spaces, noise=0.1), horizon=7)  # autoresets inside 20 steps
    actions = [np.random.default_rng(t).uniform(-2, 2, (4, 1)).astype(np.float32) for t in range(20)]
    first = rollout(envs, actions, seed=3)
    assert_same_rollouts(first, rollout(envs, actions, seed=3))
    assert_same_rollouts(
        first, rollout(make(linear_model(pendulum_spaces, noise=0.1), horizon=7), actions, 3)
    )
    other = rollout(envs, actions, seed=4)
    assert not np.array_equal(first[1][0]["state"], other[1][0]["state"])


def test_reset_seeds_rows_as_gymnasium_does(model: LinearWorldModel) -> None:
    """Row ``i`` starts from seed ``seed + i``; a list of seeds gives rows with equal seeds equal starts."""
    envs = make(model)
    obs, _ = envs.reset(seed=10)
    one, _ = make(model, num_envs=1).reset(seed=12)
    np.testing.assert_array_equal(obs["state"][2], one["state"][0])
    grouped, _ = envs.reset(seed=[5, 5, 9, 9])
    np.testing.assert_array_equal(grouped["state"][0], grouped["state"][1])
    np.testing.assert_array_equal(grouped["state"][2], grouped["state"][3])


def test_live_start_states_are_the_real_envs_first_observations(model: LinearWorldModel) -> None:
    envs = make(model, env_id=ENV_ID, start_states="live")
    obs, _ = envs.reset(seed=7)
    real = gym.vector.SyncVectorEnv([lambda: make_env(ENV_ID)] * 4)
    real_obs, _ = real.reset(seed=7)
    np.testing.assert_array_equal(obs["state"], real_obs["state"])
    envs.close()


# --- episode ends ------------------------------------------------------------------------------


def test_horizon_truncates_exactly(model: LinearWorldModel) -> None:
    envs = make(model, horizon=5)
    envs.reset(seed=0)
    for t in range(1, 11):
        _, _, terminated, truncated, info = envs.step(full(0.0))
        assert not terminated.any()
        assert truncated.all() == (t % 5 == 0) and truncated.any() == (t % 5 == 0), t
        assert ("final_obs" in info) == (t % 5 == 0)
        if t % 5 == 0:
            np.testing.assert_array_equal(info["episode"]["l"], [5] * 4)


def test_same_step_autoreset_reports_the_true_final_obs(model: LinearWorldModel) -> None:
    """Rows pushed past |obs| > 3 terminate; the step returns their next start, info their final obs."""
    starts = np.array([[2.95, 0.0, 0.0]], dtype=np.float32)
    # report_uncertainty: the step info (and so final_info) holds uncertainty only when asked for.
    envs = make(model, num_envs=3, start_states=starts, report_uncertainty=True)
    obs, _ = envs.reset(seed=0)
    actions = np.array([[1.0], [0.0], [1.0]], dtype=np.float32)  # 2.95 + 0.1 > 3 ends rows 0 and 2
    next_obs, rewards, terminated, truncated, info = envs.step(actions)
    done = np.array([True, False, True])
    np.testing.assert_array_equal(terminated, done)
    assert not truncated.any()
    np.testing.assert_array_equal(info["_final_obs"], done)
    np.testing.assert_array_equal(info["_final_info"], done)
    np.testing.assert_array_equal(info["_episode"], done)
    assert info["final_obs"][1] is None
    for i in (0, 2):
        final = info["final_obs"][i]["state"]
        np.testing.assert_allclose(final, obs["state"][i] + 0.1 * actions[i], rtol=1e-6)
        np.testing.assert_array_equal(next_obs["state"][i], starts[0])  # the next episode's start
        assert info["episode"]["r"][i] == pytest.approx(rewards[i]) and info["episode"]["l"][i] == 1
    np.testing.assert_allclose(next_obs["state"][1], obs["state"][1], rtol=1e-6)
    np.testing.assert_array_equal(info["final_info"]["uncertainty"], [1.0, 0.0, 1.0])
    # The restarted rows continue from the start state, in the model too.
    after, *_ = envs.step(np.zeros((3, 1), np.float32))
    np.testing.assert_allclose(after["state"][[0, 2]], starts[[0, 0]], rtol=1e-6)


def test_start_states_are_sampled_from_the_given_set(model: LinearWorldModel) -> None:
    envs = make(model, num_envs=8, horizon=1)
    seen = [envs.reset(seed=0)[0]["state"]]
    for _ in range(10):
        seen.append(envs.step(full(0.0, 8))[0]["state"])  # every step restarts every row
    rows = np.concatenate(seen)
    members = (rows[:, None, :] == STARTS[None]).all(axis=2)
    assert members.any(axis=1).all(), "a start state outside the set"
    assert members.any(axis=0).all(), "88 draws of 4 start states missed one"


@pytest.mark.filterwarnings("ignore:`author_email` is set to None")  # Minari's, on writing a dataset
def test_start_states_from_a_minari_dataset(
    model: LinearWorldModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omnigym.platform.datasets import collect_dataset, load_dataset_steps

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    random_cls = POLICIES.get("random")
    env = make_env(ENV_ID)
    policy = random_cls(random_cls.config_class(), env.observation_space, env.action_space)
    collect_dataset(
        policy, ENV_ID, "omnigym/pendulum-test-v0", episodes=2, env_kwargs={"max_episode_steps": 10}
    )
    dataset = load_dataset_steps("omnigym/pendulum-test-v0").obs["state"]
    envs = make(model, num_envs=16, env_id=ENV_ID, start_states="omnigym/pendulum-test-v0")
    starts = envs.reset(seed=0)[0]["state"]
    assert (starts[:, None, :] == dataset[None]).all(axis=2).any(axis=1).all()
    assert len(np.unique(starts, axis=0)) > 1


def test_start_states_are_checked(model: LinearWorldModel) -> None:
    with pytest.raises(ValueError, match="rows of shape"):
        make(model, start_states=np.zeros((5, 2), np.float32))
    with pytest.raises(ValueError, match="lack observation keys"):
        make(model, start_states={"image": np.zeros((5, 3), np.float32)})
    with pytest.raises(ValueError, match=r"live.*env id"):
        make(model, start_states="live")


# --- rewards and uncertainty ------------------------------------------------------------------


def test_mopo_penalty_subtracts_lambda_times_uncertainty(model: LinearWorldModel) -> None:
    actions = np.array([[0.5], [-1.5], [2.0], [0.0]], dtype=np.float32)
    plain = make(model)
    plain.reset(seed=1)
    _, rewards, *_ = plain.step(actions)
    penalised = make(model, uncertainty_penalty=0.7)
    penalised.reset(seed=1)
    _, penalised_rewards, _, _, info = penalised.step(actions)
    np.testing.assert_array_equal(info["uncertainty"], np.abs(actions[:, 0]))
    expected = torch.tensor(rewards) - 0.7 * torch.tensor(np.abs(actions[:, 0]))  # the env's float32 maths
    np.testing.assert_array_equal(penalised_rewards, expected.numpy())
    assert penalised_rewards.dtype == np.float32


def test_max_uncertainty_truncates_the_uncertain_rows(model: LinearWorldModel) -> None:
    envs = make(model, max_uncertainty=1.0)
    obs, _ = envs.reset(seed=0)
    actions = np.array([[0.5], [-1.5], [1.0], [2.0]], dtype=np.float32)
    _, _, terminated, truncated, info = envs.step(actions)
    uncertain = np.array([False, True, False, True])  # |a| > 1 (1.0 itself is not above)
    np.testing.assert_array_equal(truncated, uncertain)
    assert not terminated.any()  # the MDP did not end: truncated, so learners bootstrap
    np.testing.assert_array_equal(info["uncertainty_truncated"], uncertain)
    np.testing.assert_array_equal(info["_final_obs"], uncertain)
    np.testing.assert_array_equal(info["final_info"]["uncertainty_truncated"], uncertain)
    np.testing.assert_allclose(info["final_obs"][1]["state"], obs["state"][1] - 0.15, rtol=1e-6)
    assert info["final_obs"][0] is None


def test_uncertainty_settings_need_a_model_that_reports_it(pendulum_spaces: tuple) -> None:
    class Certain(LinearWorldModel):
        def step(self, state: Any, action: Tensor, **kwargs: Any) -> Any:
            out = super().step(state, action, **kwargs)
            return (*out[:4], {})

    envs = make(Certain(LinearConfig(), *pendulum_spaces), uncertainty_penalty=1.0)
    envs.reset(seed=0)
    with pytest.raises(RuntimeError, match="reports no uncertainty"):
        envs.step(full(0.0))


@pytest.mark.parametrize(
    ("settings", "wanted"),
    [
        ({}, False),
        ({"uncertainty_penalty": 0.5}, True),
        ({"max_uncertainty": 1.0}, True),
        ({"report_uncertainty": True}, True),
    ],
)
def test_the_model_computes_uncertainty_only_when_a_setting_needs_it(
    model: LinearWorldModel, settings: dict, wanted: bool
) -> None:
    """Skipping it lets an ensemble run one member per row; the info's keys follow the settings."""
    envs = make(model, **settings)
    envs.reset(seed=0)
    _, _, _, _, info = envs.step(full(0.5))
    assert model.asked_for_uncertainty is wanted
    assert ("uncertainty" in info) is wanted  # the fake model reports it either way
    if wanted:
        np.testing.assert_array_equal(info["uncertainty"], [0.5] * 4)


def test_report_uncertainty_comes_from_the_config(saved: Path) -> None:
    config = EnvConfig(
        id=ENV_ID,
        backend="world_model",
        world_model=WorldModelEnvConfig(model=str(saved), horizon=4, report_uncertainty=True),
    )
    envs = make_vec_env(config)
    assert isinstance(envs, WorldModelVectorEnv) and envs.report_uncertainty and envs.wants_uncertainty
    envs.reset(seed=0)
    assert "uncertainty" in envs.step(np.zeros((envs.num_envs, 1), np.float32))[4]


def test_known_reward_replaces_the_learned_one(model: LinearWorldModel) -> None:
    envs = make(model, env_id=ENV_ID, reward="known", termination="known")
    obs, _ = envs.reset(seed=0)
    actions = np.array([[0.5], [-1.5], [3.0], [0.0]], dtype=np.float32)
    next_obs, rewards, terminated, _, _ = envs.step(actions)
    expected = pendulum_reward(
        torch.tensor(obs["state"]), torch.tensor(actions), torch.tensor(next_obs["state"])
    )
    np.testing.assert_array_equal(rewards, expected.numpy())
    learned = -np.square(np.linalg.norm(next_obs["state"], axis=1))
    assert not np.allclose(rewards, learned)
    assert not terminated.any()  # Pendulum never terminates


def test_known_functions_need_an_env_that_has_them(model: LinearWorldModel) -> None:
    with pytest.raises(ValueError, match="known needs the real env's id"):
        make(model, reward="known")
    with pytest.raises(ValueError, match="default arguments"):
        make(model, env_id=ENV_ID, env_kwargs={"g": 9.81}, termination="known")


# --- saved models, config, the platform's loops ----------------------------------------------


@pytest.fixture
def saved(model: LinearWorldModel, tmp_path: Path, registered: None) -> Path:
    return model.save_pretrained(tmp_path / "model")


def test_saved_model_steps_identically(pendulum_spaces: tuple, tmp_path: Path, registered: None) -> None:
    noisy = linear_model(pendulum_spaces, noise=0.05)
    path = noisy.save_pretrained(tmp_path / "noisy")
    actions = [full(float(t % 3) - 1.0) for t in range(20)]
    assert_same_rollouts(rollout(make(noisy), actions, 0), rollout(make(str(path)), actions, 0))


def test_make_vec_env_world_model_backend(saved: Path) -> None:
    config = EnvConfig(
        id=ENV_ID,
        num_envs=3,
        backend="world_model",
        world_model=WorldModelEnvConfig(model=str(saved), horizon=4, uncertainty_penalty=0.1),
    )
    envs = make_vec_env(config)
    assert isinstance(envs, WorldModelVectorEnv)
    assert envs.horizon == 4 and envs.uncertainty_penalty == 0.1 and envs.env_id == ENV_ID
    with pytest.raises(ValueError, match="same_step"):
        make_vec_env(EnvConfig(id=ENV_ID, backend="world_model", autoreset_mode="next_step"))
    with pytest.raises(ValueError, match="saved world model"):
        make_vec_env(EnvConfig(id=ENV_ID, backend="world_model"))


def test_rollout_collector_runs_on_the_model(saved: Path) -> None:
    config = EnvConfig(
        id=ENV_ID,
        num_envs=2,
        backend="world_model",
        # report_uncertainty: without a setting that asks for it, info (and so stats) has none.
        world_model=WorldModelEnvConfig(model=str(saved), horizon=3, report_uncertainty=True),
    )
    envs = make_vec_env(config)
    random_cls = POLICIES.get("random")
    policy = random_cls(random_cls.config_class(), envs.single_observation_space, envs.single_action_space)
    collector = RolloutCollector(envs, policy, num_steps=7)
    collector.reset(seed=0)
    rollout_, stats = collector.collect()
    assert rollout_.truncated[2].all() and rollout_.truncated[5].all() and rollout_.truncated.sum() == 4
    assert len(stats.returns) == 4 and stats.lengths == [3, 3, 3, 3]
    assert rollout_.final_index.shape == (4, 2)  # truncated rows keep their final obs to bootstrap from
    assert "uncertainty" in stats.metrics


def test_off_policy_trainer_trains_in_the_model(saved: Path, tmp_path: Path) -> None:
    from omnigym.platform.experiment import load_experiment
    from omnigym.platform.trainers import build_trainer
    from omnigym.platform.trainers.on_policy import load_run_config

    overrides = [
        "total_steps=24",
        "env.backend=world_model",
        f"env.world_model.model={saved}",
        "env.world_model.horizon=5",
        "env.world_model.reward=known",
        "algo.learning_starts=8",
        "algo.batch_size=8",
        "eval.every_steps=0",
        "eval.episodes=1",
        "eval.video=false",
        "env.max_episode_steps=10",
        "checkpoint.every_steps=0",
        "log.progress=false",
        "log.tensorboard=false",
        f"run_dir={tmp_path / 'run'}",
    ]
    config = load_experiment("sac_pendulum", overrides)
    trainer = build_trainer(config, tmp_path / "run")
    assert isinstance(trainer.envs, WorldModelVectorEnv)
    result = trainer.train()
    assert result.total_steps == 24
    assert load_run_config(tmp_path / "run") == config  # the nested world_model section round-trips
    buffer = trainer.buffer
    assert len(buffer) == 24
    np.testing.assert_array_equal(torch.nonzero(buffer.ends[:24]).flatten(), [4, 9, 14, 19])
    # Every stored next_obs is the model's prediction, also where episodes ended: the true final obs.
    expected = buffer.obs["state"][:24] + 0.1 * buffer.actions[:24]
    torch.testing.assert_close(buffer.next_obs["state"][:24], expected)
    known = pendulum_reward(buffer.obs["state"][:24], buffer.actions[:24], expected)  # reward: known
    torch.testing.assert_close(buffer.rewards[:24], known)


def test_single_env_ends_with_the_final_observation(model: LinearWorldModel) -> None:
    env = WorldModelEnv(model, start_states=STARTS, horizon=3, report_uncertainty=True)  # info has it
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    for t in range(3):
        obs, reward, terminated, truncated, info = env.step(np.array([1.0], np.float32))
        assert truncated == (t == 2) and not terminated and isinstance(reward, float)
        assert info["uncertainty"] == 1.0
    first, _ = WorldModelEnv(model, start_states=STARTS, horizon=3).reset(seed=0)
    np.testing.assert_allclose(obs["state"], first["state"] + 0.3, rtol=1e-6)  # not the next start
    env.close()


@pytest.mark.filterwarnings("ignore:.*symmetric and normalized space")  # Pendulum's own box
@pytest.mark.filterwarnings("ignore:.*not within the observation space")  # the linear model drifts out
def test_single_env_passes_gymnasiums_env_checker(model: LinearWorldModel) -> None:
    from gymnasium.utils.env_checker import check_env

    env = WorldModelEnv(model, env_id=ENV_ID, start_states="live", horizon=10)
    check_env(env, skip_render_check=True)  # spaces, seeded resets, step types
    env.close()


def test_replay_puts_the_model_beside_the_real_env_on_the_same_actions(model, tmp_path):
    from omnigym.platform.episodes import Recording
    from omnigym.platform.world_model_replay import replay_in_world_model

    def push(obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.full((len(next(iter(obs.values()))), 1), 0.5, dtype=np.float32)

    summary = replay_in_world_model(
        model, ENV_ID, push, tmp_path / "out", episodes=2, seed=3, agent_name="push", max_episode_steps=12
    )
    real, dreamt = Recording(summary.real), Recording(summary.model)
    assert [e.seed for e in dreamt.episodes] == [e.seed for e in real.episodes] == [3, 4]
    for r, m in zip(real, dreamt, strict=True):
        start = r.observations["state"][0]
        np.testing.assert_allclose(m.observations["state"][0], start, atol=1e-6)  # the same start state
        assert m.actions[0].tolist() == r.actions[0].tolist() == [0.5]
        assert m.length == r.length == 12
        t = m.length  # the linear model: obs + 0.1 * 0.5 per step
        np.testing.assert_allclose(m.observations["state"][t], start + 0.05 * t, atol=1e-5)
        expected = np.linalg.norm(m.observations["state"][5] - r.observations["state"][5])
        assert m.infos["obs_error"][4] == pytest.approx(expected, rel=1e-5)
        assert m.summary.metrics["obs_error_mean"] == pytest.approx(np.mean(m.infos["obs_error"]))
    assert summary.model_returns[0] == pytest.approx(float(dreamt.episode(0).rewards.sum()))
