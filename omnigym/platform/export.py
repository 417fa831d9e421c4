"""Deploying a policy without omnigym: its deterministic action as an ONNX or TorchScript graph.

:func:`export_policy` traces the policy's deterministic action (see
:mod:`omnigym.platform.export_graphs` for what each policy kind's graph takes and returns), writes
the model and a JSON sidecar next to it (``<model>.json``: the inputs to feed, the output, the
action space, the policy), then checks the written file: it runs the model in the runtime a
deployer would use (onnxruntime, ``torch.jit.load``) and the torch policy on the same seeded,
valid inputs, on a batch size other than the one traced, and reports the largest absolute
difference. A trace that baked in a batch size, a constant or a branch shows up there rather
than on the robot.

ONNX export uses torch's TorchScript-based exporter (opset :data:`ONNX_OPSET`), which needs no
package beyond ``onnx`` and ``onnxruntime`` (the ``deploy`` extra).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from omnigym.core.policy import Policy
from omnigym.platform.export_graphs import (
    PolicyGraph,
    TensorSpec,
    UnsupportedPolicyError,
    build_graph,
    json_bounds,
    unsupported_reason,
)

__all__ = [
    "FORMATS",
    "ExportResult",
    "MissingExportDependencyError",
    "UnsupportedPolicyError",
    "export_policy",
    "require_backend",
    "run_exported",
    "sidecar_path",
    "unsupported_reason",
]

FORMATS: dict[str, str] = {"onnx": ".onnx", "torchscript": ".pt"}
"""Export formats and their file suffixes."""
ONNX_OPSET = 18
"""ONNX opset of exported models (18: Mish and GroupNormalization are native operators)."""
DEFAULT_ATOL = 1e-4
"""Largest absolute difference between the exported model and the torch policy that passes."""
TRACE_BATCH = 2
"""Rows of the example the graph is traced with; verification uses another size."""
INSTALL_HINT = "pip install 'omnigym[deploy]'"


class MissingExportDependencyError(ImportError):
    """``onnx`` or ``onnxruntime`` is not installed; the message names the extra that installs them."""


@dataclass
class ExportResult:
    """What :func:`export_policy` wrote and how closely the exported model matches the policy.

    Attributes:
        model_path: the exported model.
        sidecar_path: its JSON sidecar.
        format: ``onnx`` or ``torchscript``.
        policy: the policy's registered type.
        inputs: the model's inputs, in order.
        output: its output.
        max_abs_diff: largest ``|exported - torch|`` over the verification batch (nan if it did not run).
        atol: the tolerance it is held to.
        verify_batch: rows of the verification batch.
        seed: the seed of the verification inputs.
        error: why the exported model could not be run or compared; None when it was.
        metadata: the graph's description for the sidecar (kind, chunk layout, normalisation).
    """

    model_path: Path
    sidecar_path: Path
    format: str
    policy: str
    inputs: list[TensorSpec]
    output: TensorSpec
    max_abs_diff: float
    atol: float
    verify_batch: int
    seed: int
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether the exported model ran and matches the torch policy within :attr:`atol`."""
        return self.error is None and math.isfinite(self.max_abs_diff) and self.max_abs_diff <= self.atol

    def summary(self) -> dict[str, Any]:
        """The result as one JSON-ready dict (``omnigym export --json``)."""
        return {
            "model": str(self.model_path),
            "sidecar": str(self.sidecar_path),
            "format": self.format,
            "policy": self.policy,
            "inputs": [spec.to_json() for spec in self.inputs],
            "output": self.output.to_json(),
            "max_abs_diff": self.max_abs_diff if math.isfinite(self.max_abs_diff) else None,
            "atol": self.atol,
            "verify_batch": self.verify_batch,
            "seed": self.seed,
            "passed": self.passed,
            "error": self.error,
        }


def require_backend(fmt: str) -> None:
    """Fail early, naming the extra to install, when ``fmt`` needs packages that are missing.

    Raises:
        ValueError: an unknown format.
        MissingExportDependencyError: ``onnx`` or ``onnxruntime`` cannot be imported (for ``onnx``).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt != "onnx":
        return
    for package in ("onnx", "onnxruntime"):
        try:
            __import__(package)
        except ImportError as exc:
            raise MissingExportDependencyError(
                f"ONNX export needs the {package!r} package ({exc}); install it with {INSTALL_HINT}"
            ) from None


def sidecar_path(model_path: Path) -> Path:
    """The JSON sidecar of a model: ``policy.onnx`` -> ``policy.onnx.json``."""
    return model_path.with_name(model_path.name + ".json")


def export_policy(
    policy: Policy,
    path: str | Path,
    fmt: str,
    *,
    atol: float = DEFAULT_ATOL,
    seed: int = 0,
    verify_batch: int = 5,
    source: str | None = None,
) -> ExportResult:
    """Export ``policy``'s deterministic action to ``path`` as ``fmt``, with a sidecar, and verify it.

    Args:
        policy: the policy (any device; it is not changed).
        path: the model file to write (its parent is created).
        fmt: ``onnx`` or ``torchscript``.
        atol: the tolerance of the verification.
        seed: seed of the verification inputs (observations sampled from the space, noise).
        verify_batch: rows of the verification batch (not :data:`TRACE_BATCH`, so a baked-in batch
            size fails).
        source: what the policy was loaded from, recorded in the sidecar.

    Returns:
        The paths written and the verification's result; check :attr:`ExportResult.passed`.

    Raises:
        UnsupportedPolicyError: the policy cannot be exported (the message says why, what to do).
        MissingExportDependencyError: ``onnx``/``onnxruntime`` are missing for an ONNX export.
    """
    require_backend(fmt)
    if verify_batch == TRACE_BATCH:
        raise ValueError(f"verify_batch must differ from the traced batch size {TRACE_BATCH}")
    path = Path(path)
    graph = build_graph(policy)
    example = [torch.from_numpy(a) for a in graph.sample_inputs(TRACE_BATCH, seed + 1)]
    with torch.no_grad():
        traced_out = graph(*example)
    output = TensorSpec(
        graph.output_name, ("batch", *traced_out.shape[1:]), np.dtype(_np_dtype(traced_out)).name
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # tracer warnings about constants: the verification below checks them
        warnings.simplefilter("ignore")
        if fmt == "onnx":
            _write_onnx(graph, example, output, path)
        else:
            torch.jit.save(torch.jit.trace(graph, tuple(example), check_trace=False), str(path))
    inputs = graph.sample_inputs(verify_batch, seed)
    expected = graph.reference(policy, inputs)
    max_abs_diff, error = float("nan"), None
    try:
        actual = run_exported(path, {spec.name: a for spec, a in zip(graph.inputs, inputs, strict=True)}, fmt)
        if actual.shape != expected.shape:
            error = f"the exported model returned shape {actual.shape}, the policy {expected.shape}"
        else:
            max_abs_diff = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max())
    except Exception as exc:  # any runtime failure is the export's, reported as the verification's result
        error = f"the exported model failed on a batch of {verify_batch}: {type(exc).__name__}: {exc}"
    result = ExportResult(
        path, sidecar_path(path), fmt, type(policy).name, list(graph.inputs), output, max_abs_diff, atol,
        verify_batch, seed, error, graph.metadata(),
    )  # fmt: skip
    _write_sidecar(result, policy, source)
    return result


def run_exported(path: str | Path, inputs: dict[str, np.ndarray], fmt: str | None = None) -> np.ndarray:
    """Run an exported model on named NumPy inputs (as its sidecar lists them); its output.

    Args:
        path: a model written by :func:`export_policy`.
        inputs: input name -> array, in the dtypes of the sidecar; in the sidecar's order too, as
            TorchScript takes its inputs by position (ONNX by name).
        fmt: ``onnx`` or ``torchscript``; None: from the file suffix.
    """
    path = Path(path)
    fmt = fmt or next((f for f, suffix in FORMATS.items() if path.suffix == suffix), "torchscript")
    if fmt == "onnx":
        require_backend("onnx")
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feed = {i.name: inputs[i.name] for i in session.get_inputs()}
        return np.asarray(session.run(None, feed)[0])
    with warnings.catch_warnings():  # torch.jit.load's deprecation: TorchScript files still load
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path), map_location="cpu")
    with torch.no_grad():
        out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs.values()))
    return out.cpu().numpy()


def _write_onnx(graph: PolicyGraph, example: list[torch.Tensor], output: TensorSpec, path: Path) -> None:
    """Export ``graph`` to ONNX with a dynamic batch axis, and check the file with ``onnx.checker``."""
    import onnx

    names = [spec.name for spec in graph.inputs]
    torch.onnx.export(
        graph, tuple(example), str(path), dynamo=False, input_names=names, output_names=[output.name],
        dynamic_axes={name: {0: "batch"} for name in [*names, output.name]}, opset_version=ONNX_OPSET,
    )  # fmt: skip
    onnx.checker.check_model(str(path))


def _np_dtype(tensor: torch.Tensor) -> np.dtype:
    """The NumPy dtype of a tensor's elements."""
    return torch.empty(0, dtype=tensor.dtype).numpy().dtype


def _action_space_json(space: spaces.Space) -> dict[str, Any]:
    """The action space for a deployer: type, shape, dtype and bounds (None: unbounded) or ``n``."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box", "shape": list(space.shape), "dtype": np.dtype(space.dtype).name,
            "low": json_bounds(space.low), "high": json_bounds(space.high),
        }  # fmt: skip
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    return {"type": type(space).__name__}


def _write_sidecar(result: ExportResult, policy: Policy, source: str | None) -> None:
    """The JSON next to the model: what to feed, what comes out, and where it came from."""
    import omnigym

    sidecar = {
        "format": result.format,
        "model": result.model_path.name,
        "policy": result.policy,
        "source": source,
        "omnigym_version": omnigym.__version__,
        "torch_version": torch.__version__,
        "onnx_opset": ONNX_OPSET if result.format == "onnx" else None,
        "inputs": [spec.to_json() for spec in result.inputs],
        "output": result.output.to_json(),
        "action_space": _action_space_json(policy.action_space),
        "graph": result.metadata,
        "verification": {
            "max_abs_diff": result.summary()["max_abs_diff"],
            "atol": result.atol,
            "batch": result.verify_batch,
            "seed": result.seed,
            "passed": result.passed,
            "error": result.error,
        },
    }
    result.sidecar_path.write_text(json.dumps(sidecar, indent=2) + "\n")
