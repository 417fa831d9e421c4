"""The ensemble world model on omnigym/Driving-v0's vector observations (several Box keys).

The driving env's observation is a Dict of ``state [12]``, ``agents [4, 9]`` and ``route [10, 3]``
(the observation set of ``bench/dream_vs_real.py --task driving``): the ensemble must fit its
transitions, and a ``WorldModelVectorEnv`` over it must step with exactly the real env's spaces.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from omnigym.platform.buffers import ReplayBuffer
from omnigym.platform.vec_env import make_env
from omnigym.world_models.ensemble import EnsembleDynamics, EnsembleDynamicsConfig
from omnigym.world_models.env import WorldModelVectorEnv
from omnigym.world_models.training import fit_world_model

pytest.importorskip("cv2", reason="the driving env needs the driving extra")

ENV_ID = "omnigym/Driving-v0"
ENV_KWARGS = {
    "split": "train",
    "num_scenes": 8,
    "obs_keys": ["state", "agents", "route"],
    "num_agents_obs": 4,
    "num_route_points": 10,
}
HORIZON = 160


def cruise_action(obs: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Follow the route (pure pursuit) at 80 % of the limit, with Gaussian action noise."""
    state, route = obs["state"], obs["route"]
    speed, wheel, limit = state[0], state[2], state[6]
    goal = route[min(1, len(route) - 1), :2]
    curvature = 2 * goal[1] / max(float(goal @ goal), 1.0)
    action = np.array([0.8 * limit - speed, (np.arctan(3.09 * curvature) - wheel) / 0.2])
    action += rng.normal(0.0, [1.0, 0.2])
    return np.clip(action, [-6.0, -1.0], [3.0, 1.0]).astype(np.float32)


@pytest.fixture(scope="module")
def driving_data() -> tuple[ReplayBuffer, object]:
    """About 1,200 real transitions of a noisy route follower on 8 training scenes."""
    env = make_env(ENV_ID, **ENV_KWARGS)
    buffer = ReplayBuffer(env.observation_space, env.action_space, 2000)
    rng = np.random.default_rng(0)
    episode = 0
    obs, _ = env.reset(seed=episode)
    while len(buffer) < 1200:
        action = cruise_action(obs, rng)
        nxt, reward, terminated, truncated, _ = env.step(action)
        buffer.add(
            {k: v[None] for k, v in obs.items()},
            action[None],
            [reward],
            {k: v[None] for k, v in nxt.items()},
            [terminated],
            [truncated],
        )
        if terminated or truncated:
            episode += 1
            obs, _ = env.reset(seed=episode)
        else:
            obs = nxt
    spaces = (env.observation_space, env.action_space)
    env.close()
    return buffer, spaces


def small_model(observation_space: object, action_space: object) -> EnsembleDynamics:
    torch.manual_seed(0)
    config = EnsembleDynamicsConfig(
        num_members=3, num_elites=2, hidden_sizes=(128, 128), weight_decay=(1e-5,), deterministic=True
    )
    return EnsembleDynamics(config, observation_space, action_space)  # type: ignore[arg-type]


def test_ensemble_fits_driving_transitions(driving_data: tuple[ReplayBuffer, object]) -> None:
    buffer, (observation_space, action_space) = driving_data
    model = small_model(observation_space, action_space)
    assert model.obs_layout == {"agents": (4, 9), "route": (10, 3), "state": (12,)}  # the Dict's order
    assert model.obs_dim == 36 + 30 + 12
    route, state = slice(36, 66), slice(66, 78)

    metrics = fit_world_model(
        model, buffer, max_epochs=50, batch_size=64, patience=50, seed=0, callback=lambda *_: None
    )

    batch = buffer.all()
    obs, next_obs = model.flatten_obs(batch.obs), model.flatten_obs(batch.next_obs)
    predicted, *_ = model.step(obs, batch.actions, generator=torch.Generator().manual_seed(0))
    delta, predicted_delta = next_obs - obs, predicted - obs
    r2 = 1 - (predicted_delta - delta).square().mean(0) / delta.var(0).clamp_min(1e-8)  # [D]
    # The ego's wheel angle, yaw rate and lateral offset: nearly exact; its speed: well predicted.
    assert (r2[state][[2, 3, 4]] > 0.9).all() and r2[state][0] > 0.5, r2[state]
    # The route ahead moves with the ego: far better than "nothing moves".
    assert (predicted - next_obs)[:, route].square().mean() < 0.5 * delta[:, route].square().mean()
    assert metrics["eval/reward_mse"] < 0.7 * float(batch.rewards.float().var()), metrics  # R^2 ~ 0.5


def test_world_model_env_steps_with_the_driving_spaces(driving_data: tuple[ReplayBuffer, object]) -> None:
    buffer, (observation_space, action_space) = driving_data
    model = small_model(observation_space, action_space)
    fit_world_model(model, buffer, max_epochs=1, callback=lambda *_: None)
    real = make_env(ENV_ID, **ENV_KWARGS)
    first_real_obs, _ = real.reset(seed=3)
    real.close()

    envs = WorldModelVectorEnv(model, 4, env_id=ENV_ID, env_kwargs=ENV_KWARGS, horizon=HORIZON)
    try:
        assert envs.single_observation_space == observation_space
        assert envs.single_action_space == action_space
        obs, _ = envs.reset(seed=3)
        np.testing.assert_array_equal(obs["state"][0], first_real_obs["state"])  # live start states
        rng = np.random.default_rng(0)
        for _ in range(5):
            actions = rng.uniform(action_space.low, action_space.high, (4, 2)).astype(np.float32)
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            assert set(obs) == set(observation_space.spaces)
            for row in range(4):
                assert observation_space.contains({k: v[row] for k, v in obs.items()})
            assert rewards.shape == (4,) and rewards.dtype == np.float32
            assert terminated.dtype == bool and truncated.dtype == bool and not truncated.any()
    finally:
        envs.close()


def test_clip_to_data_keeps_steps_inside_the_data_range(tmp_path: Path) -> None:
    """Unbounded keys (driving's) are clipped to the range the data spans, and it is saved."""
    from gymnasium import spaces

    from omnigym.core.types import TransitionBatch
    from omnigym.world_models.base import WorldModel

    space = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    generator = torch.Generator().manual_seed(0)
    obs = torch.rand(256, 2, generator=generator)  # the data lies in [0, 1.1]
    action = torch.rand(256, 1, generator=generator) * 2 - 1
    batch = TransitionBatch(
        obs={"state": obs}, actions=action, rewards=obs.sum(-1), next_obs={"state": obs + 0.1 * action.abs()},
        terminated=torch.zeros(256),
    )  # fmt: skip
    far = torch.full((4, 2), 50.0)  # far outside the data: the MLP extrapolates
    steps = {}
    for clip in (False, True):
        torch.manual_seed(0)
        config = EnsembleDynamicsConfig(
            num_members=2,
            num_elites=1,
            hidden_sizes=(16,),
            weight_decay=(0.0,),
            deterministic=True,
            clip_to_data=clip,
        )
        model = EnsembleDynamics(config, space, action_space)
        model.set_data_statistics(batch)
        model.out.bias.data[..., :3] += 5.0  # a model that moves every row far (normalised units)
        steps[clip] = model.step(far, torch.ones(4, 1))
    unclipped, clipped = steps[False], steps[True]
    data = torch.cat([obs, batch.next_obs["state"]])
    low, high = data.amin(0), data.amax(0)
    rewards = batch.rewards
    assert ((unclipped[0] < low) | (unclipped[0] > high)).all()  # the guard is needed here
    assert ((unclipped[2] < rewards.min()) | (unclipped[2] > rewards.max())).all()
    assert ((clipped[0] >= low) & (clipped[0] <= high)).all()
    assert ((clipped[2] >= rewards.min()) & (clipped[2] <= rewards.max())).all()
    model.save_pretrained(tmp_path / "m")
    loaded = WorldModel.from_pretrained(tmp_path / "m")
    assert torch.equal(loaded.data_high, model.data_high) and torch.equal(loaded.data_low, model.data_low)


@pytest.mark.slow
def test_bench_driving_path_runs(tmp_path: Path) -> None:
    """``dream_vs_real --task driving`` end to end at its smallest budget (one PPO iteration per quarter)."""
    import json

    bench = Path(__file__).resolve().parents[2] / "bench" / "dream_vs_real.py"
    out = subprocess.run(
        [
            sys.executable,
            str(bench),
            "--task",
            "driving",
            "--quick",
            "--steps",
            "16384",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["task"] == "driving" and np.isfinite(figures["ratio"])
    assert len(figures["ranking"]) >= 4 and [r["k"] for r in figures["k_step"]] == [1, 5, 10, 20]
