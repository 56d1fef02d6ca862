"""Sidecar layouts: what one granule's sidecar costs to store, write and open, per layout.

For each granule (the ATL03-like sample at two sizes and the small CF netCDF-4 sample, all on
the local S3 endpoint with ``--latency-ms`` of first-byte latency) and each sidecar layout --
h5sidecar's Parquet in the kerchunk layout (today's default), h5sidecar's compact Parquet,
h5sidecar's JSON, and kerchunk's own JSON and Parquet (``SingleHdf5ToZarr`` +
``kerchunk.df.refs_to_dataframe``) -- it reports:

* **objects** and **bytes** of the sidecar on the store, and the **PUTs** (and other requests)
  writing it cost (the server's counters);
* **write s**: encoding and uploading the sidecar (index time is the same for every layout and
  reported once per granule);
* **open s / GETs**: ``xr.open_dataset(engine="h5sidecar", group=...)`` from a cold process
  cache, and **read s / GETs**: then ``h5sidecar.read_arrays`` of three arrays (GETs include the
  chunk reads from the source, the same for every layout).  kerchunk's outputs are opened with
  plain fsspec ``reference://`` + xarray's zarr engine instead.

Run with ``python benchmarks/run.py layouts [--big-mb 100] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

LAYOUTS = ("kerchunk", "compact", "json")
KERCHUNK = ("kerchunk-json", "kerchunk-parquet")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--big-mb", type=float, default=100, help="size of the larger ATL03-like "
                   "granule (default 100; the small one is the 10 MB sample)")
    p.add_argument("--repeats", type=int, default=3, help="cold opens per case (median)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--skip-kerchunk", action="store_true", help="h5sidecar layouts only")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result table into benchmarks/README.md")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


def _granules(big_mb: float) -> list[tuple[str, Path, str, list[str]]]:
    """``(label, path, group opened, arrays read)`` of each benchmark granule."""
    from h5sidecar.sample import write_sample_granules
    from h5sidecar.sample._netcdf import write_netcdf_like

    folder = c.S3_ROOT / c.BUCKET / "layouts"
    folder.mkdir(parents=True, exist_ok=True)
    small = folder / "small"
    found = sorted(small.glob("ATL03_*.h5"))
    atl03 = found[0] if found else write_sample_granules(small, granules=1)[0]
    nc = folder / "sample.nc"
    if not nc.exists():
        write_netcdf_like(nc)
    heights = ["gt1l/heights/h_ph", "gt1l/heights/lat_ph", "gt1l/heights/lon_ph"]
    return [
        ("ATL03-like 10 MB", Path(atl03), "gt1l/heights", heights),
        (f"ATL03-like {big_mb:g} MB", c.sample_granule(big_mb), "gt1l/heights", heights),
        ("netCDF-4 CF sample", nc, "", ["tas", "pr", "lat"]),
    ]


def _counts(url: str) -> dict[str, int]:
    stats = get_stats(url)
    ops: dict[str, int] = stats["ops"]  # type: ignore[assignment]
    return {"requests": int(stats["requests"]), **{k: int(v) for k, v in ops.items()}}  # type: ignore[call-overload]


def _cold() -> None:
    """Forget parsed sidecars and chunks: every open below starts as a new process would."""
    from h5sidecar.read._shared_caches import CHUNKS, SIDECARS

    SIDECARS.clear()
    CHUNKS.clear()


def _timed(fn: Callable[[], Any], url: str) -> tuple[float, dict[str, int]]:
    """Seconds of one cold run of ``fn`` and its requests."""
    _cold()
    reset_stats(url)
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, _counts(url)


def _objects(fs: Any, path: str) -> tuple[int, int]:
    if fs.isdir(path):
        files = fs.find(path, detail=True)
        return len(files), sum(int(f["size"]) for f in files.values())
    return 1, int(fs.size(path))


def _one_granule(label: str, path: Path, group: str, arrays: list[str], url: str,
                 args: argparse.Namespace) -> dict[str, Any]:
    import fsspec
    import xarray as xr

    import h5sidecar
    from h5sidecar.indexer import index_granule
    from h5sidecar.references import write_refs

    opts = {"endpoint_url": url, "anon": True}
    fs = fsspec.filesystem("s3", **opts)
    src = f"s3://{c.s3_key(path)}"
    out_prefix = f"{c.BUCKET}/layouts/out/{path.name}"
    for old in (c.S3_ROOT / out_prefix).parent.glob(path.name + ".*"):  # an earlier run's
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    t0 = time.perf_counter()
    refs = index_granule(src, storage_options=opts)
    index_s = time.perf_counter() - t0
    row: dict[str, Any] = {"granule": label, "size": path.stat().st_size, "index_s": index_s,
                           "variables": len(refs.arrays), "cases": {}}
    opens: dict[str, Callable[[], None]] = {}
    reads: dict[str, Callable[[], None]] = {}
    for layout in LAYOUTS:
        fmt = "json" if layout == "json" else "parquet"
        dest = f"s3://{out_prefix}.{layout}.{'json' if fmt == 'json' else 'parq'}"
        reset_stats(url)
        t0 = time.perf_counter()
        write_refs(refs, dest, format=fmt, storage_options=opts,  # type: ignore[arg-type]
                   layout="compact" if layout == "compact" else "kerchunk")
        write_s = time.perf_counter() - t0
        puts = _counts(url)
        fs.invalidate_cache()
        n, nbytes = _objects(fs, dest.removeprefix("s3://"))

        def open_group(dest: str = dest) -> None:
            ds = xr.open_dataset(dest, engine="h5sidecar", group=group or None,
                                 storage_options=opts)
            ds.close()

        def read_some(dest: str = dest) -> None:
            h5sidecar.read_arrays(dest, arrays, storage_options=opts)

        opens[layout], reads[layout] = open_group, read_some
        row["cases"][layout] = {"objects": n, "bytes": nbytes, "puts": puts.get("PutObject", 0),
                                "write_requests": puts["requests"], "write_s": write_s}
    if not args.skip_kerchunk:
        row["cases"].update(_kerchunk(path, src, out_prefix, fs, url, opts, row))
        for kind in KERCHUNK:
            opens[kind] = _plain_opener(kind, out_prefix, group, opts)
    # cold opens, the cases taking turns (a shared machine's load hits them alike)
    for what, fns in (("open", opens), ("read", reads)):
        runs: dict[str, list[tuple[float, dict[str, int]]]] = {k: [] for k in fns}
        for _ in range(args.repeats):
            for name, fn in fns.items():
                runs[name].append(_timed(fn, url))
        for name, got in runs.items():
            row["cases"][name][f"{what}_s"] = statistics.median(t for t, _ in got)
            row["cases"][name][f"{what}_gets"] = got[-1][1].get("GetObject", 0)
    for name, case in row["cases"].items():
        print(f"  {label} {name}: {case}", flush=True)
    return row


def _kerchunk(path: Path, src: str, out_prefix: str, fs: Any, url: str, opts: dict[str, Any],
              row: dict[str, Any]) -> dict[str, Any]:
    """kerchunk's own outputs of the same granule (indexed from the local file, URLs then
    pointed at the S3 copy): sizes, objects, PUTs."""
    import ujson
    from kerchunk.df import refs_to_dataframe
    from kerchunk.hdf import SingleHdf5ToZarr

    t0 = time.perf_counter()
    refs = SingleHdf5ToZarr(str(path)).translate()
    row["kerchunk_index_s"] = time.perf_counter() - t0
    refs = ujson.loads(ujson.dumps(refs).replace(ujson.dumps(str(path))[1:-1], src))
    out: dict[str, Any] = {}
    for kind in KERCHUNK:
        tmp = Path(tempfile.mkdtemp())
        try:
            if kind == "kerchunk-json":
                dest = f"{out_prefix}.{kind}.json"
                files = {dest: ujson.dumps(refs).encode()}
            else:
                dest = f"{out_prefix}.{kind}.parq"
                refs_to_dataframe(refs, str(tmp / "x.parq"))
                files = {f"{dest}/{p.relative_to(tmp / 'x.parq').as_posix()}": p.read_bytes()
                         for p in (tmp / "x.parq").rglob("*") if p.is_file()}
            reset_stats(url)
            t0 = time.perf_counter()
            fs.pipe(files)  # concurrent PUTs, as h5sidecar's writer
            write_s = time.perf_counter() - t0
            puts = _counts(url)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        fs.invalidate_cache()
        n, nbytes = _objects(fs, dest)
        out[kind] = {"objects": n, "bytes": nbytes, "puts": puts.get("PutObject", 0),
                     "write_requests": puts["requests"], "write_s": write_s}
    return out


def _plain_opener(kind: str, out_prefix: str, group: str, opts: dict[str, Any]
                  ) -> Callable[[], None]:
    """Open kerchunk's output with plain fsspec ``reference://`` + xarray's zarr engine."""
    import xarray as xr

    suffix = "json" if kind == "kerchunk-json" else "parq"

    def open_plain() -> None:
        so = {"fo": f"s3://{out_prefix}.{kind}.{suffix}", "remote_protocol": "s3",
              "remote_options": {**opts, "asynchronous": True}, "target_options": opts,
              "asynchronous": True}
        ds = xr.open_dataset("reference://", engine="zarr", group=group or None,
                             backend_kwargs={"storage_options": so, "consolidated": False},
                             zarr_format=2, chunks=None)
        ds.close()

    return open_plain


def run(args: argparse.Namespace) -> dict[str, Any]:
    granules = _granules(args.big_mb)
    url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    try:
        rows = [_one_granule(*g, url=url, args=args) for g in granules]
    finally:
        stop()
    return {"environment": c.environment(), "latency_ms": args.latency_ms, "granules": rows}


def report(results: dict[str, Any]) -> str:
    header = ["granule", "layout", "objects", "bytes", "PUTs", "write s", "open s",
              "open GETs", "+read 3 arrays s", "read GETs"]
    rows = []
    for g in results["granules"]:
        for name, case in g["cases"].items():
            rows.append([
                g["granule"], name, case["objects"], c.fmt_bytes(case["bytes"]), case["puts"],
                f"{case['write_s']:.2f}",
                f"{case['open_s']:.3f}" if "open_s" in case else "fails",
                case.get("open_gets", "-"),
                f"{case['read_s']:.3f}" if "read_s" in case else "-",
                case.get("read_gets", "-"),
            ])
    notes = "\n".join(
        f"- {g['granule']}: {c.fmt_bytes(g['size'])}, {g['variables']} arrays, h5sidecar index "
        f"{g['index_s']:.2f} s from S3" + (f", kerchunk index {g['kerchunk_index_s']:.2f} s "
                                           "from the local file" if "kerchunk_index_s" in g
                                           else "")
        for g in results["granules"]
    )
    return (f"S3 endpoint with {results['latency_ms']:g} ms first-byte latency; open and read "
            "from a cold process cache (median).\n\n"
            + c.markdown_table(header, rows) + "\n\n" + notes)


def main(args: argparse.Namespace) -> dict[str, Any]:
    return c.main_for("layouts", args, run, report, c.BENCH_DIR / "README.md")
