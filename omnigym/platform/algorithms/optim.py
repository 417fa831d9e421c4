"""Optimiser plumbing shared by algorithms."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


class FlatParameters:
    """Many small parameter tensors stored as views of one flat parameter.

    Clipping the gradient norm and an Adam step then cost one kernel each instead of one per
    tensor, which matters for the small networks of state-based RL (about a fifth of a PPO
    minibatch step on CPU). The modules keep their own ``Parameter`` objects, so forward passes,
    ``state_dict`` and in-place ``load_state_dict`` work as before. Build it after the modules
    are on their device; afterwards, optimise :attr:`param` instead of the module parameters.

    Args:
        params: the parameters to flatten (those without ``requires_grad`` are skipped).
    """

    def __init__(self, params: Iterable[nn.Parameter]) -> None:
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("FlatParameters needs at least one trainable parameter")
        with torch.no_grad():
            self.param = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.params]))
        offset = 0
        for p in self.params:
            n = p.numel()
            p.data = self.param.data[offset : offset + n].view_as(p)
            offset += n

    def zero_grad(self) -> None:
        """Drop the module parameters' gradients (before a backward pass)."""
        for p in self.params:
            p.grad = None

    def collect_grads(self) -> Tensor:
        """Gather the module parameters' gradients into :attr:`param`'s gradient."""
        grads = [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in self.params]
        self.param.grad = torch.cat(grads)
        return self.param.grad

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """Scale the gathered gradient to a global L2 norm of at most ``max_norm``.

        Returns the norm before clipping, as ``torch.nn.utils.clip_grad_norm_`` does.
        """
        grad = self.param.grad
        if grad is None:
            raise RuntimeError("call collect_grads() after backward() before clipping")
        norm = torch.linalg.vector_norm(grad)
        grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
        return norm


def adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one call per step instead of one per tensor and operation).

    Off-policy algorithms take one small step per batch of 256 transitions, so the optimiser's
    per-tensor overhead is a large share of an update on a CPU.
    """
    return torch.optim.Adam(list(params), lr=lr, fused=True)
