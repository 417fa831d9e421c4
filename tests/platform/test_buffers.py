"""The replay buffer: ring storage, sampling, episodes, returns and the Minari round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.platform.buffers import ReplayBuffer

OBS = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (2,), np.float32)})
ACT = spaces.Box(-1.0, 1.0, (1,), np.float32)


def add_steps(
    buffer: ReplayBuffer, start: int, n: int, ends: set[int] = frozenset(), terminal: set[int] = frozenset()
):
    for t in range(start, start + n):
        buffer.add(
            {"state": np.array([[t, 0.0]])},
            np.array([[t / 100]]),
            [float(t)],
            {"state": np.array([[t + 1, 0.0]])},
            [t in terminal],
            [t in ends and t not in terminal],
        )


def test_ring_overwrites_oldest_and_keeps_order() -> None:
    buffer = ReplayBuffer(OBS, ACT, capacity=4)
    add_steps(buffer, 0, 6)
    assert len(buffer) == 4
    assert buffer.all().rewards.tolist() == [2.0, 3.0, 4.0, 5.0]
    assert buffer.all().next_obs["state"][:, 0].tolist() == [3.0, 4.0, 5.0, 6.0]


def test_sample_is_seeded_and_stored_rows() -> None:
    buffer = ReplayBuffer(OBS, ACT, capacity=10)
    add_steps(buffer, 0, 10)
    a = buffer.sample(32, torch.Generator().manual_seed(0))
    b = buffer.sample(32, torch.Generator().manual_seed(0))
    assert torch.equal(a.rewards, b.rewards)
    # every sampled row is a stored transition: next state = state + 1, action = state / 100
    torch.testing.assert_close(a.next_obs["state"][:, 0], a.obs["state"][:, 0] + 1)
    torch.testing.assert_close(a.actions[:, 0], a.obs["state"][:, 0] / 100)


def test_terminated_and_time_limit_ends_differ() -> None:
    buffer = ReplayBuffer(OBS, ACT, capacity=10)
    add_steps(buffer, 0, 6, ends={2, 5}, terminal={2})
    assert buffer.all().terminated.tolist() == [0, 0, 1, 0, 0, 0]  # the time limit at 5 bootstraps
    assert buffer.episode_returns().tolist() == [0 + 1 + 2, 3 + 4 + 5]


def test_episodes_split_at_ends_with_final_observations() -> None:
    buffer = ReplayBuffer(OBS, ACT, capacity=10)
    add_steps(buffer, 0, 7, ends={2, 5}, terminal={2})
    episodes = list(buffer.episodes())
    assert [len(e["rewards"]) for e in episodes] == [3, 3, 1]
    assert episodes[0]["observations"]["state"][:, 0].tolist() == [0, 1, 2, 3]
    assert episodes[0]["terminations"].tolist() == [False, False, True]
    assert episodes[1]["truncations"].tolist() == [False, False, True]
    assert episodes[2]["truncations"].tolist() == [True]  # unfinished: cut at the end


def test_bad_transitions_are_refused() -> None:
    buffer = ReplayBuffer(OBS, ACT, capacity=4)
    with pytest.raises(ValueError, match="non-finite"):
        buffer.add({"state": np.zeros((1, 2))}, [[np.nan]], [0.0], {"state": np.zeros((1, 2))}, [False])
    with pytest.raises(KeyError, match="state"):
        buffer.add({"pos": np.zeros((1, 2))}, [[0.0]], [0.0], {"pos": np.zeros((1, 2))}, [False])
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(1)
    with pytest.raises(TypeError, match="Box actions"):
        ReplayBuffer(OBS, spaces.Discrete(3), capacity=4)


def test_state_dict_round_trip() -> None:
    buffer = ReplayBuffer(OBS, ACT, capacity=8)
    add_steps(buffer, 0, 5, ends={3})
    copy = ReplayBuffer(OBS, ACT, capacity=8)
    copy.load_state_dict(buffer.state_dict())
    assert len(copy) == 5 and copy.position == buffer.position
    assert torch.equal(copy.all().rewards, buffer.all().rewards)
    assert torch.equal(copy.episode_returns(), buffer.episode_returns())


def test_minari_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Transitions written to Minari (from a buffer's episodes) load back identical."""
    from omnigym.platform.datasets import write_episodes_dataset

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    from omnigym.platform.vec_env import make_env

    env = make_env("Pendulum-v1")
    buffer = ReplayBuffer(env.observation_space, env.action_space, capacity=100)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(30):
        action = rng.uniform(-2, 2, size=(1,)).astype(np.float32)
        nxt, reward, terminated, _, _ = env.step(action)
        truncated = t in (9, 29)
        buffer.add({k: v[None] for k, v in obs.items()}, action[None], [reward],
                   {k: v[None] for k, v in nxt.items()}, [terminated], [truncated])  # fmt: skip
        obs = env.reset(seed=t)[0] if truncated else nxt
    summary = write_episodes_dataset(
        list(buffer.episodes()), "Pendulum-v1", "test/pendulum-replay-v0", label="replay", description="test"
    )
    assert summary.episodes == 2 and summary.steps == 30
    loaded = ReplayBuffer.from_minari("test/pendulum-replay-v0")
    mine, theirs = buffer.all(), loaded.all()
    for name in ("actions", "rewards", "terminated"):
        torch.testing.assert_close(getattr(theirs, name), getattr(mine, name))
    torch.testing.assert_close(theirs.obs["state"], mine.obs["state"])
    torch.testing.assert_close(theirs.next_obs["state"], mine.next_obs["state"])
    assert torch.equal(loaded.episode_returns(), buffer.episode_returns())
