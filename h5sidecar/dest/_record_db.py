"""The record of a local DEST: an SQLite database, ``DEST/_h5sidecar.sqlite``.

What is indexed lives here, one row per granule keyed by its source URL, written by the run
that processed it as soon as it finishes (one transaction per granule), so a run that touched
one granule writes one row, not the whole report, and a run killed at any moment (``kill -9``
included) keeps every row it committed and none half-written.  :func:`read_report` rebuilds
the run report (:class:`RunReport`) from it; ``h5sidecar report DEST --json`` exports it.

Why SQLite: it is in the standard library (nothing to install on a cluster's workers), one
file, and its write-ahead log lets readers (the gateway, ``h5sidecar report``) read while runs
write, and several runs on one DEST write in turn (``busy_timeout``).  ``synchronous=NORMAL``
keeps committed rows through a killed process (a power cut may lose the last transactions,
never corrupt the file).  Object stores cannot host it: there the record is in Parquet parts
(:mod:`._record_store`).

The file is created complete or not at all: its schema (and the rows of an old
``_report.json``, the migration) are written to a temporary file which is then hard-linked into
place, so concurrent first runs agree on one database and a crash mid-migration leaves the JSON
authoritative.  A migrated ``_report.json`` is renamed ``_report.json.migrated`` (kept for
audit, never read again).  Schema versions are ``PRAGMA user_version``.

The gateway's view (:mod:`._record_view`) and the catalog's listing (:mod:`._sidecar_listing`)
read two queries of this schema directly (``roots``, and ``granules`` by status): keep those
tables' columns stable.

Incremental runs decide from the record (:meth:`Record.lookup`): a run stores the settings that
shape a sidecar's content (``runs.content``), so a granule's row, joined with the run that
wrote it, says everything the sidecar's extras block would, and its ``stamp`` (size and
modification time of the sidecar's commit file when recorded) tells a sidecar rewritten or
damaged since by something else.  A re-run does not rewrite the rows
of granules it found up to date (it counts them, ``runs.confirmed``): a no-op run writes no
granule row.  Schema version 2 added those three columns; a version-1 record is upgraded in
place on first open (two ``ALTER TABLE``, no row rewritten).

Schema version 3 numbers the rows: each row written takes the next number of a counter
(``seqs``) that only grows, so "what was written since" is one indexed query
(:meth:`Record.mark`, :meth:`Record.changed_since`): how ``cube --append`` finds the granules
indexed since the cube was written without listing DEST.  A version-2 record is upgraded in
place (one column, one index and the counter; older rows are numbered 0).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from h5sidecar._modes import follow_umask
from h5sidecar.dest._locations import RECORD_NAME, REPORT_NAME
from h5sidecar.dest._record_sql import (
    COLUMNS,
    G_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    UPGRADES,
    busy,
    connect,
    insert_run,
    result_of,
    upgrade,
    upsert,
)
from h5sidecar.dest._report import GranuleResult, RunReport
from h5sidecar.errors import InvalidReferenceError, RecordBusyError

__all__ = ["Record", "open_record", "record_path"]

#: :meth:`RecordDb.changed_since`'s query (see there why it orders by expressions).
CHANGED_SINCE = ("SELECT name, sidecar FROM granules WHERE seq > ? AND status != 'failed' "
                 "ORDER BY +name, +url")

log = logging.getLogger("h5sidecar.workflows")

MIGRATED_SUFFIX = ".migrated"

#: Bound parameters per ``IN (...)`` lookup (SQLite's default limit is 32766; small batches
#: keep what one lookup holds small).
LOOKUP_BATCH = 500


def record_path(dest: str) -> str:
    """Where the record of the local DEST ``dest`` is (whether or not it exists)."""
    return os.path.join(dest.removeprefix("file://"), RECORD_NAME)


class Record:
    """An open record (one connection; not shared between threads or processes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db = connect(path)
        self._listed = False
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version in UPGRADES:
            try:
                version = upgrade(self._db, path)
            except RecordBusyError as exc:
                log.debug("%s: read as version %d", exc, version)  # a read-only DEST: reads work
            except BaseException:
                self.close()
                raise
        if version != SCHEMA_VERSION and version not in UPGRADES:
            self.close()
            raise InvalidReferenceError(
                f"the record {path} has schema version {version}, this h5sidecar reads "
                f"{SCHEMA_VERSION}: use the h5sidecar that wrote it, or export it with its "
                "`h5sidecar report DEST --json`"
            )

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with busy(self.path):
            if self._db.in_transaction:
                # a Ctrl-C that landed between an earlier BEGIN and its try below left that
                # transaction open: nothing of it was committed, so it is dropped
                self._db.execute("ROLLBACK")
            # IMMEDIATE takes the write lock at once, so busy_timeout covers the whole transaction
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- writing ---------------------------------------------------------------------------------
    def begin_run(self, report: RunReport, content: Mapping[str, Any] | None = None) -> int:
        """Record a run starting (``report``'s fields; its granules are ignored) and its
        source roots; returns the run's id for :meth:`put` and :meth:`end_run`.

        ``content`` (the settings that shape the sidecars' content, JSON-ready) is what
        :meth:`lookup` returns with each granule this run writes.
        """
        with self._write() as db:
            run = insert_run(db, report, complete=False)
            if content is not None:
                db.execute("UPDATE runs SET content = ? WHERE id = ?",
                           (json.dumps(dict(content), sort_keys=True), run))
            return run

    def put(self, run: int, result: GranuleResult, *, finished: str, seconds: float,
            stamp: str | None = None) -> None:
        """Record one granule's result (replacing the granule's earlier row) in one
        transaction, which also moves the run's ``finished`` time forward; ``stamp``
        identifies the sidecar's commit file as written (see :meth:`lookup`)."""
        with self._write() as db:
            upsert(db, run, [result], stamp)
            db.execute("UPDATE runs SET finished = ?, seconds = ? WHERE id = ?",
                       (finished, seconds, run))

    def end_run(self, run: int, *, finished: str, seconds: float, complete: bool,
                orphaned: Iterable[str] = (), confirmed: int = 0) -> None:
        """Record the end of a run (``complete`` is false for an interrupted one);
        ``confirmed`` granules were found up to date from their rows, not rewritten."""
        with self._write() as db:
            db.execute("UPDATE runs SET finished = ?, seconds = ?, complete = ?, orphaned = ?, "
                       "confirmed = ? WHERE id = ?",
                       (finished, seconds, int(complete), json.dumps(list(orphaned)), confirmed,
                        run))

    def import_report(self, report: RunReport, *, replace: bool = False) -> None:
        """Record a whole report as one run, in one transaction; ``replace`` first forgets
        every granule (the report is then the whole record)."""
        with self._write() as db:
            if replace:
                db.execute("DELETE FROM granules")
                db.execute("DELETE FROM roots")
            run = insert_run(db, report, complete=report.complete)
            # an imported report's carried-over granules are recorded under its run
            db.execute("UPDATE runs SET orphaned = ?, carried = ? WHERE id = ?",
                       (json.dumps(list(report.orphaned)), report.carried_over, run))
            upsert(db, run, report.granules)

    def drop(self, sidecars: Iterable[str]) -> int:
        """Forget the granules whose sidecar is one of ``sidecars``; returns how many."""
        with self._write() as db:
            return sum(db.execute("DELETE FROM granules WHERE sidecar = ?", (s,)).rowcount
                       for s in sidecars)

    # -- reading ---------------------------------------------------------------------------------
    def lookup(self, urls: Iterable[str]
               ) -> Iterator[tuple[GranuleResult, Mapping[str, Any] | None, str | None]]:
        """The rows of the granules ``urls`` (those recorded), each with the ``content`` of
        the run that wrote it and its sidecar's ``stamp`` (None: an imported report or a
        version-1 run), in batches of :data:`LOOKUP_BATCH` keys of the primary key."""
        batch: list[str] = []
        for url in itertools.chain(urls, [None]):
            if url is not None:
                batch.append(url)
                if len(batch) < LOOKUP_BATCH:
                    continue
            if not batch:
                break
            rows = self._db.execute(
                f"SELECT {G_COLUMNS}, r.content, g.stamp FROM granules g "
                "JOIN runs r ON r.id = g.run "
                f"WHERE g.url IN ({', '.join('?' * len(batch))})", batch).fetchall()
            batch = []
            for row in rows:
                yield (result_of(row[:-2]), None if row[-2] is None else json.loads(row[-2]),
                       row[-1])

    def by_names(self, names: list[str]) -> dict[str, GranuleResult]:
        """The granules of ``names`` (those recorded) by name; of two granules with one name,
        the one with the larger URL (as a report's granules sorted by name and URL, keyed by
        name, give it)."""
        out: dict[str, GranuleResult] = {}
        for start in range(0, len(names), LOOKUP_BATCH):
            part = names[start:start + LOOKUP_BATCH]
            for row in self._db.execute(f"SELECT {COLUMNS} FROM granules WHERE name IN "
                                        f"({', '.join('?' * len(part))}) ORDER BY name, url",
                                        part):
                out[row[1]] = result_of(row)
        return out

    def mark(self) -> tuple[str, int] | None:
        """Which record this is (a random id made with the file: a DEST removed and indexed
        anew has another) and where its row counter stands: every row written later is
        numbered above it (:meth:`changed_since`); None for a record older than schema
        version 3 (opened read-only, so not upgraded), which numbers no rows."""
        try:
            uid, last = self._db.execute("SELECT uid, last FROM seqs").fetchone()
        except sqlite3.OperationalError:
            return None
        return str(uid), int(last)

    def changed_since(self, mark: int) -> Iterator[tuple[str, str]]:
        """``(name, sidecar)`` of the granules whose row was written after :meth:`mark` gave
        the counter ``mark`` (indexed, re-indexed or imported since), but those marked failed, by name;
        one indexed query (a run that touched one granule: one row).

        The order is by expressions (``+name``), so SQLite searches the ``seq`` index and
        sorts the few rows found: ordered by the columns, it walked the ``name`` index over
        every granule to avoid that sort (0.46 s at a million granules for one row)."""
        yield from self._db.execute(CHANGED_SINCE, (mark,))

    @contextlib.contextmanager
    def reading(self) -> Iterator[Record]:
        """One read snapshot for the queries made inside (a run writing meanwhile is seen
        whole or not at all)."""
        self._db.execute("BEGIN")
        try:
            yield self
        finally:
            self._db.execute("COMMIT")

    def note_listed(self, urls: Iterable[str]) -> None:
        """Remember (in a temporary table of this connection) the URLs this run listed, so
        :meth:`carried` leaves out the granules it found up to date without rewriting."""
        if not self._listed:
            self._db.execute("CREATE TEMP TABLE listed (url TEXT PRIMARY KEY)")
            self._listed = True
        with busy(self.path):
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR IGNORE INTO temp.listed VALUES (?)",
                                 ((u,) for u in urls))
            self._db.execute("COMMIT")

    def chunks_of(self, result: GranuleResult) -> int:
        """The chunk count recorded for ``result``'s granule when its row names the same
        sidecar and source identity (an up-to-date granule keeps it), else 0."""
        row = self._db.execute("SELECT sidecar, source, n_chunks FROM granules WHERE url = ?",
                               (result.url,)).fetchone()
        if row is None or row[0] != result.sidecar or row[1] is None:
            return 0
        return int(row[2]) if json.loads(row[1]) == dict(result.source or {}) else 0

    def carried(self, run: int, under: str) -> list[GranuleResult]:
        """The granules under the prefix ``under`` (``"root/"``) not processed by ``run``."""
        # a range on the primary key: every URL that starts with ``under``
        end = under[:-1] + chr(ord(under[-1]) + 1)
        listed = " AND url NOT IN (SELECT url FROM temp.listed)" if self._listed else ""
        rows = self._db.execute(f"SELECT {COLUMNS} FROM granules WHERE url >= ? AND url < ? "
                                f"AND run != ?{listed}", (under, end, run))
        return [result_of(r) for r in rows]

    def report(self) -> RunReport:
        """The run report this record holds: the latest run's fields with every granule
        (what :func:`merge_reports` made of every run's report).

        Raises
        ------
        FileNotFoundError
            When no run was recorded yet.
        """
        with self.snapshot() as (header, granules):
            return replace(header, granules=tuple(granules), omitted={})

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[tuple[RunReport, Iterator[GranuleResult]]]:
        """The report as a header and a stream of its granules, read from one snapshot.

        The header is the latest run's fields with no ``granules`` and every granule counted
        in ``omitted`` (so its ``counts`` are the report's); the stream yields the granules by
        name, one row at a time (what ``h5sidecar report`` holds does not grow with them).

        Raises
        ------
        FileNotFoundError
            When no run was recorded yet.
        """
        db = self._db
        db.execute("BEGIN")  # one snapshot for the run and its granules
        try:
            row = db.execute("SELECT id, source, dest, format, options, started, finished, "
                             "seconds, complete, version, orphaned, carried, "
                             f"{'confirmed' if self._has_confirmed() else '0'} FROM runs "
                             "ORDER BY id DESC LIMIT 1").fetchone()
            if row is None:
                raise FileNotFoundError(f"{self.path} records no run yet")
            run, source, dest, fmt, options, started, finished, seconds, complete, version, \
                orphaned, carried, confirmed = row
            # rows the run found up to date kept the run that wrote them: not carried over
            carried += db.execute("SELECT count(*) FROM granules WHERE run != ?",
                                  (run,)).fetchone()[0] - confirmed
            roots = tuple(r for (r,) in db.execute("SELECT root FROM roots ORDER BY seq"))
            first = db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
            counts = dict(db.execute("SELECT status, count(*) FROM granules GROUP BY status"))
            kept = tuple(n for n in json.loads(orphaned) if db.execute(
                "SELECT 1 FROM granules WHERE name = ? OR url = ? LIMIT 1", (n, n)).fetchone())
            header = RunReport(
                source=source, dest=dest, format=fmt, options=json.loads(options),
                started=started, finished=finished, seconds=seconds, granules=(),
                complete=bool(complete), version=version,
                roots=() if first and roots == (source,) else roots, carried_over=carried,
                orphaned=kept, omitted=counts,
            )
            yield header, (result_of(r) for r in db.execute(
                f"SELECT {COLUMNS} FROM granules ORDER BY name, url"))
        finally:
            db.execute("COMMIT")

    def _has_confirmed(self) -> bool:
        # a version-1 record opened read-only is not upgraded
        return any(r[1] == "confirmed" for r in self._db.execute("PRAGMA table_info(runs)"))


def open_record(dest: str, *, create: bool = True,
                legacy: Callable[[], RunReport | None] | None = None) -> Record:
    """Open the record of the local DEST ``dest``.

    With ``create``, a DEST without one gets one, holding the rows of the report ``legacy``
    returns (DEST's ``_report.json``, read by the caller): the migration.

    Raises
    ------
    FileNotFoundError
        Without ``create``, when DEST has no record.
    InvalidReferenceError
        When the file is not a readable record.
    """
    path = record_path(dest)
    if create and not os.path.exists(path):
        _create(path, None if legacy is None else legacy())
    elif not os.path.exists(path):
        raise FileNotFoundError(path)
    try:
        record = Record(path)
    except sqlite3.DatabaseError as exc:
        raise _corrupt(path, exc) from exc
    if create:
        _retire_json(dest)
    return record


def _create(path: str, old: RunReport | None) -> None:
    """Create the record (holding ``old``'s rows) complete under a temporary name, then link
    it into place."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{RECORD_NAME}.{uuid.uuid4().hex}.tmp")
    try:
        db = connect(tmp)
        try:
            # no journal while building: a crash leaves only the temporary file, which is dropped
            db.execute("PRAGMA journal_mode=MEMORY")
            db.executescript(f"BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
            if old is not None:
                record = Record.__new__(Record)
                record.path, record._db = tmp, db
                record.import_report(old)
            db.execute("PRAGMA journal_mode=WAL")  # persistent: every later connection uses it
        finally:
            db.close()  # the last connection: the log is folded into the file and removed
        # SQLite creates files 0644: follow the umask like the sidecars (its log files copy
        # the database's mode)
        follow_umask(tmp)
        with contextlib.suppress(FileExistsError):  # another run created it first: use theirs
            os.link(tmp, path)
        if old is not None:
            log.info("migrated %s into %s", os.path.join(folder, REPORT_NAME), path)
    finally:
        for leftover in (tmp, tmp + "-wal", tmp + "-shm", tmp + "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def _retire_json(dest: str) -> None:
    """Rename a migrated ``_report.json`` (the record holds its rows)."""
    old = os.path.join(dest.removeprefix("file://"), REPORT_NAME)
    with contextlib.suppress(FileNotFoundError):
        os.replace(old, old + MIGRATED_SUFFIX)


def _corrupt(path: str, exc: Exception) -> InvalidReferenceError:
    return InvalidReferenceError(
        f"the record {path} is unreadable ({exc}): move it aside and re-run `h5sidecar index` "
        "into DEST (sidecars that are up to date are not redone)"
    )
