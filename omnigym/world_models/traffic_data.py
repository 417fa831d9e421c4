"""Training data for the driving traffic model: IDM agents reacting to several ego drivers.

:func:`collect_traffic_data` drives the driving env (plan mode) with the IDM teacher as its
traffic model (:class:`~omnigym.world_models.driving.PathTrafficAgents` without a model, which
moves agents exactly as ``traffic="idm"`` does) and records every movable agent's features and
IDM acceleration at every 0.1 s. The ego drivers make the agents react in different ways: the
logged human (``log_replay``), PDM-Closed (``pdm_closed``), constant velocity (which rear-ends and
blocks traffic) and ``swerve``, the human with a lane change to the left or right and a slower
speed, which cuts in front of agents in the neighbouring lanes so the data holds ego-induced
braking. :func:`fit_traffic_model` then regresses the accelerations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omnigym.envs.driving.controller import PLAN_POSES, STEPS_PER_POSE
from omnigym.envs.driving.scene import DT
from omnigym.world_models.driving import PathTrafficAgents, TrafficWorldModel, feature_names

EGO_DRIVERS = ("log_replay", "pdm_closed", "constant_velocity", "swerve")
"""The ego drivers of :func:`collect_traffic_data`."""
NEAR_EGO = 30.0
"""Agents within this distance (m) of the ego are always recorded; farther ones are subsampled."""
PLAN_SECONDS = np.arange(1, PLAN_POSES + 1) * STEPS_PER_POSE * DT
"""Times (s) of a plan's poses."""


@dataclass
class TrafficData:
    """Recorded agent steps: ``features [M, D]`` float32 and the teacher's ``acceleration [M]`` float32."""

    features: np.ndarray
    acceleration: np.ndarray

    def __len__(self) -> int:
        return len(self.acceleration)

    def split(self, holdout_fraction: float, seed: int = 0) -> tuple[TrafficData, TrafficData]:
        """A random (train, holdout) split of the rows."""
        order = np.random.default_rng(seed).permutation(len(self))
        cut = len(self) - max(1, round(holdout_fraction * len(self)))
        return self.take(order[:cut]), self.take(order[cut:])

    def take(self, rows: np.ndarray) -> TrafficData:
        """The rows ``rows``."""
        return TrafficData(self.features[rows], self.acceleration[rows])

    def save(self, path: str | Path) -> Path:
        """Write the arrays to one ``.npz`` file."""
        path = Path(path)
        np.savez_compressed(path, features=self.features, acceleration=self.acceleration)
        return path

    @classmethod
    def load(cls, path: str | Path) -> TrafficData:
        """Read a file written by :meth:`save`."""
        with np.load(path) as data:
            return cls(data["features"], data["acceleration"])


class _Recorder:
    """Keeps agent steps: all near the ego, a random ``keep`` share of the others."""

    def __init__(self, keep: float, seed: int) -> None:
        self.keep = keep
        self.rng = np.random.default_rng(seed)
        self.features: list[np.ndarray] = []
        self.acceleration: list[np.ndarray] = []

    def __call__(self, features: np.ndarray, acceleration: np.ndarray, ego_distance: np.ndarray) -> None:
        rows = (ego_distance < NEAR_EGO) | (self.rng.random(len(acceleration)) < self.keep)
        self.features.append(features[rows])
        self.acceleration.append(acceleration[rows].astype(np.float32))

    def data(self, num_features: int) -> TrafficData:
        if not self.features:
            return TrafficData(np.zeros((0, num_features), np.float32), np.zeros(0, np.float32))
        return TrafficData(np.concatenate(self.features), np.concatenate(self.acceleration))


def _constant_velocity_plan(obs: dict[str, np.ndarray]) -> np.ndarray:
    """Straight ahead at the current speed (``state[:, 0]``): plans ``[N, 8, 3]``."""
    speed = obs["state"][:, 0]
    plan = np.zeros((len(speed), PLAN_POSES, 3), np.float32)
    plan[..., 0] = speed[:, None] * PLAN_SECONDS
    return plan


class _Swerve:
    """The logged human with a lane change and a slower pace: cuts in front of neighbouring agents.

    Per env and episode: a lateral shift of +-3.5 m reached over 3 s from a random start within
    the first 4 s, and the plan's forward distances scaled by 0.6-1.0.
    """

    def __init__(self, num_envs: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.shift = self.rng.choice([-3.5, 3.5], num_envs)
        self.begin = self.rng.uniform(0.0, 4.0, num_envs)
        self.pace = self.rng.uniform(0.6, 1.0, num_envs)
        self.clock = np.zeros(num_envs)

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        plan = obs["log_replay"].copy()
        time = self.clock[:, None] + PLAN_SECONDS
        ramp = np.clip((time - self.begin[:, None]) / 3.0, 0.0, 1.0)
        plan[..., 0] *= self.pace[:, None]
        plan[..., 1] += self.shift[:, None] * ramp  # the plan's lateral zero is the log track
        self.clock += PLAN_SECONDS[0]
        return plan


def _driver(name: str, num_envs: int, seed: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """An ego driver: observations -> plans ``[N, 8, 3]``."""
    if name in ("log_replay", "pdm_closed"):
        return lambda obs: obs[name]
    if name == "constant_velocity":
        return _constant_velocity_plan
    if name == "swerve":
        return _Swerve(num_envs, seed)
    raise ValueError(f"unknown ego driver {name!r}; choose from {EGO_DRIVERS}")


def collect_traffic_data(
    num_scenes: int,
    *,
    drivers: Sequence[str] = EGO_DRIVERS,
    split: str = "train",
    first_scene: int = 0,
    keep: float = 0.3,
    history_steps: int = 4,
    max_gap: float = 80.0,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
) -> TrafficData:
    """Record the IDM teacher's agents over ``num_scenes`` scenes per ego driver.

    Each driver drives its own scenes (``first_scene + i * num_scenes ...``), all in one vector
    env of ``num_scenes`` slots for one episode each.

    Args:
        num_scenes: scenes (and envs) per driver.
        drivers: names in :data:`EGO_DRIVERS`.
        split: the procedural scene split.
        first_scene: index of the first scene used.
        keep: share of the agent steps farther than :data:`NEAR_EGO` from the ego that are kept.
        history_steps: speed history length; must match the model's config.
        max_gap: free-road gap (m); must match the model's config.
        seed: seeds the subsampling and the swerves.
        env_kwargs: extra driving env keyword arguments (e.g. ``cache_dir``).

    Returns:
        The recorded rows of every driver.
    """
    from omnigym.envs.driving.env import DrivingVectorEnv

    recorder = _Recorder(keep, seed)
    for i, name in enumerate(drivers):
        traffic = PathTrafficAgents(recorder=recorder, history_steps=history_steps, max_gap=max_gap)
        privileged = (
            [name] if name in ("log_replay", "pdm_closed") else ["log_replay"] if name == "swerve" else []
        )
        kwargs = {"split": split, "num_scenes": first_scene + len(drivers) * num_scenes, **(env_kwargs or {})}
        envs = DrivingVectorEnv(
            num_envs=num_scenes, action_mode="plan", traffic_model=traffic, privileged=privileged, **kwargs
        )
        try:
            _drive_once(envs, _driver(name, num_scenes, seed + i), first_scene + i * num_scenes)
        finally:
            envs.close()
    return recorder.data(len(feature_names(history_steps)))


def _drive_once(envs: Any, driver: Callable[[dict[str, np.ndarray]], np.ndarray], first_scene: int) -> None:
    """One episode in every env (ended envs idle on a standing plan until all have ended)."""
    obs, _ = envs.reset(seed=first_scene)
    done = np.zeros(envs.num_envs, bool)
    while not done.all():
        plan = driver(obs)
        plan[done] = 0.0
        obs, _, terminated, truncated, _ = envs.step(plan)
        done |= terminated | truncated


def fit_traffic_model(
    model: TrafficWorldModel,
    data: TrafficData,
    *,
    epochs: int = 20,
    batch_size: int = 1024,
    holdout_fraction: float = 0.1,
    seed: int = 0,
) -> dict[str, float]:
    """Regress the teacher's accelerations: standardise, then Adam over shuffled minibatches.

    Returns:
        ``train/loss`` (last epoch's mean), the held-out ``eval/loss``, ``eval/mae`` and ``eval/r2``,
        and ``eval/loss_first`` (held-out loss before training).
    """
    if len(data) < 2:
        raise ValueError(f"need at least 2 recorded agent steps to fit the traffic model, got {len(data)}")
    train, holdout = data.split(holdout_fraction, seed)
    features, target = torch.from_numpy(train.features), torch.from_numpy(train.acceleration)
    held = torch.from_numpy(holdout.features), torch.from_numpy(holdout.acceleration)
    model.set_feature_statistics(features, target)
    first = model.evaluate_data(*held)["eval/loss"]
    generator = torch.Generator().manual_seed(seed)
    model.train()
    losses: list[float] = []
    for _ in range(epochs):
        order = torch.randperm(len(target), generator=generator)
        losses = [model.train_batch(features[rows], target[rows]) for rows in order.split(batch_size)]
    model.eval()
    return {"train/loss": float(np.mean(losses)), **model.evaluate_data(*held), "eval/loss_first": first}
