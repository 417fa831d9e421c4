"""What the chunk policies share: demonstration windows, receding-horizon acting, normalisers, saving."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy
from omnigym.core.types import OnPolicyBatch
from omnigym.policies.chunking.config import ChunkPolicyConfig
from omnigym.policies.chunking.data import DemoWindows
from omnigym.policies.chunking.policy import ChunkPolicy
from omnigym.policies.diffusion.policy import DiffusionPolicy, DiffusionPolicyConfig
from omnigym.policies.flow.meanflow import MeanFlowPolicy, MeanFlowPolicyConfig
from omnigym.policies.flow.policy import FlowPolicy, FlowPolicyConfig

TINY = {
    "down_dims": (16, 32),
    "state_hidden_sizes": (32,),
    "time_embed_dim": 16,
    "horizon": 8,
    "n_action_steps": 4,
}
OBS_SPACE = spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (3,), np.float32)})
ACTION_SPACE = spaces.Box(-2, 2, (2,), np.float32)
POLICIES = [
    (DiffusionPolicy, DiffusionPolicyConfig),
    (FlowPolicy, FlowPolicyConfig),
    (MeanFlowPolicy, MeanFlowPolicyConfig),
]


def make(cls: type = FlowPolicy, config: type = FlowPolicyConfig, **kwargs: object) -> ChunkPolicy:
    torch.manual_seed(0)
    return cls(config(**{**TINY, **kwargs}), OBS_SPACE, ACTION_SPACE)


def test_windows_pad_episode_ends_by_repeating_the_boundary_step() -> None:
    episode_index = np.array([0, 0, 0, 1, 1])
    obs = {"state": np.arange(5, dtype=np.float32)[:, None].repeat(3, axis=1)}
    actions = np.arange(5, dtype=np.float32)[:, None].repeat(2, axis=1)
    windows = DemoWindows(obs, actions, episode_index, n_obs_steps=2, horizon=4)
    assert len(windows) == 5
    np.testing.assert_array_equal(windows.obs_index, [[0, 0], [0, 1], [1, 2], [3, 3], [3, 4]])
    # actions start at the oldest observation of the window, clamped to the episode
    np.testing.assert_array_equal(
        windows.action_index, [[0, 0, 1, 2], [0, 1, 2, 2], [1, 2, 2, 2], [3, 3, 4, 4], [3, 4, 4, 4]]
    )
    batch = windows.batch(np.array([1, 4]))
    assert batch.obs["state"].shape == (2, 2, 3) and batch.actions.shape == (2, 4, 2)
    assert batch.actions[1, :, 0].tolist() == [3, 4, 4, 4]


def test_chunk_is_executed_from_its_receding_horizon_slice() -> None:
    """n_action_steps actions come from one sample: slice [To - 1, To - 1 + Ta) of the chunk."""
    policy = make(n_obs_steps=2)
    calls = []
    policy.acting_model.unet.register_forward_hook(lambda *_: calls.append(1))
    obs = {"state": torch.randn(3, 3)}
    expected, _ = policy.sample_chunks({"state": obs["state"][:, None].expand(-1, 2, -1)}, deterministic=True)
    calls.clear()
    actions = [policy.act(obs, deterministic=True).action for _ in range(4)]
    assert len(calls) == policy.config.num_inference_steps  # one chunk for all four calls
    torch.testing.assert_close(torch.stack(actions, dim=1), expected[:, 1:5])
    policy.act(obs, deterministic=True)
    assert len(calls) == 2 * policy.config.num_inference_steps  # the fifth call re-plans


def test_reset_resamples_only_the_finished_rows() -> None:
    policy = make(n_obs_steps=1)
    sampled_rows: list[int] = []
    policy.acting_model.unet.register_forward_hook(
        lambda module, args, out: sampled_rows.append(out.shape[0])
    )
    obs = {"state": torch.randn(4, 3)}
    first = policy.act(obs).action
    policy.act(obs)
    policy.reset(np.array([False, True, False, True]))
    sampled_rows.clear()
    third = policy.act(obs).action
    assert set(sampled_rows) == {2}  # only rows 1 and 3 sampled a chunk
    # rows 0 and 2 continue their chunk; rows 1 and 3 restart with a fresh chunk's first action
    assert not torch.equal(third[[0, 2]], first[[0, 2]])
    policy.reset()
    sampled_rows.clear()
    policy.act(obs)
    assert set(sampled_rows) == {4}


def test_history_pads_a_new_episode_with_its_first_observation() -> None:
    policy = make(n_obs_steps=2, n_action_steps=1)
    first, second = torch.randn(2, 3), torch.randn(2, 3)
    policy.act({"state": first})
    torch.testing.assert_close(policy._history["state"], torch.stack([first, first], dim=1))
    policy.act({"state": second})
    torch.testing.assert_close(policy._history["state"], torch.stack([first, second], dim=1))
    policy.reset(torch.tensor([True, False]))
    policy.act({"state": first})
    torch.testing.assert_close(policy._history["state"][0], torch.stack([first[0], first[0]]))
    torch.testing.assert_close(policy._history["state"][1], torch.stack([second[1], first[1]]))


@pytest.mark.parametrize(("cls", "config"), POLICIES, ids=[c.name for c, _ in POLICIES])
def test_save_load_round_trip_keeps_normalisers_and_ema(cls: type, config: type, tmp_path: Path) -> None:
    policy = make(cls, config)
    rng = np.random.default_rng(0)
    policy.fit_normalizers({"state": rng.normal(5, 3, (100, 3))}, rng.uniform(-0.5, 1.5, (100, 2)))
    batch = OnPolicyBatch(
        obs={"state": torch.randn(8, 3)}, actions=torch.rand(8, 2), logprob=torch.zeros(8, 1),
        mask=torch.ones(8, 1, dtype=torch.bool), values=torch.zeros(8), advantages=torch.zeros(8),
        returns=torch.zeros(8),
    )  # fmt: skip
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2)
    for _ in range(3):
        loss, _ = policy.compute_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        policy.update_ema()
    assert policy.ema_model is not None
    trained = dict(policy.model.named_parameters())
    assert any(not torch.equal(p, trained[n]) for n, p in policy.ema_model.named_parameters())
    loaded = Policy.from_pretrained(policy.save_pretrained(tmp_path / "p"))
    assert isinstance(loaded, ChunkPolicy)
    for name in ("action_normalizer", "state_normalizer"):
        torch.testing.assert_close(getattr(loaded, name).low, getattr(policy, name).low, rtol=0, atol=0)
        torch.testing.assert_close(getattr(loaded, name).high, getattr(policy, name).high, rtol=0, atol=0)
    assert int(loaded.ema_step) == 3
    obs = {"state": torch.randn(5, 3)}
    for _ in range(2):
        torch.testing.assert_close(
            loaded.act(obs, deterministic=True).action,
            policy.act(obs, deterministic=True).action,
            rtol=0,
            atol=0,
        )


def test_normalizer_maps_the_data_range_to_unit_interval_and_back() -> None:
    policy = make()
    actions = np.array([[-1.0, 0.5], [1.0, 0.5], [0.0, 0.5]])  # second dimension constant
    policy.fit_normalizers({"state": np.zeros((3, 3))}, actions)
    normalized = policy.action_normalizer.normalize(torch.as_tensor(actions))
    torch.testing.assert_close(normalized[:, 0], torch.tensor([-1.0, 1.0, 0.0]))
    torch.testing.assert_close(normalized[:, 1], torch.zeros(3))  # constant: centred, not scaled
    torch.testing.assert_close(
        policy.action_normalizer.unnormalize(normalized), torch.as_tensor(actions).float()
    )


def test_ema_follows_diffusion_policys_decay() -> None:
    policy = make()
    assert policy.ema_model is not None
    with torch.no_grad():
        for p in policy.model.parameters():
            p.fill_(1.0)
    policy.update_ema()  # decay 0 at the first update: a copy
    assert all(torch.equal(p, torch.ones_like(p)) for p in policy.ema_model.parameters())
    with torch.no_grad():
        for p in policy.model.parameters():
            p.fill_(0.0)
    policy.update_ema()  # decay 1 - 2^-0.75
    value = next(policy.ema_model.parameters()).flatten()[0].item()
    assert value == pytest.approx(1 - 2**-0.75, abs=1e-6)


@pytest.mark.parametrize(
    ("space", "match"), [(spaces.Discrete(3), "Box"), (spaces.Text(8), "Box")], ids=["discrete", "text"]
)
def test_unsupported_action_spaces_are_a_type_error(space: spaces.Space, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        FlowPolicy(FlowPolicyConfig(**TINY), OBS_SPACE, space)  # type: ignore[arg-type]


def test_text_observations_are_a_type_error_and_bad_horizons_a_value_error() -> None:
    obs_space = spaces.Dict({"state": OBS_SPACE["state"], "text": spaces.Text(8)})
    with pytest.raises(TypeError, match="obs_keys"):
        FlowPolicy(FlowPolicyConfig(**TINY), obs_space, ACTION_SPACE)
    FlowPolicy(FlowPolicyConfig(**TINY, obs_keys=("state",)), obs_space, ACTION_SPACE)  # explicit keys
    with pytest.raises(ValueError, match="divisible"):
        ChunkPolicyConfig(horizon=10, down_dims=(8, 16, 32))
    with pytest.raises(ValueError, match="shorter"):
        ChunkPolicyConfig(horizon=8, n_obs_steps=2, n_action_steps=8)


def test_temporal_ensembling_averages_every_chunks_prediction_of_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACT: the action at step k is sum_i w_i a_i / sum_i w_i over the chunks that predicted it,
    w_i = exp(-m i) with i = 0 the oldest; a reset row starts over."""
    policy = make(n_obs_steps=1, horizon=4, n_action_steps=1, temporal_ensemble=True, ensemble_coeff=0.5)
    values = iter([1.0, 3.0, 5.0, 7.0])

    def constant_chunks(
        history: dict, deterministic: bool = False, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list]:
        return torch.full((history["state"].shape[0], 4, 2), next(values)), []

    monkeypatch.setattr(policy, "sample_chunks", constant_chunks)
    obs = {"state": torch.zeros(2, 3)}
    w = np.exp(-0.5 * np.arange(3))
    assert policy.act(obs).action[:, 0].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(policy.act(obs).action[:, 0], (w[0] * 1 + w[1] * 3) / w[:2].sum(), rtol=1e-6)
    policy.reset(np.array([False, True]))
    action = policy.act(obs).action[:, 0].numpy()
    np.testing.assert_allclose(action, [(w[0] * 1 + w[1] * 3 + w[2] * 5) / w.sum(), 5.0], rtol=1e-6)
    with pytest.raises(ValueError, match="n_action_steps"):
        ChunkPolicyConfig(temporal_ensemble=True)
