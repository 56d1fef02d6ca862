"""The run report of an object-store DEST, kept in parts (:mod:`._record_store`): recording a
run, writing and forgetting granules, reading the report back.

The counterpart of the local record's operations in :mod:`._report_io`, with the same
results: a run's rows are written as it goes (a killed run keeps every part it wrote), a
granule found up to date with the row already recorded is not written again (a no-op run
writes one small part: its header), and the report read back is the local record's
(:meth:`Record.snapshot` over the parts loaded into a temporary database).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from h5sidecar.dest._parts_writer import PartsWriter, header_of, migrate
from h5sidecar.dest._record_db import Record
from h5sidecar.dest._record_sql import COLUMNS, result_of
from h5sidecar.dest._record_store import Mirror, compact, has_parts, store_of
from h5sidecar.dest._report import GranuleResult, RunReport
from h5sidecar.settings import RecordSettings

__all__ = ["RemoteRecorder", "forget_remote", "remote_snapshot", "write_remote"]

log = logging.getLogger("h5sidecar.workflows")

#: ``dest -> the report of DEST/_report.json or None`` (:mod:`._report_io` reads it).
ReadJson = Callable[[], RunReport | None]


class RemoteRecorder:
    """Records one run on an object-store DEST: its rows in parts as it goes, its header with
    each part, the end of the run in a last part (then compacts, when due).

    Parameters
    ----------
    dest : str
        Normalised DEST.
    run : RunReport
        The run's fields.
    read_json : callable
        Reads DEST's ``_report.json`` (migrated when present).
    settings : RecordSettings, optional
        The record cache (default: ``from_env(RecordSettings)``).
    """

    def __init__(self, dest: str, run: RunReport, storage_options: Mapping[str, Any] | None,
                 read_json: ReadJson, content: Mapping[str, Any] | None = None,
                 settings: RecordSettings | None = None) -> None:
        self.fs, self.root = store_of(dest, storage_options)
        self._settings = settings
        migrate(self.fs, self.root, read_json)
        self.mirror = Mirror(self.fs, self.root, settings=settings)
        try:
            # what this run listed or recorded, in a database of its own (the mirror is only
            # read: it may be the cache other readers share); on disk, as it may hold every URL
            scratch = os.path.join(self.mirror.scratch(), "run.sqlite")
            self.record._db.execute("ATTACH DATABASE ? AS run", (scratch,))
            self.record._db.execute("CREATE TABLE run.seen (url TEXT PRIMARY KEY)")
        except BaseException:
            self.mirror.close()
            raise
        self._header = run
        self._content = content
        self._writer = PartsWriter(self.fs, self.root)
        self._t0 = time.perf_counter() - run.seconds
        #: Granules up to date whose rows were left as they are.
        self.confirmed = 0

    @property
    def record(self) -> Record:
        """The database of the parts (read only: this run's rows are in its parts)."""
        return self.mirror.record

    def note_listed(self, urls: Iterable[str]) -> None:
        """Remember the URLs this run listed (not carried over, see :meth:`finish`)."""
        db = self.record._db
        db.execute("BEGIN")
        db.executemany("INSERT OR IGNORE INTO run.seen VALUES (?)", ((u,) for u in urls))
        db.execute("COMMIT")

    def chunks_of(self, result: GranuleResult) -> int:
        """See :meth:`Record.chunks_of`."""
        return self.record.chunks_of(result)

    def _head(self, **fields: Any) -> dict[str, Any]:
        self._header = replace(self._header, **fields)
        return header_of(self._header, self._writer.uid, "", content=self._content,
                         confirmed=self.confirmed)

    def put(self, result: GranuleResult) -> bool:
        """Record one granule (buffered; written with the next part); an up-to-date granule
        whose row already says so is only counted.  Returns whether it was written."""
        if result.status == "up_to_date" and self._same_row(result):
            self.confirmed += 1
            return False
        self.note_listed([result.url])
        if self._writer.add(result):
            self._writer.flush(self._head(seconds=time.perf_counter() - self._t0))
        return True

    def _same_row(self, result: GranuleResult) -> bool:
        row = _row_of(self.record, result.url)
        return (row is not None and row.status in ("ok", "up_to_date")
                and row.sidecar == result.sidecar and row.source == result.source
                and row.n_virtual == result.n_virtual and row.n_inlined == result.n_inlined
                and row.skipped == result.skipped)

    def finish(self, report: RunReport, orphaned: Callable[[Iterable[GranuleResult]],
                                                           tuple[str, ...]]) -> tuple[str, ...]:
        """Write the last part (the rows left and the run's end) and compact when due; returns
        the orphans ``orphaned`` finds among the granules this run did not process."""
        try:
            found: tuple[str, ...] = ()
            root = report.source.rstrip("/")
            if report.complete and root:
                found = orphaned(_carried(self.record, root + "/"))
            self._writer.flush(self._head(finished=report.finished, seconds=report.seconds,
                                          complete=report.complete, orphaned=found),
                               always=True)
        finally:
            self.mirror.close()
        try:
            compact(self.fs, self.root, settings=self._settings)
        except OSError as exc:  # the run is recorded; only reading it stays slower
            log.warning("could not compact the record of %s (%s): the next run tries again",
                        self.root, exc)
        return found


@contextlib.contextmanager
def remote_snapshot(dest: str, storage_options: Mapping[str, Any] | None,
                    settings: RecordSettings | None = None,
                    ) -> Iterator[tuple[RunReport, Iterator[GranuleResult]] | None]:
    """The report of an object-store DEST in parts as :meth:`Record.snapshot` gives it (None
    when DEST has no parts: its report, if any, is ``_report.json``)."""
    fs, root = store_of(dest, storage_options)
    if not has_parts(fs, root):
        yield None
        return
    with Mirror(fs, root, settings=settings) as mirror, mirror.record.snapshot() as stream:
        yield stream


def write_remote(report: RunReport, dest: str, storage_options: Mapping[str, Any] | None,
                 read_json: ReadJson, merge: Callable[[RunReport | None], RunReport] | None,
                 settings: RecordSettings | None = None) -> tuple[str, RunReport]:
    """Record a whole ``report`` as one run in one part: merged with the recorded granules by
    ``merge`` (their report in, the merged report out), or, without, replacing them (the
    others get tombstones).  Returns the part's path and the report as merged."""
    fs, root = store_of(dest, storage_options)
    migrate(fs, root, read_json)
    writer = PartsWriter(fs, root)
    with Mirror(fs, root, settings=settings) as mirror:
        try:
            recorded: RunReport | None = mirror.record.report()
        except FileNotFoundError:
            recorded = None
        merged = report if merge is None else merge(recorded)
        if merge is None:
            names = {g.url for g in report.granules}
            for g in recorded.granules if recorded else ():
                if g.url not in names:
                    writer.add(g.url)
    for g in report.granules:
        writer.add(g)
    written = replace(report, orphaned=merged.orphaned, granules=())
    path = writer.flush(header_of(written, writer.uid, "", confirmed=0), always=True)
    assert path is not None
    return f"{dest.split('://', 1)[0]}://{path}", merged


def forget_remote(dest: str, sidecars: set[str], storage_options: Mapping[str, Any] | None,
                  read_json: ReadJson, settings: RecordSettings | None = None) -> int:
    """Write tombstones for the granules whose sidecar is one of ``sidecars`` (normalised);
    returns how many."""
    fs, root = store_of(dest, storage_options)
    migrate(fs, root, read_json)
    writer = PartsWriter(fs, root)
    with Mirror(fs, root, settings=settings) as mirror:
        n = 0
        for url in _urls_of_sidecars(mirror.record, sidecars):
            writer.add(url)
            n += 1
    writer.flush(None)
    return n


def _carried(record: Record, under: str) -> Iterator[GranuleResult]:
    """The granules recorded under the prefix ``under`` (``"root/"``) this run neither listed
    nor recorded (a range of the primary key)."""
    end = under[:-1] + chr(ord(under[-1]) + 1)
    rows = record._db.execute(f"SELECT {COLUMNS} FROM granules WHERE url >= ? AND url < ? "
                              "AND url NOT IN (SELECT url FROM run.seen)", (under, end))
    return (result_of(r) for r in rows)


def _row_of(record: Record, url: str) -> GranuleResult | None:
    row = record._db.execute(f"SELECT {COLUMNS} FROM granules WHERE url = ?", (url,)).fetchone()
    return None if row is None else result_of(row)


def _urls_of_sidecars(record: Record, sidecars: Iterable[str]) -> Iterator[str]:
    for sidecar in sidecars:
        for (url,) in record._db.execute("SELECT url FROM granules WHERE sidecar = ?",
                                         (sidecar,)):
            yield url
