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
from typing import Any, Self

from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from h5sidecar._version import __version__
from h5sidecar.errors import ErrorKind, H5SidecarError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main"]

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
    _setup_logging(args.verbose, err)
    try:
        return int(args.run(args, out, err))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except (H5SidecarError, OSError) as exc:
        # bad input or an unusable destination (missing, not a folder, not writable): say
        # what, without a traceback (-vv logs one)
        log.debug("command failed", exc_info=True)
        err.print(f"[red]error:[/] {exc}")
        return EXIT_USAGE


# -- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="h5sidecar",
        description="Index HDF5/netCDF-4 granules into kerchunk-compatible sidecars; inspect "
        "and verify them.",
        epilog="exit codes: 0 ok, 1 failures or differences, 2 bad usage or input, "
        "130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"h5sidecar {__version__}")
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="count", default=0, help="log progress (-v) or debug (-vv)"
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, dest="verbose_global",
                        help="log progress (-v) or debug (-vv); also accepted after COMMAND")
    parser.set_defaults(verbose=0)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    p = sub.add_parser("index", parents=[verbose], help="index granules into sidecars",
                       description="Index every granule of SOURCE into DEST/<name>.parq (or "
                       ".json), skipping granules whose sidecar is up to date, and write "
                       "DEST/_report.json.")
    p.add_argument("source", nargs="?", default=None,
                   help="a file, a folder, a glob, s3://bucket/prefix or one https:// URL")
    p.add_argument("--url-list", metavar="FILE", default=None,
                   help="index the URLs listed in FILE instead, one per line (https://, "
                   "s3:// or paths; blank lines and # comments skipped)")
    p.add_argument("-o", "--output", dest="dest", required=True, help="folder or S3 prefix")
    p.add_argument("--format", choices=["parquet", "json"], default="parquet")
    p.add_argument("--layout", choices=["kerchunk", "compact"], default=None,
                   help="Parquet sidecar layout: kerchunk (record files per variable, read by "
                   "plain fsspec/kerchunk) or compact (2-3 objects per granule, h5sidecar and "
                   "its gateway only); default: H5SIDECAR_LAYOUT or kerchunk")
    p.add_argument("--workers", type=_positive, default=None,
                   help="worker processes (default: one per CPU)")
    p.add_argument("--serial", action="store_true", help="index in this process, one by one")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="run on a Dask cluster: a scheduler address (tcp://host:8786) or "
                   "local:N for a LocalCluster of N worker processes on this machine")
    p.add_argument("--retries", type=int, default=2, metavar="N",
                   help="with --dask: extra attempts for a granule that failed with a "
                   "transient read error (default 2)")
    p.add_argument("--force", action="store_true", help="re-index up-to-date granules too")
    p.add_argument("--checksums", action="store_true",
                   help="record a checksum of every chunk (reads all the data)")
    p.add_argument("--on-unsupported", choices=["skip", "raise"], default="skip",
                   help="skip unsupported variables (recorded with the reason) or fail the "
                   "granule (default: skip)")
    p.add_argument("--pattern", action="append", dest="patterns", metavar="GLOB",
                   help="file names to index in a folder/prefix (repeatable; default: *.h5 "
                   "*.hdf5 *.he5 *.nc *.nc4)")
    p.add_argument("--json", action="store_true", help="print the run report as JSON")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_index)

    p = sub.add_parser("inspect", parents=[verbose], help="show what a sidecar holds",
                       description="List the variables of a sidecar (status, shape, dtype, "
                       "chunks, bytes, codecs), the skipped ones with reasons, and the source.")
    p.add_argument("ref", help="a .parq or .json sidecar (local or s3://)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_inspect)

    p = sub.add_parser("verify", parents=[verbose], help="compare a sidecar with its source",
                       description="Decode chunks through the sidecar (plain fsspec "
                       "reference:// + zarr) and compare with h5py on the source, and with "
                       "recorded checksums; exit 1 on any difference.")
    p.add_argument("ref", help="a .parq or .json sidecar (local or s3://)")
    p.add_argument("--sample", type=_sample, default=3, metavar="N",
                   help="chunks checked per variable (0 or 'all': every chunk; default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the chunk sample (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_verify)

    p = sub.add_parser("catalog", parents=[verbose], help="write a STAC catalog of DEST",
                       description="Write (or update) a static STAC 1.1 catalog in STACDIR: a "
                       "Collection with one Item per granule indexed under DEST (footprint and "
                       "time range read from the data; assets: original file, sidecar, and the "
                       "gateway's Zarr store with --gateway-url). Documents are validated "
                       "against the STAC schemas offline.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("-o", "--output", dest="stacdir", required=True, help="catalog folder")
    p.add_argument("--gateway-url", default=None, metavar="URL",
                   help="base URL of `h5sidecar serve DEST`: adds a 'zarr' asset to each item")
    p.add_argument("--collection-id", default=None, metavar="ID",
                   help="collection id (default: the products' short_name, else DEST's name)")
    p.add_argument("--references-base-url", default=None, metavar="URL",
                   help="URL where DEST is published: 'references' assets point there")
    p.add_argument("--title", default=None, help="collection title")
    p.add_argument("--description", default=None, help="collection description")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--cube", action="append", default=[], metavar="[NAME=]CUBE",
                   help="add this datacube (written by `h5sidecar cube`) as a collection asset "
                   "(repeatable; cubes inside DEST are found by themselves)")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_catalog)

    p = sub.add_parser("cube", parents=[verbose], help="combine sidecars into one datacube",
                       description="Combine the sidecars under DEST into one kerchunk reference "
                       "set along a dimension (a datacube), from the sidecars only. Granules are "
                       "ordered by their coordinate values; granules encoded differently "
                       "(scale_factor, add_offset, _FillValue, units, calendar, dtype, codecs, "
                       "chunks) are refused, or split into one cube per encoding.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("-o", "--output", required=True,
                   help="the cube (CUBE.parq directory or CUBE.json; local or s3://)")
    p.add_argument("--concat-dim", default="time",
                   help="dimension to concatenate along (default: time)")
    p.add_argument("--group", default=None, help="group whose variables make the cube (root)")
    p.add_argument("--variables", nargs="+", default=None, metavar="VAR",
                   help="variables to keep (default: all of the group)")
    p.add_argument("--format", choices=["parquet", "json", "icechunk"], default="parquet",
                   help="kerchunk Parquet (default) or JSON, or a commit of an Icechunk "
                   "repository at CUBE")
    p.add_argument("--on-mismatch", choices=["raise", "split"], default="raise",
                   help="granules encoded differently: refuse (default) or write one cube per "
                   "encoding (CUBE-0.parq, CUBE-1.parq, ... in coordinate order)")
    p.add_argument("--append", action="store_true",
                   help="add to the existing CUBE only the granules not yet in it and replace "
                   "members whose source changed (nothing is written when nothing changed)")
    p.add_argument("--on-out-of-order", choices=["raise", "rebuild"], default="raise",
                   help="with --append, a granule that does not follow the cube: refuse "
                   "(default) or rebuild the cube from all of DEST")
    p.add_argument("--normalize-time", action="store_true",
                   help="accept granules whose concat coordinate has other time units: hold "
                   "its times in one units (exactly, else refused)")
    p.add_argument("--time-units", default=None, metavar="UNITS",
                   help="with --normalize-time, the new cube's time units (default: the first "
                   "sidecar's), e.g. 'hours since 2020-01-01'")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_cube)

    p = sub.add_parser("prune", parents=[verbose], help="list (or remove) sidecars no one needs",
                       description="Find sidecars whose source no longer exists (orphaned), "
                       "sidecars in a format no longer indexed (other_format) and temporaries "
                       "of interrupted writes (staging) under DEST. A dry run unless --apply.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("--apply", action="store_true", help="remove them (default: only list)")
    p.add_argument("--only", nargs="+", choices=["orphaned", "other_format", "staging"],
                   default=None, metavar="KIND", help="orphaned, other_format and/or staging")
    p.add_argument("--staging-age", type=float, default=3600.0, metavar="SECONDS",
                   help="leave younger temporaries alone (a running index owns them; 3600)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_prune)

    p = sub.add_parser("sample", parents=[verbose], help="write sample ATL03-like granules",
                       description="Write small synthetic ATL03-like HDF5 granules (and "
                       "optionally a netCDF-4 file) to OUTDIR.")
    p.add_argument("outdir")
    p.add_argument("--granules", type=_positive, default=2)
    p.add_argument("--photons", type=_positive, default=None,
                   help="photons per beam (default: the generator's small default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--netcdf", action="store_true", help="also write a netCDF-4 sample")
    p.add_argument("--collection", action="store_true",
                   help="write a collection of daily gridded netCDF-4 granules instead (the "
                   "datacube sample, with one extra granule packed differently)")
    p.add_argument("--days", type=_positive, default=6,
                   help="days in the --collection (default 6)")
    p.set_defaults(run=_cmd_sample)

    p = sub.add_parser("demo", parents=[verbose], help="sample -> index -> open -> compare",
                       description="Write sample granules into OUTDIR, index them, open one "
                       "with xarray through its sidecar and compare values with h5py.")
    p.add_argument("outdir", nargs="?", default="demo-output")
    p.set_defaults(run=_cmd_demo)

    p = sub.add_parser("serve", parents=[verbose], help="serve sidecars as Zarr over HTTP",
                       description="Serve every granule indexed under DEST as Zarr v2 "
                       "(/zarr/G/), Zarr v3 (/zarr3/G/) and sharded Zarr v3 (/zarr3-shard/K/G/) "
                       "stores (and each --cube datacube the same way), with a landing page at "
                       "/. Settings also come from H5SIDECAR_* "
                       "variables (H5SIDECAR_TOKEN keeps the token out of the process list).")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8000)")
    p.add_argument("--allow", action="append", default=[], metavar="PREFIX",
                   help="also allow reading sources under PREFIX (repeatable; default: only the "
                   "sources listed in DEST/_report.json)")
    p.add_argument("--token", default=None,
                   help="require 'Authorization: Bearer TOKEN' on every route but /healthz")
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow this browser origin (repeatable; default '*')")
    p.add_argument("--no-cors", action="store_true", help="send no CORS headers")
    p.add_argument("--stac", default=None, metavar="STACDIR",
                   help="serve this catalog (written by `h5sidecar catalog`) under /stac/, with "
                   "a STAC API item search at /stac/search")
    p.add_argument("--cube", action="append", default=[], metavar="[NAME=]CUBE",
                   help="also serve this datacube (written by `h5sidecar cube`) as /zarr/NAME/, "
                   "... (repeatable; NAME defaults to the file name without .parq/.json)")
    _storage_option_arg(p)
    p.set_defaults(run=_cmd_serve)
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _sample(text: str) -> int:
    if text.strip().lower() == "all":
        return 0
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 (all), 'all' or a positive number")
    return value


def _storage_option_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-option", action="append", dest="storage_options", default=[],
                   metavar="K=V", type=_key_value,
                   help="fsspec/s3fs option, repeatable; V is parsed as JSON when it can be "
                   "(anon=true); dotted keys nest (client_kwargs.region_name=us-west-2)")


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def storage_options(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """``[("a.b", 1), ("c", 2)]`` -> ``{"a": {"b": 1}, "c": 2}`` (None when empty)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out or None


def _setup_logging(verbose: int, console: Console) -> None:
    level = logging.WARNING if not verbose else logging.INFO if verbose == 1 else logging.DEBUG
    # the progress bar's console: rich then prints log records above the live bar
    handler = RichHandler(console=console, show_path=False)
    logging.basicConfig(level=level, handlers=[handler], format="%(message)s", force=True)
    log.setLevel(level)


# -- commands -----------------------------------------------------------------------------------
def _index_source(args: argparse.Namespace) -> str | list[str]:
    """SOURCE, or the URLs of --url-list FILE (exactly one of them)."""
    from h5sidecar.errors import InvalidRequestError
    from h5sidecar.workflows._url_list import read_url_list

    if (args.source is None) == (args.url_list is None):
        raise InvalidRequestError("give either SOURCE or --url-list FILE (exactly one)")
    return read_url_list(args.url_list) if args.url_list else args.source  # type: ignore[no-any-return]


def _cmd_index(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.settings import IndexSettings, from_env
    from h5sidecar.workflows import DEFAULT_PATTERNS, index_many

    with (
        _terminate_as_interrupt(),
        _executor(args, err) as (executor, workers),
        _ProgressBar(err) as bar,
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
            settings=from_env(IndexSettings),
        )
    if args.json:
        out.print_json(data=report.to_dict())
        return EXIT_OK if report.ok else EXIT_FAILED
    counts = report.counts
    out.print(
        f"[bold]{len(report.granules)}[/] granule(s) in {report.seconds:.1f} s: "
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
        lost = [s["path"] for s in g.skipped if s.get("kind") == ErrorKind.INTERNAL_ERROR]
        out.print(
            f"[red]PARTIAL[/] {escape(g.name or g.url)}: {len(lost)} variable(s) left out by an "
            f"unexpected error ({escape(', '.join(lost[:5]))}); reasons in the report"
        )
    odd = report.options.get("not_regular_files", [])
    if odd:
        out.print(f"[yellow]{len(odd)} file(s) left out, not regular files (FIFOs, sockets, "
                  f"devices)[/]: {escape(', '.join(odd))}")
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
    out.print(f"report: {report.dest.rstrip('/')}/_report.json")
    return EXIT_OK if report.ok else EXIT_FAILED


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


class _ProgressBar:
    """A rich progress bar fed by :func:`index_many` (implements ``ProgressSink``)."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, transient=False,
        )
        self._task: Any = None
        self._counts = {"ok": 0, "up_to_date": 0, "failed": 0}

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, total: int) -> None:
        self._task = self._progress.add_task("index", total=total, status="")

    def advance(self, result: Any) -> None:
        self._counts[result.status] += 1
        c = self._counts
        status = f"ok {c['ok']}  up-to-date {c['up_to_date']}  failed {c['failed']}"
        self._progress.update(self._task, advance=1, status=status)


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
        )
    if args.json:
        out.print_json(data=result.to_dict())
        return EXIT_OK if result.ok else EXIT_FAILED
    out.print(f"[bold]{len(result.items)}[/] item(s) in collection [bold]{result.collection_id}"
              f"[/]: {result.catalog} (validated against the STAC 1.1 schemas)")
    if result.cubes:
        out.print(f"cube asset(s) of the collection: {', '.join(result.cubes)}")
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
        out.print(f"{verb} [bold]{escape(e.reason)}[/] {escape(e.path)}: {escape(e.detail)}")
    out.print(f"{len(r.entries)} of {r.sidecars_checked} sidecar(s) and temporaries {verb}"
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
    stac_api = None
    if args.stac:
        from h5sidecar.catalog import StacApi

        stac_api = StacApi(args.stac)
    serve(settings, args.dest, storage_options=storage_options(args.storage_options),
          read_settings=from_env(ReadSettings), stac_api=stac_api, cubes=args.cube or None,
          log_level=("warning", "info", "debug")[min(args.verbose, 2)])
    return EXIT_OK


# -- formatting -----------------------------------------------------------------------------------
def _shape(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
