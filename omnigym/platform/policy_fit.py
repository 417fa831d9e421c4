"""Whether a policy fits an env's spaces, checked before it is built, and the building itself.

Each policy type declares the action spaces it acts in (``Policy.action_spaces``) and
:meth:`Policy.check_spaces` refuses others; :func:`build_policy` runs that check, then builds,
and words a refusal as one line naming the env's space, what the policy supports and the key or
flag that fixes it: a policy that fits, or the env's own switch (``env.kwargs.action_space=text``
where it has a text mode). :func:`check_saved_policy` compares a saved policy's spaces with an
env's before it is evaluated there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gymnasium import spaces

from omnigym.core.policy import IncompatibleSpacesError, Policy, PolicyConfig, describe_space
from omnigym.core.registry import POLICIES

__all__ = ["IncompatibleSpacesError", "build_policy", "check_fit", "check_saved_policy", "env_mode_fixes"]

GENERAL_POLICIES = ("mlp", "cnn", "vlm")
"""The policies suggested in place of one that does not fit (cheap to import, one per kind of
space: vectors, images, text)."""
ACTION_MODE_KWARG = "action_space"
"""The env keyword argument that switches an omnigym env between action spaces (games, GUI)."""
ACTION_MODES = ("discrete", "text", "structured")
"""The values it takes across omnigym's envs."""


def build_policy(
    policy: str | type[Policy],
    config: PolicyConfig | None,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    *,
    env_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    cli: bool = False,
) -> Policy:
    """Check that the policy type fits the spaces, then build it (on the CPU).

    Args:
        policy: a registered policy name or a policy class.
        config: its config; None builds the type's default config (after the check, since some
            defaults are incomplete, e.g. a ``vlm`` without a model).
        observation_space: the env's (single) observation space.
        action_space: the env's (single) action space.
        env_id: the env, named in the message and probed for an action mode that fits.
        env_kwargs: the kwargs the env was made with.
        cli: word the fixes as command-line flags (``--policy``, ``--env-kwargs``) instead of
            config keys (``policy=``, ``env.kwargs.``).

    Raises:
        IncompatibleSpacesError: one line: the env's space, what the policy supports, the fix.
    """
    policy_cls: type[Policy] = POLICIES.get(policy) if isinstance(policy, str) else policy
    checked = config if config is not None else _default_config(policy_cls)
    check_fit(
        policy_cls, checked, observation_space, action_space, env_id=env_id, env_kwargs=env_kwargs, cli=cli
    )
    if checked is None:  # an incomplete default: its own error says what is missing
        checked = policy_cls.config_class()
    assert isinstance(observation_space, spaces.Dict)  # check_fit refused any other
    return policy_cls(checked, observation_space, action_space)


def _default_config(policy_cls: type[Policy]) -> PolicyConfig | None:
    """The policy's default config, or None where the default is incomplete (a ``vlm`` needs a model)."""
    try:
        return policy_cls.config_class()
    except (TypeError, ValueError):
        return None


def check_fit(
    policy_cls: type[Policy],
    config: PolicyConfig | None,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    *,
    env_id: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    cli: bool = False,
) -> None:
    """:meth:`Policy.check_spaces`, its refusal worded with the env and the fixes (see :func:`build_policy`).

    Raises:
        IncompatibleSpacesError: one line: the env's space, what the policy supports, the fix.
    """
    try:
        policy_cls.check_spaces(config, observation_space, action_space)
    except IncompatibleSpacesError as exc:
        message = _explain(exc, policy_cls, observation_space, action_space, env_id, env_kwargs, cli)
        raise IncompatibleSpacesError(
            message, policy=exc.policy, part=exc.part, supported=exc.supported
        ) from None


def _explain(
    exc: IncompatibleSpacesError,
    policy_cls: type[Policy],
    observation_space: spaces.Space,
    action_space: spaces.Space,
    env_id: str | None,
    env_kwargs: Mapping[str, Any] | None,
    cli: bool,
) -> str:
    """The refusal with the env named and the fixes that would work."""
    env = env_id or "the env"
    fixes = [
        _policy_flag(name, cli) for name in _fitting_policies(policy_cls, observation_space, action_space)
    ]
    if exc.part == "action":
        problem = (
            f"{env} has {type(action_space).__name__} actions ({describe_space(action_space)}), but policy "
            f"{exc.policy!r} acts in {' or '.join(exc.supported)} action spaces only"
        )
        if env_id is not None:
            fixes = [
                _env_kwarg_flag(k, v, cli) for k, v in env_mode_fixes(policy_cls, env_id, env_kwargs)
            ] + fixes
    else:
        problem = f"{env}: {exc}"
        if not cli:
            fixes.insert(0, "policy.obs_keys=[...] naming keys it observes")
    if not fixes:
        return f"{problem}; no general policy fits: see `omnigym list` and docs/policies.md"
    return f"{problem}: use {' or '.join(fixes)}"


def _fitting_policies(
    policy_cls: type[Policy], observation_space: spaces.Space, action_space: spaces.Space
) -> list[str]:
    """The :data:`GENERAL_POLICIES` (but ``policy_cls``) whose default config fits the spaces."""
    fitting = []
    for name in GENERAL_POLICIES:
        if name not in POLICIES or name == policy_cls.name:
            continue
        candidate: type[Policy] = POLICIES.get(name)
        try:
            candidate.check_spaces(_default_config(candidate), observation_space, action_space)
        except IncompatibleSpacesError:
            continue
        fitting.append(name)
    return fitting


def env_mode_fixes(
    policy_cls: type[Policy], env_id: str, env_kwargs: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """``(kwarg, value)`` pairs that switch ``env_id`` to an action space ``policy_cls`` acts in.

    Only for envs that take :data:`ACTION_MODE_KWARG`; each other mode is tried by making the env
    once (this runs on the error path only).
    """
    from omnigym.platform.vec_env import env_kwarg_names, make_env

    if not policy_cls.action_spaces or ACTION_MODE_KWARG not in env_kwarg_names(env_id):
        return []
    current = dict(env_kwargs or {})
    fixes = []
    for mode in ACTION_MODES:
        if current.get(ACTION_MODE_KWARG) == mode:
            continue
        try:
            env = make_env(env_id, **{**current, ACTION_MODE_KWARG: mode})
        except Exception:  # a mode this env does not have: no hint, not an error
            continue
        try:
            if isinstance(env.action_space, policy_cls.action_spaces):
                fixes.append((ACTION_MODE_KWARG, mode))
        finally:
            env.close()
    return fixes


def _policy_flag(name: str, cli: bool) -> str:
    """How to choose policy ``name``: ``policy=mlp`` or ``--policy mlp``."""
    if not cli:
        return f"policy={name}"
    return "--policy <model dir or Hugging Face id>" if name == "vlm" else f"--policy {name}"


def _env_kwarg_flag(key: str, value: Any, cli: bool) -> str:
    """How to set an env kwarg: ``env.kwargs.action_space=text`` or ``--env-kwargs '{...}'``."""
    if not cli:
        return f"env.kwargs.{key}={value}"
    return f"--env-kwargs '{json.dumps({key: value})}'"


def check_saved_policy(
    policy: Policy,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    *,
    source: str,
    env_id: str,
    trained_on: str | None = None,
) -> None:
    """Refuse to run a saved policy on an env whose spaces differ from those it was trained on.

    Compares the action space and each observation key the policy reads (its config's
    ``obs_keys`` and ``state_keys``, else every key it was saved with): type, shape, number of
    actions. Bounds and text lengths may differ.

    Args:
        policy: the loaded policy.
        observation_space: the env's observation space.
        action_space: the env's action space.
        source: where the policy came from, for the message (``--policy`` as given).
        env_id: the env, for the message.
        trained_on: the env id it was trained on, when known (named as the fix).

    Raises:
        IncompatibleSpacesError: names the space that differs and what the policy expects.
    """
    problem = None
    if _differs(policy.action_space, action_space):
        problem = (
            f"the policy {source} acts in {describe_space(policy.action_space)}, but {env_id} has "
            f"{type(action_space).__name__} actions {describe_space(action_space)}"
        )
        part = "action"
    else:
        part = "observation"
        saved = policy.observation_space.spaces
        env_obs = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {}
        for key in _read_keys(policy):
            if key not in env_obs:
                problem = (
                    f"the policy {source} reads observation {key!r}, "
                    f"but {env_id} observes only {sorted(env_obs)}"
                )
                break
            if key in saved and _differs(saved[key], env_obs[key]):
                problem = (
                    f"the policy {source} reads observation {key!r} as {describe_space(saved[key])}, "
                    f"but {env_id}'s {key!r} is {describe_space(env_obs[key])}"
                )
                break
    if problem is None:
        return
    fix = (
        f"--env {trained_on} (the env it was trained on)"
        if trained_on
        else "--env with the env it was trained on"
    )
    raise IncompatibleSpacesError(f"{problem}: use {fix}", policy=policy.name, part=part)


def _read_keys(policy: Policy) -> list[str]:
    """The observation keys ``policy`` reads: its config's ``obs_keys`` and ``state_keys``, else all."""
    keys = [
        *(getattr(policy.config, "obs_keys", None) or ()),
        *(getattr(policy.config, "state_keys", None) or ()),
    ]
    return keys or list(policy.observation_space.spaces)


def _differs(expected: spaces.Space, actual: spaces.Space) -> bool:
    """Whether a policy built for ``expected`` cannot take ``actual``: type, shape or size."""
    if type(expected) is not type(actual):
        return True
    if isinstance(expected, spaces.Box):
        return expected.shape != actual.shape
    if isinstance(expected, spaces.Discrete) and isinstance(actual, spaces.Discrete):
        return int(expected.n) != int(actual.n)
    if isinstance(expected, spaces.MultiDiscrete) and isinstance(actual, spaces.MultiDiscrete):
        return expected.shape != actual.shape or bool((expected.nvec != actual.nvec).any())
    if isinstance(expected, spaces.MultiBinary):
        return expected.shape != actual.shape
    if isinstance(expected, spaces.Dict) and isinstance(actual, spaces.Dict):
        return set(expected.spaces) != set(actual.spaces) or any(
            _differs(space, actual.spaces[key]) for key, space in expected.spaces.items()
        )
    if isinstance(expected, spaces.Tuple) and isinstance(actual, spaces.Tuple):
        return len(expected.spaces) != len(actual.spaces) or any(
            _differs(a, b) for a, b in zip(expected.spaces, actual.spaces, strict=True)
        )
    return False
