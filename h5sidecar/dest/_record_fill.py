"""The record cache's first fill: every part of DEST loaded into a new file, made as a bulk load
and linked into place whole.

A refresh (:func:`._record_cache.refresh`) adds a few parts to a database others read: one
write transaction through the WAL, each row checked against the tombstones and the run
headers by subqueries, three indexes kept up to date as it goes.  The first fill on a machine
(and a temporary mirror) loads every part into a database nobody reads yet, so it pays none of
that: the file is private until complete (no journal, no sync until its end), rows are
upserted without asking ``gone`` (tombstones are applied once at the end,
:func:`._record_cache.settle`), run ids are looked up in a dict, and the secondary indexes
are built once over the loaded rows (a sort) instead of row by row.  Measured at 1,000,000
recorded granules: about half the time of a refresh from empty (benchmarks/README.md).

Guarantees kept: the file is complete before it appears under the cache's name (``os.link``,
which fails when a concurrent first reader linked its own first: that one is used, ours
dropped), so a reader killed mid-fill leaves no cache file, only a ``.tmp`` leftover that
:func:`._record_cache.prune_cache` removes; the data is synced before the link, so a machine
crash right after cannot leave a damaged cache under the name.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from h5sidecar.dest._record_cache import (
    ABOUT_SQL,
    FillProgress,
    create_schema,
    load_listed,
    open_cache,
    prune_cache,
    settle,
)

__all__ = ["bulk_fill", "open_filled"]

#: SQLite's page cache while filling (KiB), 8x its default: fewer pages of the primary key
#: written and read back as rows arrive.  At 1,000,000 rows 64 MB saved ~10% more (within the
#: noise of a shared machine) for +95 MB of RSS; 16 MB keeps the fill's RSS at a temporary
#: load's.
_FILL_CACHE_KIB = 16_384


def open_filled(path: str, fs: Any, root: str, *, max_age_days: float = 0.0,
                progress: FillProgress | None = None) -> tuple[sqlite3.Connection, int]:
    """The cache database at ``path`` (see :func:`._record_cache.open_cache`); when missing,
    first made from every part of DEST ``root`` listed now (a bulk fill into a private file,
    linked into place once complete; ``progress`` says how far it got meanwhile).  The caller
    still refreshes it (parts written meanwhile).  Returns it and how many parts' rows were
    read to fill it."""
    if os.path.exists(path):
        return open_cache(path, max_age_days=max_age_days), 0
    if progress is not None:
        progress.begin()
    if max_age_days > 0:
        prune_cache(os.path.dirname(path), max_age_days)
    with _local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    read: list[int] = []
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            # private until linked: a crash loses only this copy, so no journal and no sync
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            db.execute(f"PRAGMA cache_size = -{_FILL_CACHE_KIB}")
            create_schema(db)
            db.execute(ABOUT_SQL)
            db.execute("INSERT INTO about VALUES ('dest', ?)",
                       (fs.unstrip_protocol(root.rstrip("/")),))
            bulk_fill(db, lambda: read.append(load_listed(db, fs, root, bulk=True,
                                                          progress=progress)))
            db.execute("PRAGMA journal_mode = WAL")  # readers read while one refreshes
        finally:
            db.close()
        with _local(path), open(tmp, "rb") as f:  # on disk before it has the cache's name
            os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):  # a concurrent first reader was first
                os.link(tmp, path)
    finally:
        for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    return open_cache(path), sum(read)


@contextlib.contextmanager
def _local(path: str) -> Iterator[None]:
    """The cache's own files failing (a folder that cannot be made, a full disk) as SQLite says
    it of a file: an unusable cache, not a store that cannot be read (an OSError)."""
    try:
        yield
    except OSError as exc:
        raise sqlite3.OperationalError(f"unable to open the record cache {path}: {exc}") from exc


def bulk_fill(db: sqlite3.Connection, load: Callable[[], Any]) -> None:
    """Run ``load`` (parts loaded with ``bulk``) into the empty mirror ``db`` in one
    transaction: the secondary indexes are dropped before and built after, tombstones applied
    at the end (:func:`._record_cache.settle`)."""
    indexes = [sql for (sql,) in db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
    names = [name for (name,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
    db.execute("BEGIN")
    try:
        for name in names:
            db.execute(f'DROP INDEX "{name}"')
        load()
        settle(db)
        for sql in indexes:
            db.execute(sql)
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
