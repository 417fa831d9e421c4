"""DiffusionWorldModel: EDM maths against docs/algorithms, learning, seeded stepping, saving, errors.

Also the PSNR/SSIM of ``pixel_metrics`` against hand-computed values.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces

from omnigym.core.config import build_dataclass, load_yaml
from omnigym.core.registry import WORLD_MODELS
from omnigym.platform.experiment import config_dir
from omnigym.world_models.base import WorldModel
from omnigym.world_models.diffusion import DiffusionWorldModel, DiffusionWorldModelConfig
from omnigym.world_models.diffusion_data import (
    HISTORY_ACTIONS,
    HISTORY_FRAMES,
    NO_ACTION,
    fit_diffusion_world_model,
    history_transitions,
)
from omnigym.world_models.diffusion_edm import (
    edm_coefficients,
    frames_to_unit,
    karras_sigmas,
    quantize,
    reward_class,
    unit_to_frames,
)
from omnigym.world_models.pixel_metrics import gaussian_window, psnr, ssim

SIDE = 16
SQUARE = 4
OBS_SPACE = spaces.Dict({"image": spaces.Box(0, 255, (SIDE, SIDE, 3), np.uint8)})
ACTION_SPACE = spaces.Discrete(4)
MOVES = ((-2, 0), (2, 0), (0, -2), (0, 2))


def tiny_config(**overrides: object) -> DiffusionWorldModelConfig:
    settings: dict = {
        "num_context_frames": 2, "channels": (16, 32), "action_embed_dim": 8, "reward_end_channels": (8, 16),
        "reward_end_hidden": 32, "learning_rate": 2e-3, "warmup_steps": 10,
    }  # fmt: skip
    return DiffusionWorldModelConfig(**{**settings, **overrides})


def tiny_model(**overrides: object) -> DiffusionWorldModel:
    torch.manual_seed(0)
    return DiffusionWorldModel(tiny_config(**overrides), OBS_SPACE, ACTION_SPACE)


def square_frame(row: int, col: int) -> np.ndarray:
    frame = np.full((SIDE, SIDE, 3), 30, np.uint8)
    frame[row : row + SQUARE, col : col + SQUARE] = (240, 60, 60)
    return frame


def square_episodes(num: int, length: int, seed: int) -> list[dict]:
    """A red square on a dark field moves 2 px per action (clamped at the edges); +1 at the right edge."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(num):
        row, col = (int(v) for v in rng.integers(0, SIDE - SQUARE + 1, 2))
        frames, actions, rewards = [square_frame(row, col)], [], []
        for _ in range(length):
            action = int(rng.integers(4))
            row = min(max(row + MOVES[action][0], 0), SIDE - SQUARE)
            col = min(max(col + MOVES[action][1], 0), SIDE - SQUARE)
            frames.append(square_frame(row, col))
            actions.append(action)
            rewards.append(1.0 if col == SIDE - SQUARE else 0.0)
        episodes.append({
            "observations": {"image": np.stack(frames)}, "actions": np.array(actions),
            "rewards": np.array(rewards, np.float32), "terminations": np.zeros(length, bool),
        })  # fmt: skip
    return episodes


# --- the EDM maths (docs/algorithms sanity checks) ------------------------------------------------
@pytest.mark.parametrize(
    ("sigma", "expected"),
    [
        (0.0, (0.735294, 0.257248, 1.714986, -0.300993)),
        (1.0, (0.186567, 0.450953, 0.863868, 0.010772)),
    ],
)
def test_edm_coefficients_match_the_sanity_numbers(sigma: float, expected: tuple) -> None:
    c = edm_coefficients(torch.tensor([sigma], dtype=torch.float64), sigma_data=0.5, sigma_offset=0.3)
    got = (c.c_skip.item(), c.c_out.item(), c.c_in.item(), c.c_noise.item())
    assert got == pytest.approx(expected, abs=1e-6)


def test_karras_schedule_of_three_steps() -> None:
    sigmas = karras_sigmas(3, sigma_min=2e-3, sigma_max=5.0, rho=7.0)
    assert sigmas.tolist() == pytest.approx([5.0, 0.283082, 0.002, 0.0], abs=1e-6)
    assert tiny_model().sigmas.tolist() == pytest.approx(sigmas.tolist())


def test_quantize_maps_to_256_levels_and_keeps_8bit_images() -> None:
    x = torch.linspace(-1.3, 1.3, 1001)
    levels = (quantize(x) + 1) * 127.5
    assert torch.allclose(levels, levels.round(), atol=1e-4) and levels.min() == 0 and levels.max() == 255
    assert (quantize(x) - x.clamp(-1, 1)).abs().max() <= 1 / 255 + 1e-6  # nearest level: half a step of 2/255
    frames = torch.arange(256, dtype=torch.uint8).reshape(1, 16, 16, 1).expand(1, 16, 16, 3)
    assert torch.equal(unit_to_frames(quantize(frames_to_unit(frames))), frames)


def test_reward_classes_are_signs() -> None:
    assert reward_class(torch.tensor([7.0, 0.0, -3.0])).tolist() == [2, 1, 0]


# --- data -----------------------------------------------------------------------------------------------
def test_history_transitions_pad_like_reset() -> None:
    episode = square_episodes(1, 5, seed=0)[0]
    data = history_transitions([episode], 3, ACTION_SPACE)
    frames = torch.as_tensor(episode["observations"]["image"])
    assert len(data) == 5 and data.obs[HISTORY_FRAMES].shape == (5, 3, SIDE, SIDE, 3)
    assert torch.equal(data.obs[HISTORY_FRAMES][0], frames[0].expand(3, -1, -1, -1))  # replicated start
    assert data.obs[HISTORY_ACTIONS][0].flatten().tolist() == [NO_ACTION, NO_ACTION]
    assert torch.equal(data.obs[HISTORY_FRAMES][3], frames[1:4])
    assert data.obs[HISTORY_ACTIONS][3].flatten().tolist() == episode["actions"][1:3].tolist()
    assert data.actions[3].item() == episode["actions"][3] and torch.equal(
        data.next_obs["image"][3], frames[4]
    )


# --- learning -------------------------------------------------------------------------------------------
def test_training_learns_the_moving_square() -> None:
    """The held-out loss falls and a sampled next frame beats repeating the last frame."""
    torch.set_num_threads(1)
    model = tiny_model(channels=(8, 16), learning_rate=3e-3)
    held_out = history_transitions(square_episodes(8, 6, seed=99), 2, ACTION_SPACE)
    before = model.evaluate(held_out)
    metrics = fit_diffusion_world_model(
        model, square_episodes(24, 12, seed=1), max_steps=250, batch_size=16, holdout_fraction=0.0
    )
    after = model.evaluate(held_out)
    assert after["eval/loss_denoising"] < 0.5 * before["eval/loss_denoising"], (before, after)
    assert after["eval/next_frame_mse"] < 0.6 * after["eval/copy_frame_mse"], after
    assert before["eval/next_frame_mse"] > after["eval/copy_frame_mse"]  # untrained: worse than copying
    assert after["eval/reward_accuracy"] > 0.9 and metrics["train/steps"] == 250


# --- simulating -----------------------------------------------------------------------------------------
def rollout(model: WorldModel, seed: int, steps: int = 3) -> list[torch.Tensor]:
    start = torch.as_tensor(np.stack([square_frame(0, 0), square_frame(6, 6)]))
    state = model.reset({"image": start})
    generator = torch.Generator().manual_seed(seed)
    out = []
    for k in range(steps):
        state, obs, reward, terminated, info = model.step(
            state, torch.tensor([k % 4, 3]), generator=generator
        )
        assert obs["image"].dtype == torch.uint8 and obs["image"].shape == (2, SIDE, SIDE, 3)
        assert reward.dtype == torch.float32 and set(reward.tolist()) <= {-1.0, 0.0, 1.0}
        assert terminated.dtype == torch.bool and info == {}
        out += [obs["image"], reward, terminated, state["frames"], state["actions"]]
    return out


def test_seeded_steps_are_reproducible() -> None:
    model = tiny_model()
    first = rollout(model, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(first, rollout(model, seed=1), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(first, rollout(model, seed=2), strict=True))


def test_state_is_the_history() -> None:
    model = tiny_model(num_context_frames=3)
    start = torch.as_tensor(square_frame(2, 2))[None]
    state = model.reset({"image": start})
    assert torch.equal(state["frames"], start[:, None].expand(1, 3, -1, -1, -1))
    assert state["actions"].flatten().tolist() == [NO_ACTION, NO_ACTION]
    state, obs, *_ = model.step(state, torch.tensor([2]), generator=torch.Generator().manual_seed(0))
    assert torch.equal(state["frames"][:, -1], obs["image"]) and torch.equal(state["frames"][:, 1], start)
    assert state["actions"].flatten().tolist() == [NO_ACTION, 2.0]


def test_argmax_reward_and_termination_draw_nothing_extra() -> None:
    model = tiny_model(sample_reward_end=False)
    start = model.reset({"image": torch.as_tensor(square_frame(0, 0))[None]})
    generator = torch.Generator().manual_seed(0)
    model.step(start, torch.tensor([1]), generator=generator)
    after_step = generator.get_state()
    expected = torch.Generator().manual_seed(0)
    torch.randn((1, 3, SIDE, SIDE), generator=expected)  # the sampler's starting noise, nothing else
    assert torch.equal(after_step, expected.get_state())


def test_box_actions_are_embedded_linearly() -> None:
    torch.manual_seed(0)
    model = DiffusionWorldModel(tiny_config(), OBS_SPACE, spaces.Box(-1, 1, (2,), np.float32))
    state = model.reset({"image": torch.as_tensor(square_frame(0, 0))[None]})
    assert state["actions"].shape == (1, 1, 2) and (state["actions"] == 0).all()
    _, obs, *_ = model.step(state, torch.tensor([[0.5, -0.5]]), generator=torch.Generator().manual_seed(0))
    assert obs["image"].shape == (1, SIDE, SIDE, 3)


# --- saving and config ----------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path: Path) -> None:
    model = tiny_model()
    fit_diffusion_world_model(
        model, square_episodes(4, 6, seed=3), max_steps=3, batch_size=8, holdout_fraction=0
    )
    loaded = WorldModel.from_pretrained(model.save_pretrained(tmp_path / "model"))
    assert isinstance(loaded, DiffusionWorldModel) and loaded.config == model.config
    assert all(torch.equal(a, b) for a, b in zip(rollout(model, 4), rollout(loaded, 4), strict=True))


def test_registered_with_its_yaml_defaults() -> None:
    assert WORLD_MODELS.get("diffusion") is DiffusionWorldModel
    config = build_dataclass(
        DiffusionWorldModelConfig, load_yaml(config_dir() / "world_model" / "diffusion.yaml"), path="wm"
    )
    assert config == DiffusionWorldModelConfig()


# --- errors ---------------------------------------------------------------------------------------------
def test_bad_inputs_are_clear_errors() -> None:
    model = tiny_model()
    with pytest.raises(ValueError, match="images"):
        model.reset({"image": torch.zeros(2, SIDE, SIDE + 1, 3, dtype=torch.uint8)})
    with pytest.raises(KeyError, match="image"):
        model.reset({"state": torch.zeros(2, 3)})
    state = model.reset({"image": torch.zeros(2, SIDE, SIDE, 3, dtype=torch.uint8)})
    with pytest.raises(ValueError, match="finite"):
        model.step(state, torch.tensor([[0.0], [math.nan]]))
    with pytest.raises(ValueError, match="integers in"):
        model.step(state, torch.tensor([1, 4]))
    with pytest.raises(ValueError, match="shape"):
        model.step(state, torch.zeros(3, 1))
    with pytest.raises(KeyError, match="history_transitions"):
        data = history_transitions(square_episodes(1, 3, seed=0), 2, ACTION_SPACE)
        data.obs.pop(HISTORY_FRAMES)
        model.train_step(data)


def test_spaces_it_cannot_model_are_rejected() -> None:
    with pytest.raises(ValueError, match="only the 'image' key"):
        DiffusionWorldModel(
            tiny_config(), spaces.Dict({**OBS_SPACE.spaces, "text": spaces.Text(10)}), ACTION_SPACE
        )
    with pytest.raises(ValueError, match="divide by"):
        DiffusionWorldModel(
            tiny_config(), spaces.Dict({"image": spaces.Box(0, 255, (15, 15, 3), np.uint8)}), ACTION_SPACE
        )
    with pytest.raises(TypeError, match="Discrete or Box"):
        DiffusionWorldModel(tiny_config(), OBS_SPACE, spaces.MultiBinary(3))
    with pytest.raises(ValueError, match="norm_groups"):
        tiny_config(channels=(12, 32))


# --- PSNR and SSIM ----------------------------------------------------------------------------------------
def test_identical_images_score_perfectly() -> None:
    image = torch.as_tensor(np.random.default_rng(0).integers(0, 256, (2, 20, 24, 3)), dtype=torch.uint8)
    assert torch.isinf(psnr(image, image)).all()
    assert ssim(image, image).tolist() == pytest.approx([1.0, 1.0])


def test_constant_offset_has_the_hand_computed_scores() -> None:
    a = torch.full((1, 16, 16, 3), 100, dtype=torch.uint8)
    b = a + 10
    assert psnr(a, b).item() == pytest.approx(10 * math.log10(255**2 / 100))  # 28.1308 dB
    assert psnr(a, b).item() == pytest.approx(28.130803608679106)
    # flat images: no variance, so only the luminance term (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1)
    c1 = (0.01 * 255) ** 2
    assert ssim(a, b).item() == pytest.approx((2 * 100 * 110 + c1) / (100**2 + 110**2 + c1))


def test_ssim_falls_with_noise_and_is_symmetric() -> None:
    rng = np.random.default_rng(1)
    clean = torch.as_tensor(rng.integers(60, 200, (1, 32, 32, 3)), dtype=torch.uint8)
    noisy = (
        (clean.int() + torch.as_tensor(rng.integers(-40, 41, (1, 32, 32, 3)))).clamp(0, 255).to(torch.uint8)
    )
    assert 0 < ssim(clean, noisy).item() < 0.9
    assert ssim(clean, noisy).item() == pytest.approx(ssim(noisy, clean).item())
    window = gaussian_window()
    assert window.shape == (11, 11) and window.sum().item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 11x11"):
        ssim(clean[:, :8, :8], noisy[:, :8, :8])
    with pytest.raises(ValueError, match="shapes differ"):
        psnr(clean, noisy[:, :16])
