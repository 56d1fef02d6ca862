"""Persistence of the run report: merge with the report already in DEST, write atomically, read.

A local DEST keeps its report in its record, an SQLite database (:mod:`._record_db`); an object
store DEST in ``_report.json``, one PUT (atomic there).  A local ``_report.json`` (written by
earlier versions) is read while DEST has no record, and migrated into one by the first write.
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

from h5sidecar.errors import H5SidecarError, InvalidReferenceError
from h5sidecar.sources._urls import normalize_url
from h5sidecar.workflows._listing import DEFAULT_PATTERNS, filesystem, is_remote, join_url
from h5sidecar.workflows._record_db import Record, open_record, record_path
from h5sidecar.workflows._recorded import sidecar_stamp
from h5sidecar.workflows._report import REPORT_NAME, GranuleResult, RunReport

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
        return current  # empty roots stand for (source,)
    own_roots = current.roots or (current.source,)
    fresh = {g.url for g in current.granules}
    carried = [g for g in previous.granules if g.url not in fresh]
    roots = tuple(dict.fromkeys((*(previous.roots or (previous.source,)), *own_roots)))
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
    (one transaction each, so a killed run keeps what it finished), the whole report at the
    end on an object store (``_report.json``).

    Parameters
    ----------
    dest : str
        Normalised DEST.
    run : RunReport
        The run's fields (its granules are ignored), recorded at once locally.
    """

    def __init__(self, dest: str, run: RunReport,
                 storage_options: Mapping[str, Any] | None = None, *,
                 content: Mapping[str, Any] | None = None) -> None:
        self.dest = dest
        self._storage_options = storage_options
        self._t0 = time.perf_counter() - run.seconds
        self._record = None if is_remote(dest) else _open(dest)
        self._run = 0
        self._chunks: dict[tuple[str, str], int] = {}
        #: Granules found up to date from their rows (not rewritten), counted at the end.
        self.confirmed = 0
        if self._record is None:
            self._chunks = _chunk_counts(dest, storage_options)
        else:
            try:
                self._run = self._record.begin_run(run, content)
            except BaseException:
                self._record.close()
                raise

    @property
    def record(self) -> Record | None:
        """The record of a local DEST (None on an object store)."""
        return self._record

    def note_listed(self, urls: Iterable[str]) -> None:
        """Remember the URLs this run listed (see :meth:`Record.note_listed`)."""
        if self._record is not None:
            self._record.note_listed(urls)

    def known_chunks(self, result: GranuleResult) -> int:
        """The chunk count the report holds for ``result``'s granule, when its entry names the
        same sidecar and source identity (what an up-to-date granule has), else 0."""
        if self._record is not None:
            return self._record.chunks_of(result)
        return self._chunks.get((result.sidecar, _key(result.source)), 0)

    def put(self, result: GranuleResult) -> None:
        """Record one finished granule (locally; on an object store at :meth:`finish`)."""
        if self._record is not None:
            stamp = sidecar_stamp(result.sidecar) if result.status != "failed" else None
            self._record.put(self._run, result, finished=_now(),
                             seconds=time.perf_counter() - self._t0, stamp=stamp)

    def finish(self, report: RunReport) -> RunReport:
        """Record the end of the run (``report``: its fields and granules); returns ``report``
        with the orphans its listing revealed (see :func:`merge_reports`)."""
        if self._record is None:
            _, written = write_merged_report(report, self.dest,
                                             storage_options=self._storage_options)
            return replace(report, orphaned=written.orphaned)
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


def _chunk_counts(dest: str, storage_options: Mapping[str, Any] | None
                  ) -> dict[tuple[str, str], int]:
    """``(sidecar, source identity) -> n_chunks`` from the report on an object store."""
    try:
        last = read_json_report(dest, storage_options=storage_options)
    except (FileNotFoundError, H5SidecarError):
        return {}
    return {(g.sidecar, _key(g.source)): g.n_chunks for g in last.granules if g.source}


def _key(source: Mapping[str, Any] | None) -> str:
    return repr(sorted((source or {}).items()))


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
) -> str:
    """Record ``report`` in DEST and return where: the record of a local DEST (one
    transaction), ``DEST/_report.json`` on an object store (one PUT).

    With ``merge`` (the default) the granules already recorded that ``report`` does not name
    keep their entries (:func:`merge_reports`); without, ``report`` replaces them all.  On an
    object store a malformed earlier report is replaced (with a warning), and two runs
    writing at the same moment may lose each other's entries (last writer wins); a local
    record has neither problem.
    """
    return write_merged_report(report, dest, storage_options=storage_options, merge=merge)[0]


def write_merged_report(
    report: RunReport,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    merge: bool = True,
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
    url = join_url(dest, REPORT_NAME)
    if merge:
        report = merge_reports(_previous(dest, storage_options), report)
    data = json.dumps(report.to_dict(), indent=1, allow_nan=False).encode()
    filesystem(url, storage_options).pipe_file(url, data)
    return url, report


def _open(dest: str) -> Record:
    """The record of the local ``dest``, created from its ``_report.json`` when it has none."""
    return open_record(dest, legacy=lambda: _json_or_none(dest))


def _json_or_none(dest: str) -> RunReport | None:
    try:
        return read_json_report(dest)
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
                    storage_options: Mapping[str, Any] | None = None) -> None:
    """Remove the granules of ``sidecars`` (removed by prune) from DEST's report: from a local
    DEST's record by sidecar (``report`` is not needed), else from ``report``
    (``_report.json``), rewritten."""
    if not is_remote(normalize_url(dest)):
        record = _open(normalize_url(dest))
        try:
            # the record names sidecars as index wrote them (normalised); a caller's spelling
            # may differ
            record.drop({spelling for s in sidecars for spelling in (s, normalize_url(s))})
        finally:
            record.close()
        return
    if report is None:
        return
    gone = {normalize_url(s) for s in sidecars}
    granules = tuple(g for g in report.granules if normalize_url(g.sidecar) not in gone)
    names = {g.name for g in granules}
    write_report(replace(report, granules=granules,
                         orphaned=tuple(n for n in report.orphaned if n in names)),
                 dest, storage_options=storage_options, merge=False)


def _previous(dest: str, storage_options: Mapping[str, Any] | None) -> RunReport | None:
    try:
        return read_report(dest, storage_options=storage_options)
    except FileNotFoundError:
        return None
    except InvalidReferenceError as exc:
        log.warning("%s; it is replaced by this run's report", exc)
        return None


def read_report(dest: str, *, storage_options: Mapping[str, Any] | None = None) -> RunReport:
    """Read DEST's run report: from its record (a local DEST that has one), else from
    ``DEST/_report.json``.

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
    try:
        return read_json_report(dest, storage_options=storage_options)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{dest} has no run report (no record, no {REPORT_NAME}): run `h5sidecar index` "
            "into it first"
        ) from exc


@contextlib.contextmanager
def report_stream(dest: str, *, storage_options: Mapping[str, Any] | None = None
                  ) -> Iterator[tuple[RunReport, Iterator[GranuleResult]]]:
    """DEST's run report as a header (its fields, every granule counted in ``omitted``) and a
    stream of its granules by name: from a record one row at a time, so a reader of a million
    granules holds one (``h5sidecar report``); from ``_report.json`` after reading it whole.

    Raises as :func:`read_report`.
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
    report = read_report(dest, storage_options=storage_options)
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
