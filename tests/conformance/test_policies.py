"""The Policy contract, checked for every registered policy on a few observation/action spaces.

Observations are a state vector alone, a 64x64 uint8 image with the state vector, the image with
a text, or a text alone (texts come as a NumPy object array of ``B`` strings, as from a vector
env). Actions are discrete, a box, or text.

A policy is built with its default config, or with the one ``POLICY_CONFIGS`` (conftest) gives
for the combination (e.g. a tiny VLM). A policy that cannot be built for a space combination
(TypeError/ValueError at construction, or no config from its hook) is skipped for that
combination, with its message as the reason.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.torch import save_file

from omnigym.core.policy import CAPABILITIES, Policy
from omnigym.core.pretrained import CONFIG_FILE, WEIGHTS_FILE
from omnigym.core.registry import POLICIES
from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT, Obs, OnPolicyBatch, PolicyStep
from omnigym.platform.vec_env import to_env_action

BATCH = 5
STATE_SPACE = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
IMAGE_SPACE = spaces.Box(0, 255, shape=(64, 64, 3), dtype=np.uint8)
TEXT_SPACE = spaces.Text(max_length=256, charset=string.printable)  # printable ASCII with newline
OBS_SPACES = {
    "state": spaces.Dict({OBS_STATE: STATE_SPACE}),
    "image": spaces.Dict({OBS_IMAGE: IMAGE_SPACE, OBS_STATE: STATE_SPACE}),
    "image_text": spaces.Dict({OBS_IMAGE: IMAGE_SPACE, OBS_TEXT: TEXT_SPACE}),
    "text": spaces.Dict({OBS_TEXT: TEXT_SPACE}),
}
ACTION_SPACES = {
    "discrete2": spaces.Discrete(2),
    "box3": spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32),
    "box8x3": spaces.Box(-2.0, 2.0, shape=(8, 3), dtype=np.float32),  # e.g. a driving plan
    # min_length 0, as the text envs' action spaces: an empty reply is a (wrong) action, not an error.
    "text": spaces.Text(max_length=32, min_length=0, charset=string.printable),
}

pytestmark = [
    pytest.mark.parametrize("action_kind", list(ACTION_SPACES)),
    pytest.mark.parametrize("obs_kind", list(OBS_SPACES)),
]


@pytest.fixture
def action_space(action_kind: str) -> spaces.Space:
    return ACTION_SPACES[action_kind]


@pytest.fixture
def obs_space(obs_kind: str) -> spaces.Dict:
    return OBS_SPACES[obs_kind]


@pytest.fixture
def policy(
    policy_name: str,
    obs_kind: str,
    action_kind: str,
    obs_space: spaces.Dict,
    action_space: spaces.Space,
    policy_config_hooks: dict[str, Callable[..., Any]],
    tiny_model_dirs: Any,
) -> Policy:
    """The policy with its default (or hook's) config, or a skip if it does not support these spaces."""
    try:
        cls = POLICIES.get(policy_name)
    except ImportError as exc:
        pytest.skip(f"{policy_name}: optional dependency missing: {exc}")
    torch.manual_seed(0)
    try:
        if policy_name in policy_config_hooks:
            config = policy_config_hooks[policy_name](obs_kind, action_kind, tiny_model_dirs)
            if config is None:
                pytest.skip(f"{policy_name}: no conformance config for {obs_kind} -> {action_kind}")
        else:
            config = cls.config_class()
        return cls(config, obs_space, action_space)
    except (TypeError, ValueError) as exc:
        pytest.skip(f"{policy_name} does not support {obs_space} -> {action_space}: {exc}")


@pytest.fixture
def obs(obs_space: spaces.Dict, policy_name: str, text_observations: Callable[[str, int], list[str]]) -> Obs:
    generator = torch.Generator().manual_seed(0)
    batch: dict[str, Any] = {}
    if OBS_STATE in obs_space.spaces:
        batch[OBS_STATE] = torch.randn(BATCH, 4, generator=generator)
    if OBS_IMAGE in obs_space.spaces:
        batch[OBS_IMAGE] = torch.randint(0, 256, (BATCH, 64, 64, 3), generator=generator, dtype=torch.uint8)
    if OBS_TEXT in obs_space.spaces:
        texts = text_observations(policy_name, BATCH)
        assert len(set(texts)) == BATCH, "the batch's texts must differ"
        assert all(obs_space[OBS_TEXT].contains(text) for text in texts), "a text is not in its space"
        batch[OBS_TEXT] = np.array(texts, dtype=object)  # what a vector env gives
    return batch


def action_rows(step: PolicyStep) -> list[Any]:
    """The batch's actions, one per observation: a NumPy array, or a ``str`` (text actions)."""
    action = step.action
    if isinstance(action, torch.Tensor):
        action = action.detach().cpu().numpy()
    return [row if isinstance(row, str) else np.asarray(row) for row in action]


def assert_same_actions(a: PolicyStep, b: PolicyStep) -> None:
    for i, (x, y) in enumerate(zip(action_rows(a), action_rows(b), strict=True)):
        if isinstance(x, str) or isinstance(y, str):
            assert x == y, f"action {i}: {x!r} != {y!r}"
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"action {i}")


def default_type(config_class: type) -> Any:
    """The default of a config class's ``type`` field (without building one: a VLM's needs a model)."""
    field = {f.name: f for f in dataclasses.fields(config_class)}["type"]
    return field.default


def assert_same_config(loaded: Any, saved: Any, path: Path) -> None:
    """Equal configs, except that a path may be re-pointed at its copy inside the saved directory."""
    assert type(loaded) is type(saved)
    for field in dataclasses.fields(saved):
        got, expected = getattr(loaded, field.name), getattr(saved, field.name)
        if got != expected:
            assert isinstance(got, str) and Path(got).resolve().is_relative_to(path.resolve()), (
                f"config.{field.name}: saved {expected!r}, loaded {got!r}"
            )


def perturb(policy: Policy) -> None:
    """Move every floating-point parameter off its initial value (a saved policy is a trained one)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in policy.parameters():
            if param.is_floating_point():
                param.add_(0.1 * torch.randn(param.shape, generator=generator))


# --- identity -------------------------------------------------------------------------------------
def test_name_capabilities_and_config(policy: Policy, policy_name: str) -> None:
    assert type(policy).name == policy_name, "the class's name must be its registry name (saved as 'type')"
    assert default_type(policy.config_class) == policy_name, (
        "the config's default type must be the registry name"
    )
    assert policy.config.type == policy_name
    caps = policy.capabilities
    assert isinstance(caps, frozenset), f"capabilities is a {type(caps).__name__}"
    assert caps <= CAPABILITIES, f"unknown capabilities {sorted(caps - CAPABILITIES)}"
    assert "act" in caps
    if "trainable" in caps:
        assert any(p.requires_grad for p in policy.parameters()), "'trainable' but no trainable parameters"


# --- acting ---------------------------------------------------------------------------------------
def test_act_returns_actions_in_space_with_part_logprobs(
    policy: Policy, obs: Obs, action_space: spaces.Space
) -> None:
    step = policy.act(obs)
    rows = action_rows(step)
    assert len(rows) == BATCH, f"{len(rows)} actions for {BATCH} observations"
    assert step.logprob.ndim == 2 and step.logprob.shape[0] == BATCH, (
        f"logprob shape {tuple(step.logprob.shape)}"
    )
    assert step.logprob.shape[1] >= 1
    assert step.mask.shape == step.logprob.shape, (
        f"mask {tuple(step.mask.shape)} != logprob {tuple(step.logprob.shape)}"
    )
    assert step.mask.dtype == torch.bool
    assert torch.isfinite(step.logprob[step.mask]).all()
    for key, value in step.extras.items():
        assert value.shape[0] == BATCH, f"extras[{key!r}] has batch dim {value.shape[0]}"
    for i, row in enumerate(rows):
        env_action = to_env_action(action_space, row)
        assert action_space.contains(env_action), f"action {i} = {env_action!r} not in {action_space}"


def test_deterministic_act_is_repeatable(policy: Policy, obs: Obs) -> None:
    first, second = policy.act(obs, deterministic=True), policy.act(obs, deterministic=True)
    assert_same_actions(first, second)
    torch.testing.assert_close(first.logprob, second.logprob, rtol=0, atol=0)


def test_evaluate_matches_act_logprob(policy: Policy, obs: Obs) -> None:
    if "evaluate" not in policy.capabilities:
        pytest.skip(f"{policy.name} has no 'evaluate' capability")
    for deterministic in (False, True):
        step = policy.act(obs, deterministic=deterministic)
        evaluation = policy.evaluate(obs, step.action, step.extras)
        torch.testing.assert_close(evaluation.logprob, step.logprob, rtol=0, atol=1e-5)
        assert evaluation.entropy.shape == step.logprob.shape, "entropy must be [B, L] like logprob"


def test_rsample_is_differentiable(policy: Policy, obs: Obs, action_space: spaces.Space) -> None:
    if "rsample" not in policy.capabilities:
        pytest.skip(f"{policy.name} has no 'rsample' capability")
    actions, logprob = policy.rsample(obs)
    assert actions.shape == (BATCH, int(np.prod(action_space.shape))), (
        f"rsample actions {tuple(actions.shape)}"
    )
    assert logprob.shape == (BATCH,), f"rsample logprob {tuple(logprob.shape)}"
    assert torch.isfinite(actions).all() and torch.isfinite(logprob).all()
    (actions.sum() + logprob.sum()).backward()
    grads = [p.grad for p in policy.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads), "no gradient reached the policy"


def test_features_shape(policy: Policy, obs: Obs) -> None:
    if "features" not in policy.capabilities:
        pytest.skip(f"{policy.name} has no 'features' capability")
    features = policy.features(obs)
    assert features.shape == (BATCH, policy.feature_dim), f"features {tuple(features.shape)}"
    assert torch.isfinite(features).all()


def test_compute_loss_is_a_finite_scalar_with_gradient(policy: Policy, obs: Obs) -> None:
    if "compute_loss" not in policy.capabilities:
        pytest.skip(f"{policy.name} has no 'compute_loss' capability")
    step = policy.act(obs)
    zeros = torch.zeros(BATCH)
    batch = OnPolicyBatch(
        obs=obs, actions=step.action, logprob=step.logprob, mask=step.mask,
        values=zeros, advantages=zeros, returns=zeros, extras=step.extras,
    )  # fmt: skip
    loss, metrics = policy.compute_loss(batch)
    assert isinstance(metrics, dict)
    assert loss.ndim == 0, f"loss shape {tuple(loss.shape)}"
    assert torch.isfinite(loss)
    policy.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads, "the loss reaches no parameter"
    assert all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads), "every gradient is zero"


# --- saving ---------------------------------------------------------------------------------------
def test_save_load_round_trip(policy: Policy, obs: Obs, tmp_path: Path) -> None:
    perturb(policy)
    path = policy.save_pretrained(tmp_path / "policy")
    loaded = Policy.from_pretrained(path)
    assert type(loaded) is type(policy)
    assert_same_config(loaded.config, policy.config, path)
    assert loaded.observation_space == policy.observation_space
    assert loaded.action_space == policy.action_space
    step = policy.act(obs, deterministic=True)
    assert_same_actions(loaded.act(obs, deterministic=True), step)
    if "evaluate" in policy.capabilities:
        expected = policy.evaluate(obs, step.action, step.extras)
        got = loaded.evaluate(obs, step.action, step.extras)
        torch.testing.assert_close(got.logprob, expected.logprob, rtol=0, atol=0)
        torch.testing.assert_close(got.logprob, step.logprob, rtol=0, atol=1e-5)


def test_corrupt_weights_file_raises_value_error(policy: Policy, tmp_path: Path) -> None:
    path = policy.save_pretrained(tmp_path / "policy")
    (path / WEIGHTS_FILE).write_bytes(b"\x00\x01 this is not a safetensors file")
    with pytest.raises(ValueError, match=re.escape(str(path / WEIGHTS_FILE))):
        Policy.from_pretrained(path)


def test_mismatched_weights_raise_value_error(policy: Policy, tmp_path: Path) -> None:
    """Weights that are valid safetensors but do not fit the saved config are a corrupt save too."""
    state = policy.state_dict()
    if not state:
        pytest.skip(f"{policy.name} has no tensors to mismatch")
    path = policy.save_pretrained(tmp_path / "policy")
    save_file({key: torch.zeros(1) for key in state}, str(path / WEIGHTS_FILE))
    with pytest.raises(ValueError, match=re.escape(str(path / WEIGHTS_FILE))):
        Policy.from_pretrained(path)


def test_corrupt_config_file_raises_value_error(policy: Policy, tmp_path: Path) -> None:
    path = policy.save_pretrained(tmp_path / "policy")
    (path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(path / CONFIG_FILE))):
        Policy.from_pretrained(path)


def test_missing_dir_raises_file_not_found(policy: Policy, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing"):
        Policy.from_pretrained(tmp_path / "no_such_policy")
