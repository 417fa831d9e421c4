"""Shared fixtures of the algorithm tests: a CI-sized CartPole learning run, and the small agents,
batches and stand-in critics of the off-policy and offline algorithm tests."""

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import yaml
from gymnasium import spaces
from torch import Tensor, nn

from omnigym.core.policy import Policy
from omnigym.core.registry import ALGORITHMS
from omnigym.core.types import TransitionBatch
from omnigym.platform.algorithms.critics import EnsembleLinear, QEnsemble
from omnigym.platform.evaluate import evaluate_policy
from omnigym.platform.experiment import load_experiment
from omnigym.platform.trainers.on_policy import OnPolicyTrainer
from omnigym.policies.distributions import GaussianHead
from omnigym.policies.mlp import MLPPolicy, MLPPolicyConfig

Summary = dict[str, float]

STATE_SPACE = spaces.Dict({"state": spaces.Box(-1.0, 1.0, (3,))})
"""The default observation space of :func:`mlp_agent`: a 3-d ``state`` in [-1, 1]."""
ACTION_SPACE = spaces.Box(-1.0, 1.0, (1,))
"""The default action space of :func:`mlp_agent`: a 1-d Box in [-1, 1]."""


@pytest.fixture
def cartpole_learning(tmp_path: Path) -> Callable[..., tuple[Summary, Summary]]:
    """``run(algo, target, total_steps, algo_overrides) -> (untrained, trained)`` evaluation summaries.

    Trains an MLP policy on CartPole-v1 with the on-policy trainer (10 held-out evaluation episodes
    before and after). ``algo`` is registered as ``target`` only if the registry does not know it yet.
    """

    def run(
        algo: str, target: str, total_steps: int, algo_overrides: dict[str, Any]
    ) -> tuple[Summary, Summary]:
        if algo not in ALGORITHMS.names():
            ALGORITHMS.register(algo, target)
        spec = {
            "name": f"{algo}_cartpole",
            "seed": 1,
            "total_steps": total_steps,
            "defaults": {"env": "cartpole", "policy": "mlp", "algo": algo, "runtime": "local"},
            "algo": algo_overrides,
            "eval": {"every_steps": 0, "episodes": 10},
            "log": {"progress": False, "tensorboard": False},
            "run_dir": str(tmp_path / "run"),
        }
        path = tmp_path / "experiment.yaml"
        path.write_text(yaml.safe_dump(spec))
        config = load_experiment(path)
        trainer = OnPolicyTrainer(config, tmp_path / "run")
        untrained = evaluate_policy(trainer.policy, config.env.id, episodes=10, seed=config.eval.seed)
        return untrained.summary(), trainer.train().final_eval

    return run


# --- off-policy and offline algorithms -------------------------------------------------------------


@pytest.fixture
def mlp_agent() -> Callable[..., Any]:
    """``mlp_agent(AlgoClass, obs_space, action_space, seed=None, policy=None, **config)``.

    ``AlgoClass(AlgoClass.config_class(**config), policy, obs_space, action_space)`` with an MLP policy:
    a squashed Gaussian with two hidden layers of 32, updated by the ``policy`` dict of
    ``MLPPolicyConfig`` fields. The spaces default to a 3-d ``state`` and a 1-d action in [-1, 1];
    with ``seed``, the torch seed is set before the policy is built.
    """

    def build(
        algo_class: Any,
        obs_space: spaces.Dict = STATE_SPACE,
        action_space: spaces.Box = ACTION_SPACE,
        seed: int | None = None,
        policy: dict[str, Any] | None = None,
        **config: Any,
    ) -> Any:
        if seed is not None:
            torch.manual_seed(seed)
        policy_config = MLPPolicyConfig(
            **{"action_head": "squashed_gaussian", "hidden_sizes": (32, 32), **(policy or {})}
        )
        agent_policy = MLPPolicy(policy_config, obs_space, action_space)
        return algo_class(algo_class.config_class(**config), agent_policy, obs_space, action_space)

    return build


@pytest.fixture
def random_batch() -> Callable[..., TransitionBatch]:
    """``random_batch(obs_space, action_space, batch_size=64, seed=0)``: Gaussian states and rewards,
    uniform actions in the Box, about one transition in ten terminal."""

    def build(
        obs_space: spaces.Dict, action_space: spaces.Box, batch_size: int = 64, seed: int = 0
    ) -> TransitionBatch:
        g = torch.Generator().manual_seed(seed)
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        obs_dim = obs_space["state"].shape[0]
        return TransitionBatch(
            obs={"state": torch.randn(batch_size, obs_dim, generator=g)},
            actions=low + (high - low) * torch.rand(batch_size, action_space.shape[0], generator=g),
            rewards=torch.randn(batch_size, generator=g),
            next_obs={"state": torch.randn(batch_size, obs_dim, generator=g)},
            terminated=(torch.rand(batch_size, generator=g) < 0.1).float(),
        )

    return build


@pytest.fixture
def toy_batch() -> Callable[..., TransitionBatch]:
    """``toy_batch(n=2, seed=0, action_bound=1.0, reward=None)``: ``n`` transitions of a 3-d state and
    a 2-d action uniform in ``[-action_bound, action_bound]``; rewards ``1, 2, ..., n`` (all ``reward``
    when given); terminated ``[0, 1, 0, 1, ...]``."""

    def build(
        n: int = 2, seed: int = 0, action_bound: float = 1.0, reward: float | None = None
    ) -> TransitionBatch:
        g = torch.Generator().manual_seed(seed)
        return TransitionBatch(
            obs={"state": torch.randn(n, 3, generator=g)},
            actions=torch.rand(n, 2, generator=g) * (2 * action_bound) - action_bound,
            rewards=torch.arange(1, n + 1, dtype=torch.float32)
            if reward is None
            else torch.full((n,), reward),
            next_obs={"state": torch.randn(n, 3, generator=g)},
            terminated=(torch.arange(n) % 2).float(),
        )

    return build


@pytest.fixture
def set_constant_q() -> Callable[[nn.Module, list[float]], None]:
    """``set_constant_q(q, values)``: every member ``j`` of the ensemble ``q`` outputs ``values[j]``
    everywhere (its output layer's weights zeroed, its biases set)."""

    @torch.no_grad()
    def set_values(q: nn.Module, values: list[float]) -> None:
        out = cast(QEnsemble, q).out
        out.weight.zero_()
        out.bias.copy_(torch.tensor(values).view(-1, 1, 1))

    return set_values


@pytest.fixture
def constant_q() -> Callable[[list[float]], Callable[[Tensor, Tensor], Tensor]]:
    """``constant_q(values)``: a stand-in ensemble (to monkeypatch over ``q`` or ``q_target``) whose
    member ``j`` returns ``values[j]`` for every input."""

    def build(values: list[float]) -> Callable[[Tensor, Tensor], Tensor]:
        column = torch.tensor(values).unsqueeze(1)
        return lambda features, actions: column.expand(len(values), features.shape[0])

    return build


@pytest.fixture
def set_standard_normal_policy() -> Callable[[Policy], None]:
    """``set_standard_normal_policy(policy)``: a Gaussian MLP policy's pi(.|s) becomes N(0, I) for every s."""

    @torch.no_grad()
    def set_policy(policy: Policy) -> None:
        head = cast(GaussianHead, cast(MLPPolicy, policy).head)
        head.mean.weight.zero_()
        head.mean.bias.zero_()
        head.log_std.zero_()

    return set_policy


@pytest.fixture
def first_weight() -> Callable[[nn.Module], Tensor]:
    """``first_weight(q)``: the first layer's weights of an ensemble."""
    return lambda q: cast(EnsembleLinear, cast(QEnsemble, q).layers[0]).weight


@pytest.fixture
def saved() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``saved(state)``: ``state`` through ``torch.save`` / ``torch.load``, as a checkpoint would
    (sharing no tensors)."""

    def round_trip(state: dict[str, Any]) -> dict[str, Any]:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        return torch.load(buffer)

    return round_trip


@pytest.fixture
def weights() -> Callable[[Any], dict[str, list[Tensor]]]:
    """``weights(algo)``: a copy of the parameters of each of ``algo.networks`` and of ``"policy"``."""
    return lambda algo: {
        name: [p.detach().clone() for p in net.parameters()]
        for name, net in {**algo.networks, "policy": algo.policy}.items()
    }


@pytest.fixture
def assert_stepped(first_weight: Callable[[nn.Module], Tensor]) -> Callable[..., None]:
    """``assert_stepped(algo, before, tau=0.005)``: every network of :func:`weights` ``before`` changed,
    and the target critics' first layer moved by ``tau`` towards the stepped critics'."""

    def check(algo: Any, before: dict[str, list[Tensor]], tau: float = 0.005) -> None:
        after = {
            name: list(net.parameters()) for name, net in {**algo.networks, "policy": algo.policy}.items()
        }
        for name, params in after.items():
            assert any(not torch.equal(a, b) for a, b in zip(before[name], params, strict=True)), (
                f"{name} did not change"
            )
        target_old = before["q_target"][0]
        expected_target = target_old + tau * (first_weight(algo.q).detach() - target_old)
        assert torch.allclose(first_weight(algo.q_target), expected_target, atol=1e-6)

    return check


@pytest.fixture
def assert_state_round_trips(saved: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., None]:
    """``assert_state_round_trips(make, batch)``: after three updates of ``make()`` on ``batch``, a fresh
    ``make()`` given its policy weights and its saved state counts three updates and makes the same
    (seeded) next update."""

    def check(make: Callable[[], Any], batch: TransitionBatch) -> None:
        algo = make()
        for _ in range(3):
            algo.update(batch)
        clone = make()
        clone.policy.load_state_dict(algo.policy.state_dict())
        clone.load_state_dict(saved(algo.state_dict()))
        assert clone.updates == 3
        torch.manual_seed(1)
        a = algo.update(batch)
        torch.manual_seed(1)
        b = clone.update(batch)
        assert a == b

    return check
