"""The checkpoint store: atomic checksummed writes, listing with verification, safe loads.

On disk, one checkpoint is two files in one directory:

- ``ckpt-<step>.npz``: the arrays (numpy ``savez``), plus the step itself so a
  renamed file cannot pass for another step;
- ``ckpt-<step>.json``: the manifest ``{step, file, sha256, bytes, created, meta}``.

The data is written to a temporary, fsynced and renamed first; the manifest is
written the same way **last**. So a checkpoint without a manifest is partial (the
writer died), and one whose data no longer hashes to the manifest's sha256 is
corrupt. Nothing is trusted by name or recency: "latest advanced before the data
was durable" (KempnerForge#102) cannot happen when the manifest is the commit.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import numpy as np
from pydantic import AwareDatetime, Field, ValidationError

from orchestrator.exceptions import OrchestratorError
from orchestrator.lab.training.atomic import (
    TMP_SUFFIX,
    atomic_write_bytes,
    commit_tmp,
    remove_durably,
    write_tmp,
)
from orchestrator.models import StrictModel
from orchestrator.policy.training.models import CheckpointInfo

__all__ = [
    "STEP_KEY",
    "CheckpointError",
    "CheckpointRecord",
    "CheckpointStatus",
    "LoadedCheckpoint",
    "Manifest",
    "WriteHook",
    "checkpoint_id",
    "corrupt_newest",
    "flip_middle",
    "list_checkpoints",
    "load_checkpoint",
    "prune_checkpoints",
    "scan_checkpoints",
    "sha256_hex",
    "write_checkpoint",
]

#: the array key under which the step is stored inside the data file
STEP_KEY = "__step__"

#: a callback ``(phase, step)`` run at each stage of a write; the trainer's fault flag
#: uses it to die at an exact point. Phases: ``data-tmp`` (temporary durable),
#: ``data`` (data renamed, no manifest yet), ``manifest`` (committed).
WriteHook = Callable[[str, int], None]

_NAME = re.compile(r"^ckpt-(\d+)\.(npz|json)$")


def checkpoint_id(step: int) -> str:
    return f"ckpt-{step}"


def _data_path(directory: Path, step: int) -> Path:
    return directory / f"{checkpoint_id(step)}.npz"


def _manifest_path(directory: Path, step: int) -> Path:
    return directory / f"{checkpoint_id(step)}.json"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class CheckpointStatus(StrEnum):
    OK = "ok"
    #: data without a manifest: the writer did not finish
    PARTIAL = "partial"
    #: the data does not hash to the manifest's sha256 (or has another size)
    CORRUPT = "corrupt"
    #: a manifest whose data file is gone
    MISSING_DATA = "missing_data"
    #: a manifest that does not parse or names another step or file
    BAD_MANIFEST = "bad_manifest"


class Manifest(StrictModel):
    step: int = Field(ge=0)
    file: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=1)
    created: AwareDatetime
    #: what the writer wants recorded with the data (job, seed, params digest...)
    meta: dict[str, str | int | float] = Field(default_factory=dict)


class CheckpointRecord(StrictModel):
    """One checkpoint as found on disk, with the verdict of its verification."""

    step: int = Field(ge=0)
    status: CheckpointStatus
    #: sha256 computed over the data file now; None when there is no data file
    digest: str | None = None
    manifest: Manifest | None = None
    #: why the status is not ok
    detail: str = ""

    @property
    def verified(self) -> bool:
        return self.status is CheckpointStatus.OK

    @property
    def info(self) -> CheckpointInfo:
        """The fleet-contract view the recovery policy chooses from."""
        has_manifest = self.manifest is not None
        return CheckpointInfo(
            id=checkpoint_id(self.step),
            step=self.step,
            digest=self.digest,
            manifest_digest=self.manifest.sha256 if self.manifest is not None else None,
            complete=has_manifest,
        )


class CheckpointError(OrchestratorError):
    """A checkpoint cannot be used; ``status`` says why (partial, corrupt, ...)."""

    def __init__(
        self, directory: Path, step: int | None, status: CheckpointStatus, detail: str
    ) -> None:
        which = "no checkpoint" if step is None else f"checkpoint step {step}"
        super().__init__(f"{which} in {directory} is {status.value}: {detail}")
        self.directory = directory
        self.step = step
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class LoadedCheckpoint:
    step: int
    arrays: dict[str, np.ndarray]
    manifest: Manifest


def _serialize(step: int, arrays: Mapping[str, np.ndarray]) -> bytes:
    if not arrays:
        raise ValueError("arrays: a checkpoint needs at least one array")
    if STEP_KEY in arrays:
        raise ValueError(f"arrays: the key {STEP_KEY!r} is reserved for the step")
    buffer = io.BytesIO()
    payload = {name: np.asarray(value) for name, value in arrays.items()}
    payload[STEP_KEY] = np.asarray(step, dtype=np.int64)
    np.savez(buffer, allow_pickle=False, **payload)
    return buffer.getvalue()


def write_checkpoint(
    directory: Path,
    step: int,
    arrays: Mapping[str, np.ndarray],
    *,
    meta: Mapping[str, str | int | float] | None = None,
    hook: WriteHook | None = None,
) -> CheckpointInfo:
    """Write checkpoint ``step`` atomically: data durable first, manifest last.

    An older checkpoint of the same step loses its manifest before its data is
    replaced, so no instant exists where an old manifest vouches for new data.
    """
    if step < 0:
        raise ValueError(f"step: must be non-negative, got {step}")
    directory.mkdir(parents=True, exist_ok=True)
    data = _serialize(step, arrays)
    digest = sha256_hex(data)
    data_path = _data_path(directory, step)
    manifest_path = _manifest_path(directory, step)
    remove_durably([manifest_path])

    tmp = write_tmp(data_path, data)
    if hook is not None:
        hook("data-tmp", step)
    commit_tmp(tmp, data_path)
    if hook is not None:
        hook("data", step)

    manifest = Manifest(
        step=step,
        file=data_path.name,
        sha256=digest,
        bytes=len(data),
        created=datetime.now(UTC),
        meta=dict(meta or {}),
    )
    atomic_write_bytes(manifest_path, manifest.model_dump_json(indent=2).encode())
    if hook is not None:
        hook("manifest", step)
    return CheckpointInfo(
        id=checkpoint_id(step), step=step, digest=digest, manifest_digest=digest, complete=True
    )


def _read_manifest(path: Path, step: int) -> tuple[Manifest | None, str]:
    try:
        manifest = Manifest.model_validate(json.loads(path.read_bytes()))
    except (OSError, ValueError, ValidationError) as exc:
        return None, f"manifest unreadable: {str(exc).splitlines()[0]}"
    if manifest.step != step:
        return None, f"manifest says step {manifest.step}"
    if manifest.file != _data_path(path.parent, step).name:
        return None, f"manifest names file {manifest.file!r}"
    return manifest, ""


def _record(directory: Path, step: int) -> CheckpointRecord:
    data_path = _data_path(directory, step)
    manifest_path = _manifest_path(directory, step)
    try:
        data: bytes | None = data_path.read_bytes()
    except FileNotFoundError:
        data = None
    digest = None if data is None else sha256_hex(data)

    if not manifest_path.exists():
        return CheckpointRecord(
            step=step,
            status=CheckpointStatus.PARTIAL,
            digest=digest,
            detail="no manifest: the writer did not finish",
        )
    manifest, problem = _read_manifest(manifest_path, step)
    if manifest is None:
        return CheckpointRecord(
            step=step, status=CheckpointStatus.BAD_MANIFEST, digest=digest, detail=problem
        )
    if data is None:
        return CheckpointRecord(
            step=step,
            status=CheckpointStatus.MISSING_DATA,
            manifest=manifest,
            detail=f"{manifest.file} is missing",
        )
    if digest != manifest.sha256 or len(data) != manifest.bytes:
        return CheckpointRecord(
            step=step,
            status=CheckpointStatus.CORRUPT,
            digest=digest,
            manifest=manifest,
            detail=(
                f"sha256 {digest[:12] if digest else None} ({len(data)} bytes) does not match "
                f"manifest {manifest.sha256[:12]} ({manifest.bytes} bytes)"
            ),
        )
    return CheckpointRecord(step=step, status=CheckpointStatus.OK, digest=digest, manifest=manifest)


def _steps_on_disk(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    steps = {int(m.group(1)) for p in directory.iterdir() if (m := _NAME.match(p.name))}
    return sorted(steps)


def scan_checkpoints(directory: Path) -> list[CheckpointRecord]:
    """Every checkpoint in ``directory``, oldest first, each hashed and judged.

    Temporaries (``*.tmp``) are writes in progress or abandoned; they are not
    checkpoints and are not listed.
    """
    return [_record(directory, step) for step in _steps_on_disk(directory)]


def list_checkpoints(directory: Path) -> list[CheckpointInfo]:
    """The fleet-contract view of :func:`scan_checkpoints`, oldest first."""
    return [record.info for record in scan_checkpoints(directory)]


def load_checkpoint(directory: Path, step: int) -> LoadedCheckpoint:
    """The arrays of checkpoint ``step``; :class:`CheckpointError` unless it verifies.

    The bytes are read once, hashed, and parsed from memory, so the data that
    verified is exactly the data returned (no check-then-reread window).
    """
    manifest_path = _manifest_path(directory, step)
    data_path = _data_path(directory, step)
    if not manifest_path.exists():
        status = CheckpointStatus.PARTIAL if data_path.exists() else CheckpointStatus.MISSING_DATA
        detail = "no manifest" if data_path.exists() else "no such checkpoint"
        raise CheckpointError(directory, step, status, detail)
    manifest, problem = _read_manifest(manifest_path, step)
    if manifest is None:
        raise CheckpointError(directory, step, CheckpointStatus.BAD_MANIFEST, problem)
    try:
        data = data_path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            directory, step, CheckpointStatus.MISSING_DATA, f"{manifest.file} is missing"
        ) from None
    digest = sha256_hex(data)
    if digest != manifest.sha256 or len(data) != manifest.bytes:
        raise CheckpointError(
            directory,
            step,
            CheckpointStatus.CORRUPT,
            f"sha256 {digest[:12]} does not match manifest {manifest.sha256[:12]}",
        )
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            directory, step, CheckpointStatus.CORRUPT, f"data does not parse: {exc}"
        ) from None
    stored = arrays.pop(STEP_KEY, None)
    if stored is None or int(stored) != step:
        raise CheckpointError(
            directory, step, CheckpointStatus.CORRUPT, f"data holds step {stored}, not {step}"
        )
    return LoadedCheckpoint(step=step, arrays=arrays, manifest=manifest)


def prune_checkpoints(directory: Path, keep: int) -> list[int]:
    """Keep the newest ``keep`` verified checkpoints; delete everything older. Returns steps.

    Only verified checkpoints count towards ``keep``, so a corrupt newest one never
    pushes out the good one a resume would fall back to. Anything newer than the
    oldest kept one is left alone (a corrupt newest stays as evidence). Manifests go
    before data, so an interrupted prune leaves partials, never a manifest vouching
    for a missing file. Call this only from the directory's single writer.
    """
    if keep < 1:
        raise ValueError(f"keep: must be at least 1, got {keep}")
    records = scan_checkpoints(directory)
    verified = [r.step for r in records if r.verified]
    if len(verified) <= keep:
        return []
    oldest_kept = verified[-keep]
    doomed = [r.step for r in records if r.step < oldest_kept]
    paths: list[Path] = []
    for step in doomed:
        paths.append(_manifest_path(directory, step))
    for step in doomed:
        data = _data_path(directory, step)
        paths += [data, data.with_name(data.name + TMP_SUFFIX)]
    remove_durably(paths)
    return doomed


def corrupt_newest(directory: Path) -> CheckpointInfo:
    """The "corrupt newest checkpoint" fault: flip bytes in its data, keep its manifest.

    The newest checkpoint that has both a manifest and data is hit, so the next
    listing shows it corrupt and a resume must fall back to an older one.
    """
    candidates = [
        r for r in scan_checkpoints(directory) if r.manifest is not None and r.digest is not None
    ]
    if not candidates:
        raise CheckpointError(
            directory, None, CheckpointStatus.MISSING_DATA, "no committed checkpoint to corrupt"
        )
    step = candidates[-1].step
    path = _data_path(directory, step)
    size = path.stat().st_size
    flip_middle(path, size)
    return _record(directory, step).info


def flip_middle(path: Path, size: int) -> None:
    """Invert up to 16 bytes in the middle of a file: inside its payload, past any headers,
    so the file may still parse and only the checksum can tell."""
    offset, length = size // 2, min(16, size - size // 2)
    fd = os.open(path, os.O_RDWR)
    try:
        original = os.pread(fd, length, offset)
        os.pwrite(fd, bytes(b ^ 0xFF for b in original), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
