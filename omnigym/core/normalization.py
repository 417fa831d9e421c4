"""Running mean/variance statistics, kept as module buffers so they save with the weights."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningMeanStd(nn.Module):
    """Running mean and variance over a stream of batches (parallel Welford / Chan et al.).

    Args:
        shape: shape of one sample.
        epsilon: initial pseudo-count, so early normalisation is gentle.
    """

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Fold a batch ``[B, *shape]`` into the statistics."""
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        if x.shape[0] == 0:
            return
        batch_mean, batch_var, batch_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean += delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta.pow(2) * self.count * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: Tensor, clip: float | None = None) -> Tensor:
        """``(x - mean) / sqrt(var + 1e-8)``, optionally clipped to ``[-clip, clip]``."""
        std = torch.sqrt(self.var + 1e-8).to(x.dtype)
        out = (x - self.mean.to(x.dtype)) / std
        return out.clamp(-clip, clip) if clip is not None else out
