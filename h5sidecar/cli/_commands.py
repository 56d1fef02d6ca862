"""The commands besides ``index`` and ``report``: inspect, verify, dmrpp-check, catalog, cube,
prune, sample, demo and serve."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from h5sidecar.cli._args import record_settings, storage_options
from h5sidecar.cli._exit_codes import EXIT_FAILED, EXIT_OK
from h5sidecar.cli._output import shape as _shape
from h5sidecar.cli._output import size as _size
from h5sidecar.cli._summaries import SUMMARY_ABOVE, inspect_summary, verify_summary

log = logging.getLogger("h5sidecar")


def cmd_inspect(args: argparse.Namespace, out: Console, err: Console) -> int:
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
    if not args.all and c["virtual"] + c["inlined"] > SUMMARY_ABOVE:
        out.print(inspect_summary(s.variables))
        _print_skipped(s.variables, out)
        return EXIT_OK
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
    _print_skipped(s.variables, out)
    return EXIT_OK


def _print_skipped(variables: Any, out: Console) -> None:
    skipped = [v for v in variables if v.status == "skipped"]
    if skipped:
        t = Table(title="skipped variables", header_style="bold")
        t.add_column("path")
        t.add_column("reason")
        for v in skipped:
            t.add_row(v.path, v.note)
        out.print(t)


def cmd_verify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import verify_refs

    r = verify_refs(args.ref, sample=args.sample, seed=args.seed,
                    storage_options=storage_options(args.storage_options))
    if args.json:
        out.print_json(data=r.to_dict())
        return EXIT_OK if r.ok else EXIT_FAILED
    if r.source_changed:
        out.print(f"[red]source changed since indexing[/]: recorded {r.recorded.to_dict()}, "
                  f"now {r.current.to_dict()}: re-index it (h5sidecar index ... )")
    bad = [v for v in r.variables if v.status in ("different", "error")]
    short = not args.all and len(r.variables) > SUMMARY_ABOVE
    if short:
        out.print(verify_summary(r.variables))
    table = Table(header_style="bold", title="variables with problems" if short else None)
    for col in ("path", "result", "chunks", "checksums", "detail"):
        table.add_column(col)
    style = {"ok": "green", "different": "red", "error": "red", "skipped": "yellow"}
    for v in bad if short else r.variables:
        sums = f"{v.checksums_checked - v.checksums_failed}/{v.checksums_checked}" \
            if v.checksums_checked else "-"
        table.add_row(v.path, f"[{style[v.status]}]{v.status}[/]",
                      f"{v.chunks_checked}/{v.chunks_total}", sums, v.message)
    if bad or not short:
        out.print(table)
    if r.reader == "h5sidecar":
        out.print("read through h5sidecar's reader: a compact sidecar (plain fsspec/kerchunk "
                  "cannot read it)")
    for note in r.not_checked:
        out.print(f"[yellow]not checked[/]: {escape(note)}")
    verdict = "[green]OK[/]" if r.ok else "[red]DIFFERENCES FOUND[/]"
    out.print(f"{verdict}: {len(r.variables)} variable(s), {len(bad)} with problems")
    return EXIT_OK if r.ok else EXIT_FAILED


def cmd_dmrpp_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import check_dmrpp

    a = check_dmrpp(args.granule, args.dmrpp, byte_order=args.byte_order,
                    **(storage_options(args.storage_options) or {}))
    if args.json:
        out.print_json(data=a.to_dict())
        return EXIT_OK if a.ok else EXIT_FAILED
    if a.findings:
        table = Table(header_style="bold")
        for col in ("path", "disagreement", "detail"):
            table.add_column(col, no_wrap=col != "detail")
        for f in a.findings:
            table.add_row(escape(f.path or "/"), f"[red]{f.kind}[/]", escape(f.detail))
        out.print(table)
    for path, reason in a.unchecked:
        out.print(f"[yellow]not checked[/] {escape(path)}: {escape(reason)}")
    verdict = "[green]OK[/]" if a.ok else "[red]DISAGREEMENTS FOUND[/]"
    out.print(f"{verdict}: {escape(a.dmrpp)} against {escape(a.granule)}: {a.n_variables} "
              f"variable(s) compared, {len(a.findings)} disagreement(s), {len(a.unchecked)} "
              "not checked")
    return EXIT_OK if a.ok else EXIT_FAILED


def cmd_catalog(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.catalog import build_catalog
    from h5sidecar.errors import require_extra

    if args.pgstac:  # before the catalog is written, not after
        require_extra("pgstac", "pypgstac", "psycopg", feature="catalog --pgstac")
    with err.status("cataloguing granules") as status:
        result = build_catalog(
            args.dest, args.stacdir, gateway_url=args.gateway_url,
            collection_id=args.collection_id, references_base_url=args.references_base_url,
            storage_options=storage_options(args.storage_options), title=args.title,
            description=args.description, cubes=args.cube or None,
            progress=lambda name, ok: status.update(f"catalogued {name}"),
            json_tree=args.json_tree, geoparquet=args.geoparquet,
            track_footprints=args.track_footprints, record_settings=record_settings(args),
        )
    if args.pgstac:
        from h5sidecar.catalog import load_pgstac

        with err.status("loading into pgstac"):
            loaded = load_pgstac(args.pgstac, args.stacdir, collections=[result.collection_id])
        unlocated = len(loaded.no_footprint)
        err.print(f"upserted {loaded.items} item(s) of {result.collection_id} into pgstac" +
                  (f", {unlocated} of them without a footprint (an empty geometry)" if unlocated
                   else ""))
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
    where = "catalogued, in pgstac with an empty geometry" if args.pgstac else "catalogued"
    for n in result.no_footprint:
        out.print(f"[yellow]NO FOOTPRINT[/] {escape(n.name)}: {escape(n.reason)} ({where}; "
                  "bbox and intersects searches cannot find it)")
    for e in result.errors:
        # escaped: "[no_time]" would otherwise be taken for a rich markup tag and vanish
        out.print(f"[red]LEFT OUT[/] {escape(e.name)}: {escape(f'[{e.kind}]')} {escape(e.message)}")
        out.print(f"         what to do: {escape(e.hint)}")
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_cube(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import build_cube

    with err.status(f"building a cube of {args.dest} along {args.concat_dim!r}"):
        r = build_cube(args.dest, args.output, concat_dim=args.concat_dim, group=args.group,
                       variables=args.variables, format=args.format,
                       on_mismatch=args.on_mismatch,
                       storage_options=storage_options(args.storage_options),
                       mode="append" if args.append else "build",
                       on_out_of_order=args.on_out_of_order,
                       normalize_time=args.normalize_time, time_units=args.time_units,
                       record_settings=record_settings(args), recheck=args.recheck)
    if r.action == "up_to_date":
        out.print(f"nothing new: the cube is up to date ({r.unchanged} granule(s) unchanged, "
                  "nothing written)")
        return EXIT_OK
    table = Table(header_style="bold")
    for col in ("cube", "granules", args.concat_dim, "first", "last"):
        table.add_column(col)
    for c in r.cubes:
        table.add_row(c.path, str(len(c.granules)), str(c.length), *c.bounds)
    out.print(table)
    if r.action in ("appended", "rebuilt"):
        tail = "the new and replaced members'" if r.replaced else "the new members'"
        how = {"tail": f"; tail: only {tail} files written",
               "rewritten": f"; rewritten whole: {r.why_rewritten}",
               "commit": "; one Icechunk commit of the new references"}.get(r.written, "")
        out.print(f"{r.action}: {len(r.added)} granule(s) added, {len(r.replaced)} replaced, "
                  f"{r.unchanged} unchanged ({r.sidecars_read} sidecar(s) read{escape(how)})")
    if len(r.cubes) > 1:
        out.print(f"[yellow]split into {len(r.cubes)} cubes:[/] the granules encode variables "
                  "differently (run without --on-mismatch split to see how)")
    return EXIT_OK


def cmd_prune(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import prune

    reasons = tuple(args.only) if args.only else ("orphaned", "other_format", "staging")
    with err.status(f"checking the sidecars under {args.dest}"):
        r = prune(args.dest, apply=args.apply, reasons=reasons, staging_age=args.staging_age,
                  storage_options=storage_options(args.storage_options),
                  record_settings=record_settings(args))
    if args.json:
        out.print_json(data=r.to_dict())
        return EXIT_OK
    verb = "removed" if r.applied else "would remove"
    for e in r.entries:
        did = "kept" if r.applied and not e.removed else verb
        out.print(f"{did} [bold]{escape(e.reason)}[/] {escape(e.path)}: {escape(e.detail)}")
    done = [e for e in r.entries if e.removed or not r.applied]
    out.print(f"{len(done)} of {r.sidecars_checked} sidecar(s) and temporaries "
              f"{'removed' if r.applied else 'would be removed'}"
              + ("" if r.applied or not r.entries else "; run again with --apply to remove them"))
    return EXIT_OK


def cmd_sample(args: argparse.Namespace, out: Console, err: Console) -> int:
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


def cmd_demo(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.workflows import run_demo

    with err.status("running the demo: sample granules -> index -> open -> compare"):
        d = run_demo(args.outdir)
    out.rule("[bold]h5sidecar demo")
    counts = d.report.counts
    done = f"indexed {counts['ok']} granule(s)" if counts["ok"] else "indexed nothing"
    done += f", {counts['up_to_date']} up to date" if counts["up_to_date"] else ""
    done += f", {counts['failed']} failed" if counts["failed"] else ""
    out.print(f"{done}: {d.granule_dir} -> {d.sidecar_dir} in {d.report.seconds:.1f} s")
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
    out.print(f"next: {_this_command()} inspect {d.example_sidecar}")
    return EXIT_OK if d.ok else EXIT_FAILED


def _this_command() -> str:
    """How to run ``h5sidecar`` again from a new shell: ``h5sidecar`` when it is on PATH, else
    the script beside this Python (a venv not activated), else ``python -m h5sidecar.cli``."""
    if shutil.which("h5sidecar"):
        return "h5sidecar"
    script = Path(sys.executable).parent / "h5sidecar"
    return str(script) if script.is_file() else f"{sys.executable} -m h5sidecar.cli"


def cmd_serve(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.errors import require_extra

    require_extra("gateway", "starlette", "uvicorn", feature="h5sidecar serve")
    from h5sidecar.gateway.app import serve
    from h5sidecar.settings import GatewaySettings, ReadSettings, from_env

    cors = () if args.no_cors else tuple(args.cors) or None
    settings = from_env(GatewaySettings, host=args.host, port=args.port, token=args.token,
                        allow=tuple(args.allow) or None, cors_origins=cors)
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
    err.print(f"serving [bold]{args.dest}[/] on http://{settings.host}:{settings.port}/ "
              f"(token {'required' if settings.token else 'off'}; Ctrl-C stops)")
    serve(settings, args.dest, storage_options=storage_options(args.storage_options),
          read_settings=from_env(ReadSettings), stac_api=stac_api, cubes=args.cube or None,
          record_settings=record_settings(args),
          log_level=("warning", "info", "debug")[min(args.verbose, 2)])
    return EXIT_OK
