"""A learned traffic model for the driving env: agents react to the ego (PerlAD-style pseudo-simulation).

:class:`TrafficWorldModel` predicts each background agent's next longitudinal acceleration along
its logged path from features in the agent's own frame: its speed and desired speed, a short
history of its speeds, the bumper gap to and speed of the nearest object ahead in its lane band
(another agent, the ego or an active traffic-light stop box), how much path it has left, and the
ego's pose, speed and plan (1 s and 2 s ahead) relative to it. :class:`PathTrafficAgents` runs it
inside the driving simulator through the ``agents.LogTrafficModel`` hook.

Why progress along the logged path: like NAVSIM's IDM traffic agents, the agents keep the lanes
and turns they drove in the log and only their timing reacts, so a small model cannot drive them
off the road; the lateral part of the motion is the log's. Why these features: the gap search is
the same compiled leader search the IDM agents use (``ReactiveAgents``), so a learned step
costs one leader search plus one small MLP over the agents that can move, all batched.

Training (``traffic_data.py``) is supervised on rollouts of the env with reactive IDM traffic
under several ego policies, so the IDM agents are the teacher: this is a learned reactivity model
distilled from IDM behaviour. With real logs it would be trained on the logged agents instead
(the features need only poses, speeds, paths and light states).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from omnigym.envs.driving.agents import AgentFrame, ReactiveAgents, TrafficLog
from omnigym.envs.driving.scene import DT, EGO_LENGTH, EGO_WIDTH, LIGHT_GREEN
from omnigym.envs.driving.traffic import idm_acceleration
from omnigym.policies.layers import MLP
from omnigym.world_models.base import WorldModel, WorldModelConfig

EGO_SIZE = np.array([EGO_LENGTH, EGO_WIDTH])
PLAN_STEPS = (10, 20)
"""Indices of the ego's dense plan (0.1 s apart) whose points the model sees: 1 s and 2 s ahead."""
MAX_RELATIVE = 60.0
"""Ego and plan coordinates in the agent's frame are clipped to +-this (m): far is far."""
MAX_PATH_LEFT = 50.0
"""Remaining logged path (m) beyond which the end of the path no longer matters."""
BASE_FEATURES = (
    "speed",
    "desired_speed",
    "speed_ratio",
    "has_leader",
    "gap",
    "inverse_gap",
    "leader_speed",
    "closing_speed",
    "path_left",
    "ego_along",
    "ego_across",
    "ego_cos",
    "ego_sin",
    "ego_speed",
    *(f"plan{step}_{axis}" for step in PLAN_STEPS for axis in ("along", "across")),
)
"""Per-agent features before the speed history (see :func:`agent_features`)."""


def feature_names(history_steps: int) -> tuple[str, ...]:
    """Names of the model's input columns, the speed history (``speed_minus_k``) last."""
    return (*BASE_FEATURES, *(f"speed_minus_{k}" for k in range(1, history_steps + 1)))


@dataclass
class TrafficWorldModelConfig(WorldModelConfig):
    """Settings of :class:`TrafficWorldModel`."""

    type: str = "traffic"
    hidden_sizes: tuple[int, ...] = (32, 32)
    """Width of each hidden layer of the acceleration MLP."""
    activation: str = "tanh"
    """Hidden activation, a name in ``omnigym.policies.layers.ACTIVATIONS``."""
    history_steps: int = 4
    """Past speeds (0.1 s apart) each agent's features include."""
    max_gap: float = 80.0
    """Leaders farther than this (m) count as a free road."""
    min_acceleration: float = -8.0
    """Predictions are clipped to [min_acceleration, max_acceleration] (m/s²)."""
    max_acceleration: float = 3.0
    learning_rate: float = 3e-3
    """Adam learning rate of :meth:`TrafficWorldModel.train_batch`."""

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(self.hidden_sizes)
        if self.history_steps < 1:
            raise ValueError(f"history_steps must be >= 1, got {self.history_steps}")
        if self.max_gap <= 0 or self.min_acceleration >= self.max_acceleration:
            raise ValueError("need max_gap > 0 and min_acceleration < max_acceleration")


def agent_features(
    speed: np.ndarray,
    desired_speed: np.ndarray,
    path_left: np.ndarray,
    gap: np.ndarray,
    leader_speed: np.ndarray,
    history: np.ndarray,
    pose: np.ndarray,
    ego_pose: np.ndarray,
    ego_speed: np.ndarray,
    plan_points: np.ndarray,
    max_gap: float,
) -> np.ndarray:
    """The model's inputs for ``F`` agents, in each agent's frame (x along its heading, y left).

    Args:
        speed: ``[F]`` the agent's speed (m/s).
        desired_speed: ``[F]`` its free-road speed (m/s; the fastest it drove in its log).
        path_left: ``[F]`` metres of logged path ahead of it.
        gap: ``[F]`` bumper gap to the nearest object ahead in its lane band (``inf`` if none).
        leader_speed: ``[F]`` that object's speed.
        history: ``[F, H]`` the agent's speeds 1..H steps ago.
        pose: ``[F, 3]`` the agent's x, y, heading.
        ego_pose: ``[F, 3]`` the ego of each agent's slot.
        ego_speed: ``[F]`` its speed.
        plan_points: ``[F, P, 2]`` the ego's planned world positions at :data:`PLAN_STEPS`.
        max_gap: gaps beyond this count as no leader.

    Returns:
        ``[F, len(feature_names(H))]`` float32, columns in :func:`feature_names` order.
    """
    has_leader = gap < max_gap
    clipped_gap = np.where(has_leader, gap, max_gap)
    lead = np.where(has_leader, leader_speed, 0.0)
    cos, sin = np.cos(pose[:, 2]), np.sin(pose[:, 2])
    points = np.concatenate([ego_pose[:, None, :2], plan_points], axis=1) - pose[:, None, :2]
    along = cos[:, None] * points[..., 0] + sin[:, None] * points[..., 1]
    across = cos[:, None] * points[..., 1] - sin[:, None] * points[..., 0]
    relative = np.clip(np.stack([along, across], axis=-1), -MAX_RELATIVE, MAX_RELATIVE)  # [F, 1 + P, 2]
    heading = ego_pose[:, 2] - pose[:, 2]
    columns = [
        speed,
        desired_speed,
        speed / np.maximum(desired_speed, 0.1),
        has_leader.astype(np.float64),
        clipped_gap,
        1.0 / np.maximum(clipped_gap, 0.5),
        lead,
        np.where(has_leader, speed - leader_speed, 0.0),
        np.minimum(path_left, MAX_PATH_LEFT),
        relative[:, 0, 0],
        relative[:, 0, 1],
        np.cos(heading),
        np.sin(heading),
        ego_speed,
    ]
    plan = relative[:, 1:].reshape(len(speed), 2 * plan_points.shape[1])  # (along, across) per point
    return np.column_stack([*columns, plan, history - speed[:, None]]).astype(np.float32)


class TrafficWorldModel(WorldModel):
    """An MLP from an agent's features (:func:`agent_features`) to its acceleration along its path.

    Inputs and the target are standardised with statistics fitted once on the training data
    (:meth:`set_feature_statistics`); the output is clipped to the config's bounds. The model is
    not an observation-level world model (the base ``reset``/``step`` are not implemented): it
    moves the driving env's background agents through :meth:`agents`, which returns an
    ``agents.TrafficModel`` for one env (``traffic_model=model.agents()`` or the env kwargs
    ``traffic="learned", traffic_model_path=...``). The spaces are the driving env's, kept so a
    saved model records what it was made for.
    """

    name = "traffic"
    config_class = TrafficWorldModelConfig
    feature_mean: Tensor
    feature_std: Tensor
    target_mean: Tensor
    target_std: Tensor

    def __init__(
        self, config: WorldModelConfig, observation_space: spaces.Dict, action_space: spaces.Space
    ) -> None:
        super().__init__(config, observation_space, action_space)
        if not isinstance(config, TrafficWorldModelConfig):
            raise TypeError(f"TrafficWorldModel needs a TrafficWorldModelConfig, got {type(config).__name__}")
        self.config: TrafficWorldModelConfig = config
        self.num_features = len(feature_names(config.history_steps))
        self.net = MLP(self.num_features, (*config.hidden_sizes, 1), config.activation, activate_last=False)
        self.register_buffer("feature_mean", torch.zeros(self.num_features))
        self.register_buffer("feature_std", torch.ones(self.num_features))
        self.register_buffer("target_mean", torch.zeros(()))
        self.register_buffer("target_std", torch.ones(()))
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.learning_rate)

    # --- training -------------------------------------------------------------------------------
    def set_feature_statistics(self, features: Tensor, acceleration: Tensor) -> None:
        """Fit the standardisation to training data: ``features [M, D]``, ``acceleration [M]``."""
        self._check_features(features)
        self.feature_mean.copy_(features.mean(0))
        self.feature_std.copy_(features.std(0).clamp_min(1e-3))
        self.target_mean.copy_(acceleration.mean())
        self.target_std.copy_(acceleration.std().clamp_min(1e-3))

    def loss(self, features: Tensor, acceleration: Tensor) -> Tensor:
        """Mean squared error in standardised target units. Shapes: ``[B, D]``, ``[B]``."""
        predicted = self.net((features - self.feature_mean) / self.feature_std).squeeze(-1)
        return ((predicted - (acceleration - self.target_mean) / self.target_std) ** 2).mean()

    def train_batch(self, features: Tensor, acceleration: Tensor) -> float:
        """One Adam step on a minibatch; returns its loss."""
        loss = self.loss(features, acceleration)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate_data(self, features: Tensor, acceleration: Tensor) -> dict[str, float]:
        """Held-out ``eval/loss`` (standardised MSE), ``eval/mae`` (m/s²) and ``eval/r2``."""
        predicted = self.forward(features)
        error = predicted - acceleration
        variance = acceleration.var().clamp_min(1e-9)
        return {
            "eval/loss": float(self.loss(features, acceleration)),
            "eval/mae": float(error.abs().mean()),
            "eval/r2": float(1.0 - (error**2).mean() / variance),
        }

    # --- predicting -----------------------------------------------------------------------------
    def forward(self, features: Tensor) -> Tensor:
        """Accelerations (m/s²), clipped to the config's bounds. Shape: ``[B, D] -> [B]``."""
        normalised = self.net((features - self.feature_mean) / self.feature_std).squeeze(-1)
        acceleration = normalised * self.target_std + self.target_mean
        return acceleration.clamp(self.config.min_acceleration, self.config.max_acceleration)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """:meth:`forward` on NumPy ``[F, D]`` float32 features, without gradients: ``[F]`` float64."""
        if len(features) == 0:
            return np.zeros(0)
        with torch.inference_mode():
            out = self.forward(torch.from_numpy(features).to(self.device))
        return out.cpu().numpy().astype(np.float64)

    def agents(self) -> PathTrafficAgents:
        """A fresh ``agents.TrafficModel`` for one driving env, moving its agents with this model."""
        return PathTrafficAgents(self)

    def _check_features(self, features: Tensor) -> None:
        if features.ndim != 2 or features.shape[1] != self.num_features:
            raise ValueError(
                f"traffic features must be [M, {self.num_features}] "
                f"({feature_names(self.config.history_steps)}), got {tuple(features.shape)}"
            )


Recorder = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
"""Receives ``(features [F, D], teacher acceleration [F], ego distance [F])`` every step."""


class _PathAgents(ReactiveAgents):
    """The IDM agents' path following and leader search, with the acceleration delegated."""

    def __init__(
        self,
        num_slots: int,
        num_steps: int,
        num_agents: int,
        accelerate: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    ) -> None:
        super().__init__(num_slots, num_steps, num_agents)
        self._accelerate = accelerate

    def acceleration(self, gap: np.ndarray, leader_speed: np.ndarray, free: np.ndarray) -> np.ndarray:
        """The owner's acceleration (learned, or IDM while recording)."""
        return self._accelerate(gap, leader_speed, free)


class PathTrafficAgents:
    """Agents on their logged paths accelerated by a :class:`TrafficWorldModel`: a ``LogTrafficModel``.

    Each step finds every movable agent's leader among the other agents, the ego and the red or
    yellow stop boxes (the IDM agents' search), builds its features and asks the model for its
    acceleration; the agents then advance along their paths. Without a model the IDM teacher
    drives them, which is how training data is recorded (``recorder``). One instance serves one
    env: it holds the per-slot state.

    Args:
        model: the learned model; None for the IDM teacher.
        recorder: called every step with the features and the teacher's accelerations.
        history_steps: speed history length when ``model`` is None (the model's config otherwise).
        max_gap: free-road gap when ``model`` is None (the model's config otherwise).
    """

    def __init__(
        self,
        model: TrafficWorldModel | None = None,
        *,
        recorder: Recorder | None = None,
        history_steps: int = 4,
        max_gap: float = 80.0,
    ) -> None:
        self.model = model
        self.recorder = recorder
        self.history_steps = model.config.history_steps if model is not None else history_steps
        self.max_gap = model.config.max_gap if model is not None else max_gap
        self._agents: _PathAgents | None = None
        self._ego: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self._pose = np.zeros((0, 0, 3))
        self._frame: AgentFrame | None = None  # the agents now, as the last step returned them

    # --- the LogTrafficModel hook -----------------------------------------------------------------
    def allocate(self, num_slots: int, num_steps: int, num_agents: int) -> None:
        """Size the per-slot state (the simulator calls this once)."""
        self._agents = _PathAgents(num_slots, num_steps, num_agents, self._acceleration)
        self.history = np.zeros((num_slots, num_agents, self.history_steps))  # speeds 1..H steps ago
        self.light_pose = np.zeros((num_slots, 0, 3))
        self.light_size = np.zeros((num_slots, 0, 2))
        self.light_valid = np.zeros((num_slots, 0), bool)
        self.light_go = np.ones((num_slots, num_steps, 0), bool)  # green, by log index
        self.loaded = np.zeros(num_slots, bool)

    def load_log(self, slot: int, log: TrafficLog) -> None:
        """Put one scene's logged traffic in ``slot``, agents at the log's state at ``log.start``."""
        agents = self._require()
        agents.load(slot, log.pose, log.speed, log.valid, log.size, log.start)
        self._load_lights(slot, log)
        past = log.start - np.arange(1, self.history_steps + 1)  # [H] log indices
        logged = np.maximum(log.speed[np.maximum(past, 0)], 0.0).T  # [A, H]
        known = log.valid[np.maximum(past, 0)].T & (past >= 0)
        a = log.size.shape[0]
        self.history[slot] = 0.0
        self.history[slot, :a] = np.where(known, logged, agents.speed[slot, :a, None])
        self.loaded[slot] = True
        self._frame = None  # the slot's agents moved: the cached frame is stale

    def reset(self, slots: np.ndarray, frames: AgentFrame, size: np.ndarray) -> None:
        """Start ``slots``; their logs came through :meth:`load_log` (the simulator calls it first).

        Raises:
            RuntimeError: a slot never received its log.
        """
        if self._agents is None or not self.loaded[slots].all():
            raise RuntimeError(
                "PathTrafficAgents needs allocate() and load_log() before reset(): use it as a driving "
                "env's traffic_model (the simulator calls them)"
            )

    def step(self, ego_pose: np.ndarray, ego_speed: np.ndarray, plan: np.ndarray | None) -> AgentFrame:
        """Advance every slot's agents by 0.1 s given the ego (``[N, 3]``, ``[N]``, plan ``[N, 41, 2]``)."""
        agents = self._require()
        rows = np.arange(agents.num_slots)
        frame = self._frame if self._frame is not None else agents.frame(agents.clock)
        now = np.minimum(agents.clock, self.light_go.shape[1] - 1)
        stops = AgentFrame(
            self.light_pose, np.zeros(self.light_valid.shape), self.light_valid & ~self.light_go[rows, now]
        )
        self._ego, self._pose = (ego_pose, ego_speed, plan), frame.pose
        previous = agents.speed.copy()
        agents.step(frame, ego_pose, ego_speed, EGO_SIZE, stops, self.light_size)
        self.history = np.concatenate([previous[..., None], self.history[..., :-1]], axis=-1)
        self._frame = agents.frame(agents.clock)  # also the next step's current frame
        return self._frame

    # --- internals --------------------------------------------------------------------------------
    def _require(self) -> _PathAgents:
        if self._agents is None:
            raise RuntimeError("PathTrafficAgents.allocate() was not called (the driving simulator calls it)")
        return self._agents

    def _load_lights(self, slot: int, log: TrafficLog) -> None:
        k = len(log.light_pose)
        if k > self.light_pose.shape[1]:  # grow to the most lights any scene had
            grow = k - self.light_pose.shape[1]
            self.light_pose = np.pad(self.light_pose, ((0, 0), (0, grow), (0, 0)))
            self.light_size = np.pad(self.light_size, ((0, 0), (0, grow), (0, 0)))
            self.light_valid = np.pad(self.light_valid, ((0, 0), (0, grow)))
            self.light_go = np.pad(self.light_go, ((0, 0), (0, 0), (0, grow)), constant_values=True)
        t = len(log.light_state)
        self.light_pose[slot], self.light_size[slot], self.light_valid[slot] = 0.0, 0.0, False
        self.light_pose[slot, :k], self.light_size[slot, :k], self.light_valid[slot, :k] = (
            log.light_pose,
            log.light_size,
            True,
        )
        self.light_go[slot] = True
        self.light_go[slot, :t, :k] = log.light_state == LIGHT_GREEN

    def _acceleration(self, gap: np.ndarray, leader_speed: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Accelerations ``[N, A]`` of the ``free`` agents: the model's, or IDM's (recorded)."""
        agents = self._require()
        if self.model is None and self.recorder is None:  # the plain IDM teacher
            return idm_acceleration(agents.speed, agents.desired_speed, gap, leader_speed, agents.params)
        index = np.flatnonzero(free)
        features, ego_distance = self._features(index, gap, leader_speed)
        if self.recorder is not None:
            teacher = idm_acceleration(agents.speed, agents.desired_speed, gap, leader_speed, agents.params)
            self.recorder(features, teacher.reshape(-1)[index], ego_distance)
            if self.model is None:
                return teacher
        assert self.model is not None
        accel = np.zeros(free.shape)
        accel.reshape(-1)[index] = self.model.predict(features)
        return accel

    def _features(
        self, index: np.ndarray, gap: np.ndarray, leader_speed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Features ``[F, D]`` of the agents at flat indices ``index`` and their ego distances ``[F]``."""
        agents = self._require()
        assert self._ego is not None
        ego_pose, ego_speed, plan = self._ego
        num_agents = agents.speed.shape[1]
        slot = index // num_agents
        flat = lambda array: array.reshape(-1, *array.shape[2:])[index]  # noqa: E731
        pose = flat(self._pose)
        plan_points = _plan_points(ego_pose, ego_speed, plan)[slot]
        features = agent_features(
            flat(agents.speed),
            flat(agents.desired_speed),
            flat(agents.arc_end - agents.station),
            flat(gap),
            flat(leader_speed),
            flat(self.history),
            pose,
            ego_pose[slot],
            ego_speed[slot],
            plan_points,
            self.max_gap,
        )
        return features, np.hypot(*(ego_pose[slot, :2] - pose[:, :2]).T)


def _plan_points(ego_pose: np.ndarray, ego_speed: np.ndarray, plan: np.ndarray | None) -> np.ndarray:
    """The ego's planned positions at :data:`PLAN_STEPS` ``[N, P, 2]``; constant velocity without a plan."""
    if plan is not None:
        return plan[:, list(PLAN_STEPS)]
    seconds = np.array(PLAN_STEPS) * DT
    direction = np.stack([np.cos(ego_pose[:, 2]), np.sin(ego_pose[:, 2])], axis=-1)
    return ego_pose[:, None, :2] + (ego_speed[:, None] * seconds)[..., None] * direction[:, None]


def load_traffic_agents(path: str | Path) -> PathTrafficAgents:
    """Fresh agents driven by the traffic world model saved at ``path`` (the env's ``traffic="learned"``).

    Raises:
        FileNotFoundError: ``path`` is not a saved model.
        TypeError: the saved model is not a :class:`TrafficWorldModel`.
    """
    model = TrafficWorldModel.from_pretrained(path)
    assert isinstance(model, TrafficWorldModel)
    model.eval()
    return model.agents()
