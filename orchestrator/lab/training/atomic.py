"""Crash-safe file replacement: write a temporary, fsync it, rename it, fsync the directory.

A reader (or a resume after kill -9) sees either the old file or the complete new
one, never a torn one. The directory fsync makes the rename itself durable, so a
later file (a manifest) can never be on disk while an earlier one (its data) is not.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "TMP_SUFFIX",
    "atomic_write_bytes",
    "commit_tmp",
    "fsync_dir",
    "remove_durably",
    "write_tmp",
]

#: suffix of files being written; readers ignore them
TMP_SUFFIX = ".tmp"


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_tmp(path: Path, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` + ``.tmp`` (fsynced when ``durable``); ``path`` is untouched."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException as exc:
        # A failed write (a full disk) gives back the space it took.
        os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            # os.write names no file; the caller's message should.
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    os.close(fd)
    return tmp


def commit_tmp(tmp: Path, path: Path, *, durable: bool = True) -> None:
    """Rename a temporary over ``path``; ``durable`` also makes the rename survive power loss."""
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; ``durable`` adds the fsyncs.

    Heartbeats pass ``durable=False``: a reader must never see a torn file, but a
    heartbeat lost to power failure is worthless anyway, so it skips the fsyncs.
    """
    commit_tmp(write_tmp(path, data, durable=durable), path, durable=durable)


def remove_durably(paths: list[Path]) -> None:
    """Unlink ``paths`` in order (missing ones are fine), then fsync their directories."""
    dirs: set[Path] = set()
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        dirs.add(path.parent)
    for directory in dirs:
        fsync_dir(directory)
