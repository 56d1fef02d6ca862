"""The record cache's folder as its user sees it: what each file is for (the DEST whose record it
holds), its size and its last use (``h5sidecar cache list``), and removing the files not used
for some days (``h5sidecar cache prune``).

A cache file is named by a hash (:func:`._record_cache.cache_file`), so the DEST is read from the
file itself (its ``about`` table, written on a refresh); a file no refresh of this version has
touched yet does not say (``dest`` is None).  Files are read-only here: listing one neither
touches it (its modification time is its last use) nor waits for a refresh that holds it: the
file is opened ``immutable`` (a read-only connection would make its ``-wal`` and ``-shm``,
a later use by the clock), so a DEST written by a refresh whose log is not checkpointed yet
shows on a later listing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote

from h5sidecar.dest._record_cache import CACHE_FILE_NAME, prune_cache

__all__ = ["CacheFile", "list_cache", "prune_cache_files"]

#: Seconds a listing waits on a file before saying its DEST is unknown.
_WAIT_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class CacheFile:
    """One file of the record cache.

    Attributes
    ----------
    path : str
        The file (its ``-wal`` and ``-shm`` beside it).
    dest : str or None
        The DEST whose record it holds (None: not recorded in the file yet).
    size : int
        Bytes on disk, with its ``-wal`` and ``-shm``.
    last_used : float
        When a reader last used it (seconds since the epoch): what pruning goes by.
    """

    path: str
    dest: str | None
    size: int
    last_used: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def list_cache(folder: str) -> list[CacheFile]:
    """The cache files of ``folder``, the most recently used first (none when it is missing)."""
    try:
        # complete files only (not a creation's leftovers, which prune_cache removes too)
        entries = [e for e in os.scandir(folder)
                   if CACHE_FILE_NAME.fullmatch(e.name) and e.name.endswith(".sqlite")]
    except FileNotFoundError:
        return []
    out = []
    for entry in entries:
        stats = []
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                stats.append((suffix, os.stat(entry.path + suffix)))
        if not stats or stats[0][0] != "":
            continue  # removed meanwhile
        # a WAL written after the file's last touch is a later use (as prune_cache reads it)
        last = max(st.st_mtime for suffix, st in stats if suffix != "-shm")
        out.append(CacheFile(entry.path, _dest_of(entry.path), sum(st.st_size for _, st in stats),
                             last))  # fmt: skip
    return sorted(out, key=lambda f: (-f.last_used, f.path))


def _dest_of(path: str) -> str | None:
    try:
        db = sqlite3.connect(f"file:{quote(path)}?immutable=1", uri=True, timeout=_WAIT_SECONDS)
    except sqlite3.Error:
        return None
    try:
        row = db.execute("SELECT value FROM about WHERE key = 'dest'").fetchone()
    except sqlite3.Error:  # no such table (not refreshed by this version yet), damaged
        return None
    finally:
        db.close()
    return None if row is None else str(row[0])


def prune_cache_files(folder: str, older_than_days: float) -> list[CacheFile]:
    """Remove the cache files of ``folder`` not used for ``older_than_days`` (see
    :func:`._record_cache.prune_cache`); returns those removed.  A reader using one meanwhile
    loses only its cache: its next use loads the record again."""
    known = {f.path: f for f in list_cache(folder)}
    removed = prune_cache(folder, older_than_days)
    return [known[p] for p in removed if p in known]
