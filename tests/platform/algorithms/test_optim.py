"""Flat parameter buffers: views stay in sync, and grouped buffers clip by the joint norm."""

import pytest
import torch
from torch import nn

from omnigym.platform.algorithms.optim import FlatParameterGroups, FlatParameters


def test_flat_parameters_are_views_of_one_buffer():
    layer = nn.Linear(3, 2)
    flat = FlatParameters(layer.parameters())
    with torch.no_grad():
        flat.param.add_(1.0)
    assert flat.param.numel() == 8
    torch.testing.assert_close(torch.cat([layer.weight.flatten(), layer.bias]), flat.param.detach())


def test_grouped_clip_uses_the_joint_norm_of_all_groups():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 3), nn.Linear(3, 1)
    reference = [p.detach().clone().requires_grad_() for p in (*a.parameters(), *b.parameters())]
    groups = FlatParameterGroups([a.parameters(), b.parameters()])
    x = torch.randn(5, 4)

    def loss(params):
        w1, b1, w2, b2 = params
        return ((x @ w1.T + b1).tanh() @ w2.T + b2).pow(2).sum() * 10

    loss(reference).backward()
    expected_norm = torch.nn.utils.clip_grad_norm_(reference, 0.5)
    groups.zero_grad()
    loss(groups.params).backward()
    groups.collect_grads()
    norm = groups.clip_grad_norm_(0.5)
    assert float(norm) == pytest.approx(float(expected_norm), rel=1e-5) and float(norm) > 0.5
    clipped = torch.cat([g.param.grad for g in groups.groups])
    expected = torch.cat([p.grad.flatten() for p in reference])
    torch.testing.assert_close(clipped, expected, rtol=1e-4, atol=1e-6)
    assert float(clipped.norm()) == pytest.approx(0.5, rel=1e-4)


def test_grouped_clip_before_collecting_is_an_error():
    groups = FlatParameterGroups([nn.Linear(2, 2).parameters(), nn.Linear(2, 1).parameters()])
    with pytest.raises(RuntimeError, match="collect_grads"):
        groups.clip_grad_norm_(1.0)
