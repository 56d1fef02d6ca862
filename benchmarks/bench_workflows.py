"""Batch workflows: indexing throughput on a Dask cluster, and the analysis workflow's time.

Granules: ``--granules`` ATL03-like files of ``--photons`` photons each (written once into
``benchmarks/data/s3/wf/``) served by the local S3 endpoint with ``--latency-ms`` of first-byte
latency per request.  Cases:

**Indexing** (granules/s, sidecars written to a fresh local folder each time):

- ``kerchunk loop``: ``SingleHdf5ToZarr(url).translate()`` + a JSON dump per granule, one after
  the other in this process (what a script around kerchunk does);
- ``h5sidecar serial``: ``index_many(..., executor="serial")``;
- ``h5sidecar dask N``: ``index_many`` on a ``LocalCluster`` of N single-threaded worker
  processes through :class:`~h5sidecar.workflows.DaskExecutor` (cluster start-up excluded and
  reported separately; the workers are warmed up by one small task first).

**Open cost** (per granule, sidecars on the S3 endpoint, in this process, caches cleared): from
the sidecar's URL to ready-to-read arrays for the three variables of every beam (sidecar
opened for the named arrays with ``read_refs(arrays=...)``, their manifests and codecs ready),
as :func:`granule_cells` does it, for
the JSON and the Parquet sidecar; and the previous path (whole JSON parsed, then each beam
group opened with ``xr.open_dataset(engine="h5sidecar")``).  Median over the granules, with
the requests the server counted.

**Analysis** (gridded mean photon height of every beam of every granule, ``--grid`` degrees):

- ``h5sidecar dask N``: :func:`~h5sidecar.workflows.gridded_mean_height` on the cluster, reading
  through the sidecars;
- ``h5py + s3fs serial``: each granule opened with h5py on an s3fs file, the three variables of
  every beam read whole and binned (the same ``bin_cells``) in this process;
- ``h5py + s3fs dask N``: the same, one Dask task per granule on the cluster.

Every grid the sidecars give is compared with h5py's (same cells, counts and means).

Run with ``python benchmarks/run.py workflows [--granules 8] [--photons 200000]``;
``--large`` runs the large-granule case instead (:mod:`benchmarks._wf_large`).
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

import numpy as np

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

WF_BUCKET = "wf"
SIDECAR_BUCKET = "wf-sidecars"
BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--granules", type=int, default=None,
                   help="granules (default 8; 2 with --large)")
    p.add_argument("--photons", type=int, default=None,
                   help="photons per granule (default 200000, ~10 MB files; 13000000, ~520 MB, "
                        "with --large)")
    p.add_argument("--large", action="store_true",
                   help="the large-granule case instead: sidecars vs h5py + s3fs (default cache "
                        "and 8 MiB blocks) on granules of > 500 MB")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                   help="Dask worker counts to run (default 1 2)")
    p.add_argument("--grid", type=float, default=0.1, help="analysis grid, degrees")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of each analysis case; the median is reported (default 3)")
    p.add_argument("--skip-kerchunk", action="store_true",
                   help="leave out the kerchunk indexing loop (the slowest case)")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result tables into benchmarks/README.md")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


def granules(n: int, photons: int) -> list[Path]:
    """The benchmark granules (written once per (n, photons), then reused)."""
    from h5sidecar.sample import granule_name, write_atl03_like

    folder = c.S3_ROOT / WF_BUCKET / f"{photons}"
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for seed in range(n):
        path = folder / granule_name(seed)
        if not path.exists():
            print(f"writing {path.name} ({photons:,} photons) ...", flush=True)
            tmp = path.with_suffix(".tmp")
            write_atl03_like(tmp, photons=photons, seed=seed)
            tmp.rename(path)
        out.append(path)
    return out


# ---------------------------------------------------------------------------- cases
def kerchunk_loop(urls: list[str], dest: Path) -> None:
    from kerchunk.hdf import SingleHdf5ToZarr

    for url in urls:
        refs = SingleHdf5ToZarr(url, storage_options={"anon": False}).translate()
        (dest / (url.rsplit("/", 1)[1] + ".json")).write_text(json.dumps(refs))


def h5py_grid_one(url: str, grid: float, open_options: dict[str, Any] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One granule read with h5py over s3fs and binned (top level: runs on Dask workers).
    ``open_options`` go to ``fs.open`` (default: s3fs's 50 MiB read-ahead cache)."""
    import h5py
    import s3fs

    from h5sidecar.examples.grid_cells import _merge, bin_cells

    fs = s3fs.S3FileSystem()
    parts = []
    with fs.open(url, "rb", **(open_options or {})) as f, h5py.File(f, "r") as h5:
        for b in BEAMS:
            g = h5[f"{b}/heights"]
            parts.append(bin_cells(g["h_ph"][:], g["lat_ph"][:], g["lon_ph"][:], grid))
    return _merge(*parts)


VARIABLES = ("h_ph", "lat_ph", "lon_ph")


def open_named(sidecar: str) -> int:
    """What one analysis task does before its first chunk read: parse the sidecar, make the
    batch reader, and ready the named arrays' manifests and codecs.  Returns the arrays."""
    from h5sidecar.examples.icesat2 import beam_groups, named_patterns
    from h5sidecar.read import SidecarStore
    from h5sidecar.references import read_refs

    refs = read_refs(sidecar, arrays=named_patterns(VARIABLES))
    store = SidecarStore(refs, chunk_cache=None)
    paths = [f"{g}/{v}" for g in beam_groups(refs, VARIABLES) for v in VARIABLES]
    for p in paths:
        store.native.codec(p)
        refs.arrays[p].manifest  # noqa: B018 - loads it
    return len(paths)


def open_groups_previous(sidecar: str) -> int:
    """The previous task's opening: whole parse, then one xarray Dataset per beam group."""
    import xarray as xr

    from h5sidecar.examples.icesat2 import beam_groups
    from h5sidecar.references import read_refs

    refs = read_refs(sidecar, lazy=False)
    n = 0
    for g in beam_groups(refs, VARIABLES):
        others = [p.rpartition("/")[2] for p in refs.arrays
                  if p.rpartition("/")[0] == g and p.rpartition("/")[2] not in VARIABLES]
        ds = xr.open_dataset(refs, engine="h5sidecar", group=g, chunks=None,  # type: ignore[arg-type]
                             drop_variables=others, decode_times=False)
        n += len(ds.data_vars)
    return n


def open_costs(url: str, sidecars: dict[str, list[str]], previous: bool = True
               ) -> list[dict[str, Any]]:
    """Median time and requests of opening each granule's named arrays, per case."""
    from h5sidecar.read import clear_caches

    cases = [("JSON sidecar, named arrays", open_named, "json"),
             ("Parquet sidecar, named arrays", open_named, "parquet"),
             ("JSON sidecar, 6 xarray groups (previous)", open_groups_previous, "json")]
    cases = cases if previous else cases[:2]
    rows = []
    for name, fn, fmt in cases:
        times, requests = [], []
        for sc in sidecars[fmt]:
            clear_caches()
            reset_stats(url)
            seconds, _ = timed(lambda sc=sc, fn=fn: fn(sc))
            times.append(seconds)
            requests.append(get_stats(url)["requests"])
        rows.append({"case": name, "median_ms": 1000 * float(np.median(times)),
                     "max_ms": 1000 * max(times), "requests": float(np.median(requests))})
        print(f"open {name}: {rows[-1]['median_ms']:.0f} ms, {rows[-1]['requests']:g} requests",
              flush=True)
    return rows


def publish_sidecars(dest: Path, bucket: str) -> dict[str, list[str]]:
    """The JSON sidecars of ``dest`` and Parquet twins, served by the endpoint."""
    from h5sidecar.references import read_refs, write_parquet

    root = c.S3_ROOT / bucket
    shutil.rmtree(root, ignore_errors=True)
    (root / "json").mkdir(parents=True)
    out: dict[str, list[str]] = {"json": [], "parquet": []}
    for sc in sorted(dest.glob("*.json")):
        if sc.name.startswith("_"):
            continue  # the report
        shutil.copy(sc, root / "json" / sc.name)
        out["json"].append(f"s3://{bucket}/json/{sc.name}")
        parq = sc.name.removesuffix(".json") + ".parq"
        write_parquet(read_refs(sc, lazy=False), root / "parquet" / parq)
        out["parquet"].append(f"s3://{bucket}/parquet/{parq}")
    return out


def check_same(case: str, ds: Any, parts: list[Any], grid: float) -> None:
    """The sidecar analysis must give h5py's grid: the same cells and counts, the same means
    (to float rounding: the sums add in another order)."""
    from h5sidecar.examples.grid_cells import _merge
    from h5sidecar.examples.icesat2 import _to_dataset

    want = _to_dataset(*_merge(*parts), grid, {})
    same = (ds["count"].shape == want["count"].shape
            and np.array_equal(ds["lat"].values, want["lat"].values)
            and np.array_equal(ds["lon"].values, want["lon"].values)
            and np.array_equal(ds["count"].values, want["count"].values)
            and np.allclose(ds["mean_height"].values, want["mean_height"].values, rtol=1e-9,
                            atol=0, equal_nan=True))
    if not same:
        raise SystemExit(f"{case}: the grid differs from h5py's; not reporting timings")


def warm_up() -> None:
    """Import, in a worker, the modules the timed cases use (h5sidecar's indexer and readers,
    h5py, s3fs, xarray's CF decoding), so no case pays a first import."""
    import importlib

    for name in ("h5sidecar.workflows.index._index", "h5sidecar.examples.icesat2",
                 "h5sidecar.read", "h5py", "s3fs", "xarray.conventions"):
        importlib.import_module(name)


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from h5sidecar.examples.grid_cells import _merge
    from h5sidecar.workflows import DaskExecutor, dask_client, gridded_mean_height, index_many

    paths = granules(args.granules, args.photons)
    url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    # every client (this process, kerchunk, Dask workers started below) finds the endpoint here
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    source = f"s3://{WF_BUCKET}/{args.photons}/"
    urls = [source + p.name for p in paths]
    work = Path(tempfile.mkdtemp(prefix="bench-wf-"))
    rows: dict[str, Any] = {"index": [], "analysis": [], "open": []}
    def add_run(case: str, seconds: float, photons: int) -> None:
        row = next((r for r in rows["analysis"] if r["case"] == case), None)
        if row is None:
            row = {"case": case, "runs": [], "photons_runs": []}
            rows["analysis"].append(row)
        row["runs"].append(seconds)
        row["photons_runs"].append(photons)
        row["photons"] = photons
        print(f"analysis {case}: {seconds:.2f} s", flush=True)

    try:
        def index_case(name: str, fn: Any) -> Path:
            dest = work / name.replace(" ", "-")
            dest.mkdir()
            reset_stats(url)
            seconds, _ = timed(lambda: fn(dest))
            stats = get_stats(url)
            rows["index"].append({"case": name, "seconds": seconds,
                                  "granules_per_s": len(urls) / seconds,
                                  "requests": stats["requests"], "bytes": stats["bytes_out"]})
            print(f"index {name}: {seconds:.1f} s, {len(urls) / seconds:.2f} granules/s",
                  flush=True)
            return dest

        if not args.skip_kerchunk:
            index_case("kerchunk loop", lambda d: kerchunk_loop(urls, d))
        serial = index_case("h5sidecar serial", lambda d: _check(index_many(
            source, str(d), format="json", executor="serial")))
        # the same files from local disk: no latency, so what indexing costs in CPU alone
        index_case("h5sidecar serial, local files (CPU floor)", lambda d: _check(index_many(
            [str(p) for p in paths], str(d), format="json", executor="serial")))
        rows["open"] = open_costs(url, publish_sidecars(serial, SIDECAR_BUCKET))
        for n in args.workers:
            t0 = time.perf_counter()
            with dask_client(f"local:{n}") as client:
                client.wait_for_workers(n)
                # warm-up: import what the cases use in every worker before timing
                client.run(warm_up)
                startup = time.perf_counter() - t0
                ex = DaskExecutor(client)
                dest = index_case(f"h5sidecar dask {n}", lambda d, ex=ex: _check(index_many(
                    source, str(d), format="json", executor=ex, workers=ex.n_threads)))
                rows["index"][-1]["cluster_start_s"] = startup
                # one untimed round of both cases first: a worker's first read of each kind
                # starts its I/O loop, S3 session and decode threads
                gridded_mean_height(str(dest), grid=args.grid, client=client)
                client.gather([client.submit(h5py_grid_one, u, args.grid, pure=False)
                               for u in urls])
                # the cases alternate, so a burst of load on the shared machine hits both
                for _ in range(args.repeats):
                    seconds, grid = timed(lambda dest=dest, client=client: gridded_mean_height(
                        str(dest), grid=args.grid, client=client))
                    add_run(f"h5sidecar dask {n}", seconds, grid.attrs["photons"])
                    seconds, parts = timed(lambda client=client: client.gather(
                        [client.submit(h5py_grid_one, u, args.grid, pure=False) for u in urls]))
                    add_run(f"h5py + s3fs dask {n}", seconds, int(_merge(*parts)[2].sum()))
                    check_same(f"h5sidecar dask {n}", grid, parts, args.grid)
        for _ in range(args.repeats):
            seconds, parts = timed(lambda: [h5py_grid_one(u, args.grid) for u in urls])
            add_run("h5py + s3fs serial", seconds, int(_merge(*parts)[2].sum()))
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)
    return c.analysis_results(args, paths, rows)


def _check(report: Any) -> Any:
    if not report.ok:
        raise SystemExit(f"indexing failed: {report.to_dict()}")
    return report


def report(results: dict[str, Any]) -> str:
    a = results["args"]
    env = results["environment"]
    head = (f"{a['granules']} granules of {results['granule_mb']} MB ({a['photons']:,} photons), "
            f"S3 endpoint with {a['latency_ms']:g} ms latency, {env['cpus']} CPUs, load average "
            f"{env['load_avg'][0]:.1f} at the end (commit {env['commit']}).")
    n, lat = a["granules"], a["latency_ms"] / 1000

    def workers(case: str) -> int:
        return int(case.rsplit(" ", 1)[1]) if " dask " in case else 1

    # latency floor: every request of a granule waited for in turn (no overlap within a
    # granule); CPU floor: the same granules indexed from local disk, serially
    cpu = next((r["seconds"] / n for r in results["index"] if "local files" in r["case"]), None)

    def ratio(seconds: float, floor: float | None) -> str:
        return f"{seconds / floor:.1f}" if floor else "-"

    index = c.markdown_table(
        ["indexing", "seconds", "granules/s", "granules/s per worker", "requests/granule",
         "latency floor s/granule", "x latency floor", "x CPU floor", "bytes"],
        [[r["case"], f"{r['seconds']:.1f}", f"{r['granules_per_s']:.2f}",
          f"{r['granules_per_s'] / workers(r['case']):.2f}", f"{r['requests'] / n:.0f}",
          f"{r['requests'] / n * lat:.2f}",
          ratio(r["seconds"] * workers(r["case"]) / n, r["requests"] / n * lat),
          ratio(r["seconds"] * workers(r["case"]) / n, cpu),
          c.fmt_bytes(r["bytes"])] for r in results["index"]])
    base = next((r["seconds"] for r in results["analysis"] if r["case"] == "h5py + s3fs serial"),
                None)
    by_case = {r["case"]: r["seconds"] for r in results["analysis"]}

    def same_cluster(case: str) -> str:
        peer = by_case.get(case.replace("h5sidecar", "h5py + s3fs"))
        return f"{peer / by_case[case]:.2f}x" if case.startswith("h5sidecar") and peer else "-"

    analysis = c.markdown_table(
        ["analysis (grid " + f"{a['grid']:g} deg)", "median s", "runs",
         "vs h5py + s3fs serial", "vs h5py + s3fs, same workers", "photons"],
        [[r["case"], f"{r['seconds']:.2f}", len(r.get("runs", [r["seconds"]])),
          f"{base / r['seconds']:.2f}x" if base else "-", same_cluster(r["case"]),
          f"{r['photons']:,}"] for r in results["analysis"]])
    opens = c.markdown_table(
        ["open one granule's named arrays (18)", "median ms", "max ms", "requests"],
        [[r["case"], f"{r['median_ms']:.0f}", f"{r['max_ms']:.0f}", f"{r['requests']:g}"]
         for r in results.get("open", [])])
    return f"{head}\n\n{index}\n\n{opens}\n\n{analysis}"


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.large:
        from benchmarks._wf_large import main_large

        return main_large(args)
    args.granules = args.granules or 8
    args.photons = args.photons or 200_000
    return c.run_and_report("workflows", args, run, report)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.run import main as run_main

    raise SystemExit(run_main(["workflows", *sys.argv[1:]]))
