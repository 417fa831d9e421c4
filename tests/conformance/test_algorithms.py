"""The Algorithm contract, checked for every registered algorithm.

Every algorithm has a round-tripping config dataclass and a YAML in ``configs/algo``, checks its
policy's capabilities at construction, and learns in its family, decided at collection from its
class (:func:`family`): on-policy ones (whose config has ``num_steps``) learn from a real
CartPole rollout and resume exactly from their ``state_dict``; algorithms that learn from group
rollouts (``collects = "groups"``: the GRPO family) get one from a ``GroupCollector`` instead;
those that learn from transitions (``learns_from = "transitions"``: off-policy and offline) learn
from random Pendulum transitions and resume exactly. Each learning test is generated only for its
family (``on_policy_name``, ``transition_name``); every algorithm must be in one.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
import torch

from omnigym.core.config import build_dataclass, config_to_dict, list_options, load_yaml
from omnigym.core.policy import CAPABILITIES
from omnigym.core.registry import ALGORITHMS, POLICIES
from omnigym.core.types import Rollout
from omnigym.platform.algorithms.base import Algorithm
from omnigym.platform.collect import RolloutCollector
from omnigym.platform.experiment import config_dir
from omnigym.platform.groups import GroupCollector
from omnigym.platform.vec_env import make_env

ON_POLICY_SETTINGS = {
    "num_steps": 16, "num_epochs": 1, "num_minibatches": 2, "group_size": 2, "value_warmup_updates": 0,
    "component_weights": None,  # every reward component the test env reports
}  # fmt: skip
GROUP_MAX_STEPS = 16
METRIC_NAMESPACES = re.compile(r"^(train|rollout|time|eval)/")


def family(cls: type[Algorithm]) -> str:
    """``"groups"``, ``"rollouts"`` (on-policy), ``"transitions"``, or ``""`` (no learning test fits)."""
    if getattr(cls, "learns_from", "rollouts") == "transitions":
        return "transitions"
    if getattr(cls, "collects", "steps") == "groups":
        return "groups"
    return "rollouts" if hasattr(cls.config_class(), "num_steps") else ""


FAMILY_ARGS = {"on_policy_name": ("rollouts", "groups"), "transition_name": ("transitions",)}
"""The arguments that name an algorithm of a family (parametrized here, not in the conftest)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``on_policy_name`` and ``transition_name`` over the algorithms of their family."""
    for argname, families in FAMILY_ARGS.items():
        if argname in metafunc.fixturenames:
            params = []
            for name in ALGORITHMS.names():
                try:
                    if family(ALGORITHMS.get(name)) in families:
                        params.append(pytest.param(name, id=name))
                except ImportError as exc:
                    reason = f"{name}: optional dependency missing: {exc}"
                    params.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=reason)))
            metafunc.parametrize(argname, params)


def algorithm_class(name: str) -> type[Algorithm]:
    try:
        return ALGORITHMS.get(name)
    except ImportError as exc:
        pytest.skip(f"{name}: optional dependency missing: {exc}")


def small_config(cls: type[Algorithm]) -> Any:
    """The default config with the on-policy sizes shrunk to a few steps."""
    data = config_to_dict(cls.config_class())
    data.update({key: value for key, value in ON_POLICY_SETTINGS.items() if key in data})
    return build_dataclass(cls.config_class, data)


class CartPoleParts(gym.Wrapper):
    """CartPole that also reports its reward as named components (for reward-decoupled algorithms)."""

    def step(self, action: Any) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        parts = {"alive": float(reward), "centred": float(abs(obs["state"][0]) < 0.5)}
        return obs, reward, terminated, truncated, {**info, "reward_components": parts}


@pytest.fixture
def envs() -> Iterator[gym.vector.VectorEnv]:
    envs = gym.vector.SyncVectorEnv(
        [lambda: CartPoleParts(make_env("CartPole-v1")) for _ in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    yield envs
    envs.close()


def build(cls: type[Algorithm], envs: gym.vector.VectorEnv, seed: int, policy: str = "mlp") -> Algorithm:
    """The algorithm (small config) with a freshly initialised policy; ``seed`` sets the init."""
    torch.manual_seed(seed)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    policy_cls = POLICIES.get(policy)
    actor = policy_cls(policy_cls.config_class(), obs_space, act_space)
    return cls(small_config(cls), actor, obs_space, act_space)


@pytest.fixture
def on_policy(on_policy_name: str, envs: gym.vector.VectorEnv) -> tuple[type[Algorithm], Algorithm, Rollout]:
    """An on-policy algorithm with the mlp policy and one collected CartPole rollout."""
    cls = algorithm_class(on_policy_name)
    groups = family(cls) == "groups"
    algorithm = build(cls, envs, seed=0)
    if groups:
        group_size = small_config(cls).group_size
        rollout, _ = GroupCollector(envs, algorithm.policy, group_size, GROUP_MAX_STEPS).collect()
        return cls, algorithm, rollout
    collector = RolloutCollector(envs, algorithm.policy, small_config(cls).num_steps)
    collector.reset(seed=0)
    rollout, _ = collector.collect()
    return cls, algorithm, rollout


def owns_networks(state: dict[str, Any]) -> bool:
    """Whether an algorithm's state holds module weights of its own (a critic, a reference policy)."""
    return any(isinstance(value, dict) and value and key != "optimizer" for key, value in state.items())


def loss_on(algorithm: Algorithm, batch: Any) -> tuple[float, dict[str, float]]:
    torch.manual_seed(0)
    loss, metrics = algorithm.compute_loss(batch)
    return float(loss.detach()), {
        key: float(torch.as_tensor(value).detach()) for key, value in metrics.items()
    }


# --- config ---------------------------------------------------------------------------------------
def test_has_a_learning_test(algo_name: str) -> None:
    assert family(algorithm_class(algo_name)), (
        f"{algo_name} is in no family the learning tests know: not on-policy (no num_steps in its "
        "config, collects != 'groups') and learns_from != 'transitions'"
    )


def test_config_round_trips(algo_name: str) -> None:
    cls = algorithm_class(algo_name)
    assert cls.name == algo_name, "the class's name must be its registry name"
    config = cls.config_class()
    assert dataclasses.is_dataclass(config)
    assert config.type == algo_name, "the config's default type must be the registry name"
    assert build_dataclass(cls.config_class, config_to_dict(config)) == config


def test_requires_known_capabilities(algo_name: str) -> None:
    requires = algorithm_class(algo_name).requires
    assert set(requires) <= CAPABILITIES, f"unknown capabilities {sorted(set(requires) - CAPABILITIES)}"


def test_has_a_yaml_config(algo_name: str) -> None:
    cls = algorithm_class(algo_name)
    root = config_dir() / "algo"
    matching = [root / f"{name}.yaml" for name in list_options(config_dir(), "algo")]
    matching = [path for path in matching if load_yaml(path).get("type") == algo_name]
    assert matching, f"no YAML in {root} has 'type: {algo_name}'"
    for path in matching:
        build_dataclass(cls.config_class, load_yaml(path), path="algo")


def test_rejects_policy_lacking_capabilities(algo_name: str, envs: gym.vector.VectorEnv) -> None:
    cls = algorithm_class(algo_name)
    random_cls = POLICIES.get("random")
    if set(cls.requires) <= random_cls.capabilities:
        pytest.skip(f"{algo_name} needs only {cls.requires}, which the random policy has")
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    policy = random_cls(random_cls.config_class(), obs_space, act_space)
    with pytest.raises(ValueError, match="capabilities"):
        cls(cls.config_class(), policy, obs_space, act_space)


# --- learning (on-policy) -------------------------------------------------------------------------
def test_update_returns_finite_metrics(on_policy: tuple[type[Algorithm], Algorithm, Rollout]) -> None:
    _, algorithm, rollout = on_policy
    before = [p.detach().clone() for p in algorithm.policy.parameters()]
    metrics = algorithm.update(algorithm.process_rollout(rollout))
    assert metrics, "update returned no metrics"
    for key, value in metrics.items():
        assert METRIC_NAMESPACES.match(key), (
            f"metric {key!r} is outside the train/rollout/time/eval namespaces"
        )
        assert isinstance(value, float), f"{key} is a {type(value).__name__}, not a float"
        assert math.isfinite(value), f"{key} = {value}"
    after = list(algorithm.policy.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)), "update changed no weight"


def test_state_dict_round_trip_resumes_exactly(
    on_policy: tuple[type[Algorithm], Algorithm, Rollout], envs: gym.vector.VectorEnv
) -> None:
    cls, original, rollout = on_policy
    original.update(original.process_rollout(rollout))  # optimiser state and critic now non-trivial
    batch = original.process_rollout(rollout).flatten()

    buffer = io.BytesIO()  # through torch.save / torch.load, as a checkpoint does
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="cpu", weights_only=False)

    resumed = build(cls, envs, seed=1)
    resumed.policy.load_state_dict(original.policy.state_dict())  # checkpoints save the policy apart
    if owns_networks(state):  # a critic or a reference policy initialised from another seed
        assert loss_on(resumed, batch) != loss_on(original, batch), "differently initialised algorithms agree"
    resumed.load_state_dict(state)
    assert loss_on(resumed, batch) == loss_on(original, batch)

    # One more update from the same data and seed lands on the same weights (optimiser state restored).
    for algorithm in (original, resumed):
        processed = algorithm.process_rollout(rollout)
        torch.manual_seed(3)
        algorithm.update(processed)
    for (name, a), b in zip(
        original.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"policy {name} after an update")
    assert loss_on(resumed, batch) == loss_on(original, batch)


# --- learning from transitions (off-policy and offline) -------------------------------------------
TRANSITION_SETTINGS = {"batch_size": 16, "hidden_sizes": (32, 32), "flow_hidden_sizes": (32, 32)}
TRANSITION_BATCH = 16


def build_transitions(cls: type[Algorithm], seed: int) -> Algorithm:
    """``cls`` (small networks) on Pendulum with its intended policy (``policy_defaults``)."""
    torch.manual_seed(seed)
    env = make_env("Pendulum-v1")
    defaults = dict(cls.policy_defaults)  # type: ignore[attr-defined]
    policy_cls = POLICIES.get(defaults.pop("type"))
    policy_data = {**config_to_dict(policy_cls.config_class()), **defaults}
    if "hidden_sizes" in policy_data:
        policy_data["hidden_sizes"] = (32, 32)
    policy = policy_cls(
        build_dataclass(policy_cls.config_class, policy_data), env.observation_space, env.action_space
    )
    data = config_to_dict(cls.config_class())
    data.update({k: v for k, v in TRANSITION_SETTINGS.items() if k in data})
    return cls(build_dataclass(cls.config_class, data), policy, env.observation_space, env.action_space)


def random_transitions(seed: int) -> Any:
    from omnigym.core.types import TransitionBatch

    g = torch.Generator().manual_seed(seed)
    n = TRANSITION_BATCH
    return TransitionBatch(
        obs={"state": torch.randn(n, 3, generator=g)},
        actions=torch.rand(n, 1, generator=g) * 4 - 2,
        rewards=torch.randn(n, generator=g),
        next_obs={"state": torch.randn(n, 3, generator=g)},
        terminated=(torch.rand(n, generator=g) < 0.2).float(),
    )


def trainable_state(algorithm: Algorithm) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in algorithm.policy.parameters()]
    for net in getattr(algorithm, "networks", {}).values():
        tensors += [p.detach().clone() for p in net.parameters()]
    return tensors


def test_transition_update_returns_finite_metrics_and_learns(transition_name: str) -> None:
    cls = algorithm_class(transition_name)
    algorithm = build_transitions(cls, seed=0)
    before = trainable_state(algorithm)
    for seed in range(2):  # two updates: a delayed actor (TD3+BC) moves on the second
        metrics = algorithm.update(random_transitions(seed))
        assert metrics, "update returned no metrics"
        for key, value in metrics.items():
            assert METRIC_NAMESPACES.match(key), f"metric {key!r} is outside the train/... namespaces"
            assert isinstance(value, float) and math.isfinite(value), f"{key} = {value!r}"
    after = trainable_state(algorithm)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)), "update changed no weight"


def test_transition_state_dict_round_trip_resumes_exactly(transition_name: str) -> None:
    cls = algorithm_class(transition_name)
    original = build_transitions(cls, seed=0)
    original.update(random_transitions(0))
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="cpu", weights_only=False)
    resumed = build_transitions(cls, seed=1)
    resumed.policy.load_state_dict(original.policy.state_dict())
    resumed.load_state_dict(state)
    batch = random_transitions(1)
    assert loss_on(resumed, batch) == loss_on(original, batch)
    for algorithm in (original, resumed):
        torch.manual_seed(3)
        algorithm.update(batch)
    for a, b in zip(trainable_state(original), trainable_state(resumed), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
