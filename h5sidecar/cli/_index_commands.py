"""The ``index`` and ``report`` commands: a batch run over many granules and its record."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from h5sidecar.cli._args import record_settings, storage_options
from h5sidecar.cli._output import ProgressBar
from h5sidecar.errors import ErrorKind

if TYPE_CHECKING:
    from h5sidecar.workflows import RunReport, UrlList

from h5sidecar.cli._exit_codes import EXIT_FAILED, EXIT_OK

log = logging.getLogger("h5sidecar")


def _index_source(args: argparse.Namespace) -> str | UrlList:
    """SOURCE, or the URLs of --url-list FILE (exactly one of them; read as they are staged)."""
    from h5sidecar.errors import InvalidRequestError
    from h5sidecar.workflows import UrlList

    if (args.source is None) == (args.url_list is None):
        raise InvalidRequestError("give either SOURCE or --url-list FILE (exactly one)")
    return UrlList(args.url_list) if args.url_list else args.source  # type: ignore[no-any-return]


def cmd_index(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.settings import IndexSettings, from_env
    from h5sidecar.workflows import DEFAULT_PATTERNS, index_many

    with (
        _terminate_as_interrupt(),
        _executor(args, err) as (executor, workers),
        ProgressBar(err) as bar,
    ):
        report = index_many(
            _index_source(args),
            args.dest,
            format=args.format,
            force=args.force,
            checksums=args.checksums,
            on_unsupported=args.on_unsupported,
            layout=args.layout,
            storage_options=storage_options(args.storage_options),
            patterns=tuple(args.patterns or DEFAULT_PATTERNS),
            executor=executor,
            workers=workers,
            progress=bar,
            settings=from_env(IndexSettings, max_granule_seconds=args.max_granule_seconds),
            from_dmrpp=args.from_dmrpp,
            record_settings=record_settings(args),
        )
    if args.json:
        # plain json: rich's pretty-printer took a minute and 1.3 GB for 10,000 granules
        sys.stdout.write(json.dumps(report.to_dict(), indent=1, allow_nan=False) + "\n")
        return EXIT_OK if report.ok else EXIT_FAILED
    _print_report(report, out)
    where = "_h5sidecar_record/" if "://" in report.dest else "_h5sidecar.sqlite"
    out.print(f"report: {report.dest.rstrip('/')}/{where} (`h5sidecar report DEST` shows it)")
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_report(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.dest import report_stream, write_report_json

    # streamed from the record: what is held does not grow with the granules
    with report_stream(args.dest, storage_options=storage_options(args.storage_options),
                       record_settings=record_settings(args)) as (header, granules):
        if args.json:
            # the whole document, unformatted: `h5sidecar report DEST --json > report.json`
            ok = write_report_json(header, granules, sys.stdout)
            return EXIT_OK if ok else EXIT_FAILED
        held, skipped, lost = [], 0, 0
        for g in granules:  # only failed and partial granules are printed one by one
            skipped, lost = skipped + g.n_skipped, lost + g.n_lost
            if g.status == "failed" or g.partial:
                held.append(g)
    omitted = dict(header.omitted)
    for g in held:
        omitted[g.status] -= 1
    report = replace(header, granules=tuple(held), omitted=omitted)
    _print_report(report, out, skipped=skipped, lost=lost)
    if not report.complete:
        out.print(f"[yellow]the last run was interrupted[/] (started {report.started}, last "
                  f"recorded {report.finished})")
    return EXIT_OK if report.ok else EXIT_FAILED


def _print_report(report: RunReport, out: Console, *, skipped: int | None = None,
                  lost: int | None = None) -> None:
    """The summary of a run report: counts, failures and what to do, partial granules
    (``skipped`` and ``lost`` variables summed over every granule, when ``report`` holds only
    some)."""
    counts = report.counts
    out.print(
        f"[bold]{report.n_granules}[/] granule(s) in {report.seconds:.1f} s: "
        f"[green]{counts['ok']} indexed[/], {counts['up_to_date']} up to date, "
        f"[{'red' if counts['failed'] else 'green'}]{counts['failed']} failed[/]"
    )
    for g in report.failed:
        assert g.error is not None
        # escaped: "[not_hdf5]" would otherwise be taken for a rich markup tag and vanish
        out.print(f"[red]FAILED[/] {escape(g.name or g.url)}: "
                  f"{escape(f'[{g.error.kind}]')} {escape(g.error.message)}")
        out.print(f"       what to do: {escape(g.error.hint)}")
    for g in report.partial:
        gone = [s["path"] for s in g.skipped if s.get("kind") == ErrorKind.INTERNAL_ERROR]
        out.print(
            f"[red]PARTIAL[/] {escape(g.name or g.url)}: {len(gone)} variable(s) left out by an "
            f"unexpected error ({escape(', '.join(gone[:5]))}); reasons in the report"
        )
    odd = report.options.get("not_regular_files", [])
    if odd:
        out.print(f"[yellow]{len(odd)} file(s) left out, not regular files (FIFOs, sockets, "
                  f"devices)[/]: {escape(', '.join(odd))}")
    if skipped is None or lost is None:
        skipped = sum(g.n_skipped for g in report.granules)
        lost = sum(g.n_lost for g in report.granules)
    if lost:
        out.print(f"{lost} variable(s) skipped (reasons in the report and `h5sidecar inspect`)")
    if skipped - lost:
        out.print(f"{skipped - lost} entries left out that hold no data (dimension-only "
                  "datasets, links to groups already indexed)")
    if report.orphaned:
        out.print(f"[yellow]{len(report.orphaned)} sidecar(s) orphaned[/]: their sources are gone "
                  f"({escape(', '.join(report.orphaned[:5]))}"
                  f"{' ...' if len(report.orphaned) > 5 else ''}); "
                  f"`h5sidecar prune {escape(report.dest)}` lists and removes them")


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM stops ``index`` like Ctrl-C: workers ended, report written (``complete:
    false``), exit code 130."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _executor(args: argparse.Namespace, err: Console) -> Iterator[tuple[Any, int | None]]:
    """``(executor, workers)`` for ``index``: serial, worker processes, or a Dask cluster."""
    if not args.dask:
        yield ("serial" if args.serial else "process"), args.workers
        return
    from h5sidecar.errors import require_extra
    from h5sidecar.workflows import dask_executor

    # also imports distributed, whose import sets its loggers' levels: ours come after
    require_extra("dask", "dask", "distributed", feature="index --dask")

    # Dask logs every worker start and stop at INFO: keep them for -vv
    logging.getLogger("distributed").setLevel(logging.DEBUG if args.verbose > 1 else
                                              logging.WARNING)
    with dask_executor(args.dask, retries=max(0, args.retries)) as ex:
        link = getattr(ex.client, "dashboard_link", None)
        err.print(f"Dask cluster {args.dask}: {ex.n_threads} worker thread(s)"
                  + (f", dashboard {link}" if link else ""))
        yield ex, args.workers or ex.n_threads
