"""Atomic, durable writes of local sidecars (see :mod:`h5sidecar.references._io`).

* **JSON**: written to a temporary file in the same folder, fsynced, then ``os.replace``.
* **Parquet**: written into a temporary directory in the same folder, flushed once (``syncfs``
  on Linux, else an fsync per file and directory), then swapped in (an atomic exchange on
  Linux; elsewhere the old directory is renamed aside first, so readers see the old or the new
  sidecar, or for an instant none, never a mixture) and the parent fsynced.

An existing destination is only replaced when it looks like a sidecar (:data:`OURS`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from h5sidecar._modes import follow_umask
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import CHECKSUMS_FILE
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE
from h5sidecar.references.parquet_sidecar._members_file import MEMBERS_FILE

__all__ = ["OURS", "write_local_dir", "write_local_file"]

#: Files a Parquet sidecar may contain (anything else in the destination is not ours).
OURS = re.compile(
    r"(.*/)?refs\.\d+\.parq|\.zmetadata|"
    + re.escape(CHECKSUMS_FILE)
    + "|"
    + re.escape(MANIFESTS_FILE)
    + "|"
    + re.escape(MANIFESTS_FILE.removesuffix(".parq"))
    + r"\.\d+\.parq"  # its parts after the first (a cube appended to)
    + "|"
    + re.escape(MEMBERS_FILE)
    + "|"
    + re.escape(MEMBERS_FILE.removesuffix(".parq"))
    + r"\.\d+\.parq"  # the members files after the first (a cube of many)
)


def write_local_file(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` atomically: a temporary file beside it, fsynced, renamed."""
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a directory (a Parquet sidecar?); remove it or write the JSON elsewhere"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        follow_umask(tmp, fd=fd)  # mkstemp's 0600 would make the sidecar private to its writer
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_local_dir(path: Path, files: Iterable[tuple[str, bytes]], links: Iterable[str] = ()
                    ) -> None:
    """Write ``(relative path, bytes)`` pairs as directory ``path``, swapped in whole.

    ``links``: files of the existing ``path`` the new directory keeps as they are (hard-linked
    into it, not copied: an append to a cube writes only what changed, and the swap still
    shows readers the old directory or the new one).

    Raises ``FileExistsError`` when ``path`` exists and is not a Parquet sidecar.
    """
    if path.exists():
        _check_replaceable_local(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        follow_umask(tmp, directory=True)  # mkdtemp's 0700 would hide the sidecar from the group
        for rel in links:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            os.link(path / rel, tmp / rel)
        written = []
        for rel, data in files:
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(target)
        # One flush for the whole tree, before the swap: the swapped-in directory is never
        # less durable than the old one, and ~1000 record files cost one syncfs, not 1000 fsyncs
        _make_durable(tmp, written)
        _swap_in(tmp, path)
        _fsync_dir(path.parent)  # the rename itself
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the new dir after a failure, the old after a swap


def _make_durable(root: Path, files: list[Path]) -> None:
    """Flush ``files`` and the directories under ``root`` to stable storage.

    Linux ``syncfs`` flushes the whole filesystem in one call (the kernel writes the files back
    together); elsewhere every file, then every directory, is fsynced.
    """
    syncfs = _syncfs()
    if syncfs is not None:
        fd = os.open(root, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for d in sorted({f.parent for f in files} | {root}, key=lambda p: -len(p.parts)):
        _fsync_dir(d)


def _fsync_dir(path: Path) -> None:
    """fsync a directory (persists the names in it); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows cannot open directories; its renames are journaled by NTFS
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_replaceable_local(path: Path) -> None:
    if not path.is_dir():
        raise FileExistsError(
            f"{path} exists and is a file, not a Parquet sidecar directory; remove it first"
        )
    foreign = [
        p
        for p in path.rglob("*")
        if p.is_file() and not OURS.fullmatch(p.relative_to(path).as_posix())
    ]
    if foreign:
        raise FileExistsError(
            f"{path} holds files that are not part of a Parquet sidecar (e.g. {foreign[0]}); "
            "refusing to replace it: choose another destination or remove it"
        )


def _swap_in(new: Path, dest: Path) -> None:
    """Put directory ``new`` at ``dest``; afterwards ``new`` holds the old contents (if any)."""
    if not dest.exists():
        os.rename(new, dest)
        return
    if _exchange(new, dest):
        return
    aside = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.old")
    os.rename(dest, aside)
    try:
        os.rename(new, dest)
    except BaseException:
        os.rename(aside, dest)
        raise
    os.rename(aside, new)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux ``renameat2(RENAME_EXCHANGE)``; False if unavailable."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2`` (Linux, glibc >= 2.28), or None."""
    name = ctypes.util.find_library("c")
    return None if name is None else getattr(ctypes.CDLL(name, use_errno=True), "renameat2", None)


@functools.cache
def _syncfs() -> Any:
    """libc's ``syncfs`` (Linux), or None."""
    name = ctypes.util.find_library("c")
    return None if name is None else getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None)
