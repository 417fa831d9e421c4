"""Flow matching and MeanFlow: the sanity checks of docs/algorithms"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from omnigym.policies.flow.meanflow import (
    MeanFlowPolicy,
    meanflow_loss,
    meanflow_sample,
)
from omnigym.policies.flow.policy import FlowPolicy, flow_pair, integrate


@pytest.mark.parametrize(("method", "steps"), [("euler", 1), ("euler", 10), ("heun", 4)])
def test_exact_velocity_of_one_pair_reaches_the_action(method: str, steps: int) -> None:
    """§9.2: a model outputting the constant velocity ε - a reaches a from ε (in one Euler step too)."""
    noise, action = torch.randn(3, 8, 2), torch.rand(3, 8, 2)
    x_t, target = flow_pair(action, noise, torch.full((3,), 0.3))
    torch.testing.assert_close(x_t, 0.3 * noise + 0.7 * action)
    calls = []

    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        calls.append(t)
        return target

    end, chain = integrate(velocity, noise, steps, method)
    torch.testing.assert_close(end, action, rtol=0, atol=1e-5)
    assert len(chain) == steps + 1
    assert len(calls) == steps * (2 if method == "heun" else 1)
    assert calls[0][0].item() == 1.0  # starts from noise at t = 1


def test_meanflow_loss_is_zero_for_the_exact_average_velocity_of_one_point() -> None:
    """§9.3: for one data point x, u*(z, r, t) = (z - x) / t; the JVP gives du/dt = 0, loss 0."""
    x = torch.randn(1, 8, 2).expand(6, -1, -1)
    noise = torch.randn(6, 8, 2)
    t = torch.tensor([0.2, 0.5, 0.9, 1.0, 0.7, 0.35])
    r = torch.tensor([0.0, 0.5, 0.1, 0.0, 0.69, 0.3])

    def exact(z: torch.Tensor, r: torch.Tensor, t: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
        return (z - point) / t.view(-1, 1, 1)

    loss, error = meanflow_loss(exact, x, noise, r, t, x)
    assert loss.item() == pytest.approx(0.0, abs=1e-9)
    assert error.max().item() < 1e-10
    wrong, _ = meanflow_loss(
        lambda z, r, t, point: (z - point) / t.view(-1, 1, 1) + r.view(-1, 1, 1), x, noise, r, t, x
    )
    assert wrong.item() > 0.1  # a wrong tangent or target would not vanish either


def test_meanflow_loss_takes_the_jvp_only_where_r_differs_from_t_without_changing_loss_or_grad() -> None:
    """Rows with r == t skip the JVP; loss, per-row error and gradients equal the all-rows JVP."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8 + 2 + 3, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))

    def u_fn(z: torch.Tensor, r: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return net(torch.cat([z.flatten(1), r[:, None], t[:, None], cond], dim=1)).view_as(z)

    x, noise, cond = torch.randn(6, 4, 2), torch.randn(6, 4, 2), torch.randn(6, 3)
    t = torch.tensor([0.9, 0.5, 0.7, 0.3, 0.8, 0.6])
    r = torch.tensor([0.2, 0.5, 0.7, 0.1, 0.8, 0.0])  # rows 1, 2 and 4 are plain flow matching
    jvp_rows = []
    counted = lambda z, r_, t_, c: jvp_rows.append(len(z)) or u_fn(z, r_, t_, c)  # noqa: E731
    loss, error = meanflow_loss(counted, x, noise, r, t, cond)
    grads = torch.autograd.grad(loss, list(net.parameters()))
    assert sorted(jvp_rows) == [3, 3]  # one JVP call on the three moving rows, one plain call

    z = (1 - t.view(-1, 1, 1)) * x + t.view(-1, 1, 1) * noise
    v = noise - x
    u, dudt = torch.func.jvp(  # the reference: the JVP on every row
        lambda z_, r_, t_: u_fn(z_, r_, t_, cond), (z, r, t), (v, torch.zeros_like(r), torch.ones_like(t))
    )
    reference_error = (u - (v - (t - r).view(-1, 1, 1) * dudt).detach()).pow(2).flatten(1).sum(dim=1)
    reference = (reference_error / (reference_error.detach() + 1e-3)).mean()
    torch.testing.assert_close(error, reference_error)
    torch.testing.assert_close(loss, reference)
    for grad, expected in zip(grads, torch.autograd.grad(reference, list(net.parameters())), strict=True):
        torch.testing.assert_close(grad, expected)


def test_meanflow_one_step_sample_of_the_exact_model_hits_the_target() -> None:
    x = torch.rand(4, 8, 2)
    noise = torch.randn(4, 8, 2)
    exact = lambda z, r, t, point: (z - point) / t.view(-1, 1, 1)  # noqa: E731
    for steps in (1, 3):
        end, chain = meanflow_sample(exact, noise, x, steps)
        torch.testing.assert_close(end, x, rtol=0, atol=1e-5)
        assert len(chain) == steps + 1


@pytest.mark.parametrize(("cls", "calls"), [(FlowPolicy, 10), (MeanFlowPolicy, 1)])
def test_policy_sampling_calls_and_determinism(
    cls: type, calls: int, chunk_policy: Callable[..., Any]
) -> None:
    policy = chunk_policy(cls)
    seen = []
    policy.acting_model.unet.register_forward_hook(lambda *_: seen.append(1))
    history = {"state": torch.randn(3, 2, 3)}
    first, chain = policy.sample_chunks(history, deterministic=True)
    assert len(seen) == calls and len(chain) == calls + 1
    again, _ = policy.sample_chunks(history, deterministic=True)
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert first.shape == (3, 8, 2)


def test_meanflow_times_are_ordered_with_the_configured_share_equal(chunk_policy: Callable[..., Any]) -> None:
    policy = chunk_policy(MeanFlowPolicy, ratio_r_neq_t=0.25)
    r, t = policy.sample_times(20_000, torch.device("cpu"))
    assert (r <= t).all() and ((t > 0) & (t < 1)).all()
    assert (r != t).float().mean().item() == pytest.approx(0.25, abs=0.02)
