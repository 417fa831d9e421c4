"""Critics owned by off-policy and offline algorithms: Q-ensembles, state-value networks, targets.

A :class:`QEnsemble` evaluates all its members in one batched matrix product per layer instead
of one small network each: twin critics (TD3, SAC), ten (REDQ/WSRL) or more cost about one
network's per-call overhead on a CPU, where the overhead dominates 256-unit MLPs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from omnigym.policies.layers import ACTIVATIONS, MLP


class EnsembleLinear(nn.Module):
    """``n`` independent linear layers applied at once. ``[B, in]`` or ``[n, B, in]`` -> ``[n, B, out]``.

    Each member is initialised as ``nn.Linear`` would be (uniform in +-1/sqrt(in)).
    """

    def __init__(self, n: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(n, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        """Every member's output. Shape: [n, B, out]."""
        if x.dim() == 2:
            return torch.matmul(x, self.weight) + self.bias  # one input shared by all members
        return torch.baddbmm(self.bias, x, self.weight)


class QEnsemble(nn.Module):
    """``n`` Q-networks ``Q_j(s, a)`` over ``concat(features, action)``, optionally layer-normed.

    Args:
        in_dim: width of the observation features plus the action.
        hidden_sizes: width of each hidden layer.
        n: number of members.
        activation: hidden activation (a name in ``ACTIVATIONS``).
        layer_norm: layer normalisation (with per-member gain and bias) after each hidden layer
            (WSRL, FQL).
    """

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Iterable[int] = (256, 256),
        n: int = 2,
        activation: str = "relu",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        widths = [in_dim, *hidden_sizes]
        self.n = n
        self.layers = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in itertools.pairwise(widths))
        self.out = EnsembleLinear(n, widths[-1], 1)
        self.activation = ACTIVATIONS[activation]
        self.norms = nn.ParameterList()
        if layer_norm:
            for width in hidden_sizes:
                self.norms.append(nn.Parameter(torch.ones(n, 1, width)))
                self.norms.append(nn.Parameter(torch.zeros(n, 1, width)))

    def forward(self, features: Tensor, actions: Tensor) -> Tensor:
        """``Q_j(s, a)`` for every member. Shape: [n, B]."""
        x = torch.cat([features, actions], dim=-1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.norms:
                x = F.layer_norm(x, x.shape[-1:]) * self.norms[2 * i] + self.norms[2 * i + 1]
            x = self.activation(x)
        return self.out(x).squeeze(-1)

    def member(self, index: int, features: Tensor, actions: Tensor) -> Tensor:
        """``Q_index(s, a)`` alone, with the weights detached. Shape: [B].

        For actor losses that need one critic (TD3's ``Q1``): one member's matrix products
        instead of all of them, and gradients reach the actions but not the critic.
        """
        x = torch.cat([features, actions], dim=-1)
        for i, layer in enumerate(self.layers):
            layer = cast(EnsembleLinear, layer)
            x = torch.addmm(layer.bias[index].detach(), x, layer.weight[index].detach())
            if self.norms:
                gain, bias = self.norms[2 * i][index].detach(), self.norms[2 * i + 1][index].detach()
                x = F.layer_norm(x, x.shape[-1:]) * gain + bias
            x = self.activation(x)
        return torch.addmm(self.out.bias[index].detach(), x, self.out.weight[index].detach()).squeeze(-1)


class ValueNetwork(nn.Module):
    """A state-value network ``V(s)`` over observation features (IQL)."""

    def __init__(
        self, in_dim: int, hidden_sizes: Iterable[int] = (256, 256), activation: str = "relu"
    ) -> None:
        super().__init__()
        self.net = MLP(in_dim, (*hidden_sizes, 1), activation, activate_last=False)

    def forward(self, features: Tensor) -> Tensor:
        """``V(s)``. Shape: [B]."""
        return self.net(features).squeeze(-1)


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source``, parameter by parameter (one fused call)."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)
