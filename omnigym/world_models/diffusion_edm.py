"""The EDM maths of the diffusion world model: preconditioning, sigma schedules, pixel scaling.

Pure tensor functions, apart from the model and its networks, so the equations of
:mod:`omnigym.world_models.diffusion`'s docstring (Karras et al. 2022 with DIAMOND's offset noise)
can be read and tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from omnigym.world_models.diffusion import DiffusionWorldModelConfig


@dataclass(frozen=True)
class EDMCoefficients:
    """Karras et al. (2022) preconditioning at ``sigma_eff``; every field has ``sigma``'s shape."""

    c_in: Tensor
    c_skip: Tensor
    c_out: Tensor
    c_noise: Tensor


def edm_coefficients(sigma: Tensor, sigma_data: float = 0.5, sigma_offset: float = 0.3) -> EDMCoefficients:
    """The preconditioning of the module docstring, with DIAMOND's offset noise in ``sigma_eff``."""
    sigma_eff = torch.sqrt(sigma**2 + sigma_offset**2)
    total = sigma_eff**2 + sigma_data**2
    return EDMCoefficients(
        c_in=1 / torch.sqrt(total),
        c_skip=sigma_data**2 / total,
        c_out=sigma_eff * sigma_data / torch.sqrt(total),
        c_noise=torch.log(sigma_eff) / 4,
    )


def karras_sigmas(num_steps: int, sigma_min: float, sigma_max: float, rho: float) -> Tensor:
    """Karras et al. (2022) eq. 5 sigmas from ``sigma_max`` to ``sigma_min``, then 0. Shape: [N + 1]."""
    if num_steps == 1:
        ramp = torch.zeros(1, dtype=torch.float64)
    else:
        ramp = torch.linspace(0, 1, num_steps, dtype=torch.float64)
    inv_max, inv_min = sigma_max ** (1 / rho), sigma_min ** (1 / rho)
    sigmas = (inv_max + ramp * (inv_min - inv_max)) ** rho
    return torch.cat([sigmas, sigmas.new_zeros(1)]).float()


def quantize(x: Tensor) -> Tensor:
    """``x`` clipped to ``[-1, 1]`` and rounded to the nearest of the 256 levels of an 8-bit image.

    DIAMOND truncates (``.byte()``); rounding maps every 8-bit image to itself.
    """
    return torch.round((x.clamp(-1, 1) + 1) * 127.5) / 127.5 - 1


def sample_training_sigma(
    num: int, config: DiffusionWorldModelConfig, generator: torch.Generator | None
) -> Tensor:
    """``exp(N(loc, scale^2))`` clipped to ``[train_sigma_min, train_sigma_max]``. Shape: [num]."""
    device = generator.device if generator is not None else None
    log_sigma = torch.randn(num, generator=generator, device=device) * config.train_sigma_scale
    return (log_sigma + config.train_sigma_loc).exp().clamp(config.train_sigma_min, config.train_sigma_max)


def frames_to_unit(frames: Tensor) -> Tensor:
    """uint8 frames ``[..., H, W, C]`` as float ``[..., C, H, W]`` in ``[-1, 1]``."""
    return frames.movedim(-1, -3).float() / 127.5 - 1


def unit_to_frames(x: Tensor) -> Tensor:
    """Float ``[..., C, H, W]`` in ``[-1, 1]`` as uint8 frames ``[..., H, W, C]`` (rounded)."""
    return torch.round((x.clamp(-1, 1) + 1) * 127.5).to(torch.uint8).movedim(-3, -1)


def reward_class(rewards: Tensor) -> Tensor:
    """``sign(r) + 1``: class 0 for negative, 1 for zero, 2 for positive rewards. Shape: rewards'."""
    return (torch.sign(rewards) + 1).long()
