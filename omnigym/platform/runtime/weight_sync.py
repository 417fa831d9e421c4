"""Weight sync from the learner to rollout workers: whole state dicts, or lossless sparse deltas.

A learner publishes each new version of its weights with :meth:`WeightPublisher.publish`; every
rollout worker holds a :class:`WeightReceiver` that applies the payloads and keeps its copy of the
weights. Two modes (:class:`WeightSyncConfig`):

* ``full``: every payload carries every tensor.
* ``sparse``: a payload carries, per tensor, only the elements that changed since the previous
  published version (the *base*): flat indices (``int32`` when the tensor has fewer than 2^31
  elements, else ``int64``) and the new values. A tensor of which so many elements changed that
  indices would cost more than the whole tensor is sent whole; an unchanged tensor is not sent.
  Large models fine-tuned with small learning rates, frozen parts or low-precision weights (where
  many updates round to no change) often change only a fraction of their elements per step.

Lossless: "changed" compares bit patterns (each tensor viewed as the integer type of its element
size: ``float32 -> int32``, ``bfloat16``/``float16 -> int16``, ...), not values. So ``-0.0`` vs
``0.0`` and NaNs with different payloads count as changes, an unchanged NaN does not (``NaN != NaN``
would resend it every time), and the receiver writes the bits back through the same integer view:
reconstruction is bit-exact for every dtype of 1, 2, 4 or 8 bytes per element (all real float,
integer and bool dtypes; ``complex128`` has no integer view and raises ``TypeError``).

Versions: each payload carries ``version`` and ``base_version`` (None for a full payload). The
publisher keeps **one shared base**, a copy of the weights it last published, rather than one per
receiver: the memory cost is one extra copy of the model (on ``base_device``, e.g. the CPU for a
large model on a GPU). A receiver whose version is not the payload's base (it missed a version, or
just started) gets a :class:`BaseVersionError` from :meth:`WeightReceiver.apply` and asks for
:meth:`WeightPublisher.full_payload`.

Payloads are dataclasses of plain CPU tensors (``payload_device``), so they pickle for
multiprocessing and Ray. ``bytes`` / ``dense_bytes`` count tensor data only (not names or pickle
framing): what a payload costs, and what a full sync would have cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
"""The integer dtype of each element size: bit patterns are compared and copied through it."""


class BaseVersionError(ValueError):
    """A delta payload was applied to weights of another version; the receiver needs a full sync."""


@dataclass
class WeightSyncConfig:
    """How a learner sends its weights to rollout workers."""

    mode: Literal["full", "sparse"] = "sparse"
    """``full``: every tensor in every payload; ``sparse``: only what changed since the last version."""
    dense_threshold: float | None = None
    """Sparse mode: send a tensor whole when more than this fraction of its elements changed. None:
    whichever encoding is smaller (break-even at ``value_size / (index_size + value_size)``, 1/2 for
    float32 with int32 indices, 1/3 for bfloat16)."""
    payload_device: str | None = "cpu"
    """Where payload tensors live (``cpu`` pickles everywhere); None keeps the learner's device."""
    base_device: str | None = None
    """Where the publisher keeps its copy of the last published weights; None: the weights' device."""

    def __post_init__(self) -> None:
        """Reject values that cannot work."""
        if self.mode not in ("full", "sparse"):
            raise ValueError(f"weight_sync.mode must be 'full' or 'sparse', got {self.mode!r}")
        if self.dense_threshold is not None and not 0.0 <= self.dense_threshold <= 1.0:
            raise ValueError(
                f"weight_sync.dense_threshold must be in [0, 1] or null, got {self.dense_threshold}"
            )


@dataclass
class TensorDelta:
    """The changed elements of one tensor.

    Attributes:
        indices: flat (row-major) positions of the changed elements, int32 or int64. Shape: [K].
        values: their new values, in the tensor's dtype. Shape: [K].
    """

    indices: Tensor
    values: Tensor

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data: indices plus values."""
        return _nbytes(self.indices) + _nbytes(self.values)


@dataclass
class WeightPayload:
    """One published version of the weights, whole or as changes against ``base_version``.

    Attributes:
        version: the version these weights are.
        base_version: the version a delta applies to; None for a full payload.
        dense: tensors sent whole, name -> tensor.
        sparse: tensors sent as changes, name -> :class:`TensorDelta`.
        bytes: tensor data in this payload.
        dense_bytes: tensor data of a full payload of the same weights.
    """

    version: int
    base_version: int | None
    dense: dict[str, Tensor] = field(default_factory=dict)
    sparse: dict[str, TensorDelta] = field(default_factory=dict)
    bytes: int = 0
    dense_bytes: int = 0

    @property
    def is_full(self) -> bool:
        """True when the payload holds every tensor whole (no base needed)."""
        return self.base_version is None

    @property
    def bytes_saved(self) -> int:
        """``dense_bytes - bytes``: what sending changes only saved over a full sync."""
        return self.dense_bytes - self.bytes


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def bit_view(tensor: Tensor) -> Tensor:
    """The tensor's bits as a flat integer tensor of the same element size (no copy when contiguous).

    Comparing these compares bit patterns: ``-0.0 != 0.0`` and a NaN equals itself. Shape: [numel].
    """
    flat = tensor.detach().reshape(-1)
    if flat.dtype in _INT_VIEW.values():
        return flat
    if flat.element_size() not in _INT_VIEW:
        raise TypeError(f"no integer view for dtype {tensor.dtype} (element size {tensor.element_size()})")
    return flat.view(_INT_VIEW[flat.element_size()])


def changed_indices(old: Tensor, new: Tensor) -> Tensor:
    """Flat positions where the bit patterns of ``old`` and ``new`` differ. Shape: [K], int32/int64.

    ``int32`` when the tensor has fewer than 2^31 elements (half the bytes of ``int64``).
    """
    positions = (bit_view(old) != bit_view(new)).nonzero().squeeze(1)
    return positions.to(torch.int32 if new.numel() < 2**31 else torch.int64)


def _sparse_is_smaller(numel: int, changed: int, index_size: int, value_size: int) -> bool:
    return changed * (index_size + value_size) < numel * value_size


class WeightPublisher:
    """The learner's side: turns successive state dicts into payloads.

    Keeps one copy of the last published weights (the shared base, see the module docstring) so
    that sparse payloads can be computed and lagging receivers can get a full sync.

    Args:
        config: mode, dense threshold and devices.
    """

    def __init__(self, config: WeightSyncConfig | None = None) -> None:
        self.config = config or WeightSyncConfig()
        self.version: int | None = None
        self._base: dict[str, Tensor] = {}

    def publish(self, state_dict: Mapping[str, Tensor], version: int) -> WeightPayload:
        """The payload that brings a receiver at the previous version to ``version``.

        Full when the mode is ``full``, on the first publish, or when the tensor names, shapes or
        dtypes changed; otherwise sparse. Versions must increase.

        Args:
            state_dict: the learner's weights (``module.state_dict()``: parameters and buffers).
            version: their version (e.g. the number of completed updates).
        """
        if self.version is not None and version <= self.version:
            raise ValueError(f"weight versions must increase: published {self.version}, got {version}")
        if self.config.mode == "full" or not self._same_layout(state_dict):
            payload = self._full(state_dict, version)
        else:
            payload = self._delta(state_dict, version)
        self._store_base(state_dict, payload)
        self.version = version
        return payload

    def full_payload(self) -> WeightPayload:
        """The last published weights whole, for a receiver that is behind or new."""
        if self.version is None:
            raise RuntimeError("nothing published yet: call publish() before full_payload()")
        return self._full(self._base, self.version)

    def _same_layout(self, state_dict: Mapping[str, Tensor]) -> bool:
        if self._base.keys() != state_dict.keys():
            return False
        return all(
            base.shape == state_dict[name].shape and base.dtype == state_dict[name].dtype
            for name, base in self._base.items()
        )

    def _to_payload(self, tensor: Tensor) -> Tensor:
        """A copy on the payload device that no one else holds (receivers may keep it)."""
        device = self.config.payload_device or tensor.device
        return tensor.detach().to(device, copy=True)

    def _full(self, state_dict: Mapping[str, Tensor], version: int) -> WeightPayload:
        dense = {name: self._to_payload(t) for name, t in state_dict.items()}
        size = sum(_nbytes(t) for t in dense.values())
        return WeightPayload(version=version, base_version=None, dense=dense, bytes=size, dense_bytes=size)

    def _delta(self, state_dict: Mapping[str, Tensor], version: int) -> WeightPayload:
        payload = WeightPayload(version=version, base_version=self.version)
        for name, new in state_dict.items():
            payload.dense_bytes += _nbytes(new)
            old = self._base[name]
            indices = changed_indices(old, new.to(old.device))
            if indices.numel() == 0:
                continue
            if self._send_whole(new, indices):
                payload.dense[name] = self._to_payload(new)
                payload.bytes += _nbytes(new)
            else:
                values = new.detach().reshape(-1)[indices.to(new.device).long()]
                delta = TensorDelta(indices=self._to_payload(indices), values=self._to_payload(values))
                payload.sparse[name] = delta
                payload.bytes += delta.nbytes
        return payload

    def _send_whole(self, tensor: Tensor, indices: Tensor) -> bool:
        """Whether a tensor with these changed elements is cheaper (or configured) to send whole."""
        threshold = self.config.dense_threshold
        if threshold is not None:
            return indices.numel() > threshold * tensor.numel()
        return not _sparse_is_smaller(
            tensor.numel(), indices.numel(), indices.element_size(), tensor.element_size()
        )

    def _store_base(self, state_dict: Mapping[str, Tensor], payload: WeightPayload) -> None:
        """Remember the published weights for the next delta and for :meth:`full_payload`.

        In full mode, the payload's tensors are already private copies that nobody writes to
        (receivers copy what they keep), so they serve as the base unless another base device is
        asked for: no extra copy of the model. In sparse mode the base is the publisher's own copy,
        updated in place (never a payload's tensors, which a receiver may still have to apply).
        """
        if self.config.mode == "full" and self.config.base_device is None:
            self._base = dict(payload.dense)
            return
        if self._same_layout(state_dict):
            for name, tensor in state_dict.items():
                self._base[name].copy_(tensor.detach())
            return
        device = self.config.base_device
        self._base = {
            name: t.detach().to(device or t.device, copy=True).contiguous() for name, t in state_dict.items()
        }


class WeightReceiver:
    """A rollout worker's side: applies payloads to its copy of the weights.

    ``state`` holds the weights of ``version`` (None before the first full payload). A delta for
    any other base raises :class:`BaseVersionError`; the worker then asks the learner for
    :meth:`WeightPublisher.full_payload`.

    Args:
        device: where the reconstructed weights live (None: where the payload's tensors are).
    """

    def __init__(self, device: str | torch.device | None = None) -> None:
        self.device = None if device is None else torch.device(device)
        self.version: int | None = None
        self.state: dict[str, Tensor] = {}

    def apply(self, payload: WeightPayload) -> dict[str, Tensor]:
        """Bring ``state`` to ``payload.version`` and return it (the receiver's own tensors)."""
        if payload.is_full:
            self.state = {name: self._own(t) for name, t in payload.dense.items()}
        else:
            self._check_base(payload)
            for name, tensor in payload.dense.items():
                self.state[name].copy_(tensor)
            for name, delta in payload.sparse.items():
                self._apply_delta(name, delta)
        self.version = payload.version
        return self.state

    def load_into(self, module: nn.Module, strict: bool = True) -> None:
        """Copy the current weights into ``module`` (``load_state_dict`` copies bit for bit)."""
        if self.version is None:
            raise RuntimeError("no weights received yet: apply a full payload first")
        module.load_state_dict(self.state, strict=strict)

    def _own(self, tensor: Tensor) -> Tensor:
        """A contiguous copy that this receiver alone writes to (a payload may go to several)."""
        return tensor.to(self.device or tensor.device, copy=True).contiguous()

    def _check_base(self, payload: WeightPayload) -> None:
        if self.version is None:
            raise BaseVersionError(
                f"delta payload {payload.base_version} -> {payload.version} but no weights received yet; "
                "request a full sync"
            )
        if payload.base_version != self.version:
            raise BaseVersionError(
                f"delta payload {payload.base_version} -> {payload.version} does not apply to weights of "
                f"version {self.version}; request a full sync"
            )
        unknown = (payload.dense.keys() | payload.sparse.keys()) - self.state.keys()
        if unknown:
            raise BaseVersionError(f"delta payload names tensors this receiver lacks: {sorted(unknown)}")

    def _apply_delta(self, name: str, delta: TensorDelta) -> None:
        """Write the new bits through the integer view, so the copy is exact for every dtype."""
        target = bit_view(self.state[name])
        indices = delta.indices.to(target.device).long()
        target[indices] = bit_view(delta.values).to(target.device)
