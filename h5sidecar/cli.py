"""``h5sidecar`` command line: a thin shell over :mod:`h5sidecar.workflows`.

Each command parses its arguments, calls one library function and prints the result with rich
(tables on stdout; progress and logs on stderr, so ``--json`` output can be piped).

Exit codes: 0 success; 1 something failed or differed (a granule failed to index, ``verify``
found a difference); 2 bad usage or input (no such source or sidecar, malformed sidecar);
130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from h5sidecar._cli_args import build_parser, storage_options
from h5sidecar._cli_output import ProgressBar, cli_logging
from h5sidecar._cli_output import shape as _shape
from h5sidecar._cli_output import size as _size
from h5sidecar.errors import ErrorKind, H5SidecarError

if TYPE_CHECKING:
    from h5sidecar.workflows import RunReport, UrlList

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main",
           "storage_options"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

log = logging.getLogger("h5sidecar")

#: Line width of tables when stdout is not a terminal.
_PIPE_WIDTH = 240


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    args = build_parser().parse_args(argv)
    args.verbose += args.verbose_global  # -v before or after the command
    # piped output: long paths stay on one line (greppable) and tables are not squeezed to 80
    # columns; on a terminal rich fits the terminal
    width = None if sys.stdout.isatty() else _PIPE_WIDTH
    out, err = Console(soft_wrap=True, width=width), Console(stderr=True, soft_wrap=True)
    with cli_logging(args.verbose, err):
        return _run(args, out, err)


def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        return int(_COMMANDS[args.command](args, out, err))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except (H5SidecarError, OSError) as exc:
        # bad input or an unusable destination (missing, not a folder, not writable): say
        # what, without a traceback (-vv logs one)
        log.debug("command failed", exc_info=True)
        err.print(f"[red]error:[/] {exc}")
        return EXIT_USAGE




# -- commands -----------------------------------------------------------------------------------
def _index_source(args: argparse.Namespace) -> str | UrlList:
    """SOURCE, or the URLs of --url-list FILE (exactly one of them; read as they are staged)."""
    from h5sidecar.errors import InvalidRequestError
    from h5sidecar.workflows import UrlList

    if (args.source is None) == (args.url_list is None):
        raise InvalidRequestError("give either SOURCE or --url-list FILE (exactly one)")
    return UrlList(args.url_list) if args.url_list else args.source  # type: ignore[no-any-return]


def _cmd_index(args: argparse.Namespace, out: Console, err: Console) -> int:
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
        )
    if args.json:
        # plain json: rich's pretty-printer took a minute and 1.3 GB for 10,000 granules
        sys.stdout.write(json.dumps(report.to_dict(), indent=1, allow_nan=False) + "\n")
        return EXIT_OK if report.ok else EXIT_FAILED
    _print_report(report, out)
    where = "_h5sidecar_record/" if "://" in report.dest else "_h5sidecar.sqlite"
    out.print(f"report: {report.dest.rstrip('/')}/{where} (`h5sidecar report DEST` shows it)")
    return EXIT_OK if report.ok else EXIT_FAILED


def _cmd_report(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.dest import report_stream, write_report_json

    # streamed from the record: what is held does not grow with the granules
    with report_stream(args.dest, storage_options=storage_options(args.storage_options)) as (
        header,
        granules,
    ):
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
    import distributed  # noqa: F401 - its import sets its loggers' levels; ours come after

    from h5sidecar.workflows import dask_executor

    # Dask logs every worker start and stop at INFO: keep them for -vv
    logging.getLogger("distributed").setLevel(logging.DEBUG if args.verbose > 1 else
                                              logging.WARNING)
    with dask_executor(args.dask, retries=max(0, args.retries)) as ex:
        link = getattr(ex.client, "dashboard_link", None)
        err.print(f"Dask cluster {args.dask}: {ex.n_threads} worker thread(s)"
                  + (f", dashboard {link}" if link else ""))
        yield ex, args.workers or ex.n_threads


def _cmd_inspect(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import inspect_refs

    s = inspect_refs(args.ref, storage_options=storage_options(args.storage_options))
    if args.json:
        out.print_json(data=s.to_dict())
        return EXIT_OK
    src = s.source
    layout = f", {s.layout} layout" if s.layout else ""
    out.print(f"[bold]{s.ref}[/] ({s.format}{layout}, {_size(s.sidecar_bytes)})")
    out.print(f"source: {src.url}  size {src.size:,} B  etag {src.etag or '-'}  "
              f"mtime {src.mtime if src.mtime is not None else '-'}")
    c = s.counts
    out.print(f"{s.n_groups} group(s); variables: {c['virtual']} virtual, {c['inlined']} "
              f"inlined, {c['skipped']} skipped")
    table = Table(show_lines=False, header_style="bold")
    numeric = {"stored", "inline", "missing", "bytes"}
    for col in ("path", "status", "shape", "dtype", "chunks", "stored", "inline", "missing",
                "bytes", "codecs"):
        table.add_column(col, justify="right" if col in numeric else "left",
                         no_wrap=col != "codecs")
    for v in s.variables:
        if v.status == "skipped":
            continue
        table.add_row(v.path, v.status, _shape(v.shape), v.dtype, _shape(v.chunks),
                      str(v.n_stored), str(v.n_inline), str(v.n_missing),
                      _size(v.stored_bytes + v.inline_bytes), ",".join(v.codecs) or "-")
    out.print(table)
    skipped = [v for v in s.variables if v.status == "skipped"]
    if skipped:
        t = Table(title="skipped variables", header_style="bold")
        t.add_column("path")
        t.add_column("reason")
        for v in skipped:
            t.add_row(v.path, v.note)
        out.print(t)
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import verify_refs

    r = verify_refs(args.ref, sample=args.sample, seed=args.seed,
                    storage_options=storage_options(args.storage_options))
    if args.json:
        out.print_json(data=r.to_dict())
        return EXIT_OK if r.ok else EXIT_FAILED
    if r.source_changed:
        out.print(f"[red]source changed since indexing[/]: recorded {r.recorded.to_dict()}, "
                  f"now {r.current.to_dict()}: re-index it (h5sidecar index ... )")
    table = Table(header_style="bold")
    for col in ("path", "result", "chunks", "checksums", "detail"):
        table.add_column(col)
    style = {"ok": "green", "different": "red", "error": "red", "skipped": "yellow"}
    for v in r.variables:
        sums = f"{v.checksums_checked - v.checksums_failed}/{v.checksums_checked}" \
            if v.checksums_checked else "-"
        table.add_row(v.path, f"[{style[v.status]}]{v.status}[/]",
                      f"{v.chunks_checked}/{v.chunks_total}", sums, v.message)
    out.print(table)
    bad = [v for v in r.variables if v.status in ("different", "error")]
    if r.reader == "h5sidecar":
        out.print("read through h5sidecar's reader: a compact sidecar (plain fsspec/kerchunk "
                  "cannot read it)")
    verdict = "[green]OK[/]" if r.ok else "[red]DIFFERENCES FOUND[/]"
    out.print(f"{verdict}: {len(r.variables)} variable(s), {len(bad)} with problems")
    return EXIT_OK if r.ok else EXIT_FAILED


def _cmd_catalog(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.catalog import build_catalog

    with err.status("cataloguing granules") as status:
        result = build_catalog(
            args.dest, args.stacdir, gateway_url=args.gateway_url,
            collection_id=args.collection_id, references_base_url=args.references_base_url,
            storage_options=storage_options(args.storage_options), title=args.title,
            description=args.description, cubes=args.cube or None,
            progress=lambda name, ok: status.update(f"catalogued {name}"),
            json_tree=args.json_tree, geoparquet=args.geoparquet,
            track_footprints=args.track_footprints,
        )
    if args.pgstac:
        from h5sidecar.catalog import load_pgstac

        with err.status("loading into pgstac"):
            loaded = load_pgstac(args.pgstac, args.stacdir, collections=[result.collection_id])
        err.print(f"upserted {loaded.items} item(s) of {result.collection_id} into pgstac")
        for name in loaded.no_geometry:
            out.print(f"[yellow]NOT IN PGSTAC[/] {escape(name)}: no footprint (pgstac's items "
                      "need a geometry)")
    if args.json:
        out.print_json(data=result.to_dict())
        return EXIT_OK if result.ok else EXIT_FAILED
    out.print(f"[bold]{result.n_items}[/] item(s) in collection [bold]{result.collection_id}[/]: "
              f"{result.catalog} (validated against the STAC 1.1 schemas)")
    out.print(f"{result.added} added, {result.updated} updated, {result.removed} removed, "
              f"{result.unchanged} unchanged" +
              (f"; stac-geoparquet: {result.geoparquet}" if result.geoparquet else ""))
    if result.cubes:
        out.print(f"cube asset(s) of the collection: {', '.join(result.cubes)}")
    for n in result.no_footprint:
        out.print(f"[yellow]NO FOOTPRINT[/] {escape(n.name)}: {escape(n.reason)} (catalogued; "
                  "bbox and intersects searches cannot find it)")
    for e in result.errors:
        # escaped: "[no_time]" would otherwise be taken for a rich markup tag and vanish
        out.print(f"[red]LEFT OUT[/] {escape(e.name)}: {escape(f'[{e.kind}]')} {escape(e.message)}")
        out.print(f"         what to do: {escape(e.hint)}")
    return EXIT_OK if result.ok else EXIT_FAILED


def _cmd_cube(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import build_cube

    with err.status(f"building a cube of {args.dest} along {args.concat_dim!r}"):
        r = build_cube(args.dest, args.output, concat_dim=args.concat_dim, group=args.group,
                       variables=args.variables, format=args.format,
                       on_mismatch=args.on_mismatch,
                       storage_options=storage_options(args.storage_options),
                       mode="append" if args.append else "build",
                       on_out_of_order=args.on_out_of_order,
                       normalize_time=args.normalize_time, time_units=args.time_units)
    if r.action == "up_to_date":
        out.print(f"nothing new: the cube is up to date ({r.unchanged} granule(s) unchanged, "
                  "nothing written)")
        return EXIT_OK
    table = Table(header_style="bold")
    for col in ("cube", "granules", args.concat_dim, "first", "last"):
        table.add_column(col)
    for c in r.cubes:
        table.add_row(c.path, str(len(c.granules)), str(c.length), str(c.first), str(c.last))
    out.print(table)
    if r.action in ("appended", "rebuilt"):
        out.print(f"{r.action}: {len(r.added)} granule(s) added, {len(r.replaced)} replaced, "
                  f"{r.unchanged} unchanged ({r.sidecars_read} sidecar(s) read)")
    if len(r.cubes) > 1:
        out.print(f"[yellow]split into {len(r.cubes)} cubes:[/] the granules encode variables "
                  "differently (run without --on-mismatch split to see how)")
    return EXIT_OK


def _cmd_prune(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import prune

    reasons = tuple(args.only) if args.only else ("orphaned", "other_format", "staging")
    with err.status(f"checking the sidecars under {args.dest}"):
        r = prune(args.dest, apply=args.apply, reasons=reasons, staging_age=args.staging_age,
                  storage_options=storage_options(args.storage_options))
    if args.json:
        out.print_json(data=r.to_dict())
        return EXIT_OK
    verb = "removed" if r.applied else "would remove"
    for e in r.entries:
        did = "kept" if r.applied and not e.removed else verb
        out.print(f"{did} [bold]{escape(e.reason)}[/] {escape(e.path)}: {escape(e.detail)}")
    done = [e for e in r.entries if e.removed or not r.applied]
    out.print(f"{len(done)} of {r.sidecars_checked} sidecar(s) and temporaries {verb}"
              + ("" if r.applied or not r.entries else "; run again with --apply to remove them"))
    return EXIT_OK


def _cmd_sample(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import write_samples

    if args.collection:
        from h5sidecar.sample import write_daily_collection

        paths = write_daily_collection(args.outdir, days=args.days, mixed_packing=True,
                                       seed=args.seed)
        for p in paths:
            out.print(f"wrote {p} ({_size(p.stat().st_size)})")
        return EXIT_OK
    paths = write_samples(args.outdir, granules=args.granules, photons=args.photons,
                          seed=args.seed, netcdf=args.netcdf)
    for p in paths:
        out.print(f"wrote {p} ({_size(p.stat().st_size)})")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import run_demo

    with err.status("running the demo: sample granules -> index -> open -> compare"):
        d = run_demo(args.outdir)
    out.rule("[bold]h5sidecar demo")
    out.print(f"indexed {len(d.report.granules)} granule(s) from {d.granule_dir} into "
              f"{d.sidecar_dir} in {d.report.seconds:.1f} s")
    table = Table(header_style="bold")
    for col in ("granule", "status", "source", "sidecar", "virtual", "inlined", "skipped"):
        table.add_column(col)
    for g in d.report.granules:
        size = (g.source or {}).get("size", 0)
        table.add_row(g.name, g.status, _size(size), _size(g.sidecar_bytes), str(g.n_virtual),
                      str(g.n_inlined), str(g.n_skipped))
    out.print(table)
    out.print(f"opened [bold]{d.opened}[/] group [bold]{d.group}[/] with xarray "
              f"(engine={d.engine!r}): {d.dataset_summary}")
    t = Table(title="values through the sidecar vs h5py", header_style="bold")
    for col in ("variable", "first values (sidecar)", "first values (h5py)", "equal"):
        t.add_column(col)
    for c in d.comparisons:
        t.add_row(c.variable, c.sidecar_values, c.h5py_values,
                  "[green]yes[/]" if c.equal else "[red]NO[/]")
    out.print(t)
    out.print(f"next: h5sidecar inspect {d.example_sidecar}")
    return EXIT_OK if d.ok else EXIT_FAILED


def _cmd_serve(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.gateway.app import serve
    from h5sidecar.settings import GatewaySettings, ReadSettings, from_env

    cors = () if args.no_cors else tuple(args.cors) or None
    settings = from_env(GatewaySettings, host=args.host, port=args.port, token=args.token,
                        allow=tuple(args.allow) or None, cors_origins=cors)
    err.print(f"serving [bold]{args.dest}[/] on http://{settings.host}:{settings.port}/ "
              f"(token {'required' if settings.token else 'off'}; Ctrl-C stops)")
    stac_api: Any = None
    if args.stac_backend:
        from h5sidecar.catalog import PgStacApi, backend_dsn

        if args.stac:
            from h5sidecar.errors import InvalidRequestError

            raise InvalidRequestError("give --stac STACDIR or --stac-backend pgstac:DSN, not both")
        stac_api = PgStacApi(backend_dsn(args.stac_backend))
    elif args.stac:
        from h5sidecar.catalog import StacApi

        stac_api = StacApi(args.stac)
    serve(settings, args.dest, storage_options=storage_options(args.storage_options),
          read_settings=from_env(ReadSettings), stac_api=stac_api, cubes=args.cube or None,
          log_level=("warning", "info", "debug")[min(args.verbose, 2)])
    return EXIT_OK


# -- formatting -----------------------------------------------------------------------------------


_COMMANDS = {
    "index": _cmd_index,
    "inspect": _cmd_inspect,
    "verify": _cmd_verify,
    "catalog": _cmd_catalog,
    "cube": _cmd_cube,
    "prune": _cmd_prune,
    "report": _cmd_report,
    "sample": _cmd_sample,
    "demo": _cmd_demo,
    "serve": _cmd_serve,
}



if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
