"""The record of an object-store DEST kept loaded between runs: a local SQLite database per DEST
holding the parts already read, so that a reader reads only the parts written since.

Parts (:mod:`._record_parts`) are immutable and uniquely named (a new name for every write), so
the state of the record is a function of the set of part names, and a database that loaded some
of them needs only the others: a refresh lists the parts (one LIST), loads those it has not
seen, newest row winning as in a temporary mirror, and remembers their names.  A part a
compaction wrote whose ``covers`` (the parts it replaced) were all loaded already holds nothing
new: only its footer is read.  Parts that vanished must be covered by a compaction that was
seen; otherwise (DEST emptied, a part deleted by hand, another store under the same name) the
database is emptied and loaded again from the parts listed, so it never answers with rows the
store no longer holds.

Why a cache rather than querying the parts where they are (DuckDB or ``pyarrow.dataset`` over
``s3://``): a run's questions are point lookups (a URL, a sidecar, a name) and one range of
URLs (the run's source root), asked many times; parts are written in run order, not sorted by
URL, so their row-group statistics prune nothing, and every question would read every part
(at 100,000 rows, 0.6 MB per question, the same bytes each time).  The cache answers them from
SQLite's indexes (the local record's queries, :class:`~h5sidecar.dest._record_db.Record`),
after reading each part once on this machine.  Measured at 100,000 recorded granules
(benchmarks/README.md, s3record): a run touching one granule reads the one part written since
(8.5 KB) instead of every part (0.57 MB), and opening the record takes 0.01-0.05 s and +3 MB
of RSS instead of 0.7-5 s and +120 MB.  The first fill on a machine is a bulk load into a
private file linked into place once complete (:mod:`._record_fill`), once.

The database is a cache: removing it costs one full load.  Its folder is
:class:`~h5sidecar.settings.RecordSettings`'s ``record_cache`` (``$H5SIDECAR_RECORD_CACHE``;
default ``$XDG_CACHE_HOME/h5sidecar/records``, else ``~/.cache/h5sidecar/records``; empty: no
cache, every reader loads a temporary mirror); one file per DEST, named by a hash of the
store's options (secrets left out) and DEST's path.  Each use touches the file; when a new
file is made, those not used for ``record_cache_max_age_days`` (DESTs no longer read here)
are removed (:func:`prune_cache`), so the folder does not grow with every DEST ever read.
A refresh runs in one write transaction (``BEGIN IMMEDIATE``): concurrent readers on this
machine take turns, and a reader killed mid-refresh leaves the database as it was (the write
is rolled back).  Readers see what later refreshes add, never less.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from h5sidecar.dest._record_parts import list_parts, open_part, part_meta, parts_root
from h5sidecar.dest._record_sql import SCHEMA as RECORD_SCHEMA
from h5sidecar.dest._record_sql import SCHEMA_VERSION, busy, connect, insert_run
from h5sidecar.dest._report import RunReport
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.settings import RecordSettings, from_env

__all__ = ["ABOUT_SQL", "CACHE_FILE_NAME", "FillProgress", "cache_file", "create_schema", "load_listed",
           "load_part", "number_runs", "open_cache", "prune_cache", "refresh", "settle"]
log = logging.getLogger("h5sidecar.workflows")

#: Version of the cache's layout, in its file names: a new layout starts new files.
_LAYOUT = 1
#: Rows per batch read from a part.
BATCH = 20_000
#: Times a refresh lists the parts again when a compaction removed one it was about to read.
_RELISTS = 5
#: Storage options left out of the cache's name (secrets; the name stays one per store).
_SECRET_WORDS = ("secret", "key", "token", "password", "credential", "session")

_MIRROR_SQL = """
ALTER TABLE granules ADD COLUMN key TEXT;
ALTER TABLE granules ADD COLUMN run_uid TEXT;
CREATE TABLE gone (url TEXT PRIMARY KEY, key TEXT NOT NULL, run_uid TEXT);
CREATE TABLE headers (uid TEXT PRIMARY KEY, id INTEGER NOT NULL, key TEXT NOT NULL,
                      doc TEXT NOT NULL);
CREATE TABLE parts (name TEXT PRIMARY KEY);
CREATE TABLE covered (name TEXT PRIMARY KEY);
"""
#: What a cache file is for (``dest``: DEST's URL), for ``h5sidecar cache list``; made on a
#: refresh, so files of an earlier version get it on their next use.
ABOUT_SQL = "CREATE TABLE IF NOT EXISTS about (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_ROW = ("url, name, sidecar, status, source, n_virtual, n_inlined, n_skipped, skipped, "
        "n_chunks, sidecar_bytes, seconds, error, run, updated, stamp, key, run_uid")
_N = len(_ROW.split(","))
# the newest row wins, a tombstone as new or newer removes it (parts are read in any order);
# ``run`` is the id of the header of the row's run (0: a part without one)
_VALUES = ", ".join("coalesce((SELECT id FROM headers WHERE uid = ?18), 0)" if i == 14
                    else f"?{i}" for i in range(1, _N + 1))
_UPSERT = (
    f"INSERT INTO granules ({_ROW}) SELECT {_VALUES} "
    "WHERE NOT EXISTS (SELECT 1 FROM gone WHERE gone.url = ?1 AND gone.key >= ?17) "
    "ON CONFLICT(url) DO UPDATE SET "
    + ", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in _ROW.split(",")[1:])
    + " WHERE excluded.key > granules.key"
)
#: The same without the tombstone check nor the header lookup, for a bulk fill (run id given).
_BULK_UPSERT = (
    f"INSERT INTO granules ({_ROW}) VALUES ({', '.join(f'?{i}' for i in range(1, _N + 1))}) "
    "ON CONFLICT(url) DO UPDATE SET "
    + ", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in _ROW.split(",")[1:])
    + " WHERE excluded.key > granules.key"
)
_TOMB = ("INSERT INTO gone (url, key, run_uid) VALUES (?1, ?2, ?3) ON CONFLICT(url) DO UPDATE "
         "SET key = excluded.key, run_uid = excluded.run_uid WHERE excluded.key > gone.key")
_UNTOMB = "DELETE FROM granules WHERE url = ?1 AND key < ?2"


@dataclass
class FillProgress:
    """How far a first fill of the record cache got, updated by the thread that fills it and
    read by others meanwhile (the gateway's ``/healthz`` while it warms up).

    Attributes
    ----------
    parts, parts_done, rows : int
        Parts of DEST to load (None: not listed yet), parts loaded and rows read so far.
    started : float or None
        When the fill began (``time.time()``; None: no fill has run).
    on_part : callable or None
        Called with this object in the filling thread after each part (a progress report;
        the gateway's tests hold a fill there to see it warming).
    """

    parts: int | None = None
    parts_done: int = 0
    rows: int = 0
    started: float | None = None
    on_part: Callable[[FillProgress], None] | None = None

    def begin(self) -> None:
        """A fill starts: count from nothing."""
        self.parts, self.parts_done, self.rows, self.started = None, 0, 0, time.time()

    def counted(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches``, their rows added to :attr:`rows` as they are read."""
        for batch in batches:
            yield batch
            self.rows += batch.num_rows


def cache_file(fs: Any, root: str, settings: RecordSettings | None = None) -> str | None:
    """Path of the cache of DEST ``root`` on ``fs`` (None: caching is off), in the folder of
    ``settings`` (default: ``from_env(RecordSettings)``, read now)."""
    folder = (settings or from_env(RecordSettings)).cache_folder()
    if folder is None:
        return None
    options = {k: v for k, v in dict(getattr(fs, "storage_options", {}) or {}).items()
               if not any(w in k.lower() for w in _SECRET_WORDS)}
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    ident = json.dumps([protocol, root.rstrip("/"), options], sort_keys=True, default=str)
    digest = hashlib.sha256(ident.encode()).hexdigest()[:32]
    return os.path.join(folder, f"v{_LAYOUT}-{digest}.sqlite")


def create_schema(db: sqlite3.Connection) -> None:
    """Create a mirror's tables (the local record's, and what parts add) in ``db``."""
    db.executescript(f"BEGIN; {RECORD_SCHEMA} {_MIRROR_SQL} "
                     f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")


def open_cache(path: str, *, max_age_days: float = 0.0) -> sqlite3.Connection:
    """The cache database at ``path``, created (empty) when missing: complete under a
    temporary name, then linked into place (concurrent first readers agree on one file).

    An existing file is touched (its modification time is its last use, what
    :func:`prune_cache` goes by); making a new one first removes the files of its folder not
    used for ``max_age_days`` (0: none).
    """
    if os.path.exists(path):
        with contextlib.suppress(OSError):
            os.utime(path)
    else:
        if max_age_days > 0:
            prune_cache(os.path.dirname(path), max_age_days)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                create_schema(db)
                db.execute("PRAGMA journal_mode = WAL")  # readers read while one refreshes
            finally:
                db.close()
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
    return connect(path)


#: Names of the cache's files (any layout version) and of a creation's leftovers.
CACHE_FILE_NAME = re.compile(r"v\d+-[0-9a-f]{32}\.sqlite(\.[0-9a-f]{32}\.tmp)?")


def prune_cache(folder: str, max_age_days: float, *, now: float | None = None) -> list[str]:
    """Remove the cache files of ``folder`` (with their ``-wal``/``-shm``) not used for
    ``max_age_days``: the caches of DESTs no longer read from this machine.  Returns the
    paths removed.  Other files are left alone; a reader that opens a file as it goes loses
    only its cache (the next reader loads the record again)."""
    cutoff = (time.time() if now is None else now) - max_age_days * 86_400
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder yet, or not readable: nothing to prune
        return removed
    for entry in entries:
        if not CACHE_FILE_NAME.fullmatch(entry.name):
            continue
        try:  # a WAL written after the file's last touch is a later use
            last = max(os.stat(p).st_mtime for p in (entry.path, entry.path + "-wal")
                       if os.path.exists(p))  # fmt: skip
        except (OSError, ValueError):
            continue  # removed meanwhile
        if last >= cutoff:
            continue
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path + suffix)
        removed.append(entry.path)
    if removed:
        log.info("removed %d record cache file(s) not used for %g days from %s",
                 len(removed), max_age_days, folder)  # fmt: skip
    return removed


def refresh(db: sqlite3.Connection, fs: Any, root: str, path: str) -> int:
    """Bring the cache ``db`` (at ``path``) up to DEST's parts: load those not loaded yet, in
    one transaction; returns how many parts' rows were read."""
    with busy(path):
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(ABOUT_SQL)
            db.execute("INSERT OR IGNORE INTO about VALUES ('dest', ?)",  # no write when known
                       (fs.unstrip_protocol(root.rstrip("/")),))
            read = load_listed(db, fs, root)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    return read


def load_listed(db: sqlite3.Connection, fs: Any, root: str, *, bulk: bool = False,
                progress: FillProgress | None = None) -> int:
    """Load the parts of DEST listed now that ``db`` has not loaded (in the caller's
    transaction); returns how many parts' rows were read.  ``bulk``: see :func:`load_part`;
    ``progress``: counted there as parts and rows are read."""
    read = 0
    for _ in range(_RELISTS):
        listed = {p.rsplit("/", 1)[-1]: p for p in list_parts(fs, root)}
        known = {n for (n,) in db.execute("SELECT name FROM parts")}
        missed = False
        todo = sorted(listed.keys() - known)
        if progress is not None:
            progress.parts = progress.parts_done + len(todo)
        for name in todo:
            try:
                read += _take(db, fs, listed[name], name, known, bulk, progress)
            except FileNotFoundError:
                missed = True  # compacted meanwhile: the compacted part is listed next time
            if progress is not None:
                progress.parts_done += 1
                if progress.on_part is not None:
                    progress.on_part(progress)
        covered = {n for (n,) in db.execute("SELECT name FROM covered")}
        vanished = known - listed.keys()
        if vanished - covered:
            # not a compaction seen here: DEST was emptied or edited; the rows loaded from
            # those parts may be gone, so start again from what is listed
            _reset(db)
            continue
        db.executemany("DELETE FROM parts WHERE name = ?", [(n,) for n in vanished])
        db.executemany("DELETE FROM covered WHERE name = ?", [(n,) for n in vanished])
        if not missed:
            if read:
                number_runs(db)
            return read
    raise FileNotFoundError(f"the parts of {parts_root(root)} kept vanishing while read "
                            "(compactions running): read again")


def _take(db: sqlite3.Connection, fs: Any, path: str, name: str, known: set[str],
          bulk: bool, progress: FillProgress | None = None) -> int:
    """Load the part at ``path`` unless it is a compaction of parts all loaded already (then
    only its footer is read); returns 1 when its rows were read."""
    try:
        with open_part(fs, path) as pf:
            meta = part_meta(pf)
            covers = [str(c) for c in meta.get("covers", ())]
            rows = not covers or not set(covers) <= known
            if rows:
                batches = pf.iter_batches(BATCH)
                load_part(db, meta, batches if progress is None else progress.counted(batches),
                          bulk=bulk)  # fmt: skip
    except pa.ArrowInvalid as exc:  # not Parquet, truncated: say which part
        raise InvalidReferenceError(f"the record part {path} cannot be read ({exc}): restore "
                                    "it, or remove it") from exc  # fmt: skip
    db.execute("INSERT OR IGNORE INTO parts VALUES (?)", (name,))
    db.executemany("INSERT OR IGNORE INTO covered VALUES (?)", [(c,) for c in covers])
    known.add(name)
    return int(rows)


def _reset(db: sqlite3.Connection) -> None:
    for table in ("granules", "gone", "headers", "runs", "roots", "parts", "covered"):
        db.execute(f"DELETE FROM {table}")


def load_part(db: sqlite3.Connection, meta: Mapping[str, Any],
              batches: Iterable[pa.RecordBatch], *, bulk: bool = False) -> None:
    """Load one part's run headers and rows into the mirror ``db`` (newest row wins).

    ``bulk``: ``db`` is being filled from nothing (:mod:`._record_fill`): rows are upserted
    without asking ``gone`` and tombstones only recorded; :func:`settle` then removes the rows
    a tombstone as new or newer outranks (the same end state, for any order of the parts).
    """
    for h in meta.get("runs", ()):
        found = db.execute("SELECT key FROM headers WHERE uid = ?", (h["uid"],)).fetchone()
        if found is None:
            top = db.execute("SELECT coalesce(max(id), 0) FROM headers").fetchone()[0]
            db.execute("INSERT INTO headers VALUES (?, ?, ?, ?)",
                       (h["uid"], top + 1, h["key"], json.dumps(h)))
        elif h["key"] > found[0]:
            db.execute("UPDATE headers SET key = ?, doc = ? WHERE uid = ?",
                       (h["key"], json.dumps(h), h["uid"]))
    # a run's header id, looked up here once rather than by a subquery per row
    ids = dict(db.execute("SELECT uid, id FROM headers")) if bulk else {}
    for batch in batches:
        # column lists zipped into tuples: a third of the time of one dict per row
        c = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        dead = c["deleted"]
        n = len(dead)
        if any(dead):
            tombs = [(u, k, r) for u, k, r, d in zip(c["url"], c["key"], c["run"], dead,
                                                        strict=True) if d]
            db.executemany(_TOMB, tombs)
            if not bulk:
                db.executemany(_UNTOMB, [t[:2] for t in tombs])
        live = [c[k] for k in ("url", "name", "sidecar", "status", "source", "n_virtual",
                               "n_inlined", "n_skipped", "skipped", "n_chunks",
                               "sidecar_bytes", "seconds", "error")]
        # bulk: the run's id given; else looked up by the statement
        run = [ids.get(u, 0) for u in c["run"]] if bulk else [0] * n
        columns = [*live, run, [0.0] * n, [None] * n, c["key"], c["run"]]
        rows: Iterable[tuple[Any, ...]] = zip(*columns, strict=True)
        if any(dead):
            rows = itertools.compress(rows, [not d for d in dead])
        db.executemany(_BULK_UPSERT if bulk else _UPSERT, rows)


def settle(db: sqlite3.Connection) -> None:
    """End a bulk fill (:func:`load_part` with ``bulk``): remove the rows outranked by a
    tombstone as new or newer (what a refresh never inserts)."""
    db.execute("DELETE FROM granules WHERE url IN (SELECT gone.url FROM gone JOIN granules g "
               "ON g.url = gone.url WHERE gone.key >= g.key)")


def number_runs(db: sqlite3.Connection) -> None:
    """Fill ``runs`` (and ``roots``) from the headers so that run ids follow the headers'
    keys (the newest run has the largest id: what the local record's queries take for the
    latest run).

    A header keeps the id it was first loaded with while the order holds (sequential runs), so
    the rows stay as they are; a run whose newest part outranks a later-loaded run (runs that
    overlapped) gets a new id, and its rows are pointed at it (a scan, only then).
    """
    heads = list(db.execute("SELECT uid, id, doc FROM headers ORDER BY key, id"))
    top = max((i for _, i, _ in heads), default=0)
    last, moved, ordered = 0, [], []
    for uid, i, doc in heads:
        if i <= last:
            top += 1
            i = top
            moved.append((i, uid))
        last = i
        ordered.append((i, doc))
    db.executemany("UPDATE headers SET id = ? WHERE uid = ?", moved)
    db.executemany("UPDATE granules SET run = ? WHERE run_uid = ?", moved)
    db.execute("DELETE FROM runs")
    db.execute("DELETE FROM roots")
    for i, doc in ordered:
        h = json.loads(doc)
        report = RunReport.from_dict({**h["report"], "granules": []})
        run = insert_run(db, report, complete=report.complete)
        db.execute("UPDATE runs SET id = ?, orphaned = ?, carried = ?, content = ?, "
                   "confirmed = ? WHERE id = ?",
                   (i, json.dumps(list(report.orphaned)), report.carried_over,
                    None if h.get("content") is None
                    else json.dumps(h["content"], sort_keys=True),
                    int(h.get("confirmed", 0)), run))
