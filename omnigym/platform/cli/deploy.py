"""``omnigym export``: a policy as an ONNX or TorchScript model for deployment, verified on export."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omnigym.platform.cli.errors import UsageError
from omnigym.platform.cli.policy_spec import env_flags, is_hub_id, json_kwargs, resolve_policy

if TYPE_CHECKING:
    from omnigym.core.policy import Policy
    from omnigym.platform.export import ExportResult

RUN_PARTS = frozenset({"policy", "best_policy"})
"""Folder names of a run's saved policies; the default output is named after the run instead."""


@env_flags
def _cmd_export(args: argparse.Namespace) -> int:
    from omnigym.platform.export import (
        FORMATS,
        MissingExportDependencyError,
        UnsupportedPolicyError,
        export_policy,
        require_backend,
    )

    try:
        require_backend(args.format)  # before a policy loads for seconds
    except MissingExportDependencyError as exc:
        raise UsageError(str(exc)) from None
    if not args.atol > 0:
        raise UsageError(f"--atol must be > 0, got {args.atol}")
    try:
        policy = _load_policy(args)
        out = Path(args.out) if args.out else _default_out(args.policy, FORMATS[args.format])
        if out.suffix == ".json":
            raise UsageError(
                f"--out {out}: .json is the sidecar's suffix; name the model e.g. "
                f"policy{FORMATS[args.format]}"
            )
        result = export_policy(policy, out, args.format, atol=args.atol, seed=args.seed, source=args.policy)
    except UnsupportedPolicyError as exc:
        raise UsageError(f"--policy {args.policy}: {exc}") from None
    if args.json:
        print(json.dumps(result.summary()))
    else:
        _print_result(result)
    if not result.passed:
        print(f"omnigym export: error: {_failure(result)}", file=sys.stderr)
        return 1
    return 0


def _load_policy(args: argparse.Namespace) -> Policy:
    """The policy ``--policy`` names; type checks first, so nothing unexportable loads its weights.

    With ``--env``, :func:`~omnigym.platform.cli.policy_spec.resolve_policy` (checked against the
    env's spaces, as ``eval`` does). Without, a saved policy, checkpoint or run directory loads
    on its own: it holds its spaces.
    """
    from omnigym.core.registry import POLICIES
    from omnigym.platform.export import UnsupportedPolicyError, unsupported_reason

    spec = args.policy
    path = Path(spec).expanduser()
    if spec.startswith("tiny:") or _is_hf_model_dir(path) or (not path.exists() and is_hub_id(spec)):
        raise UnsupportedPolicyError(unsupported_reason("vlm") or "")
    if not path.exists() and spec in POLICIES:
        reason = unsupported_reason(spec, POLICIES.get(spec))
        if reason is not None:
            raise UnsupportedPolicyError(reason)
    found = _saved_policy_dir(path) if path.exists() else None
    if found is not None:
        _check_saved_type(found)
    if args.env:
        return resolve_policy(spec, args.env, json_kwargs(args.env_kwargs))
    if found is not None:
        from omnigym.core.policy import Policy

        return Policy.from_pretrained(found)
    if path.exists():
        raise UsageError(
            f"--policy {spec} holds no saved policy (no config.json in it, its policy/ or checkpoints)"
        )
    raise UsageError(
        f"--policy {spec} is no saved policy, checkpoint or run dir: give --env ENV to build a registered "
        "policy for an env's spaces (an untrained one), or the path of a trained policy"
    )


def _saved_policy_dir(path: Path) -> Path | None:
    """The saved policy of a policy, checkpoint or run dir (as ``eval`` finds it); None if none."""
    from omnigym.core.pretrained import CONFIG_FILE
    from omnigym.platform.checkpoint import latest_checkpoint

    candidates = [path, path / "policy", path / "best_policy"]
    checkpoint = latest_checkpoint(path) if path.is_dir() else None
    if checkpoint is not None:
        candidates.append(checkpoint / "policy")
    return next((c for c in candidates if (c / CONFIG_FILE).is_file()), None)


def _check_saved_type(found: Path) -> None:
    """Refuse a saved policy of an unexportable type from its config, before its weights load."""
    from omnigym.core.pretrained import CONFIG_FILE
    from omnigym.core.registry import POLICIES
    from omnigym.platform.export import UnsupportedPolicyError, unsupported_reason

    try:  # the type alone: a saved vlm has no model.safetensors for read_meta to find
        meta = json.loads((found / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"corrupt policy config in {found}: {exc}") from None
    policy_type = str(meta.get("type", "")) if isinstance(meta, dict) else ""
    policy_cls = POLICIES.get(policy_type) if policy_type in POLICIES else None
    reason = unsupported_reason(policy_type, policy_cls)
    if reason is not None:
        raise UnsupportedPolicyError(reason)


def _is_hf_model_dir(path: Path) -> bool:
    """A Hugging Face model directory (``config.json`` with a ``model_type``): a language model."""
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and "model_type" in data and "observation_space" not in data


def _default_out(spec: str, suffix: str) -> Path:
    """``exports/<name><suffix>``: the run's or saved policy's folder name, or the registered name."""
    path = Path(spec).expanduser()
    if not path.exists():
        return Path("exports") / f"{spec}{suffix}"
    resolved = path.resolve()
    name = resolved.parent.name if resolved.name in RUN_PARTS else resolved.name
    return Path("exports") / f"{name or 'policy'}{suffix}"


def _print_result(result: ExportResult) -> None:
    """The files written, the tensors to feed, and the verification, for a person."""
    kind = "ONNX" if result.format == "onnx" else "TorchScript"
    print(f"exported {result.policy} policy to {result.model_path} ({kind}); sidecar {result.sidecar_path}")
    for spec in result.inputs:
        print(f"  input  {spec.name}: {spec.dtype} [{', '.join(map(str, spec.shape))}]")
    print(
        f"  output {result.output.name}: {result.output.dtype} [{', '.join(map(str, result.output.shape))}]"
    )
    diff = "n/a" if result.error else f"{result.max_abs_diff:.3g}"
    print(
        f"verified against the torch policy on {result.verify_batch} seeded inputs: max abs diff {diff} "
        f"(atol {result.atol:g})"
    )


def _failure(result: ExportResult) -> str:
    """The one line of a failed verification."""
    if result.error:
        return f"verification failed: {result.error} (the files are kept: {result.model_path})"
    return (
        f"the exported model differs from the torch policy: max abs diff {result.max_abs_diff:.3g} > --atol "
        f"{result.atol:g} (files kept: {result.model_path}); for actions of a large range raise --atol"
    )


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``export`` command."""
    export = sub.add_parser(
        "export", help="export a policy's deterministic action as an ONNX or TorchScript model",
        description="Export a policy's deterministic action (observation normalisation included) as an ONNX "
        "or TorchScript model with a JSON sidecar, then check it against the torch policy (docs/deploy.md).",
    )  # fmt: skip
    export.add_argument(
        "--policy", required=True, help="saved policy, checkpoint or run dir; or a registered name with --env"
    )
    export.add_argument("--format", required=True, choices=("onnx", "torchscript"), help="model format")
    export.add_argument(
        "--out", default=None, metavar="PATH",
        help="model file to write (default exports/<run or policy name>.onnx or .pt); sidecar: PATH.json",
    )  # fmt: skip
    export.add_argument(
        "--env", default=None,
        help="Gymnasium env id: check a saved policy against its spaces, or build a registered policy there",
    )  # fmt: skip
    export.add_argument("--env-kwargs", default=None, help="JSON keyword arguments for the env (with --env)")
    export.add_argument(
        "--atol", type=float, default=1e-4,
        help="largest max abs diff of the exported model from the torch policy that passes (default 1e-4)",
    )  # fmt: skip
    export.add_argument("--seed", type=int, default=0, help="seed of the verification inputs (default 0)")
    export.add_argument("--json", action="store_true", help="print one JSON object")
    export.set_defaults(func=_cmd_export)
