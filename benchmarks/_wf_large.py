"""The workflow benchmark's large-granule case: ``run.py workflows --large``.

A few ATL03-like granules of more than 500 MB (``--granules 2 --photons 13000000`` by default,
written once into ``benchmarks/data/s3/wf/<photons>/``), served by the S3 endpoint with
``--latency-ms`` per request.  Real ATL03 granules are 1-8 GB: no analysis downloads them whole
to read three variables, so the question here is what reading them in place costs.

- ``h5sidecar dask N``: :func:`~h5sidecar.workflows.gridded_mean_height` through the JSON
  sidecars (indexed once, serially, before the clock starts);
- ``h5py + s3fs (default cache) dask N``: one task per granule, h5py on an s3fs file object as
  s3fs opens it (a 50 MiB read-ahead buffer);
- ``h5py + s3fs (8 MiB blocks) dask N``: the same with ``block_size=8 MiB`` and
  ``cache_type="blockcache"`` (an LRU of blocks, what one tunes for random access);
- ``h5sidecar dask N, 1 decode thread``: the sidecar case with each worker's decode pool cut
  to one thread (``h5sidecar.read.configure(decode_threads=1)`` on every worker), so that N
  workers use N cores: by default one worker's decode threads already keep both cores of a
  2-core machine busy, which leaves a second worker nothing to scale into.

Each repeat runs the three cases in turn; every sidecar result is compared with both h5py
results (the same cells, counts and means).  Requests and bytes are the server's counters;
"cores busy" is the CPU time the whole machine spent (every process) over the wall time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

LARGE_GRANULES = 2
LARGE_PHOTONS = 13_000_000
SIDECAR_BUCKET = "wf-large-sidecars"
#: h5py over s3fs, as opened by default and with a block cache tuned for random access
H5PY_CASES: dict[str, dict[str, Any] | None] = {
    "h5py + s3fs (default cache)": None,
    "h5py + s3fs (8 MiB blocks)": {"block_size": 8 * 2**20, "cache_type": "blockcache"},
}


def busy_cores() -> float:
    """CPU seconds the whole machine has spent busy so far (every process: workers, scheduler,
    endpoint), from ``/proc/stat``; 0 where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def set_decode_threads(n: int | None) -> int:
    """On a worker: its decode pool of ``n`` threads (None: as its environment says, which
    :func:`~h5sidecar.workflows.dask_client` sets to the worker's share of the CPUs).
    Returns the pool's size."""
    import dataclasses

    from h5sidecar.read import configure
    from h5sidecar.read.native._decode import decode_threads
    from h5sidecar.settings import ReadSettings, from_env

    settings = from_env(ReadSettings)
    configure(settings if n is None else dataclasses.replace(settings, decode_threads=n))
    return decode_threads()


def run_large(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.bench_workflows import (
        WF_BUCKET,
        _check,
        check_same,
        granules,
        h5py_grid_one,
        open_costs,
        publish_sidecars,
        timed,
        warm_up,
    )
    from h5sidecar.examples.grid_cells import _merge
    from h5sidecar.workflows import dask_client, gridded_mean_height, index_many

    n_granules, photons = args.granules, args.photons
    paths = granules(n_granules, photons)
    url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    os.environ.update({"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    source = f"s3://{WF_BUCKET}/{photons}/"
    urls = [source + p.name for p in paths]
    work = Path(tempfile.mkdtemp(prefix="bench-wf-large-"))
    rows: dict[str, Any] = {"analysis": [], "index": [], "open": []}

    def timed_busy(fn: Any) -> tuple[float, Any, float]:
        """``timed(fn)``, and how many cores the machine kept busy meanwhile."""
        before = busy_cores()
        seconds, out = timed(fn)
        return seconds, out, (busy_cores() - before) / seconds

    def add_run(case: str, seconds: float, cores: float, photons_read: int,
                stats: dict[str, Any], workers: int) -> None:
        row = next((r for r in rows["analysis"] if r["case"] == case), None)
        if row is None:
            row = {"case": case, "workers": workers, "runs": [], "photons_runs": [],
                   "requests": [], "bytes": [], "busy_cores": []}
            rows["analysis"].append(row)
        row["runs"].append(seconds)
        row["photons_runs"].append(photons_read)
        row["requests"].append(stats["requests"])
        row["bytes"].append(stats["bytes_out"])
        row["busy_cores"].append(cores)
        row["photons"] = photons_read
        print(f"analysis {case}: {seconds:.2f} s, {stats['requests']} requests, "
              f"{c.fmt_bytes(stats['bytes_out'])}", flush=True)

    try:
        dest = work / "sidecars"
        dest.mkdir()
        reset_stats(url)
        seconds, _ = timed(lambda: _check(index_many(source, str(dest), format="json",
                                                     executor="serial")))
        stats = get_stats(url)
        rows["index"].append({"case": "h5sidecar serial", "seconds": seconds,
                              "granules_per_s": n_granules / seconds,
                              "requests": stats["requests"], "bytes": stats["bytes_out"]})
        print(f"index serial: {seconds:.1f} s", flush=True)
        rows["open"] = open_costs(url, publish_sidecars(dest, SIDECAR_BUCKET), previous=False)
        for n in args.workers:
            with dask_client(f"local:{n}") as client:
                client.wait_for_workers(n)
                client.run(warm_up)
                # the "1 decode thread" row only where the default pool is larger
                default_pool = max(client.run(set_decode_threads, None).values())
                variants = [(None, "")] + ([(1, ", 1 decode thread")] if default_pool > 1 else [])
                for _ in range(args.repeats):
                    for threads, suffix in variants:
                        client.run(set_decode_threads, threads)
                        reset_stats(url)
                        seconds, grid, cores = timed_busy(
                            lambda client=client: gridded_mean_height(
                                str(dest), grid=args.grid, client=client))
                        add_run(f"h5sidecar dask {n}{suffix}", seconds, cores,
                                grid.attrs["photons"], get_stats(url), n)
                    client.run(set_decode_threads, None)
                    for label, opts in H5PY_CASES.items():
                        reset_stats(url)
                        seconds, parts, cores = timed_busy(
                            lambda client=client, opts=opts: client.gather(
                                [client.submit(h5py_grid_one, u, args.grid, opts, pure=False)
                                 for u in urls]))
                        add_run(f"{label} dask {n}", seconds, cores,
                                int(_merge(*parts)[2].sum()), get_stats(url), n)
                        check_same(f"h5sidecar dask {n} vs {label}", grid, parts, args.grid)
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)
    return c.analysis_results(args, paths, rows)


def report_large(results: dict[str, Any]) -> str:
    a = results["args"]
    env = results["environment"]
    head = (f"{a['granules']} granules of {results['granule_mb']} MB ({a['photons']:,} photons), "
            f"S3 endpoint with {a['latency_ms']:g} ms latency, {env['cpus']} CPUs, load average "
            f"{env['load_avg'][0]:.1f} at the end (commit {env['commit']}).")
    by_case = {r["case"]: r["seconds"] for r in results["analysis"]}

    def vs(case: str, label: str) -> str:
        if not case.startswith("h5sidecar"):
            return "-"
        # the peer on the same workers (older results have no "1 decode thread" rows)
        peer = by_case.get(f"{label} dask {case.split()[2].rstrip(',')}")
        return f"{peer / by_case[case]:.1f}x" if peer else "-"

    scaling = []
    # by default one worker decodes on every CPU and two share them; "one core a worker" pairs
    # one worker with a 1-thread pool against two 1-thread workers
    two_default = by_case.get("h5sidecar dask 2")
    for what, one, two in (
            ("h5sidecar by default", by_case.get("h5sidecar dask 1"), two_default),
            ("h5sidecar, one core a worker", by_case.get("h5sidecar dask 1, 1 decode thread"),
             by_case.get("h5sidecar dask 2, 1 decode thread", two_default))):
        if one and two:
            scaling.append(f"{what} {one:.2f} -> {two:.2f} s ({one / two:.2f}x)")
    for label in H5PY_CASES:
        one, two = by_case.get(f"{label} dask 1"), by_case.get(f"{label} dask 2")
        if one and two:
            scaling.append(f"{label} {one / two:.2f}x")

    labels = list(H5PY_CASES)
    table = c.markdown_table(
        ["analysis (grid " + f"{a['grid']:g} deg)", "median s", "runs",
         "faster than h5py + s3fs, default cache", "faster than h5py + s3fs, 8 MiB blocks",
         "requests", "bytes read", "cores busy", "photons"],
        [[r["case"], f"{r['seconds']:.2f}", len(r["runs"]), vs(r["case"], labels[0]),
          vs(r["case"], labels[1]), f"{int(np.median(r['requests'])):,}",
          c.fmt_bytes(float(np.median(r["bytes"]))),
          f"{np.median(r['busy_cores']):.2f}" if r.get("busy_cores") else "-",
          f"{r['photons']:,}"]
         for r in results["analysis"]])
    index = "; ".join(
        f"indexing serially: {r['seconds'] / a['granules']:.1f} s and "
        f"{r['requests'] / a['granules']:.0f} requests per granule, "
        f"{c.fmt_bytes(r['bytes'] / a['granules'])} read of each" for r in results["index"])
    opens = "; ".join(f"{r['case']}: {r['median_ms']:.0f} ms, {r['requests']:g} "
                      f"request{'s' if r['requests'] != 1 else ''}"
                      for r in results.get("open", []))
    scale = f" From 1 to 2 workers: {'; '.join(scaling)}." if scaling else ""
    return (f"{head}\n\n{table}\n\nOpening one granule's named arrays (median): {opens}. "
            f"{index[:1].upper()}{index[1:]}.{scale}")


def main_large(args: argparse.Namespace) -> dict[str, Any]:
    args.granules = args.granules or LARGE_GRANULES
    args.photons = args.photons or LARGE_PHOTONS
    t0 = time.perf_counter()
    results = c.run_and_report("workflows-large", args, run_large, report_large)
    if not args.from_results:
        print(f"large case: {time.perf_counter() - t0:.0f} s in all", flush=True)
    return results
