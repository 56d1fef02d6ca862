"""Datacubes: build one from sidecars, open it, read a time series and a time step; side by side
with kerchunk and VirtualiZarr + Icechunk building from the HDF5 files.

Granules: ``--days`` small daily gridded netCDF-4 files
(:func:`h5sidecar.sample.write_daily_collection`, written once into ``benchmarks/data/s3/cube/``)
served by the local S3 endpoint with ``--latency-ms`` of first-byte latency per request.  Every
cube is written to that endpoint too (``s3://cube/_cubes/DAYS/``), so opening one is measured in
requests and seconds at that latency.

- ``h5sidecar``: the granules are indexed first (not timed: sidecars exist in the use case),
  then :func:`~h5sidecar.workflows.build_cube` builds a Parquet cube and an Icechunk repository
  from the sidecars (it reads each granule's coordinates through the sidecars).  Parquet opens
  with ``xr.open_dataset(engine="h5sidecar", chunks={})``, Icechunk with
  :func:`~h5sidecar.workflows.open_icechunk` + ``xr.open_zarr``.  Two appends
  (``mode="append"``): one with nothing new, one adding the last day to a cube of the others.
- ``kerchunk``: ``SingleHdf5ToZarr`` on every granule + ``MultiZarrToZarr`` along ``time``
  (from HDF5).  Its references lack ``tas`` and ``pr`` (``SingleHdf5ToZarr`` leaves them out:
  see README), so the reads use ``MultiZarrToZarr`` over the sidecars' kerchunk references
  instead (the combine step alone; its bytes are the baseline of the size target).
- ``VirtualiZarr``: ``open_virtual_mfdataset`` (``HDFParser``, obstore registry) along ``time``
  + ``.vz.to_icechunk`` (from HDF5), opened with icechunk + ``xr.open_zarr``.

"open" is every variable's metadata and the decoded time coordinate; then one whole time step
and one grid point's series of ``tas`` are read (``--repeats`` times, each from a new open
with h5sidecar's caches emptied; the median is reported).  Every value read is compared with xarray +
h5netcdf on the local files (``--oracle-every K`` compares every K-th step of the series only).
The mixed-packing sample (:func:`_cube_mixed.run_mixed`) shows what each tool makes of a granule
packed differently.

Run with ``python benchmarks/run.py cube [--days 365] [--latency-ms 20] [--repeats 3]``; at
10,000 days run h5sidecar alone (``--skip-kerchunk --skip-virtualizarr --oracle-every 100``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as c
from benchmarks import _cube_peers as peers
from benchmarks._cube_mixed import report_mixed, run_mixed
from benchmarks.s3server import get_stats, reset_stats, start_server

BUCKET = "cube"
#: The grid point of the time series (the sample grid is 8 x 12).
POINT = {"lat": 3, "lon": 5}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", type=int, default=365, help="daily granules (default 365)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--skip-kerchunk", action="store_true", help="no kerchunk rows")
    p.add_argument("--skip-virtualizarr", action="store_true",
                   help="no VirtualiZarr + Icechunk rows")
    p.add_argument("--repeats", type=int, default=3,
                   help="opens and reads per tool; the median is reported (default 3)")
    p.add_argument("--oracle-every", type=int, default=1, metavar="K",
                   help="compare every K-th step of the time series with h5netcdf (default 1)")
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


class Bench:
    """One run's S3 endpoint, truth and result rows."""

    def __init__(self, args: argparse.Namespace, url: str, paths: list[Path]) -> None:
        self.args, self.url, self.days = args, url, args.days
        self.rows: dict[str, dict[str, Any]] = {}
        print(f"reading the truth with h5netcdf (every {args.oracle_every} steps) ...", flush=True)
        self.step = self.days // 2
        self.series_at = list(range(0, self.days, args.oracle_every))
        self.truth_step = tuple(a[0] for a in peers.truth([paths[self.step]]))
        self.truth_series = tuple(a[:, POINT["lat"], POINT["lon"]]
                                  for a in peers.truth([paths[i] for i in self.series_at]))

    def time(self, name: str, fn: Any, **extra: Any) -> Any:
        """Run ``fn`` once, timed; a row of ``seconds`` (every run's in ``times``), requests and
        bytes of the S3 endpoint (last run's)."""
        row, out = _timed(self.url, fn)
        times = [*self.rows.get(name, {}).get("times", []), row["seconds"]]
        self.rows[name] = row | extra | {"times": times, "seconds": statistics.median(times)}
        print(f"{name}: {row['seconds']:.3f} s, {row['requests']} requests", flush=True)
        return out

    def open_and_read(self, tool: str, opener: Any) -> None:
        """Open (metadata of every variable + time index), then the two reads, compared with
        h5netcdf; ``--repeats`` times, each from a fresh open with h5sidecar's caches empty."""
        from h5sidecar.read import clear_caches

        for _ in range(self.args.repeats):
            clear_caches()
            if not self._open_and_read_once(tool, opener):
                return

    def _open_and_read_once(self, tool: str, opener: Any) -> bool:
        ds = self.time(f"{tool}: open", lambda: _opened(opener()))
        self.rows[f"{tool}: open"]["variables"] = sorted(map(str, ds.variables))
        if "tas" not in ds:
            ds.close()
            return False
        tas = ds["tas"]
        got = self.time(f"{tool}: time step", lambda: tas.isel(time=self.step).values)
        self.rows[f"{tool}: time step"] |= peers.compare(got, self.truth_step)
        got = self.time(f"{tool}: point series", lambda: tas.isel(POINT).values)
        self.rows[f"{tool}: point series"] |= peers.compare(got[self.series_at],
                                                            self.truth_series)
        ds.close()
        return True


def _opened(ds: Any) -> Any:
    ds["time"].values  # noqa: B018  (the time index: loaded here if the opener left it lazy)
    return ds


def run(args: argparse.Namespace) -> dict[str, Any]:
    from h5sidecar.catalog import list_indexed
    from h5sidecar.workflows import build_cube, index_many, open_icechunk

    paths = granules(args.days)
    url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": peers.S3["key"],
                       "AWS_SECRET_ACCESS_KEY": peers.S3["secret"],
                       "AWS_DEFAULT_REGION": peers.S3["region"]})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    import s3fs

    # s3fs reuses a filesystem made with the same arguments, whatever endpoint the environment
    # named then (in a test run, the moto server of an earlier test)
    s3fs.S3FileSystem.clear_instance_cache()
    source = f"s3://{BUCKET}/{args.days}/"
    cubes_key = f"_cubes/{args.days}"
    cubes_dir = c.S3_ROOT / BUCKET / cubes_key
    shutil.rmtree(cubes_dir, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="bench-cube-"))
    urls = [source + p.name for p in paths]
    out: dict[str, Any] = {}
    try:
        b = Bench(args, url, paths)
        print(f"indexing {args.days} granules (not timed) ...", flush=True)
        report = index_many(source, str(work / "sidecars"), executor="serial")
        if not report.ok:
            raise SystemExit(f"indexing failed: {report.to_dict()}")
        parq = f"s3://{BUCKET}/{cubes_key}/h5sidecar.parq"
        ice = f"s3://{BUCKET}/{cubes_key}/h5sidecar.icechunk"
        b.time("h5sidecar: build Parquet", lambda: build_cube(str(work / "sidecars"), parq),
               cube_bytes=None)
        b.rows["h5sidecar: build Parquet"] |= _parquet_bytes(cubes_dir / "h5sidecar.parq")
        b.time("h5sidecar: build Icechunk",
               lambda: build_cube(str(work / "sidecars"), ice, format="icechunk"))
        b.rows["h5sidecar: build Icechunk"]["cube_bytes"] = c.dir_size(
            cubes_dir / "h5sidecar.icechunk")
        # every tool opens with chunks={} (Dask): its import, once per process (~0.35 s), is
        # paid before the first timed open, so a single run (--repeats 1) times the opens alone
        import dask.array  # noqa: F401

        b.open_and_read("h5sidecar Parquet", lambda: _open_h5sidecar(parq))
        b.open_and_read("h5sidecar Icechunk", lambda: _open_h5sidecar_icechunk(open_icechunk(ice)))
        # appends: nothing new (each sidecar's stamp checked, nothing read), then one new day
        # onto a cube of the others
        dest = str(work / "sidecars")
        b.time("h5sidecar: append, nothing new", lambda: build_cube(dest, parq, mode="append"))
        older = f"s3://{BUCKET}/{cubes_key}/older.parq"
        build_cube([g.sidecar for g in list_indexed(dest)][:-1], older)
        b.time("h5sidecar: append 1 granule", lambda: build_cube(dest, older, mode="append"))
        if not args.skip_kerchunk:
            _kerchunk(b, urls, work, cubes_dir, f"s3://{BUCKET}/{cubes_key}")
        if not args.skip_virtualizarr:
            prefix, key = f"{cubes_key}/virtualizarr.icechunk", BUCKET
            b.time("VirtualiZarr + Icechunk: build (from HDF5)",
                   lambda: peers.vz_build(urls, url, key, prefix, source))
            b.rows["VirtualiZarr + Icechunk: build (from HDF5)"]["cube_bytes"] = c.dir_size(
                cubes_dir / "virtualizarr.icechunk")
            b.open_and_read("VirtualiZarr + Icechunk",
                            lambda: peers.open_icechunk_peer(url, key, prefix, source))
        out["mixed"] = run_mixed(url, work)
        out["rows"] = b.rows
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(cubes_dir, ignore_errors=True)
    return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k != "func"},
            "environment": c.environment(), **out}


def _parquet_bytes(cube: Path) -> dict[str, int]:
    """A Parquet cube's bytes, and (about) how many are h5sidecar's extras that plain kerchunk
    readers skip: the member granules' identities, the URL table, the columnar manifests."""
    extras = json.loads((cube / ".zmetadata").read_text()).get("h5sidecar", {})
    side = cube / ".h5sidecar"
    return {"cube_bytes": c.dir_size(cube),
            "extras_bytes": len(json.dumps(extras, separators=(",", ":")))
            + (c.dir_size(side) if side.exists() else 0)}


def _open_h5sidecar(cube: str) -> Any:
    import xarray as xr

    return xr.open_dataset(cube, engine="h5sidecar", chunks={})


def _open_h5sidecar_icechunk(repo: Any) -> Any:
    import xarray as xr

    return xr.open_zarr(repo.readonly_session("main").store, consolidated=False, chunks={})


def _kerchunk(b: Bench, urls: list[str], work: Path, cubes_dir: Path, cubes_url: str) -> None:
    from h5sidecar.references import read_refs, to_kerchunk

    refs = b.time("kerchunk: build (from HDF5)", lambda: peers.kerchunk_from_hdf5(urls))
    b.rows["kerchunk: build (from HDF5)"] |= {"cube_bytes": len(json.dumps(refs)),
                                             "variables": peers.kerchunk_variables(refs)}
    sidecars = sorted((work / "sidecars").glob("*.parq"))
    refs = b.time("kerchunk: MultiZarrToZarr of the sidecars",
                  lambda: peers.combine_kerchunk([to_kerchunk(read_refs(str(p)))
                                                  for p in sidecars]))
    refs.pop("h5sidecar", None)
    text = json.dumps(refs)
    (cubes_dir / "kerchunk.json").write_text(text)
    b.rows["kerchunk: MultiZarrToZarr of the sidecars"] |= {
        "cube_bytes": len(text), "variables": peers.kerchunk_variables(refs)}
    b.open_and_read("kerchunk", lambda: peers.open_kerchunk(f"{cubes_url}/kerchunk.json"))


def report(results: dict[str, Any]) -> str:
    a, env = results["args"], results["environment"]
    head = (f"{a['days']} daily granules, S3 endpoint with {a['latency_ms']:g} ms latency "
            f"(sources and cubes), opens and reads median of {a.get('repeats', 1)}, "
            f"{env['cpus']} CPUs, load average {env['load_avg'][0]:.1f} "
            f"at the end (commit {env['commit']}).")
    rows = results["rows"]
    table = c.markdown_table(
        ["case", "seconds", "requests", "cube bytes", "values vs h5netcdf", "variables"],
        [[name, f"{r['seconds']:.3f}", r["requests"],
          _cube_bytes(r),
          _verdict(r), ", ".join(r["variables"]) if "variables" in r else "-"]
         for name, r in rows.items()])
    return f"{head}\n\n{table}\n\n{_ratios(rows)}\n\n{report_mixed(results['mixed'])}"


def _cube_bytes(r: dict[str, Any]) -> str:
    if r.get("cube_bytes") is None:
        return "-"
    if "extras_bytes" not in r:
        return c.fmt_bytes(r["cube_bytes"])
    return (f"{c.fmt_bytes(r['cube_bytes'])} (kerchunk part "
            f"{c.fmt_bytes(r['cube_bytes'] - r['extras_bytes'])})")


def _verdict(r: dict[str, Any]) -> str:
    if "verdict" not in r:
        return "-"
    if r["verdict"] == "differ":
        return f"differ (max {r['max_abs_error']:.3g})"
    return r["verdict"] + (f" (max {r['max_abs_error']:.2g})" if r["max_abs_error"] else "")


def _ratios(rows: dict[str, dict[str, Any]]) -> str:
    build = rows["h5sidecar: build Parquet"]
    peer_builds = {k: r for k, r in rows.items() if "(from HDF5)" in k}
    lines = []
    if peer_builds:
        fastest = min(peer_builds, key=lambda k: peer_builds[k]["seconds"])
        lines.append(f"Build from sidecars vs the fastest peer from HDF5 ({fastest}): "
                     f"{peer_builds[fastest]['seconds'] / build['seconds']:.1f}x faster.")
    base = rows.get("kerchunk: MultiZarrToZarr of the sidecars")
    if base:
        lines.append(f"Cube bytes (Parquet) vs kerchunk's JSON holding the same arrays: "
                     f"{build['cube_bytes'] / base['cube_bytes']:.2f}x"
                     + (f" ({(build['cube_bytes'] - build['extras_bytes']) / base['cube_bytes']:.2f}x"
                        " without h5sidecar's extras)." if "extras_bytes" in build else "."))
    return " ".join(lines)


def main(args: argparse.Namespace) -> dict[str, Any]:
    # one README table per collection size: <!-- cube --> for 365 days, <!-- cube-1000 --> ...
    name = "cube" if args.days == 365 else f"cube-{args.days}"
    return c.run_and_report(name, args, run, report)
