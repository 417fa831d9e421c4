"""Critic building blocks: the batched Q-ensemble, one member alone, Polyak targets."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from omnigym.platform.algorithms.critics import EnsembleLinear, QEnsemble, ValueNetwork, polyak_update


@pytest.mark.parametrize("layer_norm", [False, True])
def test_ensemble_members_are_independent_mlps(layer_norm: bool) -> None:
    torch.manual_seed(0)
    q = QEnsemble(5, (8, 8), n=3, layer_norm=layer_norm)
    features, actions = torch.randn(4, 3), torch.randn(4, 2)
    values = q(features, actions)
    assert values.shape == (3, 4)
    for j in range(3):  # member j by hand, from its slice of the stacked weights
        x = torch.cat([features, actions], -1)
        for i, layer in enumerate(q.layers):
            x = x @ layer.weight[j] + layer.bias[j]
            if layer_norm:
                x = nn.functional.layer_norm(x, (8,)) * q.norms[2 * i][j] + q.norms[2 * i + 1][j]
            x = torch.relu(x)
        torch.testing.assert_close(values[j], (x @ q.out.weight[j] + q.out.bias[j]).squeeze(-1))
        torch.testing.assert_close(q.member(j, features, actions), values[j])


def test_member_sends_gradients_to_actions_not_weights() -> None:
    q = QEnsemble(4, (8,), n=2)
    actions = torch.randn(3, 1, requires_grad=True)
    q.member(0, torch.randn(3, 3), actions).sum().backward()
    assert actions.grad is not None and actions.grad.abs().sum() > 0
    assert all(p.grad is None for p in q.parameters())


def test_ensemble_linear_shared_and_per_member_inputs_agree() -> None:
    layer = EnsembleLinear(2, 3, 4)
    x = torch.randn(5, 3)
    torch.testing.assert_close(layer(x), layer(x.expand(2, 5, 3)))


def test_polyak_update_moves_targets_by_tau() -> None:
    source, target = ValueNetwork(2, (4,)), ValueNetwork(2, (4,))
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, source, 0.25)
    for b, t, s in zip(before, target.parameters(), source.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * s)
