"""The record of an object-store DEST read back: parts written by runs, read through a local
SQLite database with the local record's schema.

The format of the parts is :mod:`h5sidecar.dest._record_parts`.  Readers open a
:class:`Mirror`: the database kept between runs (:mod:`._record_cache`), brought up to date by
loading only the parts it has not seen, or a temporary one loaded from every part (a
compaction's parts, or caching turned off), so that lookups, the run report and its export are
the local record's own queries (:class:`~h5sidecar.dest._record_db.Record`) and never hold
every granule as Python objects.  Writing parts is :mod:`._parts_writer`.

Compaction (:func:`compact`): when DEST has more than :data:`COMPACT_PARTS` parts, the end of a
run copies the newest row of every granule of the parts it listed into one new part, then
deletes those parts only.  A reader or a concurrent run sees the rows in the old parts, in the
new one, or in both (the same rows with the same keys), never none; a part written meanwhile is
not touched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq

from h5sidecar._pids import pid_alive
from h5sidecar.dest._dest_walk import entry_mtime
from h5sidecar.dest._locations import filesystem
from h5sidecar.dest._record_cache import (
    BATCH,
    FillProgress,
    cache_file,
    create_schema,
    load_part,
    number_runs,
    refresh,
)
from h5sidecar.dest._record_db import Record
from h5sidecar.dest._record_fill import bulk_fill, open_filled
from h5sidecar.dest._record_parts import (
    META_KEY,
    SCHEMA,
    list_parts,
    open_part,
    part_key,
    part_meta,
    parts_root,
    read_batches,
)
from h5sidecar.dest._record_parts import latest_rows as parts_latest_rows
from h5sidecar.dest._record_parts import roots_of as parts_roots_of
from h5sidecar.errors import RecordBusyError
from h5sidecar.settings import RecordSettings, from_env

__all__ = ["COMPACT_PARTS", "MIRROR_PREFIX", "Mirror", "cached_record", "compact", "has_parts",
           "latest_rows", "newest_part_mtime", "roots_of", "scratch_folder", "store_of",
           "sweep_stale_mirrors"]

log = logging.getLogger("h5sidecar.workflows")

#: A run's end compacts DEST's parts when there are more than this many.
COMPACT_PARTS = 64

def store_of(dest: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The filesystem of the object-store ``dest`` and its path there (no scheme)."""
    return filesystem(dest, storage_options), dest.split("://", 1)[1].rstrip("/")


def has_parts(fs: Any, root: str) -> bool:
    """Whether DEST's record is in parts (it has at least one)."""
    return bool(list_parts(fs, root))


def newest_part_mtime(fs: Any, root: str) -> float | None:
    """When the newest part of DEST's record was written (None: no parts)."""
    try:
        entries = fs.ls(parts_root(root), detail=True)
    except FileNotFoundError:
        return None
    times = [entry_mtime(e) for e in entries if str(e["name"]).endswith(".parquet")]
    return max((t for t in times if t is not None), default=None)


# -- reading -------------------------------------------------------------------------------------
#: Temporary mirrors are folders ``<tmp>/h5sidecar-record-<pid>-<random>``.
MIRROR_PREFIX = "h5sidecar-record-"
#: A mirror left by a process that is gone is removed once untouched this long (seconds): the
#: pid alone could belong to another pid namespace sharing the temporary folder.
STALE_MIRROR_SECONDS = 3600.0



def sweep_stale_mirrors(tmp: str | None = None, *, older_than: float = STALE_MIRROR_SECONDS) -> int:
    """Remove the temporary mirrors of processes killed before they could (kill -9, OOM): each
    is as large as the record.  A mirror is stale when the process named in it no longer runs
    and nothing in it changed for ``older_than`` seconds.  Returns how many were removed."""
    tmp = tempfile.gettempdir() if tmp is None else tmp
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(MIRROR_PREFIX):
            continue
        pid_text = entry.name[len(MIRROR_PREFIX):].partition("-")[0]
        if not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue  # a mirror of an earlier version (no pid) or of a running process
        try:
            latest = max([entry.stat().st_mtime]
                         + [e.stat().st_mtime for e in os.scandir(entry.path)])
        except OSError:
            continue
        if now - latest > older_than:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
    return removed


def scratch_folder() -> str:
    """A new private folder of this process under the temporary folder (a temporary mirror's,
    a reader's own files): remove it when done; one left by a killed process is removed by
    :func:`sweep_stale_mirrors` once stale."""
    sweep_stale_mirrors()
    return tempfile.mkdtemp(prefix=f"{MIRROR_PREFIX}{os.getpid()}-")


class Mirror:
    """DEST's parts loaded into an SQLite database with the schema of a local record, read
    through :attr:`record`: the cache kept between runs (:mod:`._record_cache`, only the parts
    not loaded yet are read), or, for a compaction's parts or without a cache, a temporary
    one loaded from every part.  Read it only: rows written through :attr:`record` would not
    be in DEST's parts.

    Parameters
    ----------
    fs, root
        DEST's filesystem and path.
    paths : sequence of str, optional
        Load only these parts into a temporary database (a compaction's); a part gone
        meanwhile raises FileNotFoundError.  Default: every part, listed again if one vanishes.
    settings : RecordSettings, optional
        The cache's folder and the age past which unused cache files go (default:
        ``from_env(RecordSettings)``).
    """

    def __init__(self, fs: Any, root: str, paths: Sequence[str] | None = None,
                 settings: RecordSettings | None = None) -> None:  # fmt: skip
        settings = settings or from_env(RecordSettings)
        self._max_age_days = settings.record_cache_max_age_days
        self._dir: str | None = None
        #: Parts whose rows were read to make or refresh the database.
        self.read = 0
        #: Whether the database is the record cache (else a temporary one).
        self.cached = False
        cached = cache_file(fs, root, settings) if paths is None else None
        if cached is not None:
            try:
                self.record = self._cached(fs, root, cached)
                self.cached = True
                return
            except RecordBusyError:
                raise  # the cache stayed locked: say so, as for a local record
            except (OSError, sqlite3.DatabaseError) as exc:
                # an unusable cache (no permission, a read-only or full disk, a damaged file)
                # costs a full load, not the run
                log.warning("the record cache %s is unusable (%s): reading every part of %s",
                            cached, exc, parts_root(root))
        self.record = self._temporary(fs, root, paths)

    def _cached(self, fs: Any, root: str, path: str) -> Record:
        db, filled = open_filled(path, fs, root, max_age_days=self._max_age_days)
        try:
            self.read = filled + refresh(db, fs, root, path)
        finally:
            db.close()
        return Record(path)

    def _temporary(self, fs: Any, root: str, paths: Sequence[str] | None) -> Record:
        self._dir = scratch_folder()
        path = os.path.join(self._dir, "record.sqlite")
        try:
            db = sqlite3.connect(path, isolation_level=None)
            try:
                # a scratch copy: no journal, no sync (a crash loses only the copy)
                db.execute("PRAGMA journal_mode = OFF")
                db.execute("PRAGMA synchronous = OFF")
                create_schema(db)
                bulk_fill(db, lambda: self._load(db, fs, root, paths))
            finally:
                db.close()
            return Record(path)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    def _load(self, db: sqlite3.Connection, fs: Any, root: str,
              paths: Sequence[str] | None) -> None:
        for _, meta, batches in self._parts(fs, root, paths):
            load_part(db, meta, batches, bulk=True)
            self.read += 1
        number_runs(db)

    @staticmethod
    def _parts(fs: Any, root: str, paths: Sequence[str] | None
               ) -> Iterator[tuple[str, dict[str, Any], Iterator[pa.RecordBatch]]]:
        if paths is None:
            yield from read_batches(fs, root, batch_size=BATCH)
            return
        for path in paths:
            with open_part(fs, path) as pf:
                yield path, part_meta(pf), pf.iter_batches(BATCH)

    def scratch(self) -> str:
        """A private folder of this process for a reader's own files (removed by
        :meth:`close`, or swept once stale after a kill)."""
        if self._dir is None:
            self._dir = scratch_folder()
        return self._dir

    def close(self) -> None:
        """Close the database (a temporary one is deleted, with :meth:`scratch`)."""
        try:
            self.record.close()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cached_record(fs: Any, root: str, settings: RecordSettings | None = None, *,
                  progress: FillProgress | None = None) -> str | None:
    """The record cache of the object-store DEST ``root``, refreshed now (one LIST, then only
    the parts it has not loaded): its path, for read-only queries as on a local record
    (:class:`~h5sidecar.dest._record_view.RecordView`: the gateway looks granules up there
    instead of holding every source).  None when DEST has no parts or ``settings`` (default:
    ``from_env(RecordSettings)``) turn caching off.  ``progress``: how far a first fill (an
    empty cache) got, counted as it goes.

    Raises
    ------
    RecordBusyError
        The cache stayed locked by another process (a long refresh).
    sqlite3.DatabaseError
        The cache cannot be made, opened or written (no permission, a full disk, a damaged
        file).  No temporary copy is loaded instead: the caller chooses (the gateway keeps a
        private cache).
    OSError
        The store cannot be listed or read.
    """
    settings = settings or from_env(RecordSettings)
    path = cache_file(fs, root, settings)
    if path is None or not list_parts(fs, root):
        return None
    # a folder that cannot be made or written fails as SQLite says of a file
    db, _ = open_filled(path, fs, root, max_age_days=settings.record_cache_max_age_days,
                        progress=progress)  # fmt: skip
    try:
        refresh(db, fs, root, path)
    finally:
        db.close()
    return path


#: The parts' columns as the mirror's SQL gives them.
_COLUMN_SQL = {
    "key": "key", "url": "url", "name": "name", "sidecar": "sidecar", "status": "status",
    "source": "source", "source_url": "json_extract(source, '$.url')", "n_virtual": "n_virtual",
    "n_inlined": "n_inlined", "n_skipped": "n_skipped", "skipped": "skipped",
    "n_chunks": "n_chunks", "sidecar_bytes": "sidecar_bytes", "seconds": "seconds",
    "error": "error", "run": "run_uid",
}


def latest_rows(fs: Any, root: str, columns: Sequence[str],
                settings: RecordSettings | None = None) -> pa.Table | None:
    """The newest row of every granule recorded in DEST's parts (tombstoned granules left out),
    with ``columns`` (of the parts' :data:`~._record_parts.SCHEMA`), sorted by URL, as one
    columnar table; None without parts.

    Read from the record cache of ``settings`` (only the parts it has not seen are read);
    without a cache, from every part (:func:`._record_parts.latest_rows`).
    """
    if cache_file(fs, root, settings) is None:
        return parts_latest_rows(fs, root, columns)
    schema = pa.schema([SCHEMA.field(c) for c in columns])
    with Mirror(fs, root, settings=settings) as mirror:
        db = mirror.record._db
        if db.execute("SELECT count(*) FROM parts").fetchone()[0] == 0:
            return None
        cursor = db.execute(f"SELECT {', '.join(_COLUMN_SQL[c] for c in columns)} "
                            "FROM granules ORDER BY url")
        batches = []
        while rows := cursor.fetchmany(BATCH):
            cols = list(zip(*rows, strict=True))
            batches.append(pa.RecordBatch.from_arrays(
                [pa.array(cols[i], type=f.type) for i, f in enumerate(schema)], schema=schema))
    return pa.Table.from_batches(batches, schema=schema)


#: :func:`written_since`'s query: by expressions in the order (as the local record's
#: ``changed_since``), so that an index on ``key`` would be searched, not ``name`` walked.
_WRITTEN_SINCE = ("SELECT name, sidecar FROM granules WHERE key > ? AND status != 'failed' "
                  "ORDER BY +name, +url")


def newest_key(fs: Any, root: str, settings: RecordSettings | None = None) -> str | None:
    """The largest row key DEST's parts hold (rows and tombstones), None without rows: where
    DEST's record stands, for a cube's mark (every row written later has a larger key, but a
    part named before it and stored after it: see :func:`written_since`)."""
    with Mirror(fs, root, settings=settings) as mirror:
        db = mirror.record._db
        keys = [db.execute(f"SELECT max(key) FROM {t}").fetchone()[0] for t in ("granules", "gone")]
    return max((k for k in keys if k is not None), default=None)


def written_since(fs: Any, root: str, key: str, settings: RecordSettings | None = None
                  ) -> list[tuple[str, str]]:
    """``(name, sidecar)`` of DEST's granules whose newest row's key is larger than ``key``
    (those marked failed left out), by name: read from the record cache (only the parts it has
    not seen are read; without a cache, every part)."""
    with Mirror(fs, root, settings=settings) as mirror:
        return list(mirror.record._db.execute(_WRITTEN_SINCE, (key,)))


def roots_of(fs: Any, root: str, settings: RecordSettings | None = None) -> tuple[str, ...]:
    """The source roots DEST's parts record, oldest first: from the record cache of
    ``settings``, else from every part's footer (:func:`._record_parts.roots_of`)."""
    if cache_file(fs, root, settings) is None:
        return parts_roots_of(fs, root)
    with Mirror(fs, root, settings=settings) as mirror:
        return tuple(r for (r,) in mirror.record._db.execute(
            "SELECT root FROM roots ORDER BY seq"))


# -- compacting ----------------------------------------------------------------------------------
def compact(fs: Any, root: str, threshold: int | None = None,
            settings: RecordSettings | None = None) -> str | None:
    """When DEST has more than ``threshold`` (:data:`COMPACT_PARTS`) parts, replace those listed now by one part holding
    the newest row of each granule (tombstones kept; rows keep their keys); returns its path.

    The new part is written (one upload) before any covered part is deleted; a covered part
    that vanished meanwhile (a concurrent compaction) leaves the parts as they are.
    """
    paths = list_parts(fs, root)
    if len(paths) <= (COMPACT_PARTS if threshold is None else threshold):
        return None
    try:
        mirror = _mirror_of(fs, root, paths, settings)
    except FileNotFoundError:
        log.info("another run is compacting %s: left to it", parts_root(root))
        return None
    key = part_key()
    local = os.path.join(mirror.scratch(), "compacted.parquet")
    try:
        db = mirror.record._db
        runs = [json.loads(d) for (d,) in db.execute("SELECT doc FROM headers ORDER BY key")]
        roots = [r for (r,) in db.execute("SELECT root FROM roots ORDER BY seq")]
        # ``covers``: a reader that loaded every covered part skips the rows of this one
        covers = [p.rsplit("/", 1)[-1] for p in paths]
        meta = {"format": 1, "runs": runs, "roots": roots, "compacted": len(paths),
                "covers": covers}
        schema = SCHEMA.with_metadata({META_KEY: json.dumps(meta).encode()})
        with pq.ParquetWriter(local, schema, compression="zstd") as out:
            for rows in _compacted_rows(db):
                out.write_table(pa.Table.from_pylist(rows, schema=schema))
        # one upload, visible only once complete
        fs.put_file(local, f"{parts_root(root)}/{key}.parquet")
    finally:
        mirror.close()
    with contextlib.suppress(FileNotFoundError):
        fs.rm(paths)
    log.info("compacted %d parts of %s into %s", len(paths), parts_root(root), key)
    return f"{parts_root(root)}/{key}.parquet"


def _mirror_of(fs: Any, root: str, paths: Sequence[str],
               settings: RecordSettings | None) -> Mirror:
    """A mirror of exactly the parts ``paths``: the record cache when, refreshed, it holds
    those parts and no other (nothing is read again), else a temporary one loaded from them."""
    if cache_file(fs, root, settings) is not None:
        mirror = Mirror(fs, root, settings=settings)
        if mirror.cached:
            loaded = {n for (n,) in mirror.record._db.execute("SELECT name FROM parts")}
            if loaded == {p.rsplit("/", 1)[-1] for p in paths}:
                return mirror
        mirror.close()
    return Mirror(fs, root, paths)


def _compacted_rows(db: sqlite3.Connection) -> Iterator[list[dict[str, Any]]]:
    cols = [f.name for f in SCHEMA]
    live = db.execute("SELECT key, url, name, sidecar, status, source, "
                      "json_extract(source, '$.url'), n_virtual, n_inlined, n_skipped, skipped, "
                      "n_chunks, sidecar_bytes, seconds, error, run_uid, 0 FROM granules")
    gone = db.execute("SELECT key, url, '', '', '', NULL, NULL, 0, 0, 0, '[]', 0, 0, '{}', "
                      "NULL, run_uid, 1 FROM gone")
    for cursor in (live, gone):
        while rows := cursor.fetchmany(BATCH):
            yield [dict(zip(cols, (*r[:-1], bool(r[-1])), strict=True)) for r in rows]
