"""The SQL of DEST's record (:mod:`._record_db`): schema, upgrades between versions,
connections, and how a :class:`GranuleResult` is stored in a ``granules`` row and read back.

Kept apart from the record's operations so each module holds one concern; nothing here knows
about runs beyond the rows it writes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator
from typing import Any

from h5sidecar.dest._report import ErrorRecord, GranuleResult, RunReport
from h5sidecar.errors import RecordBusyError

__all__ = [
    "BUSY_TIMEOUT_MS",
    "COLUMNS",
    "G_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "UPGRADES",
    "busy",
    "connect",
    "insert_run",
    "result_of",
    "upgrade",
    "upsert",
]

log = logging.getLogger("h5sidecar.workflows")

SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 60_000

SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL, dest TEXT NOT NULL, format TEXT NOT NULL, options TEXT NOT NULL,
    started TEXT NOT NULL, finished TEXT NOT NULL, seconds REAL NOT NULL,
    complete INTEGER NOT NULL, version TEXT NOT NULL, orphaned TEXT NOT NULL DEFAULT '[]',
    carried INTEGER NOT NULL DEFAULT 0, content TEXT, confirmed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE roots (seq INTEGER PRIMARY KEY AUTOINCREMENT, root TEXT NOT NULL UNIQUE);
CREATE TABLE granules (
    url TEXT PRIMARY KEY, name TEXT NOT NULL, sidecar TEXT NOT NULL, status TEXT NOT NULL,
    source TEXT, n_virtual INTEGER NOT NULL, n_inlined INTEGER NOT NULL,
    n_skipped INTEGER NOT NULL, skipped TEXT NOT NULL, n_chunks INTEGER NOT NULL,
    sidecar_bytes INTEGER NOT NULL, seconds TEXT NOT NULL, error TEXT,
    run INTEGER NOT NULL, updated REAL NOT NULL, stamp TEXT, seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX granules_by_name ON granules (name, url);
CREATE INDEX granules_by_sidecar ON granules (sidecar);
CREATE INDEX granules_by_seq ON granules (seq);
CREATE TABLE seqs (last INTEGER NOT NULL, uid TEXT NOT NULL);
INSERT INTO seqs VALUES (0, lower(hex(randomblob(16))));
"""

#: From each version to the next (``user_version`` is set by :func:`upgrade`).
UPGRADES = {
    1: "ALTER TABLE runs ADD COLUMN content TEXT; "
       "ALTER TABLE runs ADD COLUMN confirmed INTEGER NOT NULL DEFAULT 0; "
       "ALTER TABLE granules ADD COLUMN stamp TEXT;",
    2: "ALTER TABLE granules ADD COLUMN seq INTEGER NOT NULL DEFAULT 0; "
       "CREATE INDEX granules_by_seq ON granules (seq); "
       "CREATE TABLE seqs (last INTEGER NOT NULL, uid TEXT NOT NULL); "
       "INSERT INTO seqs VALUES (0, lower(hex(randomblob(16))));",
}

COLUMNS = ("url, name, sidecar, status, source, n_virtual, n_inlined, n_skipped, skipped, "
            "n_chunks, sidecar_bytes, seconds, error")
G_COLUMNS = ", ".join(f"g.{c.strip()}" for c in COLUMNS.split(","))


def upgrade(db: sqlite3.Connection, path: str) -> int:
    """Bring an older record to :data:`SCHEMA_VERSION` in one transaction (concurrent first
    opens: the second finds it done); returns the version now."""
    with busy(path):
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            while version in UPGRADES:
                for statement in UPGRADES[version].split(";"):
                    if statement.strip():
                        db.execute(statement)
                version += 1
                db.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    log.info("upgraded the record %s to schema version %d", path, version)
    return int(version)


@contextlib.contextmanager
def busy(path: str) -> Iterator[None]:
    """Turn SQLite's "cannot write now" errors into :class:`RecordBusyError`."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            raise RecordBusyError(
                f"the record {path} stayed locked by another process for more than "
                f"{BUSY_TIMEOUT_MS // 1000} s ({exc}): another h5sidecar run (or a tool holding "
                "the database open for writing) is busy with DEST; re-run when it is done"
            ) from exc
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            raise RecordBusyError(
                f"the record {path} cannot be written ({exc}): DEST or the record is read-only; "
                "index into a writable DEST, or read it with `h5sidecar report DEST`"
            ) from exc
        raise


def connect(path: str) -> sqlite3.Connection:
    # autocommit mode: transactions are explicit (BEGIN IMMEDIATE ... COMMIT)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA synchronous = NORMAL")
    return db


def insert_run(db: sqlite3.Connection, report: RunReport, *, complete: bool) -> int:
    cur = db.execute(
        "INSERT INTO runs (source, dest, format, options, started, finished, seconds, complete, "
        "version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (report.source, report.dest, report.format, json.dumps(dict(report.options)),
         report.started, report.finished, report.seconds, int(complete), report.version))
    db.executemany("INSERT OR IGNORE INTO roots (root) VALUES (?)",
                   [(r,) for r in report.source_roots])
    assert cur.lastrowid is not None
    return cur.lastrowid


def upsert(db: sqlite3.Connection, run: int, results: Iterable[GranuleResult],
            stamp: str | None = None) -> None:
    """Write ``results``' rows (inside the caller's write transaction).

    Each row gets the next ``seq`` of the record's counter (``seqs.last``, never reset, not
    even when rows are deleted; ``seqs.uid`` names the record, made anew with the file): writers take turns (``BEGIN IMMEDIATE``), so a reader that saw the
    counter at M has seen every row numbered up to M, and every row written after it is
    numbered above M (:meth:`~h5sidecar.dest.Record.changed_since`).
    """
    results = list(results)
    now = time.time()
    base = db.execute("SELECT last FROM seqs").fetchone()[0]
    db.execute("UPDATE seqs SET last = ?", (base + len(results),))
    db.executemany(
        f"INSERT OR REPLACE INTO granules ({COLUMNS}, run, updated, stamp, seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(g.url, g.name, g.sidecar, g.status, _dumps(g.source), g.n_virtual, g.n_inlined,
          g.n_skipped, json.dumps([dict(s) for s in g.skipped]), g.n_chunks, g.sidecar_bytes,
          json.dumps(dict(g.seconds)), None if g.error is None else json.dumps(g.error.to_dict()),
          run, now, stamp, base + k) for k, g in enumerate(results, start=1)])


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(dict(value))


def result_of(row: tuple[Any, ...]) -> GranuleResult:
    (url, name, sidecar, status, source, n_virtual, n_inlined, n_skipped, skipped, n_chunks,
     sidecar_bytes, seconds, error) = row
    return GranuleResult(
        url=url, sidecar=sidecar, status=status, name=name,
        source=None if source is None else json.loads(source), n_virtual=n_virtual,
        n_inlined=n_inlined, n_skipped=n_skipped, skipped=tuple(json.loads(skipped)),
        n_chunks=n_chunks, sidecar_bytes=sidecar_bytes, seconds=json.loads(seconds),
        error=None if error is None else ErrorRecord(**json.loads(error)),
    )
