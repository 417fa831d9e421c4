"""The Policy contract, checked for every registered policy on each observation/action space it acts in.

A *case* is one policy on one pair of spaces; the cases are generated at collection, only for the
spaces the policy supports (:func:`policy_case_params`):

- General policies act on the fixed spaces below. Observations are a state vector alone, a 64x64
  uint8 image with the state vector, the image with a text, or a text alone (texts come as a NumPy
  object array of ``B`` strings, as from a vector env). Actions are discrete, a box, a box of
  8x3 (a driving plan), or text. A policy listed in :data:`POLICY_KINDS` acts on the
  observation and action kinds listed there; any other on every pair ``check_fit`` admits.
- A policy listed in :data:`POLICY_ENVS` (the manipulation experts, the driving baselines)
  acts on the real spaces of its env(s), made once per session with the policy's ``env_kwargs``,
  and on real observations of ``BATCH`` seeded resets.

A case is built with ``build_policy`` (so ``check_fit`` first), with the default config or the one
``POLICY_CONFIGS`` (conftest) gives. A case that fails to build fails, it is not skipped. A test
of a capability (``evaluate``, ``rsample``, ``features``, ``compute_loss``) is generated only for
the cases whose policy has it on those spaces: ``capabilities_for(config, action_space)`` where the
policy type defines it, its class ``capabilities`` otherwise (the identity test checks the built
policy agrees).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import string
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors.torch import save_file

from omnigym.core.policy import CAPABILITIES, IncompatibleSpacesError, Policy
from omnigym.core.pretrained import CONFIG_FILE, WEIGHTS_FILE
from omnigym.core.registry import POLICIES
from omnigym.core.types import OBS_IMAGE, OBS_STATE, OBS_TEXT, Obs, OnPolicyBatch, PolicyStep
from omnigym.platform.policy_fit import build_policy, check_fit
from omnigym.platform.vec_env import make_env, to_env_action

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

CHUNK_OBS = ("state", "image")  # chunk policies read Box observations only (no text)
POLICY_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    **{name: (CHUNK_OBS, ("box3", "box8x3")) for name in ("diffusion", "flow", "meanflow", "noise_steering")},
    # planners plan [waypoints, coordinates] actions
    **{name: (CHUNK_OBS, ("box8x3",)) for name in ("diffusion_planner", "hierarchical_diffusion_planner")},
    "game_solver": (("image_text", "text"), ("discrete2", "text")),  # reads a game's text
    "gui_oracle": (("image_text", "text"), ("text",)),  # reads a GUI's text, writes text actions
    "vlm": (("image_text", "text"), ("text",)),  # a VLM (image + text) or a text-only LM
    "vla": (("image_text",), ("box3",)),  # a tiny VLM encoder: one pair (driving plans: the matrix test)
    "hierarchical": (("state",), ("box3",)),  # its chunk controller is checked on every pair as flow
}
"""Policy name -> (observation kinds, action kinds): the fixed spaces it is checked on, all pairs,
for a policy that ``check_fit`` cannot narrow down (it refuses these only once built: what its
observations must hold, the shape of its actions). Others get every pair ``check_fit`` admits."""

DRIVING_ENVS = ("omnigym/Driving-v0", "omnigym/DrivingPlan-v0")  # control (2,) and plan (8, 3) actions
POLICY_ENVS: dict[str, tuple[str, ...]] = {
    "pusht_expert": ("omnigym/PushT-v0",),
    "gym_pusht_expert": (  # privileged expert_state
        "omnigym/GymPushT-v0",
        "omnigym/GymPushTPixels-v0",
        "omnigym/GymPushTKeypoints-v0",
    ),
    "reach_expert": ("omnigym/Reach-v0",),
    "pushcube_expert": ("omnigym/PushCube-v0",),
    "pickplace_expert": ("omnigym/PickPlace-v0",),
    "pushcube_two_stage_expert": ("omnigym/PushCubeTwoStage-v0",),
    "aloha_transfer_expert": ("omnigym/ext-aloha-TransferCube-v0",),  # needs gym-aloha's cube pose
    "aloha_insertion_expert": ("omnigym/ext-aloha-Insertion-v0",),  # needs the peg and socket poses
    **{name: DRIVING_ENVS for name in ("constant_velocity", "pdm_closed", "log_replay")},
    "pdm_closed_meta": ("omnigym/DrivingPlan-v0",),  # writes meta actions: plan mode, text actions
}
"""Policy name -> the envs it acts in: it is checked on their real spaces (made with the policy's
``env_kwargs``, e.g. a driving expert's privileged observation) instead of the fixed ones."""


# --- the cases ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PolicyCase:
    """One policy on one pair of spaces: fixed kinds (``obs_kind``, ``action_kind``) or an env's."""

    policy: str
    obs_kind: str = ""
    action_kind: str = ""
    env_id: str = ""
    capabilities: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        spaces_id = self.env_id or f"{self.obs_kind}-{self.action_kind}"
        return f"{self.policy}-{spaces_id}"


def declared_capabilities(cls: type[Policy], config: Any, action_space: spaces.Space) -> frozenset[str]:
    """What the policy will be able to do on ``action_space``, known without building it."""
    capabilities_for = getattr(cls, "capabilities_for", None)
    return cls.capabilities if capabilities_for is None else capabilities_for(config, action_space)


def policy_case_params(name: str) -> list[Any]:
    """The cases of policy ``name`` (``pytest.param``s; one skipped param when it cannot be imported)."""
    try:
        cls: type[Policy] = POLICIES.get(name)
    except ImportError as exc:
        reason = f"{name}: optional dependency missing: {exc}"
        return [pytest.param(PolicyCase(name, env_id="unavailable"), marks=pytest.mark.skip(reason=reason))]
    except Exception:  # a broken module: one case, whose fixtures raise the error again
        return [pytest.param(PolicyCase(name, env_id="unimportable"), id=f"{name}-unimportable")]
    if name in POLICY_ENVS:
        # (their types' capabilities do not depend on the spaces: the envs are made only when run)
        cases = [PolicyCase(name, env_id=e, capabilities=cls.capabilities) for e in POLICY_ENVS[name]]
        return [pytest.param(case, id=case.id, marks=unregistered(case.env_id)) for case in cases]
    else:
        if name in POLICY_KINDS:  # declared: each must build (and pass check_fit) or fail
            obs_kinds, action_kinds = POLICY_KINDS[name]
            kinds = list(itertools.product(obs_kinds, action_kinds))
        else:  # the fixed spaces the type's declarations admit
            kinds = [k for k in itertools.product(OBS_SPACES, ACTION_SPACES) if fits(cls, *k)]
        config = default_config(cls)
        cases = [
            PolicyCase(name, o, a, capabilities=declared_capabilities(cls, config, ACTION_SPACES[a]))
            for o, a in kinds
        ]
    return [pytest.param(case, id=case.id) for case in cases]


def unregistered(env_id: str) -> list[Any]:
    """A skip mark for an env id its optional package did not register (a peer suite's, e.g. gym-aloha)."""
    import gymnasium as gym

    import omnigym.envs  # noqa: F401  (registers omnigym's ids, the peer suites' where installed)

    if env_id in gym.registry:
        return []
    return [pytest.mark.skip(reason=f"{env_id} is not registered: its optional package is missing")]


def default_config(cls: type[Policy]) -> Any:
    """The type's default config, or None where it is incomplete (a ``vlm`` needs a model)."""
    try:
        return cls.config_class()
    except (TypeError, ValueError):
        return None


def fits(cls: type[Policy], obs_kind: str, action_kind: str) -> bool:
    """Whether ``check_fit`` admits the fixed spaces ``obs_kind`` -> ``action_kind`` for ``cls``."""
    try:
        check_fit(cls, default_config(cls), OBS_SPACES[obs_kind], ACTION_SPACES[action_kind])
    except IncompatibleSpacesError:
        return False
    except Exception:  # a bug in the check: generate the case, whose build then fails with it
        return True
    return True


@cache
def all_case_params() -> tuple[Any, ...]:
    return tuple(param for name in POLICIES.names() for param in policy_case_params(name))


F = TypeVar("F", bound=Callable[..., Any])


def needs(capability: str) -> Callable[[F], F]:
    """Generate the decorated test only for the cases whose policy has ``capability``."""

    def mark(test: F) -> F:
        test.needs_capability = capability  # type: ignore[attr-defined]
        return test

    return mark


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``policy_case`` over the cases (those with the test's capability)."""
    if "policy_case" not in metafunc.fixturenames:
        return
    capability = getattr(metafunc.function, "needs_capability", None)
    params = [
        param
        for param in all_case_params()
        if capability is None or param.marks or capability in param.values[0].capabilities
    ]
    metafunc.parametrize("policy_case", params)


def test_every_policy_has_a_case(policy_name: str) -> None:
    """Each registered policy is checked on at least one pair of spaces (fixed, or its env's)."""
    assert [p for p in all_case_params() if p.values[0].policy == policy_name], (
        f"no spaces to check {policy_name} on: list it in POLICY_KINDS or POLICY_ENVS"
    )


# --- spaces and observations ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvSample:
    """An env's spaces and ``BATCH`` real observations (seeded resets), stacked NumPy arrays by key."""

    observation_space: spaces.Dict
    action_space: spaces.Space
    obs: dict[str, np.ndarray]


@pytest.fixture(scope="session")
def env_samples() -> Iterator[Callable[[str, dict[str, Any]], EnvSample]]:
    """``env_samples(env_id, kwargs)``: the env made once per session (per id and kwargs)."""
    made: dict[str, EnvSample] = {}

    def sample(env_id: str, kwargs: dict[str, Any]) -> EnvSample:
        key = json.dumps([env_id, kwargs], sort_keys=True)
        if key not in made:
            env = make_env(env_id, **kwargs)
            try:
                rows = [env.reset(seed=seed)[0] for seed in range(BATCH)]
            finally:
                env.close()
            obs = {k: np.stack([np.asarray(row[k]) for row in rows]) for k in rows[0]}
            assert isinstance(env.observation_space, spaces.Dict)
            made[key] = EnvSample(env.observation_space, env.action_space, obs)
        return made[key]

    yield sample


@pytest.fixture
def env_sample(
    policy_case: PolicyCase, env_samples: Callable[[str, dict[str, Any]], EnvSample]
) -> EnvSample | None:
    """The real env of an env case (made with the policy's ``env_kwargs``); None for fixed spaces."""
    if not policy_case.env_id:
        return None
    return env_samples(policy_case.env_id, dict(POLICIES.get(policy_case.policy).env_kwargs))


@pytest.fixture
def action_space(policy_case: PolicyCase, env_sample: EnvSample | None) -> spaces.Space:
    return env_sample.action_space if env_sample else ACTION_SPACES[policy_case.action_kind]


@pytest.fixture
def obs_space(policy_case: PolicyCase, env_sample: EnvSample | None) -> spaces.Dict:
    return env_sample.observation_space if env_sample else OBS_SPACES[policy_case.obs_kind]


@pytest.fixture
def policy(
    policy_case: PolicyCase,
    obs_space: spaces.Dict,
    action_space: spaces.Space,
    policy_config_hooks: dict[str, Callable[..., Any]],
    tiny_model_dirs: Any,
) -> Policy:
    """The case's policy, built by ``build_policy`` with its default (or hook's) config."""
    name = policy_case.policy
    torch.manual_seed(0)
    config = None
    if name in policy_config_hooks:
        config = policy_config_hooks[name](policy_case.obs_kind, policy_case.action_kind, tiny_model_dirs)
        assert config is not None, f"POLICY_CONFIGS[{name!r}] gives no config for {policy_case.id}"
    return build_policy(name, config, obs_space, action_space, env_id=policy_case.env_id or None)


@pytest.fixture
def obs(
    policy_case: PolicyCase,
    obs_space: spaces.Dict,
    env_sample: EnvSample | None,
    text_observations: Callable[[str, int], list[str]],
) -> Obs:
    """``BATCH`` observations: an env case's real ones, random ones (and texts) for fixed spaces."""
    batch: dict[str, Any] = {}
    if env_sample is not None:
        for key, value in env_sample.obs.items():
            batch[key] = value if value.dtype == object else torch.from_numpy(value)
        return batch
    generator = torch.Generator().manual_seed(0)
    if OBS_STATE in obs_space.spaces:
        batch[OBS_STATE] = torch.randn(BATCH, *(obs_space[OBS_STATE].shape or ()), generator=generator)
    if OBS_IMAGE in obs_space.spaces:
        batch[OBS_IMAGE] = torch.randint(0, 256, (BATCH, 64, 64, 3), generator=generator, dtype=torch.uint8)
    if OBS_TEXT in obs_space.spaces:
        texts = text_observations(policy_case.policy, BATCH)
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
def test_name_capabilities_and_config(policy: Policy, policy_case: PolicyCase) -> None:
    policy_name = policy_case.policy
    assert type(policy).name == policy_name, "the class's name must be its registry name (saved as 'type')"
    assert default_type(policy.config_class) == policy_name, (
        "the config's default type must be the registry name"
    )
    assert policy.config.type == policy_name
    caps = policy.capabilities
    assert isinstance(caps, frozenset), f"capabilities is a {type(caps).__name__}"
    assert caps <= CAPABILITIES, f"unknown capabilities {sorted(caps - CAPABILITIES)}"
    assert "act" in caps
    assert caps == policy_case.capabilities, (
        f"built with {sorted(caps)}, but its type declares {sorted(policy_case.capabilities)} for these "
        "spaces: a type whose capabilities depend on the spaces or config says so in capabilities_for"
    )
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


@needs("evaluate")
def test_evaluate_matches_act_logprob(policy: Policy, obs: Obs) -> None:
    for deterministic in (False, True):
        step = policy.act(obs, deterministic=deterministic)
        evaluation = policy.evaluate(obs, step.action, step.extras)
        torch.testing.assert_close(evaluation.logprob, step.logprob, rtol=0, atol=1e-5)
        assert evaluation.entropy.shape == step.logprob.shape, "entropy must be [B, L] like logprob"


@needs("rsample")
def test_rsample_is_differentiable(policy: Policy, obs: Obs, action_space: spaces.Space) -> None:
    actions, logprob = policy.rsample(obs)
    assert actions.shape == (BATCH, int(np.prod(action_space.shape or ()))), (
        f"rsample actions {tuple(actions.shape)}"
    )
    assert logprob.shape == (BATCH,), f"rsample logprob {tuple(logprob.shape)}"
    assert torch.isfinite(actions).all() and torch.isfinite(logprob).all()
    (actions.sum() + logprob.sum()).backward()
    grads = [p.grad for p in policy.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads), "no gradient reached the policy"


@needs("features")
def test_features_shape(policy: Policy, obs: Obs) -> None:
    features = policy.features(obs)
    assert features.shape == (BATCH, policy.feature_dim), f"features {tuple(features.shape)}"
    assert torch.isfinite(features).all()


@needs("compute_loss")
def test_compute_loss_is_a_finite_scalar_with_gradient(policy: Policy, obs: Obs) -> None:
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
    """Weights that are valid safetensors but do not fit the saved config are a corrupt save too:
    each tensor of the wrong shape or, for a policy without tensors, one it does not have."""
    state = policy.state_dict()
    path = policy.save_pretrained(tmp_path / "policy")
    wrong = {key: torch.zeros(1) for key in state} if state else {"unexpected": torch.zeros(1)}
    save_file(wrong, str(path / WEIGHTS_FILE))
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
