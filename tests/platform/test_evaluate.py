"""evaluate_policy on CartPole with scripted controllers and on a small metrics-reporting env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy, PolicyConfig
from omnigym.core.types import PolicyStep
from omnigym.platform.evaluate import EvalResult, evaluate_policy, format_summary
from omnigym.platform.vec_env import make_env

METRICS_ENV_ID = "omnigym_test/Metrics-v0"


class MetricsEnv(gym.Env):
    """Episodes of ``2 + seed % 3`` steps, reward 1 per step; success when the seed is even.

    Each step reports ``reward_components`` (progress 1.0, penalty -0.5) and ``distance`` (steps
    left); the final step also reports ``success``, a string and a non-scalar array.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # noqa: RUF012

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.render_mode = render_mode
        self._seed = 0
        self._length = 0
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._seed = seed if seed is not None else 0
        self._length = 2 + self._seed % 3
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert self.action_space.contains(action)
        self._t += 1
        done = self._t >= self._length
        info: dict[str, Any] = {
            "distance": np.float32(self._length - self._t),
            "reward_components": {"progress": 1.0, "penalty": -0.5},
        }
        if done:
            info.update(success=self._seed % 2 == 0, label="text", pose=np.zeros(3), steps=np.array(self._t))
        return self._obs(), 1.0, done, False, info

    def render(self) -> None:
        return None  # claims rgb_array but has nothing to show

    def _obs(self) -> np.ndarray:
        return np.array([self._t, self._seed], dtype=np.float32)


if METRICS_ENV_ID not in gym.registry:
    gym.register(id=METRICS_ENV_ID, entry_point=MetricsEnv)  # type: ignore[arg-type]


def lean_controller(obs: dict[str, np.ndarray]) -> np.ndarray:
    """Push the cart toward the pole's lean (angle + angular velocity)."""
    state = obs["state"]
    return (state[:, 2] + state[:, 3] > 0).astype(np.int64)


def angle_only(obs: dict[str, np.ndarray]) -> np.ndarray:
    """A weaker controller (ignores angular velocity): episodes of varied length, 30-60 steps."""
    return (obs["state"][:, 2] > 0).astype(np.int64)


def always_left(obs: dict[str, np.ndarray]) -> np.ndarray:
    return np.zeros(len(obs["state"]), dtype=np.int64)


class RecordingPolicy:
    """A Policy-like object (has predict/reset) that records what it was called with."""

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []
        self.resets: list[torch.Tensor | None] = []
        self.deterministic: list[bool] = []

    def predict(self, obs: dict[str, np.ndarray], *, deterministic: bool = True) -> np.ndarray:
        self.batch_sizes.append(len(obs["state"]))
        self.deterministic.append(deterministic)
        return np.zeros(len(obs["state"]), dtype=np.int64)

    def reset(self, done_mask: torch.Tensor | None = None) -> None:
        self.resets.append(done_mask)


def test_scripted_controller_balances_cartpole() -> None:
    result = evaluate_policy(lean_controller, "CartPole-v1", episodes=4, seed=1, num_envs=4)
    assert result.seeds == [1, 2, 3, 4]
    assert result.returns == [500.0] * 4
    assert result.lengths == [500] * 4
    summary = result.summary()
    assert summary["return_mean"] == 500.0
    assert summary["return_std"] == 0.0
    assert summary["episodes"] == 4
    assert summary["length_mean"] == 500


def test_constant_action_falls_quickly() -> None:
    result = evaluate_policy(always_left, "CartPole-v1", episodes=5, seed=0)
    assert max(result.returns) < 50
    assert result.summary()["return_max"] < 50


def test_results_are_reproducible_and_independent_of_num_envs() -> None:
    kwargs: dict[str, Any] = {"episodes": 7, "seed": 7}
    one = evaluate_policy(angle_only, "CartPole-v1", num_envs=1, **kwargs)
    again = evaluate_policy(angle_only, "CartPole-v1", num_envs=1, **kwargs)
    four = evaluate_policy(angle_only, "CartPole-v1", num_envs=4, **kwargs)
    assert len(set(one.returns)) > 3  # varied lengths, so slots refill in a scrambled order
    assert one.returns == again.returns == four.returns
    assert one.lengths == four.lengths
    assert one.seeds == four.seeds == list(range(7, 14))
    other_seed = evaluate_policy(angle_only, "CartPole-v1", num_envs=4, episodes=7, seed=100)
    assert other_seed.returns != one.returns


def test_metrics_and_success_rate_from_info() -> None:
    # Seeds 10..14: lengths 2 + s % 3 = [3, 4, 2, 3, 4]; even seeds succeed -> 3 / 5.
    result = evaluate_policy(always_left, METRICS_ENV_ID, episodes=5, seed=10, num_envs=2)
    assert result.lengths == [3, 4, 2, 3, 4]
    assert result.returns == [3.0, 4.0, 2.0, 3.0, 4.0]
    assert result.metrics["success"] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert result.metrics["distance"] == [0.0] * 5  # the final step's value, not an earlier one
    assert result.metrics["steps"] == [3.0, 4.0, 2.0, 3.0, 4.0]  # 0-d arrays count
    assert result.metrics["reward/progress"] == [3.0, 4.0, 2.0, 3.0, 4.0]
    assert result.metrics["reward/penalty"] == [-1.5, -2.0, -1.0, -1.5, -2.0]
    assert "label" not in result.metrics
    assert "pose" not in result.metrics
    assert "reward_components" not in result.metrics

    summary = result.summary()
    assert summary["success_rate"] == pytest.approx(0.6)
    assert "success_mean" not in summary
    assert summary["reward/progress_mean"] == pytest.approx(3.2)
    assert summary["reward/penalty_mean"] == pytest.approx(-1.6)
    assert summary["distance_mean"] == 0.0
    assert "success_rate" in format_summary(summary)


def test_summary_is_success_and_missing_values() -> None:
    result = EvalResult(
        env_id="x",
        returns=[1.0, 2.0, 3.0],
        lengths=[1, 2, 3],
        seeds=[0, 1, 2],
        metrics={"is_success": [1.0, float("nan"), 0.0], "score": [2.0, float("nan"), 4.0]},
    )
    summary = result.summary()
    assert summary["success_rate"] == pytest.approx(1 / 3)  # NaN (not reported) is a failure
    assert summary["score_mean"] == pytest.approx(3.0)
    assert "success_rate" not in EvalResult("x", [1.0], [1], [0]).summary()


def test_policy_predict_and_reset_protocol() -> None:
    policy = RecordingPolicy()
    result = evaluate_policy(policy, METRICS_ENV_ID, episodes=3, seed=0, num_envs=2, deterministic=False)
    assert result.lengths == [2, 3, 4]
    assert set(policy.batch_sizes) == {2}  # slot layout is kept, also once a slot is idle
    assert set(policy.deterministic) == {False}
    assert policy.resets[0] is None
    masks = policy.resets[1:]
    assert len(masks) == 1  # only seed 2 starts mid-run, in slot 0 after seed 0's 2 steps
    assert masks[0] is not None
    assert masks[0].dtype == torch.bool
    assert masks[0].tolist() == [True, False]


def test_nan_action_raises_with_context() -> None:
    def nan_actions(obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.full(len(obs["state"]), np.nan)

    with pytest.raises(ValueError, match=r"CartPole-v1.*step 0.*non-finite"):
        evaluate_policy(nan_actions, "CartPole-v1", episodes=2)

    def nan_torques(obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.full((len(obs["state"]), 1), np.nan, dtype=np.float32)

    with pytest.raises(ValueError, match=r"Pendulum-v1.*step 0"):
        evaluate_policy(nan_torques, "Pendulum-v1", episodes=1)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        evaluate_policy(always_left, "CartPole-v1", episodes=0)
    with pytest.raises(ValueError):
        evaluate_policy(always_left, "CartPole-v1", num_envs=0)
    with pytest.raises(TypeError):
        evaluate_policy(object(), "CartPole-v1", episodes=1)  # type: ignore[arg-type]


def _count_frames(path: str | Path, shape: tuple[int, ...] | None = None) -> int:
    """Frames in an MP4 (read one by one, so the count is exact); checks each frame's shape."""
    capture = cv2.VideoCapture(str(path))
    try:
        assert capture.isOpened()
        frames = 0
        while True:
            ok, frame = capture.read()
            if not ok:
                return frames
            frames += 1
            if shape is not None:
                assert frame.shape == shape
    finally:
        capture.release()


def test_video_is_written_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "eval.mp4"
    result = evaluate_policy(
        lean_controller,
        "CartPole-v1",
        episodes=3,
        num_envs=2,
        max_episode_steps=20,
        video_path=path,
        video_episodes=2,
    )
    assert result.returns == [20.0, 20.0, 20.0]
    # one whole episode per file, named after the episode; video_path is the first
    assert result.video_paths == [str(tmp_path / "eval-episode0.mp4"), str(tmp_path / "eval-episode1.mp4")]
    assert result.video_path == result.video_paths[0]
    for video in result.video_paths:
        assert _count_frames(video, shape=(400, 600, 3)) == 21  # the reset frame and one per step


def test_video_records_whole_episodes_of_every_length(tmp_path: Path) -> None:
    """Episodes of different lengths, run side by side and refilled: file i holds episode i whole."""
    result = evaluate_policy(
        always_left,
        "CartPole-v1",
        episodes=5,
        seed=3,
        num_envs=2,
        video_path=tmp_path / "v.mp4",
        video_episodes=4,
    )
    assert len(set(result.lengths[:4])) > 1  # the episodes really differ in length
    assert [Path(p).name for p in result.video_paths] == [f"v-episode{i}.mp4" for i in range(4)]
    assert [_count_frames(p) for p in result.video_paths] == [length + 1 for length in result.lengths[:4]]
    assert sorted(tmp_path.iterdir()) == sorted(Path(p) for p in result.video_paths)  # nothing else written


def test_one_video_episode_is_written_to_the_path_itself(tmp_path: Path) -> None:
    result = evaluate_policy(
        always_left, "CartPole-v1", episodes=3, num_envs=3, video_path=tmp_path / "one.mp4", video_episodes=1
    )
    assert result.video_paths == [str(tmp_path / "one.mp4")]
    assert _count_frames(tmp_path / "one.mp4") == result.lengths[0] + 1
    many = evaluate_policy(
        always_left, "CartPole-v1", episodes=2, video_path=tmp_path / "m.mp4", video_episodes=5
    )
    assert len(many.video_paths) == 2  # at most one per episode run


@pytest.mark.filterwarnings("ignore:.*RGB-array rendering should return")
def test_video_needs_a_rendering_env(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot render"):
        evaluate_policy(always_left, METRICS_ENV_ID, episodes=1, video_path=tmp_path / "x.mp4")


def test_recording_does_not_change_results(tmp_path: Path) -> None:
    plain = evaluate_policy(angle_only, "CartPole-v1", episodes=3, seed=5, num_envs=2)
    recorded = evaluate_policy(
        angle_only, "CartPole-v1", episodes=3, seed=5, num_envs=2, video_path=tmp_path / "v.mp4"
    )
    assert plain.video_path is None
    assert recorded.video_path is not None
    assert recorded.returns == plain.returns


class LeanPolicy(Policy):
    """A real (parameter-free) Policy: the lean controller behind ``act``, noting its mode."""

    name = "test_lean"

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Space) -> None:
        super().__init__(PolicyConfig(type=self.name), observation_space, action_space)
        self.modes: list[bool] = []

    def act(self, obs: dict[str, torch.Tensor], *, deterministic: bool = False) -> PolicyStep:
        self.modes.append(self.training)
        state = obs["state"]
        action = (state[:, 2] + state[:, 3] > 0).long()
        zeros = torch.zeros(len(action), 1)
        return PolicyStep(action=action, logprob=zeros, mask=torch.ones_like(zeros, dtype=torch.bool))


def test_real_policy_runs_in_eval_mode_and_mode_is_restored() -> None:
    env = make_env("CartPole-v1")
    policy = LeanPolicy(env.observation_space, env.action_space)  # type: ignore[arg-type]
    env.close()
    policy.train()
    result = evaluate_policy(policy, "CartPole-v1", episodes=2, seed=1, max_episode_steps=50)
    assert result.returns == [50.0, 50.0]
    assert policy.modes and not any(policy.modes)
    assert policy.training
