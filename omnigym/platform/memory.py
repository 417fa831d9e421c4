"""Whether a preallocated store fits in memory, checked before allocating it.

A rollout or replay buffer sized past the machine's memory would otherwise fail deep inside
NumPy or torch with a multi-gigabyte allocation traceback, or push the machine into swap. The
check compares an estimate with the memory available now and names the config key that sizes it.
"""

from __future__ import annotations

import torch

__all__ = ["InsufficientMemoryError", "available_memory", "check_fits", "format_bytes"]


class InsufficientMemoryError(ValueError):
    """A store would need more memory than is available; the message names the key that sizes it."""


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that can be allocated now on ``device`` without swapping; None when unknown.

    Host memory from psutil (``MemAvailable`` of ``/proc/meminfo`` without it); a CUDA device's
    free memory from torch.
    """
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):  # no CUDA runtime, or not initialisable here
            return None
    if device.type != "cpu":
        return None
    try:
        import psutil
    except ImportError:
        return _meminfo_available()
    return int(psutil.virtual_memory().available)


def _meminfo_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (Linux), or None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def format_bytes(n: float) -> str:
    """``n`` bytes for a person: ``512 B``, ``3.2 MiB``, ``31.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_fits(needed: int, *, what: str, fix: str, device: torch.device | str = "cpu") -> None:
    """Refuse a store of ``needed`` bytes that exceeds the memory available on ``device``.

    Args:
        needed: the estimated size of the store.
        what: the store and how it is sized, e.g. ``"a rollout of algo.num_steps=32 x env.num_envs=8"``.
        fix: what to change, e.g. ``"lower env.num_envs or algo.num_steps"``.
        device: where it would be allocated.

    Raises:
        InsufficientMemoryError: ``needed`` exceeds the available memory (unknown memory passes).
    """
    available = available_memory(device)
    if available is not None and needed > available:
        where = "" if torch.device(device).type == "cpu" else f" on {device}"
        raise InsufficientMemoryError(
            f"{what} needs about {format_bytes(needed)}, but only {format_bytes(available)} of memory "
            f"is available{where}: {fix}"
        )
