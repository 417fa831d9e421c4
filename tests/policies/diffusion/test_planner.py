"""Trajectory diffusion planners: shapes, determinism, saving, anchor expansion, BC on planner plans."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy
from omnigym.platform.trainers.imitation import ImitationConfig, train_imitation
from omnigym.policies.chunking.data import DemoWindows
from omnigym.policies.diffusion.planner import (
    DiffusionPlanner,
    DiffusionPlannerConfig,
    HierarchicalDiffusionPlanner,
    HierarchicalDiffusionPlannerConfig,
    expand_anchors,
)

TINY: dict[str, Any] = {
    "down_dims": (16, 32),
    "state_hidden_sizes": (32,),
    "time_embed_dim": 16,
    "num_inference_steps": 4,
}
HIER = {**TINY, "coarse_down_dims": (16, 32), "refine_steps": 2}
OBS_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (6,), np.float32)})
LOW = np.tile(np.array([-10.0, -40.0, -math.pi], np.float32), (8, 1))
PLAN_SPACE = spaces.Box(LOW, -LOW * np.array([12.0, 1.0, 1.0], np.float32), dtype=np.float32)
PLANNERS: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "flat": (DiffusionPlanner, DiffusionPlannerConfig, TINY),
    "hierarchical": (HierarchicalDiffusionPlanner, HierarchicalDiffusionPlannerConfig, HIER),
}


def make(kind: str, **kwargs: object) -> DiffusionPlanner:
    cls, config_cls, tiny = PLANNERS[kind]
    torch.manual_seed(0)
    return cls(config_cls(**{**tiny, **kwargs}), OBS_SPACE, PLAN_SPACE)


def states(batch: int = 4) -> dict[str, torch.Tensor]:
    return {"state": torch.randn(batch, 6, generator=torch.Generator().manual_seed(0))}


@pytest.mark.parametrize("kind", list(PLANNERS))
def test_plans_have_the_action_shape_and_deterministic_acting_is_batch_independent(kind: str) -> None:
    policy = make(kind)
    obs = states()
    step = policy.act(obs, deterministic=True)
    assert step.action.shape == (4, 8, 3)
    assert all(PLAN_SPACE.contains(row) for row in step.action.numpy())
    again = policy.act(obs, deterministic=True)
    torch.testing.assert_close(again.action, step.action, rtol=0, atol=0)
    policy.reset()  # a different batch layout: the first two rows alone
    alone = policy.act({"state": obs["state"][:2]}, deterministic=True)
    torch.testing.assert_close(alone.action, step.action[:2], rtol=0, atol=1e-3)  # metres: float rounding
    sampled = policy.act(obs)
    assert sampled.action.shape == (4, 8, 3) and torch.isfinite(sampled.action).all()


@pytest.mark.parametrize("kind", list(PLANNERS))
def test_save_load_round_trip(kind: str, tmp_path: Path) -> None:
    policy = make(kind)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
    policy.fit_normalizers(states(64), torch.as_tensor(PLAN_SPACE.sample()).expand(64, 8, 3) * 0.5)
    loaded = Policy.from_pretrained(policy.save_pretrained(tmp_path / kind))
    assert type(loaded) is type(policy) and loaded.config == policy.config
    expected = policy.act(states(), deterministic=True).action
    torch.testing.assert_close(loaded.act(states(), deterministic=True).action, expected, rtol=0, atol=0)


def test_expansion_preserves_anchors_exactly_and_follows_an_arc() -> None:
    indices = (1, 3, 5, 7)
    generator = torch.Generator().manual_seed(0)
    anchors = torch.randn(16, 4, 3, generator=generator) * torch.tensor([20.0, 5.0, 0.5])
    expanded = expand_anchors(anchors, indices, 8)
    assert expanded.shape == (16, 8, 3)
    assert (expanded[:, list(indices)] - anchors).abs().max().item() == 0.0
    # a circular arc (radius 20 m, 2 m per interval) through the origin: the spline stays within 1 mm
    radius, arc = 20.0, [2.0 * (i + 1) / 20.0 for i in range(8)]
    truth = torch.tensor([[radius * math.sin(a), radius * (1 - math.cos(a)), a] for a in arc])
    error = (expand_anchors(truth[list(indices)].unsqueeze(0), indices, 8)[0] - truth).abs().max().item()
    assert error < 1e-3, error
    # anchors 2, 4, 8 (uneven gaps) are kept exactly too
    uneven = expand_anchors(anchors[:, :3], (1, 3, 7), 8)
    assert (uneven[:, [1, 3, 7]] - anchors[:, :3]).abs().max().item() == 0.0


def test_unsupported_spaces_and_configs_raise() -> None:
    with pytest.raises(ValueError, match="waypoints"):
        DiffusionPlanner(DiffusionPlannerConfig(**TINY), OBS_SPACE, spaces.Box(-1, 1, (3,), np.float32))
    with pytest.raises(ValueError, match="last waypoint"):
        make("hierarchical", anchor_indices=(0, 2, 4, 6))
    with pytest.raises(ValueError, match="one whole plan"):
        DiffusionPlannerConfig(horizon=8)


def planner_demonstrations(
    num_envs: int = 4, steps: int = 12
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``pdm_closed``'s observations and plans on a few training scenes (episode index per step)."""
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    planner_cls = POLICIES.get("pdm_closed")
    keys = ["state", "route"]
    obs_rows: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    actions, episodes = [], []
    for scene in range(num_envs):
        env = make_env(
            "omnigym/DrivingPlan-v0", split="train", num_scenes=8, obs_keys=keys, **planner_cls.env_kwargs
        )
        planner = planner_cls(planner_cls.config_class(), env.observation_space, env.action_space)
        obs, _ = env.reset(seed=scene)
        for _ in range(steps):
            batch = {k: np.asarray(v)[None] for k, v in obs.items()}
            plan = planner.act(batch, deterministic=True).action[0].numpy()
            for k in keys:
                obs_rows[k].append(np.asarray(obs[k], np.float32))
            actions.append(plan)
            episodes.append(scene)
            obs, _, terminated, truncated, _ = env.step(plan)
            if terminated or truncated:
                break
        env.close()
    return {k: np.stack(v) for k, v in obs_rows.items()}, np.stack(actions), np.asarray(episodes)


@pytest.mark.parametrize("kind", list(PLANNERS))
def test_bc_on_planner_demonstrations_reduces_the_loss_and_plans_in_the_action_space(kind: str) -> None:
    from omnigym.platform.vec_env import make_env

    obs, actions, episodes = planner_demonstrations()
    env = make_env("omnigym/DrivingPlan-v0", split="train", num_scenes=8, obs_keys=["state", "route"])
    cls, config_cls, tiny = PLANNERS[kind]
    torch.manual_seed(0)
    policy = cls(
        config_cls(**{**tiny, "obs_keys": ("state", "route")}), env.observation_space, env.action_space
    )
    env.close()
    policy.fit_normalizers(obs, actions)
    windows = DemoWindows(obs, actions, episodes, 1, 1)
    fixed = windows.batch(np.arange(len(windows)))

    def loss() -> float:
        torch.manual_seed(1)
        with torch.no_grad():
            return float(np.mean([policy.compute_loss(fixed)[0].item() for _ in range(8)]))

    before = loss()
    train_imitation(
        policy,
        windows,
        ImitationConfig(steps=150, batch_size=32, learning_rate=2e-3, warmup_steps=10, log_every=0),
    )
    after = loss()
    assert after < 0.7 * before, (before, after)
    plans = policy.act({k: torch.as_tensor(v[:6]) for k, v in obs.items()}, deterministic=True).action.numpy()
    assert np.isfinite(plans).all()
    assert all(env.action_space.contains(plan) for plan in plans)
