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


class FlatParameterGroups:
    """Several :class:`FlatParameters`, one per optimiser param group (e.g. its own learning rate).

    Offers the same calls as one :class:`FlatParameters` (the gradient-norm clip is global over
    all groups), so an update loop need not know whether the groups are split.

    Args:
        groups: the parameters of each group (each must hold a trainable one).
    """

    def __init__(self, groups: Iterable[Iterable[nn.Parameter]]) -> None:
        self.groups = [FlatParameters(params) for params in groups]
        self.params = [p for group in self.groups for p in group.params]

    @property
    def flat_params(self) -> list[nn.Parameter]:
        """Each group's flat parameter, in order (one optimiser param group each)."""
        return [group.param for group in self.groups]

    def zero_grad(self) -> None:
        """Drop every group's module gradients."""
        for group in self.groups:
            group.zero_grad()

    def collect_grads(self) -> list[Tensor]:
        """Gather each group's gradients into its flat parameter's gradient."""
        return [group.collect_grads() for group in self.groups]

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        """Scale all gathered gradients to a joint L2 norm of at most ``max_norm``; the norm before."""
        grads = [group.param.grad for group in self.groups if group.param.grad is not None]
        if len(grads) < len(self.groups):
            raise RuntimeError("call collect_grads() after backward() before clipping")
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale)
        return norm


def adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one call per step instead of one per tensor and operation).

    Off-policy algorithms take one small step per batch of 256 transitions, so the optimiser's
    per-tensor overhead is a large share of an update on a CPU.
    """
    return torch.optim.Adam(list(params), lr=lr, fused=True)
