"""Batch indexing: list granules, index each in a worker (skipping up-to-date ones), report.

The per-granule task, :func:`~._index_one.index_one`, runs in the workers; this module lists,
dispatches, records and reports.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from h5sidecar._version import __version__
from h5sidecar.dest import (
    DEFAULT_PATTERNS,
    LOOKUP_BATCH,
    SIDECAR_SUFFIX,
    URL_LIST_OPTION,
    GranuleResult,
    Record,
    RunRecorder,
    RunReport,
    create_local_dest,
    dest_lock,
    is_remote,
    join_url,
)
from h5sidecar.indexer import FromDmrpp
from h5sidecar.references import SourceInfo
from h5sidecar.settings import IndexSettings, RecordSettings
from h5sidecar.sources import normalize_url
from h5sidecar.workflows.index._executors import ExecutorSpec, Task, default_workers, run_tasks
from h5sidecar.workflows.index._index_one import IndexOptions, SidecarFormat, index_one
from h5sidecar.workflows.index._leftover_sweep import LeftoverSweep, sweep_leftovers
from h5sidecar.workflows.index._listed_current import mark_current, split_current
from h5sidecar.workflows.index._main_guard import refuse_unguarded_main
from h5sidecar.workflows.index._up_to_date import content_of, precheck
from h5sidecar.workflows.listing._listed_granule import Granule
from h5sidecar.workflows.listing._listing import stage_granules
from h5sidecar.workflows.listing._staged_listing import StagedListing
from h5sidecar.workflows.listing._url_list import UrlList

__all__ = ["ProgressSink", "index_many"]

log = logging.getLogger("h5sidecar.workflows")

class ProgressSink(Protocol):
    """Receives progress of :func:`index_many` (the CLI's progress bar implements it)."""

    def start(self, total: int) -> None:
        """Called once with the number of granules listed."""

    def advance(self, result: GranuleResult) -> None:
        """Called as each granule finishes."""


def index_many(
    source: str | Iterable[str],
    dest: str,
    *,
    format: SidecarFormat = "parquet",
    force: bool = False,
    checksums: bool = False,
    on_unsupported: Literal["skip", "raise"] = "skip",
    layout: Literal["kerchunk", "compact"] | None = None,
    settings: IndexSettings | None = None,
    storage_options: Mapping[str, Any] | None = None,
    patterns: Sequence[str] = DEFAULT_PATTERNS,
    executor: ExecutorSpec = "process",
    workers: int | None = None,
    progress: ProgressSink | None = None,
    from_dmrpp: FromDmrpp = "never",
    record_settings: RecordSettings | None = None,
) -> RunReport:
    """Index every granule under ``source`` into one sidecar each under ``dest``.

    Parameters
    ----------
    source : str or iterable of str
        A file, a local folder, a glob, an ``s3://bucket/prefix``, one ``https://`` URL or a
        list of object URLs (see :func:`list_granules`).
    dest : str
        Local folder or S3 prefix; granule ``NAME`` gets ``DEST/NAME.parq`` (or ``.json``) and
        the run report to DEST's record (``_report.json`` on an object store).
    format : "parquet" or "json"
    force : bool
        Re-index every granule, even those whose sidecar is up to date.
    checksums, on_unsupported : optional
        Override the corresponding fields of ``settings``.
    layout : "kerchunk" or "compact", optional
        Layout of Parquet sidecars (overrides ``settings.layout``): record files per variable,
        readable by plain fsspec/kerchunk, or ``.zmetadata`` + one manifests file, readable by
        h5sidecar only.  A sidecar of the other layout is re-written (replaced atomically).
    settings : IndexSettings, optional
        Indexer options (default: ``IndexSettings()``).
    storage_options : mapping, optional
        fsspec/s3fs options for source and destination.
    patterns : sequence of str
        File-name patterns kept when listing a folder or prefix.
    executor : "process", "serial" or concurrent.futures.Executor
        Where :func:`index_one` runs: worker processes managed here (default; a crashing worker
        costs only its granule), this process, or a caller's executor (e.g. Dask's
        ``client.get_executor()``).
    workers : int, optional
        Worker processes (default: one per CPU, at most one per granule); also bounds the tasks
        in flight on a caller's executor.
    progress : ProgressSink, optional
    from_dmrpp : "auto", "only" or "never"
        Index each granule from the DMR++ document beside it (``GRANULE.dmrpp``): ``auto``
        where one exists, else from the HDF5; ``only`` fails granules without one.
    record_settings : RecordSettings, optional
        The record cache an object-store DEST's record is read through (default:
        ``from_env(RecordSettings)``).

    Returns
    -------
    RunReport
        This run's own results.  Each granule is also recorded in the record of a local DEST as
        it finishes (one transaction each; see :mod:`h5sidecar.dest._record_db`); on an
        object store in parts written every few granules and at the end
        (:mod:`h5sidecar.dest._record_store`).
        ``report.ok`` is false when a granule failed.

    Raises
    ------
    SourceNotFoundError
        When ``source`` matches no granule.
    NotADirectoryError
        When ``dest`` is an existing local file.
    OSError
        When a local ``dest`` cannot be created ("cannot create DEST ...").
    KeyboardInterrupt
        After writing a report of the granules finished so far (``complete: false``).
    UnguardedMainError
        With worker processes (``"process"``, or ``"serial"`` with a time limit), when called
        at the top level of a script outside ``if __name__ == "__main__":`` (each worker would
        import the script and run it again), or from a script read from standard input (which
        no worker can import).
    """
    if executor == "process" or (executor == "serial" and (
            settings is None or settings.max_granule_seconds)):
        # worker processes would import the caller's script: refused before any starts, or
        # anything is written ("serial" with a time limit runs in one worker process of ours)
        refuse_unguarded_main("index_many")
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    dest = normalize_url(dest)
    base = settings if settings is not None else IndexSettings()
    options = IndexOptions(
        format=format,
        force=force,
        settings=replace(
            base,
            checksums=checksums or base.checksums,
            on_unsupported=on_unsupported,
            layout=layout or base.layout,
        ),
        storage_options=dict(storage_options) if storage_options else None,
        from_dmrpp=from_dmrpp,
    )
    if not is_remote(dest) and os.path.exists(dest) and not os.path.isdir(dest):
        raise NotADirectoryError(
            f"DEST {dest} exists and is not a folder: pass a folder (created if missing)"
        )
    not_regular: list[str] = []
    # staged on disk and read back by name a batch at a time: nothing below holds every granule
    with stage_granules(source, storage_options=storage_options, patterns=patterns,
                        exclude=[dest], not_regular=not_regular) as listing:
        for url in not_regular:
            log.warning("skipped %s: not a regular file (a FIFO, socket or device)", url)
        if not is_remote(dest):  # once the source is known to hold granules
            create_local_dest(dest)
        return _index_listed(listing, source, dest, format, options, patterns, executor,
                             workers, progress, not_regular, started, t0, record_settings)


def _index_listed(listing: StagedListing, source: str | Iterable[str], dest: str,
                  format: SidecarFormat, options: IndexOptions, patterns: Sequence[str],
                  executor: ExecutorSpec, workers: int | None, progress: ProgressSink | None,
                  not_regular: list[str], started: datetime, t0: float,
                  record_settings: RecordSettings | None) -> RunReport:
    """:func:`index_many` once its sources are listed."""
    storage_options = options.storage_options
    force = options.force
    suffix = SIDECAR_SUFFIX[format]

    def tasks(granules: Iterable[Granule]) -> Iterator[Task]:
        for g in granules:
            sc = join_url(dest, g.name + suffix)  # sidecar_url, DEST normalised once
            yield Task(g.url, sc, (g.url, sc, options, g.identity, False))  # index_one's args

    def swept() -> Iterator[str]:
        """The URLs listed, what an interrupted write left beside their sidecars removed as
        they go (one read of each folder; a remote DEST's writes leave nothing to sweep)."""
        sweep = LeftoverSweep()
        head = join_url(dest, "x")[:-1]  # join_url(dest, name + suffix), made once
        for url, name in listing.names():
            sweep(head + name.replace("/", os.sep) + suffix)
            yield url

    n_workers = workers if workers is not None else default_workers(len(listing))
    listed = _url_list_of(source, listing)
    run = RunReport(
        source=normalize_url(source) if isinstance(source, str) else
        f"(a list of {len(listing)} URLs)",
        dest=dest,
        format=format,
        options={
            "force": force,
            "checksums": options.settings.checksums,
            "on_unsupported": options.settings.on_unsupported,
            **({"layout": options.settings.layout} if format == "parquet" else {}),
            "patterns": list(patterns),
            "executor": executor if isinstance(executor, str) else type(executor).__name__,
            "workers": n_workers,
            **({"not_regular_files": not_regular} if not_regular else {}),
            **({URL_LIST_OPTION: listed} if listed is not None else {}),
        },
        started=started.isoformat(timespec="seconds"),
        finished=started.isoformat(timespec="seconds"),
        seconds=time.perf_counter() - t0,
        granules=(),
        complete=False,
        version=__version__,
    )
    # a shared lock: a prune --apply waits until this run's report names its sidecars
    with dest_lock(dest, exclusive=False, holder="index"):
        recorder = RunRecorder(dest, run, storage_options,
                               content=content_of(options.settings, format, options.from_dmrpp),
                               record_settings=record_settings)
        if progress is not None:
            progress.start(len(listing))
        held = HeldResults(keep_all=False)
        complete = False
        pending = None
        # each task handed to the executor and not finished yet: its listed identity (a task
        # that crashes or raises is recorded with it) and its sidecar (what an interrupted
        # write of it left is removed when the run stops); bounded by the tasks in flight
        inflight: dict[str, Task] = {}

        def finished(res: GranuleResult) -> None:
            res = res.renamed(_name_of(res.sidecar, dest, format))
            task = inflight.pop(res.url, None)
            listed: SourceInfo | None = None if task is None else task.args[3]
            if res.status == "up_to_date":
                res = replace(res, n_chunks=recorder.known_chunks(res))
            elif res.source is None and listed is not None:  # crashed or raised: as listed
                res = replace(res, source=listed.to_dict())
            recorder.put(res)  # recorded as it finishes: a killed run keeps it
            held.add(res)
            if progress is not None:
                progress.advance(res)

        def confirm(found: list[tuple[str, str, str]], record: Record) -> None:
            """Count the granules ``(url, name, sidecar)`` the record shows up to date (their
            rows stay as they are); the report holds their rows while it holds every result."""
            rows = {} if held.full else {
                row.url: row for row, _, _ in record.lookup(url for url, _, _ in found)}
            for url, name, sidecar in found:
                recorder.confirmed += 1
                row = rows.get(url)
                res = (GranuleResult(url=url, sidecar=sidecar, status="up_to_date", name=name)
                       if row is None else replace(row, status="up_to_date", seconds={}))
                held.add(res)
                if progress is not None:
                    progress.advance(res)

        def unmarked(record: Record) -> Iterator[Task]:
            """The tasks of the granules the record does not show up to date, those it does
            counted as they are reached (decided in SQL: :mod:`._listed_current`)."""
            mark_current(listing, record.path, dest, format, options.settings,
                         options.from_dmrpp)
            found: list[tuple[str, str, str]] = []
            for item in split_current(listing, dest, format):
                if isinstance(item, Granule):
                    yield from tasks([item])
                    continue
                found.append(item)
                if len(found) >= LOOKUP_BATCH:
                    confirm(found, record)
                    found = []
            confirm(found, record)

        def todo() -> Iterator[Task]:
            """The tasks that need a worker, found as the executor asks for the next one."""
            record = recorder.record
            if force:
                checked: Iterator[GranuleResult | Task] = tasks(listing)
            else:
                # what the record cannot decide is checked as before: row by row, or from the
                # sidecar's extras block where the record has no row
                checked = precheck(tasks(listing) if record is None else unmarked(record),
                                   storage_options=storage_options,
                                   lookup=None if record is None else record.lookup)
            for res in checked:
                if isinstance(res, Task):
                    inflight[res.url] = res
                    yield res
                elif not res.seconds:  # decided from its row: the row stays as it is
                    recorder.confirmed += 1
                    held.add(res)
                    if progress is not None:
                        progress.advance(res)
                else:
                    finished(res)  # from its sidecar: recorded with this run's settings

        try:
            recorder.note_listed(swept())
            # up-to-date granules are found from the record or with threads (one small read
            # each) as the executor takes tasks, so workers are started only for granules
            # that need indexing, and a no-op run starts none
            limit = options.settings.max_granule_seconds
            pending = run_tasks(
                index_one,
                todo(),
                executor,
                workers=n_workers,
                time_limit=_hard_limit(limit),
                memory_limit=options.settings.max_worker_memory,
            )
            for res in pending:
                finished(res)
            complete = True
        finally:
            if pending is not None:
                pending.close()  # stops the worker pool now, not when garbage-collected
            if not complete:  # Ctrl-C, SIGTERM, an error: the writes in flight were cut short
                for task in inflight.values():
                    with contextlib.suppress(OSError):
                        sweep_leftovers(task.sidecar)
            # also on KeyboardInterrupt: the report says what was finished (complete=false)
            report = recorder.finish(replace(
                run,
                finished=datetime.now(UTC).isoformat(timespec="seconds"),
                seconds=time.perf_counter() - t0,
                granules=held.granules(),
                omitted=held.omitted,
                complete=complete,
            ))
        return report


#: Results a run's report holds beyond its failures (a larger run's report holds its failures
#: and counts; every granule is in DEST's record).
HELD_RESULTS = 10_000


class HeldResults:
    """The results :func:`index_many` returns: every one up to :data:`HELD_RESULTS` (all of
    them with ``keep_all``), then only failures and counts of the rest, so a run's memory does
    not grow with its granules."""

    def __init__(self, *, keep_all: bool) -> None:
        self._keep_all = keep_all
        self._results: list[GranuleResult] = []
        self.omitted: dict[str, int] = {}

    @property
    def full(self) -> bool:
        """Whether results other than failures are only counted from now on."""
        return not self._keep_all and len(self._results) >= HELD_RESULTS

    def add(self, result: GranuleResult) -> None:
        """Hold ``result`` (or count it)."""
        if self._keep_all or result.status == "failed" or len(self._results) < HELD_RESULTS:
            self._results.append(result)
        else:
            self.omitted[result.status] = self.omitted.get(result.status, 0) + 1

    def granules(self) -> tuple[GranuleResult, ...]:
        """The held results sorted by name."""
        return tuple(sorted(self._results, key=lambda r: r.name))


def _name_of(sidecar: str, dest: str, fmt: SidecarFormat) -> str:
    """The listing name of the granule whose sidecar is ``sidecar`` (the inverse of
    :func:`sidecar_url`: no per-granule name table held for the run)."""
    return sidecar[len(dest.rstrip("/")) + 1 : -len(SIDECAR_SUFFIX[fmt])]


def _hard_limit(seconds: float) -> float | None:
    """When a worker still busy with one granule is ended: the granule's own time limit (which
    the indexer enforces itself at each read) plus a grace period, for a worker stuck where it
    cannot check (inside HDF5, in a blocking system call)."""
    return seconds + min(seconds, 30.0) if seconds > 0 else None


def _url_list_of(source: str | Iterable[str], granules: StagedListing) -> dict[str, Any] | None:
    """What the report says of a list of URLs (None for a folder or prefix): how many, the
    SHA-256 of the URLs in name order (one line each: equal lists, in any order, give equal
    digests), and the file they came from.  Not the URLs: those are the granules' rows, and
    a million of them held in the run's header (or every part's footer) is what this avoids.
    No root either: no prefix under which a missing granule would count as orphaned; the
    gateway allows each recorded granule's own source."""
    if isinstance(source, str):
        return None
    digest = hashlib.sha256()
    for url, _ in granules.names():  # streamed from the staged listing
        digest.update(url.encode("utf-8") + b"\n")
    out: dict[str, Any] = {"urls": len(granules), "sha256": digest.hexdigest()}
    if isinstance(source, UrlList):
        out["file"] = os.path.abspath(source.path)
    return out
