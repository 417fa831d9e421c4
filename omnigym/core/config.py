"""Typed config validation and YAML composition.

Experiments are YAML files that pick one option per group (``env``, ``policy``, ``algo``,
``runtime``) and override fields on top; :func:`compose` turns them into one plain dict and
:func:`build_dataclass` turns that dict into typed config dataclasses, rejecting unknown keys and
wrong types with messages that name the full dotted key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import reprlib
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

T = TypeVar("T")
TypeResolver = Callable[[type, str, str], type]
"""``resolve_type(base_cls, type_name, path)`` returns the config class registered as ``type_name``."""

_OVERRIDE_EXAMPLE = "e.g. algo.learning_rate=3e-4, env.num_envs=8 or env=cartpole"
DELETE_PREFIX = "~"
"""An override ``~key.sub`` deletes ``key.sub`` from the composed config (Hydra's syntax)."""


class ConfigError(ValueError):
    """A config that is malformed, has unknown keys or values of the wrong type."""


def build_dataclass(
    cls: type[T], data: Mapping[str, Any] | None, path: str = "", resolve_type: TypeResolver | None = None
) -> T:
    """Builds dataclass ``cls`` from a plain mapping, validating keys and types strictly.

    Args:
        cls: the dataclass to build.
        data: field values; ``None`` means "all defaults".
        path: dotted path of ``data`` in the whole config, used in error messages.
        resolve_type: for sections with a ``type`` field, maps the ``type`` value to the concrete
            dataclass to build (usually a registry lookup). Passed down to nested sections.

    Returns:
        The built instance; its ``__post_init__`` has run.

    Raises:
        ConfigError: on unknown or missing keys, values of the wrong type, or a ``ValueError``
            raised by ``__post_init__``.
    """
    data = {} if data is None else _require_mapping(data, cls, path)
    if resolve_type is not None and "type" in _init_fields(cls):
        cls = _resolve_class(cls, data, path, resolve_type)
    fields = _init_fields(cls)
    _check_unknown_keys(data, fields, path)
    hints = get_type_hints(cls)
    kwargs = {}
    for name, field in fields.items():
        key = _join(path, name)
        if name in data:
            kwargs[field.name] = _convert(data[name], hints[field.name], key, resolve_type)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"Missing required config key '{key}' ({_type_name(hints[field.name])}).")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(f"Invalid config '{path or cls.__name__}': {error}") from error


def config_to_dict(obj: Any) -> dict[str, Any]:
    """Converts a config dataclass to a plain, YAML/JSON-safe dict (tuples become lists).

    ``build_dataclass(type(obj), config_to_dict(obj)) == obj`` for configs built by this module.
    """
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"config_to_dict expects a dataclass instance, got {type(obj).__name__}")
    return _to_plain(obj)


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {config_key(f): _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, Mapping):
        return {key: _to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(item) for item in value]
    return str(value) if isinstance(value, Path) else value


CONFIG_KEY = "config_key"
"""Field metadata naming a field's config key when it cannot be its Python name (``async``)."""


def config_key(field: dataclasses.Field) -> str:
    """The key a dataclass field has in configs: ``metadata["config_key"]``, else its name."""
    return str(field.metadata.get(CONFIG_KEY, field.name))


def _init_fields(cls: type) -> dict[str, dataclasses.Field]:
    """The fields a config sets, by config key."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"expected a dataclass type, got {cls!r}")
    return {config_key(f): f for f in dataclasses.fields(cls) if f.init}


def _resolve_class(base: type, data: Mapping[str, Any], path: str, resolve_type: TypeResolver) -> type:
    type_field = _init_fields(base)["type"]
    name = data.get("type", type_field.default)
    if name is dataclasses.MISSING:
        raise ConfigError(f"Missing required config key '{_join(path, 'type')}' (str).")
    if not isinstance(name, str):
        raise _type_error(_join(path, "type"), str, name)
    concrete = resolve_type(base, name, path)
    _init_fields(concrete)  # the resolver must return a dataclass
    return concrete


def _check_unknown_keys(data: Mapping[str, Any], fields: Mapping[str, Any], path: str) -> None:
    unknown = [key for key in data if key not in fields]
    if not unknown:
        return
    key = str(unknown[0])
    close = difflib.get_close_matches(key, list(fields), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    where = f" under '{path}'" if path else ""
    valid = ", ".join(fields) or "(none)"
    raise ConfigError(f"Unknown config key '{_join(path, key)}'.{hint} Valid keys{where}: {valid}.")


def _convert(value: Any, tp: Any, path: str, resolve_type: TypeResolver | None) -> Any:
    """Checks ``value`` against annotation ``tp`` and coerces it (int -> float, list -> tuple)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        for choice in get_args(tp):
            if value == choice and type(value) is type(choice):
                return choice
        choices = ", ".join(repr(choice) for choice in get_args(tp))
        raise ConfigError(f"Config key '{path}' must be one of {choices}; got {_show(value)}.")
    if origin in (Union, types.UnionType):
        return _convert_union(value, tp, path, resolve_type)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return build_dataclass(tp, _require_mapping(value, tp, path), path, resolve_type)
    if (origin or tp) in (list, tuple, Sequence):
        return _convert_sequence(value, tp, path, resolve_type)
    if (origin or tp) in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise _type_error(path, tp, value)
        key_type, item_type = get_args(tp) or (Any, Any)
        return {
            _convert(key, key_type, path, None): _convert(item, item_type, _join(path, key), resolve_type)
            for key, item in value.items()
        }
    return _convert_scalar(value, tp, path)


def _convert_union(value: Any, tp: Any, path: str, resolve_type: TypeResolver | None) -> Any:
    members = get_args(tp)
    if value is None and type(None) in members:
        return None
    candidates = [member for member in members if member is not type(None)]
    if len(candidates) == 1:  # Optional[X]: X's own error is the most precise one
        return _convert(value, candidates[0], path, resolve_type)
    for member in candidates:
        try:
            return _convert(value, member, path, resolve_type)
        except ConfigError:
            continue
    raise _type_error(path, tp, value)


def _convert_sequence(value: Any, tp: Any, path: str, resolve_type: TypeResolver | None) -> Any:
    if not isinstance(value, (list, tuple)):
        raise _type_error(path, tp, value)
    is_tuple = (get_origin(tp) or tp) is tuple
    args = get_args(tp)
    if is_tuple and args and args[-1] is not Ellipsis:  # fixed length, e.g. tuple[int, int]
        if len(args) != len(value):
            raise ConfigError(
                f"Config key '{path}' expects {len(args)} items ({_type_name(tp)}); got {_show(value)}."
            )
        item_types = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    items = [
        _convert(v, t, f"{path}[{i}]", resolve_type)
        for i, (v, t) in enumerate(zip(value, item_types, strict=True))
    ]
    return tuple(items) if is_tuple else items


def _convert_scalar(value: Any, tp: Any, path: str) -> Any:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is float and is_number:
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer():  # YAML reads 1e5 as a float
        return int(value)
    if tp is Path and isinstance(value, str):
        return Path(value)
    if tp is int and isinstance(value, bool):
        raise _type_error(path, tp, value)
    if tp is type(None) and value is None:
        return None
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _type_error(path, tp, value)


def _require_mapping(value: Any, tp: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        where = f"Config key '{path}'" if path else "The config"
        raise ConfigError(f"{where} must be a mapping of {_type_name(tp)} fields; got {_show(value)}.")
    return value


def _type_error(path: str, tp: Any, value: Any) -> ConfigError:
    return ConfigError(f"Config key '{path}' expects {_type_name(tp)}; got {_show(value)}.")


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not get_args(tp):
        return tp.__name__
    return re.sub(r"\b(?:\w+\.)+(\w+)", r"\1", str(tp))  # drop module prefixes (typing., pkg.mod.)


def _show(value: Any) -> str:
    return f"{reprlib.repr(value)} ({type(value).__name__})"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Loads a YAML file whose top level is a mapping, resolving ``${...}`` interpolations."""
    return _to_container(_load_config(Path(path)), where=str(path))


def list_options(config_dir: str | Path, group: str) -> list[str]:
    """Returns the option names (YAML file stems) of ``config_dir/group``, sorted."""
    return sorted(path.stem for path in (Path(config_dir) / group).glob("*.yaml"))


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Deep-merges dotted ``key.sub=value`` overrides (values parsed as YAML) into ``data``.

    ``~key.sub`` (Hydra's syntax) deletes that key instead, so the dataclass default applies when
    the result is built; overrides apply in order.

    Raises:
        ConfigError: on a malformed override, or a ``~key`` that names no key of ``data``.
    """
    merged = _apply_dotted(OmegaConf.create(dict(data)), overrides)
    return _to_container(merged, where="overrides")


def compose(
    config_dir: str | Path,
    experiment: str | Path,
    overrides: Sequence[str] = (),
    groups: Sequence[str] = ("env", "policy", "algo", "runtime"),
) -> dict[str, Any]:
    """Composes an experiment into one plain dict.

    Layers, later ones winning: each group's option file (``defaults: {env: cartpole, ...}`` in the
    experiment, or ``env=other`` on the command line) as section ``<group>``; the experiment's other
    keys; the dotted command-line overrides, in order (``~key.sub`` deletes a key of the layers
    before it, so its dataclass default applies). Interpolations are resolved on the composed
    result, so ``${env.num_envs}`` works across files.

    Args:
        config_dir: folder holding ``experiment/`` and one folder per group.
        experiment: a name in ``config_dir/experiment/`` or a path to a YAML file.
        overrides: ``group=option`` swaps, ``key.sub=value`` overrides and ``~key.sub`` deletions.
        groups: the groups an experiment may select options for.

    Returns:
        The composed config, without the ``defaults`` key.

    Raises:
        ConfigError: on unknown experiments, groups or options, malformed overrides, or a
            ``~key`` that names no key of the composed config.
    """
    config_dir = Path(config_dir)
    spec = _to_container(_load_config(_experiment_path(config_dir, experiment)), resolve=False)
    defaults = spec.pop("defaults", None) or {}
    if not isinstance(defaults, dict):
        raise ConfigError(
            f"'defaults' in experiment '{experiment}' must be a mapping, e.g. {{env: cartpole}}."
        )
    swaps, dotted = _split_group_swaps(overrides, groups)
    base = {}
    for group, option in {**defaults, **swaps}.items():
        if group not in groups:
            raise ConfigError(
                f"Unknown config group '{group}' in defaults. Valid groups: {', '.join(groups)}."
            )
        option_config = _load_config(_option_path(config_dir, group, option))
        base[group] = _to_container(option_config, resolve=False)
    merged = _merge(OmegaConf.create(base), OmegaConf.create(spec))
    return _to_container(_apply_dotted(merged, dotted), where=f"experiment '{experiment}'")


def _split_group_swaps(overrides: Sequence[str], groups: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Separates ``group=option`` swaps from dotted overrides."""
    swaps, dotted = {}, []
    for override in overrides:
        key = override.split("=", 1)[0].strip()
        value = _parse_overrides([override]).get(key) if key in groups else None
        if isinstance(value, str):
            swaps[key] = value
        else:
            dotted.append(override)
    return swaps, dotted


def _apply_dotted(config: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """Applies ``key=value`` merges and ``~key`` deletions to ``config`` in command-line order.

    Runs of consecutive merges are merged at once (one OmegaConf merge per run).
    """
    pending: list[str] = []
    for override in overrides:
        if override.lstrip().startswith(DELETE_PREFIX):
            if pending:
                config = _merge(config, _parse_overrides(pending))
                pending = []
            _delete_key(config, override)
        else:
            pending.append(override)
    if pending:
        config = _merge(config, _parse_overrides(pending))
    return config


def _merge(*configs: DictConfig) -> DictConfig:
    """OmegaConf's deep merge of mappings (later ones winning), typed as the mapping it returns."""
    merged = OmegaConf.merge(*configs)
    assert isinstance(merged, DictConfig)  # merging DictConfigs gives a DictConfig
    return merged


def _delete_key(config: DictConfig, override: str) -> None:
    """Deletes the key that ``~key.sub`` names from ``config`` (in place).

    Raises:
        ConfigError: when the override is malformed or the key does not exist; the message names
            the key and suggests a close match among its would-be siblings.
    """
    dotted = override.strip()[len(DELETE_PREFIX) :]
    if "=" in dotted or not dotted or any(not part for part in dotted.split(".")):
        raise ConfigError(
            f"Override '{override}' must have the form ~key (no value), e.g. ~policy.normalize_obs, "
            "to delete a key so its default applies."
        )
    *parents, name = dotted.split(".")
    node: Any = config
    for depth, part in enumerate(parents):
        if not isinstance(node, DictConfig) or part not in node:
            raise _missing_key_error(dotted, ".".join(parents[:depth]), part, node)
        node = node._get_node(part)  # the raw node: no interpolation is resolved on the way
    if not isinstance(node, DictConfig) or name not in node:
        raise _missing_key_error(dotted, ".".join(parents), name, node)
    del node[name]


def _missing_key_error(dotted: str, path: str, key: str, node: Any) -> ConfigError:
    """The error for ``~dotted`` whose part ``key`` is missing under ``path`` (node ``node``)."""
    siblings = [str(k) for k in node] if isinstance(node, DictConfig) else []
    close = difflib.get_close_matches(key, siblings, n=1)
    hint = f" Did you mean '~{_join(path, close[0])}'?" if close else ""
    where = f" under '{path}'" if path else ""
    if isinstance(node, DictConfig):
        keys = f" Keys{where}: {', '.join(siblings) or '(none)'}."
    else:
        keys = f" '{path}' is not a mapping."
    return ConfigError(f"Cannot delete '~{dotted}': the config has no key '{dotted}'.{hint}{keys}")


def _parse_overrides(overrides: Sequence[str]) -> DictConfig:
    for override in overrides:
        if "=" not in override or not override.split("=", 1)[0].strip():
            raise ConfigError(f"Override '{override}' must have the form key=value, {_OVERRIDE_EXAMPLE}.")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as error:
        raise ConfigError(f"Cannot parse overrides {list(overrides)}: {error}") from error


def _experiment_path(config_dir: Path, experiment: str | Path) -> Path:
    path = Path(experiment)
    if isinstance(experiment, Path) or path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"Experiment file not found: {path}")
        return path
    return _option_path(config_dir, "experiment", experiment)


def _option_path(config_dir: Path, group: str, option: Any) -> Path:
    path = config_dir / group / f"{option}.yaml"
    if not isinstance(option, str) or not path.is_file():
        available = ", ".join(list_options(config_dir, group)) or "(none)"
        raise ConfigError(f"Unknown {group} '{option}'. Available in {config_dir / group}: {available}.")
    return path


def _load_config(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError(f"Config file not found: {path}")
    try:
        config = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as error:
        raise ConfigError(f"Cannot parse {path}: {error}") from error
    if not isinstance(config, DictConfig):
        raise ConfigError(f"{path} must hold a mapping at the top level, not a list.")
    return config


def _to_container(config: Any, where: str = "config", resolve: bool = True) -> dict[str, Any]:
    try:
        container = OmegaConf.to_container(config, resolve=resolve)
    except OmegaConfBaseException as error:
        raise ConfigError(f"Cannot resolve {where}: {error}") from error
    assert isinstance(container, dict)  # callers pass DictConfigs
    return container  # type: ignore[return-value]  # keys are str in YAML configs
