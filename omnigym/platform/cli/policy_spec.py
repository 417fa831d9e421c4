"""What ``--policy`` names: a registered policy, a saved policy, checkpoint or run, a language model.

Local paths are tried first and a spec only goes to the Hugging Face hub when it has a hub id's
shape and nothing local could be meant (see :func:`is_hub_id`), so a mistyped run directory fails
at once instead of after network retries; ``HF_HUB_OFFLINE`` limits the hub to its local cache.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from omnigym.platform.cli.errors import UsageError

if TYPE_CHECKING:
    from omnigym.core.policy import Policy

LOCAL_ROOTS = frozenset({"runs", "checkpoints", "outputs", "models", "videos", "datasets", "agent_eval"})
"""First path segments that name local output directories, never a hub organisation."""
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""``org/name``: a Hugging Face repo id (one slash, no leading dot)."""
HUB_TIMEOUT_S = 10.0
"""How long the one existence request to the hub may take."""
NOT_FOUND = "--policy {spec}: no such local path, registered policy or loadable Hugging Face model"
R = TypeVar("R")


def env_flags(command: Callable[..., R]) -> Callable[..., R]:
    """Word a command's env errors with its flags: ``--env`` and ``--env-kwargs``, not ``env.id``.

    :class:`~omnigym.platform.vec_env.EnvArgumentError` names config keys, right for ``train``;
    commands that take the env as flags wear this decorator.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        from omnigym.platform.vec_env import EnvArgumentError

        try:
            return command(*args, **kwargs)
        except EnvArgumentError as exc:
            raise UsageError(exc.describe(id_flag="--env", kwargs_flag="--env-kwargs")) from None

    return wrapper


def resolve_policy(
    spec: str, env_id: str, env_kwargs: dict | None = None, *, policy_kwargs: dict | None = None
) -> Policy:
    """A policy from a registered name, a saved policy, checkpoint or run dir, or a model dir or id.

    A Hugging Face image-text-to-text model directory, hub id or ``tiny:`` spec becomes a ``vlm``
    policy; ``policy_kwargs`` are its ``VLMPolicyConfig`` options (``max_new_tokens``, ...),
    unused by other policies. Every policy is checked against the env's spaces before it runs.

    Raises:
        UsageError: no such path, policy or model (offline: not cached), or spaces that differ.
        IncompatibleSpacesError: the policy type cannot act in the env's spaces.
    """
    from omnigym.core.registry import POLICIES
    from omnigym.platform.vec_env import make_env

    path = Path(spec).expanduser()
    if _is_hf_model_dir(path) or spec.startswith("tiny:"):
        return _language_model_agent(spec, env_id, env_kwargs, policy_kwargs)
    if path.exists():
        return _saved_policy(spec, path, env_id, env_kwargs)
    if is_hub_id(spec):
        check_hub_model(spec)
        return _language_model_agent(spec, env_id, env_kwargs, policy_kwargs)
    if spec not in POLICIES:
        raise _unknown_spec(spec, POLICIES.names())
    policy_cls = POLICIES.get(spec)
    env = make_env(env_id, **{**policy_cls.env_kwargs, **(env_kwargs or {})})
    try:
        return _build(policy_cls, None, env.observation_space, env.action_space, env_id, env_kwargs)
    finally:
        env.close()


def _build(
    policy_cls: Any, config: Any, obs_space: Any, action_space: Any, env_id: str, env_kwargs: dict | None
) -> Policy:
    """:func:`~omnigym.platform.policy_fit.build_policy` worded for the command line."""
    from omnigym.platform.policy_fit import build_policy

    return build_policy(
        policy_cls, config, obs_space, action_space, env_id=env_id, env_kwargs=env_kwargs, cli=True
    )


def _saved_policy(spec: str, path: Path, env_id: str, env_kwargs: dict | None) -> Policy:
    """The policy saved at ``path`` (a policy, checkpoint or run dir), checked against the env's spaces."""
    from omnigym.core.policy import Policy
    from omnigym.core.pretrained import CONFIG_FILE
    from omnigym.platform.checkpoint import latest_checkpoint
    from omnigym.platform.policy_fit import check_saved_policy
    from omnigym.platform.vec_env import make_env

    candidates = [path, path / "policy", path / "best_policy"]
    checkpoint = latest_checkpoint(path) if path.is_dir() else None
    if checkpoint is not None:
        candidates.append(checkpoint / "policy")
    found = next((c for c in candidates if (c / CONFIG_FILE).is_file()), None)
    if found is None:
        raise UsageError(
            f"--policy {spec} holds no saved policy (no {CONFIG_FILE} in {', '.join(map(str, candidates))})"
        )
    policy = Policy.from_pretrained(found)
    run_kwargs, max_episode_steps = run_env_settings(path, env_id)
    kwargs = {**type(policy).env_kwargs, **(run_kwargs or {}), **(env_kwargs or {})}
    env = make_env(env_id, max_episode_steps=max_episode_steps, **kwargs)
    try:
        check_saved_policy(
            policy, env.observation_space, env.action_space, source=spec, env_id=env_id,
            trained_on=trained_env_id(found),
        )  # fmt: skip
    finally:
        env.close()
    return policy


def trained_env_id(policy_dir: Path) -> str | None:
    """The env id of the run a saved policy belongs to (its ``config.yaml`` up to 3 levels up)."""
    import yaml

    for directory in [policy_dir, *policy_dir.resolve().parents][:4]:
        config = directory / "config.yaml"
        if config.is_file():
            try:
                env = (yaml.safe_load(config.read_text()) or {}).get("env") or {}
            except (yaml.YAMLError, OSError, AttributeError):
                return None
            return str(env["id"]) if isinstance(env, dict) and "id" in env else None
    return None


def _language_model_agent(
    model: str, env_id: str, env_kwargs: dict | None, policy_kwargs: dict | None = None
) -> Policy:
    """A ``vlm`` policy over a model directory, hub id or ``tiny:`` spec (text only for an LM)."""
    from omnigym.platform.policy_fit import check_fit
    from omnigym.platform.vec_env import make_env
    from omnigym.policies.vlm.policy import VLMPolicy, VLMPolicyConfig, resolve_model_class
    from omnigym.policies.vlm.tiny import resolve_model

    env = make_env(env_id, **(env_kwargs or {}))
    try:
        # the spaces first: a model loads for seconds, then could not act here anyway
        check_fit(
            VLMPolicy, None, env.observation_space, env.action_space, env_id=env_id, env_kwargs=env_kwargs,
            cli=True,
        )  # fmt: skip
        text_only = resolve_model_class(resolve_model(model), "auto") == "causal_lm"
        options = {"obs_keys": ("text",) if text_only else ("image", "text"), **(policy_kwargs or {})}
        config = VLMPolicyConfig(model=model, **options)
        return _build(VLMPolicy, config, env.observation_space, env.action_space, env_id, env_kwargs)
    except OSError as exc:  # transformers' "not a local folder and not a valid model identifier"
        raise FileNotFoundError(f"{NOT_FOUND.format(spec=model)} ({' '.join(str(exc).split())})") from exc
    finally:
        env.close()


def _unknown_spec(spec: str, registered: list[str]) -> FileNotFoundError:
    """The error for a spec that is no local path, registered policy or hub id: what it looked like."""
    if "/" in spec or "\\" in spec or spec.startswith((".", "~")):
        return FileNotFoundError(
            f"--policy {spec}: no such file or directory; give a saved policy, checkpoint or run dir, "
            "a registered policy (`omnigym list`) or a Hugging Face org/name"
        )
    close = difflib.get_close_matches(spec, registered, n=2)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return FileNotFoundError(
        f"--policy {spec}: unknown policy {spec!r}{hint} and no such file or directory; "
        f"registered policies: {', '.join(registered)}"
    )


def is_hub_id(spec: str) -> bool:
    """Whether ``spec`` can only mean a Hugging Face hub id: ``org/name`` and nothing local.

    Not a hub id: anything starting with ``.``, ``/`` or ``~``, more than one slash, a first
    segment that exists here (``runs/...`` when ``runs/`` does) or names a local output
    directory (:data:`LOCAL_ROOTS`), or a name with a file suffix of a saved policy.
    """
    if HUB_ID.fullmatch(spec) is None:
        return False
    org, name = spec.split("/")
    return (
        org not in LOCAL_ROOTS
        and not Path(org).exists()
        and not name.endswith((".json", ".safetensors", ".pt", ".yaml"))
    )


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) limits the hub to its local cache."""
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return constants.HF_HUB_OFFLINE or any(f.strip().upper() in {"1", "ON", "YES", "TRUE"} for f in flags)


def check_hub_model(repo_id: str) -> None:
    """Fail at once, in one line, for a hub id that is neither cached nor (online) on the hub.

    A cached model passes without the network. Offline, an uncached one is an error naming
    ``HF_HUB_OFFLINE``; online, one request asks the hub whether the repo exists (rather than
    the retries of a full download attempt).

    Raises:
        UsageError: the model is not cached and offline, not on the hub, or the hub is unreachable.
    """
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

    try:
        cached = huggingface_hub.try_to_load_from_cache(repo_id, "config.json")
    except HFValidationError as exc:
        raise UsageError(f"--policy {repo_id}: not a valid Hugging Face model id ({exc})") from None
    if isinstance(cached, str):
        return
    if hub_offline():
        raise FileNotFoundError(
            f"{NOT_FOUND.format(spec=repo_id)}: it is not in the local Hugging Face cache and HF_HUB_OFFLINE "
            "is set; unset HF_HUB_OFFLINE to download it, or give a local path"
        )
    try:
        huggingface_hub.model_info(repo_id, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        return  # it exists; loading it will say how to get access
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"{NOT_FOUND.format(spec=repo_id)}: the hub has no model {repo_id}; give a saved policy, "
            "checkpoint or run dir, a policy of `omnigym list` or an existing org/name"
        ) from None
    except Exception as exc:  # any transport or HTTP failure: the hub cannot confirm the model
        raise FileNotFoundError(
            f"{NOT_FOUND.format(spec=repo_id)}: the Hugging Face hub is unreachable ({type(exc).__name__}); "
            "check the network, or set HF_HUB_OFFLINE=1 to use cached models only"
        ) from None


def _is_hf_model_dir(path: Path) -> bool:
    """A directory holding a Hugging Face model (``config.json`` with a ``model_type``)."""
    config = path / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (json.JSONDecodeError, OSError):
        return False
    return isinstance(data, dict) and "model_type" in data and "observation_space" not in data


def run_env_settings(path: Path, env_id: str) -> tuple[dict | None, int | None]:
    """A run directory's env kwargs and time limit, when it trained on ``env_id``."""
    from omnigym.platform.trainers.on_policy import CONFIG_FILE, load_run_config

    if not (path / CONFIG_FILE).is_file():
        return None, None
    env = load_run_config(path).env
    return (env.kwargs, env.max_episode_steps) if env.id == env_id else (None, None)


def json_kwargs(text: str | None, flag: str = "--env-kwargs", example: str = '{"split": "test"}') -> dict:
    """A JSON-object flag (``--env-kwargs``...) parsed; an error names ``flag``, where, and an example.

    Raises:
        UsageError: not valid JSON (with line and column) or not an object.
    """
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"{flag} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos}) "
            f"of {text!r}; give a JSON object with double-quoted keys, e.g. {flag} '{example}'"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object, got {type(value).__name__}; e.g. {flag} '{example}'")
    return value
