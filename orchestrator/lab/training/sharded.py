"""Sharded checkpoints (one file per rank): commit, list with verification, prune, corrupt.

The PyTorch job (:mod:`.torchjob`) writes each checkpoint with
``torch.distributed.checkpoint``: every rank writes its own shard file and the
coordinator a ``.metadata`` file. This module turns such a directory into a
committed checkpoint the same way :mod:`.checkpoints` commits a single file, and
needs no torch, so the lab lists and verifies them without importing it:

- the ranks write into ``ckpt-<step>.dcp.tmp/`` (a directory nobody reads);
- the committer hashes every file in it, fsyncs them, renames the directory to
  ``ckpt-<step>.dcp/`` and fsyncs the parent;
- then writes the manifest ``ckpt-<step>.dcp.json`` atomically, **last**: the
  commit. It lists every shard with its sha256 and size, and ``sha256``, the
  digest over that list.

A checkpoint without a manifest is partial; one whose shards (any of them, or
their set) no longer hash to the manifest is corrupt. The fleet-contract view
(:class:`CheckpointInfo`) carries the manifest's combined digest and the one
computed now, so the recovery policy's "newest verified checkpoint" choice is the
same as for single-file checkpoints. Names differ from ``ckpt-<step>.npz/json``
so the two stores never mistake each other's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import AwareDatetime, Field, ValidationError

from orchestrator.lab.training.atomic import TMP_SUFFIX, atomic_write_bytes, fsync_dir
from orchestrator.lab.training.checkpoints import (
    CheckpointError,
    CheckpointRecord,
    CheckpointStatus,
    Manifest,
    checkpoint_id,
    flip_middle,
    sha256_hex,
)
from orchestrator.models import StrictModel
from orchestrator.policy.training.models import CheckpointInfo

__all__ = [
    "ShardEntry",
    "ShardedManifest",
    "commit_sharded",
    "corrupt_newest_sharded",
    "list_sharded",
    "prune_sharded",
    "scan_sharded",
    "shard_dir",
    "staging_dir",
    "verify_sharded",
]

_SUFFIX = ".dcp"
_NAME = re.compile(r"^ckpt-(\d+)\.dcp(?:\.json)?$")
_CHUNK = 1 << 20


def shard_dir(directory: Path, step: int) -> Path:
    return directory / f"{checkpoint_id(step)}{_SUFFIX}"


def staging_dir(directory: Path, step: int) -> Path:
    """Where the ranks write checkpoint ``step`` before it is committed."""
    return directory / f"{checkpoint_id(step)}{_SUFFIX}{TMP_SUFFIX}"


def _manifest_path(directory: Path, step: int) -> Path:
    return directory / f"{checkpoint_id(step)}{_SUFFIX}.json"


class ShardEntry(StrictModel):
    file: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)


class ShardedManifest(StrictModel):
    step: int = Field(ge=0)
    #: the directory holding the shards, relative to the manifest's
    dir: str = Field(min_length=1)
    shards: list[ShardEntry] = Field(min_length=1)
    #: sha256 over the sorted ``file:sha256:bytes`` lines: one digest for the whole set
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created: AwareDatetime
    meta: dict[str, str | int | float] = Field(default_factory=dict)


def _file_sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _hash_dir(path: Path) -> list[ShardEntry]:
    entries = []
    for child in sorted(path.iterdir()):
        if child.is_file():
            sha, size = _file_sha256(child)
            entries.append(ShardEntry(file=child.name, sha256=sha, bytes=size))
    return entries


def _combined(entries: list[ShardEntry]) -> str:
    lines = sorted(f"{e.file}:{e.sha256}:{e.bytes}" for e in entries)
    return sha256_hex("\n".join(lines).encode())


def commit_sharded(
    directory: Path, step: int, *, meta: dict[str, str | int | float] | None = None
) -> CheckpointInfo:
    """Commit what the ranks wrote into :func:`staging_dir`: hash, rename, manifest last.

    Call it once every rank's write is complete (after the save returned everywhere).
    """
    staging = staging_dir(directory, step)
    if not staging.is_dir():
        raise CheckpointError(
            directory, step, CheckpointStatus.MISSING_DATA, f"{staging.name} does not exist"
        )
    entries = _hash_dir(staging)
    if not entries:
        raise CheckpointError(directory, step, CheckpointStatus.PARTIAL, "no shard was written")
    for name in [e.file for e in entries]:
        fd = os.open(staging / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(staging)
    manifest_path = _manifest_path(directory, step)
    final = shard_dir(directory, step)
    # An older checkpoint of this step loses its manifest before its shards go, so no
    # manifest ever vouches for a directory it was not computed over.
    manifest_path.unlink(missing_ok=True)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    fsync_dir(directory)
    digest = _combined(entries)
    manifest = ShardedManifest(
        step=step,
        dir=final.name,
        shards=entries,
        sha256=digest,
        created=datetime.now(UTC),
        meta=dict(meta or {}),
    )
    atomic_write_bytes(manifest_path, manifest.model_dump_json(indent=2).encode())
    return CheckpointInfo(
        id=checkpoint_id(step), step=step, digest=digest, manifest_digest=digest, complete=True
    )


@dataclass(frozen=True)
class _Found:
    manifest: ShardedManifest | None
    problem: str


def _read_manifest(directory: Path, step: int) -> _Found:
    path = _manifest_path(directory, step)
    if not path.exists():
        return _Found(None, "no manifest: the writer did not finish")
    try:
        manifest = ShardedManifest.model_validate(json.loads(path.read_bytes()))
    except (OSError, ValueError, ValidationError) as exc:
        return _Found(None, f"manifest unreadable: {str(exc).splitlines()[0]}")
    if manifest.step != step or manifest.dir != shard_dir(directory, step).name:
        return _Found(None, f"manifest names step {manifest.step} dir {manifest.dir!r}")
    return _Found(manifest, "")


def _record(directory: Path, step: int) -> CheckpointRecord:
    folder = shard_dir(directory, step)
    entries = _hash_dir(folder) if folder.is_dir() else None
    digest = None if entries is None else _combined(entries)
    found = _read_manifest(directory, step)
    manifest_exists = _manifest_path(directory, step).exists()
    if not manifest_exists:
        return CheckpointRecord(
            step=step, status=CheckpointStatus.PARTIAL, digest=digest, detail=found.problem
        )
    if found.manifest is None:
        return CheckpointRecord(
            step=step, status=CheckpointStatus.BAD_MANIFEST, digest=digest, detail=found.problem
        )
    manifest = found.manifest
    # CheckpointRecord keeps the single-file Manifest shape; the sharded one's
    # combined digest stands in for the file's sha256.
    view = Manifest(
        step=step,
        file=manifest.dir,
        sha256=manifest.sha256,
        bytes=max(1, sum(e.bytes for e in manifest.shards)),
        created=manifest.created,
        meta=manifest.meta,
    )
    if entries is None:
        return CheckpointRecord(
            step=step,
            status=CheckpointStatus.MISSING_DATA,
            manifest=view,
            detail=f"{manifest.dir} is missing",
        )
    if digest != manifest.sha256:
        expected = {e.file: e for e in manifest.shards}
        actual = {e.file: e for e in entries}
        bad = sorted(
            name
            for name in expected.keys() | actual.keys()
            if expected.get(name) != actual.get(name)
        )
        return CheckpointRecord(
            step=step,
            status=CheckpointStatus.CORRUPT,
            digest=digest,
            manifest=view,
            detail=f"shards that do not match the manifest: {', '.join(bad)}",
        )
    return CheckpointRecord(step=step, status=CheckpointStatus.OK, digest=digest, manifest=view)


def _steps_on_disk(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted({int(m.group(1)) for p in directory.iterdir() if (m := _NAME.match(p.name))})


def scan_sharded(directory: Path) -> list[CheckpointRecord]:
    """Every sharded checkpoint in ``directory``, oldest first, every shard hashed."""
    return [_record(directory, step) for step in _steps_on_disk(directory)]


def list_sharded(directory: Path) -> list[CheckpointInfo]:
    """The fleet-contract view of :func:`scan_sharded`, oldest first."""
    return [record.info for record in scan_sharded(directory)]


def verify_sharded(directory: Path, step: int) -> Path:
    """The shard directory of checkpoint ``step``; :class:`CheckpointError` unless it verifies."""
    record = _record(directory, step)
    if not record.verified:
        raise CheckpointError(directory, step, record.status, record.detail)
    return shard_dir(directory, step)


def prune_sharded(directory: Path, keep: int) -> list[int]:
    """Keep the newest ``keep`` verified checkpoints; delete older ones (manifest first)."""
    if keep < 1:
        raise ValueError(f"keep: must be at least 1, got {keep}")
    records = scan_sharded(directory)
    verified = [r.step for r in records if r.verified]
    if len(verified) <= keep:
        return []
    oldest_kept = verified[-keep]
    doomed = [r.step for r in records if r.step < oldest_kept]
    for step in doomed:
        _manifest_path(directory, step).unlink(missing_ok=True)
    fsync_dir(directory)
    for step in doomed:
        shutil.rmtree(shard_dir(directory, step), ignore_errors=True)
        shutil.rmtree(staging_dir(directory, step), ignore_errors=True)
    return doomed


def corrupt_newest_sharded(directory: Path, *, truncate: bool = False) -> CheckpointInfo:
    """The "corrupt newest checkpoint" fault on one shard: flip bytes, or cut it in half."""
    candidates = [
        r for r in scan_sharded(directory) if r.manifest is not None and r.digest is not None
    ]
    if not candidates:
        raise CheckpointError(
            directory, None, CheckpointStatus.MISSING_DATA, "no committed checkpoint to corrupt"
        )
    step = candidates[-1].step
    shards = sorted(p for p in shard_dir(directory, step).iterdir() if p.suffix == ".distcp")
    # The largest rank shard: the one most likely to hold parameters.
    path = max(shards, key=lambda p: p.stat().st_size)
    size = path.stat().st_size
    if truncate:
        os.truncate(path, size // 2)
    else:
        flip_middle(path, size)
    return _record(directory, step).info
