"""Frame-quality metrics for pixel world models: PSNR and SSIM, per image, in torch.

Both take batches of images in the env's layout, ``[B, H, W, C]`` (uint8 or float), and return one
value per image, so a rollout's per-step curve is a mean over rows of each step.

* PSNR = ``10 * log10(data_range^2 / MSE)`` over all pixels and channels of an image; ``inf`` for
  identical images.
* SSIM is Wang et al. (2004), "Image Quality Assessment: From Error Visibility to Structural
  Similarity", eq. 13 with the paper's settings: an 11x11 Gaussian window of standard deviation
  1.5, ``K1 = 0.01``, ``K2 = 0.03``, ``C1 = (K1 L)^2``, ``C2 = (K2 L)^2`` with ``L`` the data range.
  The local statistics are taken over the windows that fit inside the image ("valid" filtering,
  as the paper's reference MATLAB code does), per channel; the image's SSIM is the mean of the map
  over positions and channels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

SSIM_WINDOW = 11
"""Side of the Gaussian window (Wang et al. 2004)."""
SSIM_SIGMA = 1.5
"""Standard deviation of the Gaussian window, in pixels."""
SSIM_K1 = 0.01
SSIM_K2 = 0.03


def _as_float_images(images: Tensor, name: str) -> Tensor:
    """``[B, H, W, C]`` images as float64 ``[B, C, H, W]``; raises on another rank."""
    if images.ndim != 4:
        raise ValueError(f"{name} must be images [B, H, W, C], got shape {tuple(images.shape)}")
    return images.permute(0, 3, 1, 2).to(torch.float64)


def _checked_pair(prediction: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Both batches as float64 ``[B, C, H, W]``, after checking their shapes agree."""
    if prediction.shape != target.shape:
        raise ValueError(
            f"prediction and target shapes differ: {tuple(prediction.shape)} vs {tuple(target.shape)}"
        )
    return _as_float_images(prediction, "prediction"), _as_float_images(target, "target")


def psnr(prediction: Tensor, target: Tensor, data_range: float = 255.0) -> Tensor:
    """Peak signal-to-noise ratio of each image, in dB (``inf`` where the images are equal).

    Args:
        prediction: Shape: [B, H, W, C].
        target: Shape: [B, H, W, C].
        data_range: the largest possible pixel difference (255 for uint8, 2 for [-1, 1]).

    Returns:
        Shape: [B], float64.
    """
    x, y = _checked_pair(prediction, target)
    mse = (x - y).square().mean(dim=(1, 2, 3))
    return 10.0 * torch.log10(data_range**2 / mse)  # mse = 0 -> inf


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> Tensor:
    """A normalised 2-D Gaussian window (sums to 1). Shape: [size, size], float64."""
    coords = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    profile = torch.exp(-(coords**2) / (2 * sigma**2))
    profile = profile / profile.sum()
    return torch.outer(profile, profile)


def ssim(prediction: Tensor, target: Tensor, data_range: float = 255.0) -> Tensor:
    """Structural similarity (Wang et al. 2004, eq. 13) of each image; 1 for identical images.

    Args:
        prediction: Shape: [B, H, W, C], with H and W at least 11.
        target: Shape: [B, H, W, C].
        data_range: ``L``, the pixel value range (255 for uint8).

    Returns:
        Mean of the SSIM map over valid window positions and channels. Shape: [B], float64.
    """
    x, y = _checked_pair(prediction, target)
    if min(x.shape[-2:]) < SSIM_WINDOW:
        raise ValueError(
            f"SSIM needs images of at least {SSIM_WINDOW}x{SSIM_WINDOW}, got {tuple(x.shape[-2:])}"
        )
    channels = x.shape[1]
    window = gaussian_window().to(x.device).expand(channels, 1, SSIM_WINDOW, SSIM_WINDOW)

    def local_mean(image: Tensor) -> Tensor:
        return F.conv2d(image, window, groups=channels)  # depthwise: each channel on its own

    mu_x, mu_y = local_mean(x), local_mean(y)
    var_x = local_mean(x * x) - mu_x**2
    var_y = local_mean(y * y) - mu_y**2
    cov_xy = local_mean(x * y) - mu_x * mu_y
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    # eq. 13: luminance, contrast and structure terms with alpha = beta = gamma = 1, C3 = C2 / 2
    ssim_map = ((2 * mu_x * mu_y + c1) * (2 * cov_xy + c2)) / (
        (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    )
    return ssim_map.mean(dim=(1, 2, 3))
