"""Persistence of the run report: merge with the report already in DEST, write atomically, read.

A local DEST keeps its report in its record, an SQLite database (:mod:`._record_db`); an object
store DEST in parts, append-only Parquet objects written as a run goes (:mod:`._record_remote`).
A ``_report.json`` (written by earlier versions) is read while DEST has neither, and migrated
by the first write.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TextIO

from h5sidecar.dest._locations import (
    DEFAULT_PATTERNS,
    REPORT_NAME,
    filesystem,
    is_remote,
    join_url,
    sidecar_stamp,
)
from h5sidecar.dest._record_db import Record, open_record, record_path
from h5sidecar.dest._record_remote import (
    RemoteRecorder,
    forget_remote,
    remote_snapshot,
    write_remote,
)
from h5sidecar.dest._report import GranuleResult, RunReport
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.settings import RecordSettings
from h5sidecar.sources import normalize_url

__all__ = [
    "RunRecorder",
    "forget_sidecars",
    "merge_reports",
    "read_json_report",
    "read_report",
    "report_stream",
    "write_merged_report",
    "write_report",
    "write_report_json",
]

log = logging.getLogger("h5sidecar.workflows")


def merge_reports(previous: RunReport | None, current: RunReport) -> RunReport:
    """``current`` with the granules of ``previous`` it did not process carried over.

    A report never shrinks: an interrupted run (or one over a narrower ``--pattern``) keeps
    the entries of granules it did not reach, whose sidecars are still in DEST.  A granule
    present in both takes ``current``'s entry, whatever its status.  ``roots`` accumulates
    every run's source root; counts cover the merged granules, ``complete`` and the options
    are ``current``'s.
    """
    if previous is None:
        return current  # empty roots stand for (source,): see source_roots
    fresh = {g.url for g in current.granules}
    carried = [g for g in previous.granules if g.url not in fresh]
    roots = tuple(dict.fromkeys((*previous.source_roots, *current.source_roots)))
    granules = tuple(sorted((*current.granules, *carried), key=lambda g: (g.name, g.url)))
    orphaned = orphaned_names(current, carried)
    return replace(current, granules=granules, roots=roots, carried_over=len(carried),
                   orphaned=orphaned)


def orphaned_names(current: RunReport, carried: Iterable[GranuleResult]) -> tuple[str, ...]:
    """The names of the ``carried`` granules (not processed by ``current``) whose sources
    ``current``'s listing would have found if they existed: orphans (see
    :func:`_listing_missed`)."""
    return tuple(g.name or g.url for g in carried if _listing_missed(current, g))


class RunRecorder:
    """Records one run in DEST: each granule as it finishes in the record of a local DEST
    (one transaction each, so a killed run keeps what it finished); on an object store in
    parts, every few granules and at the end (:class:`RemoteRecorder`).

    Parameters
    ----------
    dest : str
        Normalised DEST.
    run : RunReport
        The run's fields (its granules are ignored), recorded at once locally.
    record_settings : RecordSettings, optional
        The record cache of an object-store DEST (default: ``from_env(RecordSettings)``).
    """

    def __init__(self, dest: str, run: RunReport,
                 storage_options: Mapping[str, Any] | None = None, *,
                 content: Mapping[str, Any] | None = None,
                 record_settings: RecordSettings | None = None) -> None:
        self.dest = dest
        self._storage_options = storage_options
        self._t0 = time.perf_counter() - run.seconds
        self._record = None if is_remote(dest) else _open(dest)
        self._run = 0
        self._remote: RemoteRecorder | None = None
        #: Granules found up to date from their rows (not rewritten), counted at the end.
        self.confirmed = 0
        if self._record is None:
            self._remote = RemoteRecorder(dest, run, storage_options,
                                          lambda: _json_or_none(dest, storage_options), content,
                                          record_settings)
        else:
            try:
                self._run = self._record.begin_run(run, content)
            except BaseException:
                self._record.close()
                raise

    @property
    def record(self) -> Record | None:
        """The record of a local DEST (None on an object store: its rows are not looked up
        before the sidecars, whose freshness only the sidecars tell there)."""
        return self._record

    def note_listed(self, urls: Iterable[str]) -> None:
        """Remember the URLs this run listed (see :meth:`Record.note_listed`)."""
        if self._record is not None:
            self._record.note_listed(urls)
        elif self._remote is not None:
            self._remote.note_listed(urls)

    def known_chunks(self, result: GranuleResult) -> int:
        """The chunk count the report holds for ``result``'s granule, when its entry names the
        same sidecar and source identity (what an up-to-date granule has), else 0."""
        if self._record is not None:
            return self._record.chunks_of(result)
        assert self._remote is not None
        return self._remote.chunks_of(result)

    def put(self, result: GranuleResult) -> None:
        """Record one finished granule (on an object store: with the next part)."""
        if self._remote is not None:
            self._remote.put(result)
        elif self._record is not None:
            stamp = sidecar_stamp(result.sidecar) if result.status != "failed" else None
            self._record.put(self._run, result, finished=_now(),
                             seconds=time.perf_counter() - self._t0, stamp=stamp)

    def finish(self, report: RunReport) -> RunReport:
        """Record the end of the run (``report``: its fields and granules); returns ``report``
        with the orphans its listing revealed (see :func:`merge_reports`)."""
        if self._remote is not None:
            self._remote.confirmed += self.confirmed
            found = self._remote.finish(report, lambda carried: orphaned_names(report, carried))
            return replace(report, orphaned=found)
        assert self._record is not None
        try:
            orphaned: tuple[str, ...] = ()
            root = report.source.rstrip("/")
            if report.complete and root:
                orphaned = orphaned_names(report, self._record.carried(self._run, root + "/"))
            self._record.end_run(self._run, finished=report.finished, seconds=report.seconds,
                                 complete=report.complete, orphaned=orphaned,
                                 confirmed=self.confirmed)
        finally:
            self._record.close()
        return replace(report, orphaned=orphaned)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _listing_missed(current: RunReport, g: GranuleResult) -> bool:
    """Whether ``current``'s complete listing would have found ``g``'s source if it existed.

    A carried-over granule under the run's folder or prefix that matches its patterns was not
    listed, so its source is gone: its sidecar is an orphan (``h5sidecar prune`` removes it).
    Granules of other roots, other patterns or an interrupted run are merely not reached.
    """
    root = current.source.rstrip("/")
    if not current.complete or any(ch in root for ch in "*?[") or g.status == "failed":
        return False
    if not g.url.startswith(root + "/"):
        return False
    patterns = current.options.get("patterns") or DEFAULT_PATTERNS
    name = g.url.rsplit("/", 1)[-1]
    hidden = any(part.startswith(".") for part in g.url[len(root) + 1 :].split("/"))
    return not hidden and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def write_report(
    report: RunReport,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    merge: bool = True,
    record_settings: RecordSettings | None = None,
) -> str:
    """Record ``report`` in DEST and return where: the record of a local DEST (one
    transaction), a new part of an object-store DEST's record (one PUT).

    With ``merge`` (the default) the granules already recorded that ``report`` does not name
    keep their entries (:func:`merge_reports`); without, ``report`` replaces them all.  A
    malformed earlier ``_report.json`` is replaced (with a warning).  ``record_settings``: the
    record cache of an object-store DEST (default: ``from_env(RecordSettings)``).
    """
    return write_merged_report(report, dest, storage_options=storage_options, merge=merge,
                               record_settings=record_settings)[0]


def write_merged_report(
    report: RunReport,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    merge: bool = True,
    record_settings: RecordSettings | None = None,
) -> tuple[str, RunReport]:
    """:func:`write_report`, also returning the report as written (merged, with orphans)."""
    dest = normalize_url(dest)
    if not is_remote(dest):
        record = _open(dest)
        try:
            # only this report's granules are written; merging tells the orphans among the rest
            merged = merge_reports(_recorded(record), report) if merge else report
            record.import_report(replace(report, orphaned=merged.orphaned), replace=not merge)
            return record.path, merged
        finally:
            record.close()
    return write_remote(report, dest, storage_options,
                        lambda: _json_or_none(dest, storage_options),
                        (lambda previous: merge_reports(previous, report)) if merge else None,
                        record_settings)


def _open(dest: str) -> Record:
    """The record of the local ``dest``, created from its ``_report.json`` when it has none."""
    return open_record(dest, legacy=lambda: _json_or_none(dest))


def _json_or_none(dest: str, storage_options: Mapping[str, Any] | None = None
                  ) -> RunReport | None:
    try:
        return read_json_report(dest, storage_options=storage_options)
    except FileNotFoundError:
        return None
    except InvalidReferenceError as exc:  # as a malformed report always was: replaced
        log.warning("%s; the record starts empty instead", exc)
        return None


def _recorded(record: Record) -> RunReport | None:
    try:
        return record.report()
    except FileNotFoundError:
        return None


def forget_sidecars(report: RunReport | None, dest: str, sidecars: Iterable[str], *,
                    storage_options: Mapping[str, Any] | None = None,
                    record_settings: RecordSettings | None = None) -> None:
    """Remove the granules of ``sidecars`` (removed by prune) from DEST's report by sidecar:
    from a local DEST's record, with tombstones in a new part on an object store (``report``
    is not needed)."""
    if not is_remote(normalize_url(dest)):
        record = _open(normalize_url(dest))
        try:
            # the record names sidecars as index wrote them (normalised); a caller's spelling
            # may differ
            record.drop({spelling for s in sidecars for spelling in (s, normalize_url(s))})
        finally:
            record.close()
        return
    dest = normalize_url(dest)
    forget_remote(dest, {spelling for s in sidecars for spelling in (s, normalize_url(s))},
                  storage_options, lambda: _json_or_none(dest, storage_options),
                  record_settings)


def read_report(dest: str, *, storage_options: Mapping[str, Any] | None = None,
                record_settings: RecordSettings | None = None) -> RunReport:
    """Read DEST's run report: from its record (a local DEST that has one, an object-store DEST
    with parts, through the record cache of ``record_settings``, default
    ``from_env(RecordSettings)``), else from ``DEST/_report.json``.

    Raises
    ------
    FileNotFoundError
        When there is no report.
    InvalidReferenceError
        When the record is unreadable, or the report is not valid JSON or lacks fields.
    """
    dest = normalize_url(dest)
    if not is_remote(dest) and os.path.exists(record_path(dest)):
        record = open_record(dest, create=False)
        try:
            return record.report()
        finally:
            record.close()
    if is_remote(dest):
        with remote_snapshot(dest, storage_options, record_settings) as stream:
            if stream is not None:
                return replace(stream[0], granules=tuple(stream[1]), omitted={})
    try:
        return read_json_report(dest, storage_options=storage_options)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{dest} has no run report (no record, no {REPORT_NAME}): run `h5sidecar index` "
            "into it first"
        ) from exc


@contextlib.contextmanager
def report_stream(dest: str, *, storage_options: Mapping[str, Any] | None = None,
                  record_settings: RecordSettings | None = None,
                  ) -> Iterator[tuple[RunReport, Iterator[GranuleResult]]]:
    """DEST's run report as a header (its fields, every granule counted in ``omitted``) and a
    stream of its granules by name: from a record one row at a time, so a reader of a million
    granules holds one (``h5sidecar report``), an object-store DEST's parts loaded first into a
    temporary database; from ``_report.json`` after reading it whole.

    Raises as :func:`read_report`; ``record_settings`` as there.
    """
    dest = normalize_url(dest)
    if not is_remote(dest) and os.path.exists(record_path(dest)):
        record = open_record(dest, create=False)
        try:
            with record.snapshot() as stream:
                yield stream
        finally:
            record.close()
        return
    if is_remote(dest):
        with remote_snapshot(dest, storage_options, record_settings) as stream:
            if stream is not None:
                yield stream
                return
    report = read_report(dest, storage_options=storage_options, record_settings=record_settings)
    yield replace(report, granules=(), omitted=report.counts), iter(report.granules)


def write_report_json(header: RunReport, granules: Iterable[GranuleResult], out: TextIO) -> bool:
    """Write the report document (:meth:`RunReport.to_dict`, what ``_report.json`` holds) of
    ``header`` and ``granules`` to ``out``, one granule at a time; returns ``report.ok``."""
    doc = header.to_dict()
    doc.pop("omitted", None)
    doc.pop("granules")
    head = json.dumps(doc, indent=1, allow_nan=False)
    out.write(head[:-2] + ',\n "granules": [')
    partial = False
    for i, g in enumerate(granules):
        partial = partial or g.partial
        out.write(("\n  " if i == 0 else ",\n  ") + json.dumps(g.to_dict(), allow_nan=False))
    out.write("\n ]\n}\n")
    return header.complete and not header.counts["failed"] and not partial


def read_json_report(dest: str, *, storage_options: Mapping[str, Any] | None = None
                     ) -> RunReport:
    """Read ``DEST/_report.json`` (an object store DEST's report, or a local one not migrated
    yet); raises as :func:`read_report`."""
    url = join_url(normalize_url(dest), REPORT_NAME)
    raw = filesystem(url, storage_options).cat_file(url)
    try:
        return RunReport.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidReferenceError(
            f"run report {url} is malformed ({exc}): delete it and re-run the batch"
        ) from exc
