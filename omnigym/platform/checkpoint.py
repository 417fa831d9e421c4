"""Atomic, verifiable training checkpoints.

A run keeps its checkpoints under ``run_dir/checkpoints/``::

    checkpoints/
        latest                      # pointer file: the name of the newest committed checkpoint
        step_0000001000/
            policy/                 # written by ``policy.save_pretrained(dir)``
            algorithm.pt            # torch.save of the algorithm's state (optimisers, critics, ...)
            trainer_state.json      # step counters and other JSON-able trainer state
            rng.pkl                 # pickle of ``seeding.capture_rng_state()``
            env_state.pkl           # optional raw bytes from the caller
            manifest.json           # written last: size and sha256 of every other file

A save writes everything into a hidden temporary directory, fsyncs it, renames it into place and
only then moves the ``latest`` pointer, so a process killed at any moment leaves ``latest`` naming
a complete checkpoint (or an older one). One process writes a run's checkpoints at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest"
MANIFEST_FILE = "manifest.json"
POLICY_DIR = "policy"
ALGORITHM_FILE = "algorithm.pt"
TRAINER_STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pkl"
ENV_STATE_FILE = "env_state.pkl"
MANIFEST_VERSION = 1

# Hidden prefixes: a save in progress, and a committed checkpoint moved aside to be replaced.
_TMP_PREFIX = ".tmp-"
_OLD_PREFIX = ".old-"
_STEP_DIR_RE = re.compile(r"^step_(\d+)$")
_REQUIRED_FILES = (ALGORITHM_FILE, TRAINER_STATE_FILE, RNG_FILE)
_HASH_CHUNK = 1 << 20


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or corrupt."""


class SavesPretrained(Protocol):
    """Anything that writes itself to a directory, as :meth:`Policy.save_pretrained` does."""

    def save_pretrained(self, path: Path) -> Any:
        """Write the object's files into ``path``."""
        ...


@dataclass
class Checkpoint:
    """A loaded, verified checkpoint."""

    path: Path
    """The checkpoint directory."""
    step: int
    """The environment step the checkpoint was taken at."""
    policy_dir: Path
    """Directory to pass to ``Policy.from_pretrained``."""
    algorithm_state: dict[str, Any]
    """The algorithm's state dict (tensors on CPU)."""
    trainer_state: dict[str, Any]
    """The trainer's JSON state (step counters, ...)."""
    rng_state: dict[str, Any]
    """For ``seeding.restore_rng_state``."""
    env_state: bytes | None
    """The caller's raw environment state, or None when none was saved."""


def checkpoint_dir_name(step: int) -> str:
    """The directory name of the checkpoint taken at ``step``, e.g. ``step_0000001000``."""
    return f"step_{step:010d}"


# --- saving ---------------------------------------------------------------------------------


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    *,
    policy: SavesPretrained,
    algorithm_state: dict[str, Any],
    trainer_state: dict[str, Any],
    rng_state: dict[str, Any],
    env_state: bytes | None = None,
    keep: int = 2,
) -> Path:
    """Atomically write a checkpoint, point ``latest`` at it and prune old ones.

    Pruning keeps the ``keep`` most recent checkpoints by step (the new one included). Checkpoints
    with a step above ``step`` belong to a timeline that was abandoned when the run resumed from
    an earlier checkpoint, and are removed too. Leftovers of killed saves are removed afterwards.

    Args:
        run_dir: The run directory; checkpoints go to ``run_dir/checkpoints/``.
        step: The environment step (>= 0) the checkpoint is taken at.
        policy: Object whose ``save_pretrained(dir)`` writes the policy.
        algorithm_state: The algorithm's state dict, saved with ``torch.save``.
        trainer_state: JSON-able trainer state (NaN and infinities use Python's JSON extension).
        rng_state: What ``seeding.capture_rng_state()`` returned.
        env_state: Optional raw bytes describing the environments' state.
        keep: How many checkpoints to keep (>= 1).

    Returns:
        The committed checkpoint directory.

    Raises:
        ValueError: If ``step`` < 0 or ``keep`` < 1.
        TypeError: If ``env_state`` is not bytes or ``trainer_state`` is not JSON-able.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    if env_state is not None and not isinstance(env_state, (bytes, bytearray)):
        raise TypeError(f"env_state must be bytes or None, got {type(env_state).__name__}")
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = checkpoint_dir_name(step)
    tmp = root / f"{_TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _write_contents(tmp, policy, algorithm_state, trainer_state, rng_state, env_state)
        _write_manifest(tmp, step)
        _fsync_dir(tmp)
    except Exception:
        # An ordinary error (unpicklable state, full disk) cleans up after itself; a hard kill
        # leaves the temp dir for the next save to remove.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = _commit(tmp, root / name)
    _write_latest(root, name)
    _remove_leftovers(root)
    _prune(root, step, keep)
    return final


def _write_contents(
    tmp: Path,
    policy: SavesPretrained,
    algorithm_state: dict[str, Any],
    trainer_state: dict[str, Any],
    rng_state: dict[str, Any],
    env_state: bytes | None,
) -> None:
    """Write every checkpoint file except the manifest into ``tmp``."""
    (tmp / TRAINER_STATE_FILE).write_text(json.dumps(trainer_state, indent=2))
    policy_dir = tmp / POLICY_DIR
    policy_dir.mkdir()
    policy.save_pretrained(policy_dir)
    torch.save(algorithm_state, tmp / ALGORITHM_FILE)
    with open(tmp / RNG_FILE, "wb") as f:
        pickle.dump(rng_state, f, protocol=pickle.HIGHEST_PROTOCOL)
    if env_state is not None:
        (tmp / ENV_STATE_FILE).write_bytes(bytes(env_state))


def _write_manifest(ckpt_dir: Path, step: int) -> None:
    """Fsync every file in ``ckpt_dir`` and record its size and sha256 in the manifest."""
    files: dict[str, dict[str, Any]] = {}
    for file in sorted(p for p in ckpt_dir.rglob("*") if p.is_file()):
        rel = file.relative_to(ckpt_dir).as_posix()
        if rel != MANIFEST_FILE:
            files[rel] = {"size": file.stat().st_size, "sha256": _sha256(file, fsync=True)}
    for sub in (p for p in ckpt_dir.rglob("*") if p.is_dir()):
        _fsync_dir(sub)
    manifest = {"version": MANIFEST_VERSION, "step": step, "files": files}
    with open(ckpt_dir / MANIFEST_FILE, "w") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def _commit(tmp: Path, final: Path) -> Path:
    """Rename the finished ``tmp`` to ``final``, moving an existing ``final`` aside first."""
    if final.exists():
        # Directories cannot be os.replace'd onto non-empty ones. While the old copy is aside,
        # latest_checkpoint falls back to older checkpoints or, as a last resort, to the copy.
        aside = final.parent / f"{_OLD_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}"
        os.replace(final, aside)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    return final


def _write_latest(root: Path, name: str) -> None:
    """Atomically point ``root/latest`` at the checkpoint directory ``name``."""
    tmp = root / f".{LATEST_FILE}.tmp"
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / LATEST_FILE)
    _fsync_dir(root)


def _remove_leftovers(root: Path) -> None:
    """Remove temp dirs of killed saves and checkpoints moved aside by a replacement."""
    for entry in root.iterdir():
        if entry.is_dir() and entry.name.startswith((_TMP_PREFIX, _OLD_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)


def _prune(root: Path, step: int, keep: int) -> None:
    """Keep the checkpoint at ``step`` and the ``keep - 1`` newest older ones."""
    older = sorted((s, d) for s, d in _step_dirs(root) if s < step)
    newer = [d for s, d in _step_dirs(root) if s > step]
    for stale in [d for _, d in older[: max(len(older) - (keep - 1), 0)]] + newer:
        shutil.rmtree(stale, ignore_errors=True)


# --- finding --------------------------------------------------------------------------------


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run.

    Follows the ``latest`` pointer when it names a checkpoint whose manifest verifies (sizes and
    sha256). Otherwise falls back to the newest ``step_*`` directory that verifies and, as a last
    resort, to a verified checkpoint that a killed replacement had moved aside.

    Args:
        run_dir: The run directory.

    Returns:
        The checkpoint directory, or None when the run has no complete checkpoint.
    """
    return find_checkpoint(run_dir).path


@dataclass
class CheckpointSearch:
    """The checkpoint a resume uses, and the newer ones it skipped because they did not verify."""

    path: Path | None
    step: int | None
    skipped: list[tuple[Path, str]]
    """``(checkpoint dir, why it was skipped)``, newest first."""


def find_checkpoint(run_dir: str | Path) -> CheckpointSearch:
    """Like :func:`latest_checkpoint`, also naming each newer checkpoint skipped as corrupt."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    skipped: list[tuple[Path, str]] = []
    if not root.is_dir():
        return CheckpointSearch(None, None, skipped)
    pointed = _read_latest(root)
    by_step = [d for _, d in sorted(_step_dirs(root), reverse=True) if d != pointed]
    aside = sorted((d for d in root.iterdir() if d.is_dir() and d.name.startswith(_OLD_PREFIX)), reverse=True)
    for ckpt in ([pointed] if pointed is not None else []) + by_step + aside:
        try:
            return CheckpointSearch(ckpt, _verify(ckpt), skipped)
        except CheckpointError as exc:
            if ckpt.exists() and not ckpt.name.startswith(_OLD_PREFIX):
                skipped.append((ckpt, str(exc)))
    return CheckpointSearch(None, None, skipped)


class CheckpointSchedule:
    """When a run checkpoints: every ``every_steps`` steps and every ``every_minutes`` of wall time.

    The loop asks :meth:`due` after each iteration and calls :meth:`saved` after each checkpoint;
    the end of the run and an interrupt checkpoint regardless.
    """

    def __init__(self, every_steps: int = 0, every_minutes: float = 0.0) -> None:
        self.every_steps, self.every_minutes = every_steps, every_minutes
        self._last = time.monotonic()

    def due(self, step: int, previous_step: int) -> bool:
        """Whether a checkpoint falls due between ``previous_step`` and ``step``."""
        if self.every_steps > 0 and step // self.every_steps > previous_step // self.every_steps:
            return True
        return self.every_minutes > 0 and time.monotonic() - self._last >= 60.0 * self.every_minutes

    def saved(self) -> None:
        """Restart the wall-time clock."""
        self._last = time.monotonic()


def _read_latest(root: Path) -> Path | None:
    """The directory the ``latest`` pointer names, or None if it is missing or malformed."""
    try:
        name = (root / LATEST_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return root / name if _STEP_DIR_RE.match(name) else None


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """``(step, dir)`` of every committed ``step_*`` directory in ``root``."""
    found = []
    for entry in root.iterdir():
        match = _STEP_DIR_RE.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return found


# --- loading --------------------------------------------------------------------------------


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Verify and load a checkpoint.

    Args:
        path: A checkpoint directory, or a run directory (its latest checkpoint is loaded).

    Returns:
        The loaded checkpoint; tensors in ``algorithm_state`` are on the CPU.

    Raises:
        CheckpointError: If there is no checkpoint, or a file is missing, has the wrong size or
            hash, or cannot be parsed; the message names the file.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no such checkpoint or run dir: {path}")
    if _looks_like_checkpoint(path):
        step = _verify(path)
    else:
        found = find_checkpoint(path)
        if found.path is None or found.step is None:
            raise CheckpointError(f"no complete checkpoint in run dir {path}")
        path, step = found.path, found.step
    return Checkpoint(
        path=path,
        step=step,
        policy_dir=path / POLICY_DIR,
        algorithm_state=_read_file(path / ALGORITHM_FILE, _load_torch),
        trainer_state=_read_file(path / TRAINER_STATE_FILE, lambda p: json.loads(p.read_text())),
        rng_state=_read_file(path / RNG_FILE, _load_pickle),
        env_state=(path / ENV_STATE_FILE).read_bytes() if (path / ENV_STATE_FILE).is_file() else None,
    )


def _looks_like_checkpoint(path: Path) -> bool:
    """Whether ``path`` is (meant to be) a checkpoint directory rather than a run directory."""
    return (path / MANIFEST_FILE).exists() or bool(_STEP_DIR_RE.match(path.name))


def _verify(ckpt_dir: Path) -> int:
    """Check ``ckpt_dir`` against its manifest; return the step it records."""
    manifest_path = ckpt_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise CheckpointError(f"incomplete checkpoint {ckpt_dir}: {MANIFEST_FILE} is missing")
    manifest = _read_file(manifest_path, lambda p: json.loads(p.read_text()))
    try:
        step, files = int(manifest["step"]), dict(manifest["files"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"malformed manifest {manifest_path}: {exc!r}") from exc
    for rel in _REQUIRED_FILES:
        if rel not in files:
            raise CheckpointError(f"checkpoint {ckpt_dir}: {rel} is not listed in {MANIFEST_FILE}")
    if not (ckpt_dir / POLICY_DIR).is_dir():
        raise CheckpointError(f"checkpoint {ckpt_dir}: {POLICY_DIR}/ is missing")
    for rel, entry in files.items():
        _verify_file(ckpt_dir, rel, entry)
    return step


def _verify_file(ckpt_dir: Path, rel: str, entry: dict[str, Any]) -> None:
    """Check one manifest entry's existence, size and sha256."""
    file = ckpt_dir / rel
    if ".." in Path(rel).parts or Path(rel).is_absolute():
        raise CheckpointError(f"manifest of {ckpt_dir} lists a path outside it: {rel}")
    if not file.is_file():
        raise CheckpointError(f"checkpoint file missing: {file}")
    size = file.stat().st_size
    if size != entry.get("size"):
        raise CheckpointError(f"checkpoint file {file} has size {size}, expected {entry.get('size')}")
    if _sha256(file) != entry.get("sha256"):
        raise CheckpointError(f"checkpoint file {file} is corrupt (sha256 mismatch)")


def _read_file(path: Path, reader: Any) -> Any:
    """``reader(path)``, turning any failure into a CheckpointError naming ``path``."""
    try:
        return reader(path)
    except Exception as exc:  # torch.load and pickle can raise almost anything on bad input
        raise CheckpointError(f"cannot read checkpoint file {path}: {exc!r}") from exc


def _load_torch(path: Path) -> Any:
    """Load ``algorithm.pt`` onto the CPU."""
    # weights_only=False: algorithm states hold optimiser states and other Python objects, and
    # these are trusted files this library wrote itself (their sha256 was just checked).
    return torch.load(path, map_location="cpu", weights_only=False)


def _load_pickle(path: Path) -> Any:
    """Unpickle a trusted, hash-verified file written by :func:`save_checkpoint`."""
    with open(path, "rb") as f:
        return pickle.load(f)


# --- filesystem helpers ---------------------------------------------------------------------


def _sha256(path: Path, *, fsync: bool = False) -> str:
    """Hex sha256 of a file; with ``fsync``, also flush it to disk."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_HASH_CHUNK), b""):
            digest.update(chunk)
        if fsync:
            os.fsync(f.fileno())
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (a no-op where directories cannot be opened)."""
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
