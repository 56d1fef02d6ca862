"""The record of an object-store DEST read back: parts written by runs, read through a
temporary local SQLite database with the local record's schema.

The format of the parts is :mod:`h5sidecar.dest._record_parts`.  Reading loads every part into a
temporary database (:class:`Mirror`), one batch of rows at a time and newest row first, so that
lookups, the run report and its export are the local record's own queries
(:class:`~h5sidecar.dest._record_db.Record`) and never hold every granule as Python
objects.  Writing parts is :mod:`._parts_writer`.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq

from h5sidecar._pids import pid_alive
from h5sidecar.dest._dest_walk import entry_mtime
from h5sidecar.dest._locations import filesystem
from h5sidecar.dest._record_db import Record
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
from h5sidecar.dest._record_sql import SCHEMA as RECORD_SCHEMA
from h5sidecar.dest._record_sql import SCHEMA_VERSION, insert_run
from h5sidecar.dest._report import RunReport

__all__ = ["COMPACT_PARTS", "MIRROR_PREFIX", "Mirror", "compact", "has_parts", "newest_part_mtime",
           "store_of", "sweep_stale_mirrors"]

log = logging.getLogger("h5sidecar.workflows")

#: A run's end compacts DEST's parts when there are more than this many.
COMPACT_PARTS = 64
#: Rows per batch read from a part or written to a compacted one.
_BATCH = 20_000

_MIRROR_SQL = """
ALTER TABLE granules ADD COLUMN key TEXT;
ALTER TABLE granules ADD COLUMN run_uid TEXT;
CREATE TABLE gone (url TEXT PRIMARY KEY, key TEXT NOT NULL, run_uid TEXT);
CREATE TABLE headers (uid TEXT PRIMARY KEY, id INTEGER NOT NULL, key TEXT NOT NULL,
                      doc TEXT NOT NULL);
"""
_ROW = ("url, name, sidecar, status, source, n_virtual, n_inlined, n_skipped, skipped, "
        "n_chunks, sidecar_bytes, seconds, error, run, updated, stamp, key, run_uid")
_N = len(_ROW.split(","))
# the newest row wins, a tombstone as new or newer removes it (parts are read in any order)
_UPSERT = (
    f"INSERT INTO granules ({_ROW}) SELECT {', '.join(f'?{i}' for i in range(1, _N + 1))} "
    "WHERE NOT EXISTS (SELECT 1 FROM gone WHERE gone.url = ?1 AND gone.key >= ?17) "
    "ON CONFLICT(url) DO UPDATE SET "
    + ", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in _ROW.split(",")[1:])
    + " WHERE excluded.key > granules.key"
)
_TOMB = ("INSERT INTO gone (url, key, run_uid) VALUES (?1, ?2, ?3) ON CONFLICT(url) DO UPDATE "
         "SET key = excluded.key, run_uid = excluded.run_uid WHERE excluded.key > gone.key")
_UNTOMB = "DELETE FROM granules WHERE url = ?1 AND key < ?2"


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


class Mirror:
    """DEST's parts loaded into a temporary SQLite database with the schema of a local record,
    read (and, for the run writing, updated) through :attr:`record`.

    Parameters
    ----------
    fs, root
        DEST's filesystem and path.
    paths : sequence of str, optional
        Load only these parts (a compaction's); a part gone meanwhile raises
        FileNotFoundError.  Default: every part, listed again if one vanishes.
    """

    def __init__(self, fs: Any, root: str, paths: Sequence[str] | None = None) -> None:
        sweep_stale_mirrors()
        self._dir = tempfile.mkdtemp(prefix=f"{MIRROR_PREFIX}{os.getpid()}-")
        self.path = os.path.join(self._dir, "record.sqlite")
        self.parts: list[str] = []
        try:
            db = sqlite3.connect(self.path, isolation_level=None)
            try:
                # a scratch copy: no journal, no sync (a crash loses only the copy)
                db.execute("PRAGMA journal_mode = OFF")
                db.execute("PRAGMA synchronous = OFF")
                db.executescript(f"BEGIN; {RECORD_SCHEMA} {_MIRROR_SQL} "
                                 f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
                db.execute("BEGIN")
                for path, meta, batches in self._parts(fs, root, paths):
                    _load(db, meta, batches)
                    self.parts.append(path)
                _number_runs(db)
                db.execute("COMMIT")
            finally:
                db.close()
            self.record = Record(self.path)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise

    @staticmethod
    def _parts(fs: Any, root: str, paths: Sequence[str] | None
               ) -> Iterator[tuple[str, dict[str, Any], Iterator[pa.RecordBatch]]]:
        if paths is None:
            yield from read_batches(fs, root, batch_size=_BATCH)
            return
        for path in paths:
            with open_part(fs, path) as pf:
                yield path, part_meta(pf), pf.iter_batches(_BATCH)

    def uid_of(self, run: int) -> str | None:
        """The part-level id of the mirror's run ``run``."""
        row = self.record._db.execute("SELECT uid FROM headers WHERE id = ?", (run,)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        """Close and delete the temporary database."""
        try:
            self.record.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _load(db: sqlite3.Connection, meta: Mapping[str, Any], batches: Iterable[pa.RecordBatch]
          ) -> None:
    """Load one part's run headers and rows into the mirror ``db``."""
    for h in meta.get("runs", ()):
        found = db.execute("SELECT key FROM headers WHERE uid = ?", (h["uid"],)).fetchone()
        if found is None:
            n = db.execute("SELECT count(*) FROM headers").fetchone()[0]
            db.execute("INSERT INTO headers VALUES (?, ?, ?, ?)",
                       (h["uid"], n + 1, h["key"], json.dumps(h)))
        elif h["key"] > found[0]:
            db.execute("UPDATE headers SET key = ?, doc = ? WHERE uid = ?",
                       (h["key"], json.dumps(h), h["uid"]))
    for batch in batches:
        # column lists zipped into tuples: a third of the time of one dict per row
        c = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        dead = c["deleted"]
        if any(dead):
            tombs = [(u, k, r) for u, k, r, d in zip(c["url"], c["key"], c["run"], dead,
                                                        strict=True) if d]
            db.executemany(_TOMB, tombs)
            db.executemany(_UNTOMB, [t[:2] for t in tombs])
        n = len(dead)
        rows = zip(c["url"], c["name"], c["sidecar"], c["status"], c["source"], c["n_virtual"],
                   c["n_inlined"], c["n_skipped"], c["skipped"], c["n_chunks"],
                   c["sidecar_bytes"], c["seconds"], c["error"], [0] * n, [0.0] * n,
                   [None] * n, c["key"], c["run"], dead, strict=True)
        db.executemany(_UPSERT, (r[:-1] for r in rows if not r[-1]))


def _number_runs(db: sqlite3.Connection) -> None:
    """Fill ``runs`` (and ``roots``) from the headers, oldest key first, so the newest run has
    the largest id (what the local record's queries take for the latest run), and point each
    row at its run."""
    headers = list(db.execute("SELECT uid, doc FROM headers ORDER BY key, id"))
    ids = {}
    for uid, doc in headers:
        h = json.loads(doc)
        report = RunReport.from_dict({**h["report"], "granules": []})
        run = insert_run(db, report, complete=report.complete)
        db.execute("UPDATE runs SET orphaned = ?, carried = ?, content = ?, confirmed = ? "
                   "WHERE id = ?", (json.dumps(list(report.orphaned)), report.carried_over,
                                    None if h.get("content") is None
                                    else json.dumps(h["content"], sort_keys=True),
                                    int(h.get("confirmed", 0)), run))
        ids[uid] = run
    db.executemany("UPDATE headers SET id = ? WHERE uid = ?", [(i, u) for u, i in ids.items()])
    db.execute("UPDATE granules SET run = coalesce("
               "(SELECT id FROM headers WHERE uid = granules.run_uid), 0)")


# -- compacting ----------------------------------------------------------------------------------
def compact(fs: Any, root: str, threshold: int | None = None) -> str | None:
    """When DEST has more than ``threshold`` (:data:`COMPACT_PARTS`) parts, replace those listed now by one part holding
    the newest row of each granule (tombstones kept; rows keep their keys); returns its path.

    The new part is written (one upload) before any covered part is deleted; a covered part
    that vanished meanwhile (a concurrent compaction) leaves the parts as they are.
    """
    paths = list_parts(fs, root)
    if len(paths) <= (COMPACT_PARTS if threshold is None else threshold):
        return None
    try:
        mirror = Mirror(fs, root, paths)
    except FileNotFoundError:
        log.info("another run is compacting %s: left to it", parts_root(root))
        return None
    key = part_key()
    local = os.path.join(mirror._dir, "compacted.parquet")
    try:
        db = mirror.record._db
        runs = [json.loads(d) for (d,) in db.execute("SELECT doc FROM headers ORDER BY key")]
        roots = [r for (r,) in db.execute("SELECT root FROM roots ORDER BY seq")]
        meta = {"format": 1, "runs": runs, "roots": roots, "compacted": len(paths)}
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


def _compacted_rows(db: sqlite3.Connection) -> Iterator[list[dict[str, Any]]]:
    cols = [f.name for f in SCHEMA]
    live = db.execute("SELECT key, url, name, sidecar, status, source, "
                      "json_extract(source, '$.url'), n_virtual, n_inlined, n_skipped, skipped, "
                      "n_chunks, sidecar_bytes, seconds, error, run_uid, 0 FROM granules")
    gone = db.execute("SELECT key, url, '', '', '', NULL, NULL, 0, 0, 0, '[]', 0, 0, '{}', "
                      "NULL, run_uid, 1 FROM gone")
    for cursor in (live, gone):
        while rows := cursor.fetchmany(_BATCH):
            yield [dict(zip(cols, (*r[:-1], bool(r[-1])), strict=True)) for r in rows]
