"""Datacubes: build one from sidecars, open it, read a time series and a time step.

Granules: ``--days`` small daily gridded netCDF-4 files
(:func:`h5sidecar.sample.write_daily_collection`, written once into ``benchmarks/data/s3/cube/``)
served by the local S3 endpoint with ``--latency-ms`` of first-byte latency per request.

- ``h5sidecar``: the granules are indexed first (not timed: sidecars exist in the use case),
  then :func:`~h5sidecar.workflows.build_cube` builds a Parquet cube from the sidecars (it reads
  each granule's coordinates through the sidecars); the cube is opened with
  ``xr.open_dataset(engine="h5sidecar", chunks={})`` (every variable's metadata and the time
  index), then one grid point's time series and one whole time step are read.  Two appends
  (``mode="append"``): one with nothing new, one adding the last day to a cube of the others.
- ``kerchunk``: ``SingleHdf5ToZarr`` on every granule + ``MultiZarrToZarr`` along ``time`` (the
  peer builds from HDF5; build time, requests, and the variables its references hold).

Run with ``python benchmarks/run.py cube [--days 365] [--latency-ms 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

BUCKET = "cube"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", type=int, default=365, help="daily granules (default 365)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--skip-kerchunk", action="store_true", help="h5sidecar only")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result table into benchmarks/README.md")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


def granules(days: int) -> list[Path]:
    """The benchmark granules (written once per ``days``, then reused)."""
    from h5sidecar.sample import write_daily_collection

    folder = c.S3_ROOT / BUCKET / f"{days}"
    if not folder.exists():
        print(f"writing {days} daily granules ...", flush=True)
        write_daily_collection(folder.with_suffix(".tmp"), days=days)
        folder.with_suffix(".tmp").rename(folder)
    return sorted(folder.glob("*.nc"))


def _timed(url: str, fn: Any) -> tuple[dict[str, Any], Any]:
    reset_stats(url)
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    stats = get_stats(url)
    return {"seconds": seconds, "requests": stats["requests"], "bytes": stats["bytes_out"]}, out


def _kerchunk(urls: list[str]) -> dict[str, Any]:
    from kerchunk.combine import MultiZarrToZarr
    from kerchunk.hdf import SingleHdf5ToZarr

    refs = [SingleHdf5ToZarr(u, storage_options={"anon": False}).translate() for u in urls]
    return MultiZarrToZarr(refs, concat_dims=["time"],
                           remote_options={"anon": False}).translate()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import xarray as xr

    from h5sidecar.catalog import list_indexed
    from h5sidecar.workflows import build_cube, index_many

    paths = granules(args.days)
    url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    source = f"s3://{BUCKET}/{args.days}/"
    work = Path(tempfile.mkdtemp(prefix="bench-cube-"))
    rows: dict[str, Any] = {}
    try:
        report = index_many(source, str(work / "sidecars"), executor="serial")
        if not report.ok:
            raise SystemExit(f"indexing failed: {report.to_dict()}")
        cube = str(work / "cube.parq")
        rows["h5sidecar build"], _ = _timed(url, lambda: build_cube(str(work / "sidecars"), cube))
        rows["h5sidecar build"]["cube_bytes"] = c.dir_size(Path(cube))
        # appends: nothing new (each sidecar's stamp checked, nothing read), then one new day
        # onto a cube of the others
        dest = str(work / "sidecars")
        rows["h5sidecar append, nothing new"], _ = _timed(
            url, lambda: build_cube(dest, cube, mode="append"))
        older = [g.sidecar for g in list_indexed(dest)][:-1]
        build_cube(older, str(work / "older.parq"))
        rows["h5sidecar append 1 granule"], _ = _timed(
            url, lambda: build_cube(dest, str(work / "older.parq"), mode="append"))
        rows["h5sidecar open"], ds = _timed(
            url, lambda: xr.open_dataset(cube, engine="h5sidecar", chunks={}))
        rows["h5sidecar time step"], _ = _timed(
            url, lambda: ds["tas"].isel(time=args.days // 2).values)
        rows["h5sidecar point series"], _ = _timed(
            url, lambda: ds["tas"].isel(lat=3, lon=5).values)
        ds.close()
        if not args.skip_kerchunk:
            urls = [source + p.name for p in paths]
            rows["kerchunk build (from HDF5)"], refs = _timed(url, lambda: _kerchunk(urls))
            rows["kerchunk build (from HDF5)"]["cube_bytes"] = len(json.dumps(refs))
            rows["kerchunk build (from HDF5)"]["variables"] = sorted(
                k.rsplit("/", 1)[0] for k in refs["refs"] if k.endswith("/.zarray"))
        rows["h5sidecar build"]["variables"] = sorted(ds.variables)
        for name, r in rows.items():
            print(f"{name}: {r['seconds']:.3f} s, {r['requests']} requests", flush=True)
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k != "func"},
            "environment": c.environment(), "rows": rows}


def report(results: dict[str, Any]) -> str:
    a, env = results["args"], results["environment"]
    head = (f"{a['days']} daily granules, S3 endpoint with {a['latency_ms']:g} ms latency, "
            f"{env['cpus']} CPUs, load average {env['load_avg'][0]:.1f} at the end "
            f"(commit {env['commit']}).")
    table = c.markdown_table(
        ["case", "seconds", "requests", "cube bytes", "variables"],
        [[name, f"{r['seconds']:.3f}", r["requests"],
          c.fmt_bytes(r["cube_bytes"]) if "cube_bytes" in r else "-",
          ", ".join(r["variables"]) if "variables" in r else "-"]
         for name, r in results["rows"].items()])
    return f"{head}\n\n{table}"


def main(args: argparse.Namespace) -> dict[str, Any]:
    return c.run_and_report("cube", args, run, report)
