"""Thin selections of an NSRDB-like granule: one time step across all sites, one site's series.

The granule (written once into ``benchmarks/data/s3/subchunk/``) holds ``wind_speed``: int16,
shape ``(17568, --sites)``, chunks ``(2688, 372)`` as NREL's NSRDB files, **uncompressed**, and
its gzip twin ``wind_speed_gz`` (same values and chunks).  It is served by the local S3 endpoint
(``benchmarks/s3server.py``) with ``--latency-ms`` of first-byte latency per request.

Readers, side by side in one run, each on both variables and both selections:

- ``h5py (local file)``: the floor; bytes are what the process read (``/proc/self/io``);
- ``h5py + s3fs``: h5py on an s3fs file object (default read-ahead cache);
- ``kerchunk + zarr``: ``SingleHdf5ToZarr`` references (made from the local file, pointed at
  the endpoint), read with zarr through ``reference://``: whole chunks;
- ``h5sidecar read_arrays``: the batch reader, which reads only the byte runs of uncompressed
  chunks a selection needs (``ReadSettings.subchunk_fraction``), and the same with
  ``subchunk_fraction=0`` (whole chunks, for comparison);
- ``h5sidecar xarray engine``: ``xr.open_dataset(sidecar, engine="h5sidecar")`` and the
  selection's ``.values``, without Dask and with ``chunks={}`` (one Dask task per stored chunk);
- ``gateway re-chunk view + zarr``: ``h5sidecar serve`` in its own process, zarr-python reading
  ``/zarr3-rechunk/{spec}/`` over HTTP (zarr's ``async.concurrency`` is 128 for both zarr readers) (``64k`` for both selections, ``1x0`` for the time
  step); bytes and requests are the gateway's upstream reads from the endpoint.

Every run reads a different time step / site (nothing is served from a cache of the run
before) and every value is compared with h5py.  The first run of each case is a warm-up and is
not timed.

Run with ``python benchmarks/run.py subchunk [--sites 74400] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from benchmarks import _common as c
from benchmarks import _read_tools as rt
from benchmarks.s3server import get_stats, reset_stats, start_server

BUCKET = "subchunk"
ROWS, CHUNKS = 17568, (2688, 372)
VARS = ("wind_speed", "wind_speed_gz")
DEFAULT_SITES = 200 * CHUNKS[1]
ZARR_CONCURRENCY = 128
Sel = tuple[Any, ...]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sites", type=int, default=DEFAULT_SITES,
                   help="sites (columns); default 74400 = 200 chunk columns (a time step "
                        "crosses 200 chunks), 2.6 GB uncompressed + its gzip twin; the "
                        "README also has --sites 4464 (12 chunk columns)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per case (median)")
    p.add_argument("--skip-kerchunk", action="store_true")
    p.add_argument("--skip-gateway", action="store_true")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result table into benchmarks/README.md")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


def granule(sites: int) -> Path:
    """The benchmark granule for ``sites`` columns (written once, then reused)."""
    path = c.S3_ROOT / BUCKET / f"nsrdb_{sites}.h5"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing {path.name} ({ROWS} x {sites} int16, + gzip twin) ...", flush=True)
    rng = np.random.default_rng(0)
    phase = rng.uniform(0, 6.3, sites)  # one daily-cycle phase per site
    cols = CHUNKS[1] * 16  # blocks of 16 chunk columns: memory bounded at any --sites
    tmp = path.with_suffix(".tmp")
    with h5py.File(tmp, "w") as f:
        plain = f.create_dataset(VARS[0], (ROWS, sites), "<i2", chunks=CHUNKS)
        gz = f.create_dataset(VARS[1], (ROWS, sites), "<i2", chunks=CHUNKS, compression="gzip")
        for r in range(0, ROWS, CHUNKS[0]):
            n = min(CHUNKS[0], ROWS - r)
            t = np.arange(r, r + n)[:, None]
            for s0 in range(0, sites, cols):
                s1 = min(s0 + cols, sites)
                # wind speed x 100: a daily cycle per site plus noise (compresses like real data)
                base = 600 + 250 * np.sin(2 * np.pi * t / 48 + phase[None, s0:s1])
                block = (base + rng.normal(0, 60, (n, s1 - s0))).clip(0, 4000).astype("<i2")
                plain[r : r + n, s0:s1] = block
                gz[r : r + n, s0:s1] = block
    tmp.rename(path)
    return path


def selections(kind: str, i: int, sites: int) -> Sel:
    """The ``i``-th selection of ``kind``: a different time step / site chunk column per run."""
    if kind == "time step":
        return (ROWS // 2 + 17 + 211 * i, slice(None))
    return (slice(None), (sites // 2 + 5 + 373 * i) % sites)


# ---------------------------------------------------------------------------- readers
def h5py_local(env: rt.Env, var: str, sel: Sel) -> np.ndarray:
    with h5py.File(env.granule, "r") as f:
        return np.asarray(f[var][sel])


def h5py_s3fs(env: rt.Env, var: str, sel: Sel) -> np.ndarray:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **env.opts)
    with fs.open(env.s3url, "rb") as fobj, h5py.File(fobj, "r") as f:
        return np.asarray(f[var][sel])


def kerchunk_zarr(env: rt.Env, var: str, sel: Sel) -> np.ndarray:
    out = rt._zarr_read(rt._reference_store(env), [(var, sel)], consolidated=True)  # type: ignore[list-item]
    return np.asarray(out[var])


def read_arrays(env: rt.Env, var: str, sel: Sel, **settings: Any) -> np.ndarray:
    from h5sidecar.read import read_arrays as ra
    from h5sidecar.settings import ReadSettings

    s = ReadSettings(**settings) if settings else None
    return ra(env.sidecar, {var: sel}, storage_options=env.opts, settings=s)[var]


def xarray_engine(chunks: dict[str, int] | None) -> Callable[[rt.Env, str, Sel], np.ndarray]:
    """``xr.open_dataset(sidecar, engine="h5sidecar", chunks=chunks)``, then the selection."""

    def read(env: rt.Env, var: str, sel: Sel) -> np.ndarray:
        import xarray as xr

        with xr.open_dataset(env.sidecar, engine="h5sidecar", storage_options=env.opts,
                             chunks=chunks) as ds:  # fmt: skip
            return np.asarray(ds[var][sel].values)

    return read


def gateway_zarr(base: str, name: str, spec: str) -> Callable[[rt.Env, str, Sel], np.ndarray]:
    def read(env: rt.Env, var: str, sel: Sel) -> np.ndarray:
        import zarr

        arr = zarr.open_array(f"{base}/zarr3-rechunk/{spec}/{name}/{var}", mode="r")
        return np.asarray(arr[sel])

    return read


# ---------------------------------------------------------------------------- the run
def _client_requests(base: str) -> float:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = r'^h5sidecar_http_requests_total\{[^}]*route="zarr3-rechunk"[^}]*\} ([0-9.e+]+)$'
    return sum(float(v) for v in re.findall(pattern, text, re.MULTILINE))


def measure(env: rt.Env, s3: str, fn: Callable[[rt.Env, str, Sel], np.ndarray], var: str,
            kind: str, args: argparse.Namespace, *, local: bool = False,
            gateway: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Median seconds, and per run the requests/bytes moved, of ``fn`` on ``repeats`` runs."""
    times, reqs, moved, answer, client = [], [], [], 0, []
    with h5py.File(env.granule, "r") as f:
        for i in range(args.repeats + 1):  # run 0 is the warm-up
            sel = selections(kind, i, args.sites)
            want = f[var][sel]
            rt.clear_caches()
            reset_stats(s3)
            before = _client_requests(gateway) if gateway else 0.0
            with c.local_io() as io:
                t0 = time.perf_counter()
                got = fn(env, var, sel)
                seconds = time.perf_counter() - t0
            np.testing.assert_array_equal(got, want, err_msg=f"{var} {kind} run {i}")
            if i == 0:
                continue
            stats = get_stats(s3)
            times.append(seconds)
            reqs.append(io["requests"] if local else stats["requests"])
            moved.append(io["bytes"] if local else stats["bytes_out"])
            answer = int(want.nbytes)
            if gateway:
                client.append(_client_requests(gateway) - before)
    row = {"seconds": statistics.median(times), "times": times,
           "requests": statistics.median(reqs), "bytes": statistics.median(moved),
           "answer_bytes": answer}  # fmt: skip
    if client:
        row["client_requests"] = statistics.median(client)
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    import zarr

    from benchmarks.bench_gateway import start_gateway
    from h5sidecar.workflows import index_many

    path = granule(args.sites)
    print(f"granule {path.name}: {c.fmt_bytes(path.stat().st_size)}", flush=True)
    # the zarr readers (kerchunk, the gateway's views) get the concurrency the README tells
    # zarr users to set, as in the read benchmark (zarr 3.1's default is 10 chunks at a time)
    zarr.config.set({"async.concurrency": ZARR_CONCURRENCY})
    s3, stop_s3 = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    work = Path(tempfile.mkdtemp(prefix="bench-subchunk-", dir=c.DATA_DIR))
    proc = None
    rows: list[dict[str, Any]] = []
    try:
        env = rt.prepare(path, s3, need_kerchunk=not args.skip_kerchunk)
        cases: list[tuple[str, Callable[..., np.ndarray], dict[str, Any], tuple[str, ...]]] = [
            ("h5py (local file)", h5py_local, {"local": True}, ()),
            ("h5py + s3fs", h5py_s3fs, {}, ()),
            ("h5sidecar read_arrays", read_arrays, {}, ()),
            ("h5sidecar read_arrays, whole chunks",
             lambda e, v, s: read_arrays(e, v, s, subchunk_fraction=0.0), {}, ()),
            ("h5sidecar xarray engine", xarray_engine(None), {}, ()),
            ("h5sidecar xarray engine + Dask (chunks={})", xarray_engine({}), {}, ()),
        ]  # fmt: skip
        if not args.skip_kerchunk:
            cases.append(("kerchunk + zarr", kerchunk_zarr, {}, ()))
        if not args.skip_gateway:
            opts = {"endpoint_url": s3, "anon": True}
            report = index_many(f"s3://{c.s3_key(path)}", str(work / "dest"), format="json",
                                executor="serial", storage_options=opts)  # fmt: skip
            assert report.ok, report.to_dict()
            # a 1 MiB cache holds the sidecar but no gzip chunk (~1.5 MB): every run reads
            # upstream, as the other readers do (each run reads another row or site anyway)
            proc, base = start_gateway(work / "dest", s3, work / "gateway.log", 2**20)
            cases.append(("gateway /zarr3-rechunk/64k + zarr", gateway_zarr(base, path.name, "64k"),
                          {"gateway": base}, ()))  # fmt: skip
            cases.append(("gateway /zarr3-rechunk/1x0 + zarr", gateway_zarr(base, path.name, "1x0"),
                          {"gateway": base}, ("site series",)))  # fmt: skip
        for kind in ("time step", "site series"):
            for var in VARS:
                for label, fn, kw, skip in cases:
                    if kind in skip:
                        continue
                    row = {"selection": kind, "variable": var, "reader": label}
                    row |= measure(env, s3, fn, var, kind, args, **kw)
                    rows.append(row)
                    print(f"{kind:11s} {var:14s} {label:40s} {row['seconds']:7.3f} s "
                          f"{row['requests']:>7} req {c.fmt_bytes(row['bytes']):>9} "
                          f"({row['bytes'] / row['answer_bytes']:.1f}x answer)", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        stop_s3()
        shutil.rmtree(work, ignore_errors=True)
    return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k != "func"} | {"zarr_async_concurrency": ZARR_CONCURRENCY},
            "granule_bytes": path.stat().st_size, "environment": c.environment(), "rows": rows}


def report(results: dict[str, Any]) -> str:
    a, env = results["args"], results["environment"]
    head = (f"`wind_speed` int16 ({ROWS} x {a['sites']}, chunks {CHUNKS[0]} x {CHUNKS[1]}) "
            f"and its gzip twin in one {c.fmt_bytes(results['granule_bytes'])} granule; S3 "
            f"endpoint with {a['latency_ms']:g} ms latency; median of {a['repeats']} runs; "
            f"{env['cpus']} CPUs, load average {env['load_avg'][0]:.1f} at the end "
            f"(commit {env['commit']}); zarr readers with `async.concurrency` "
            f"{a.get('zarr_async_concurrency', 10)}.  Every value equals h5py's.")
    floor = {(r["selection"], r["variable"]): r["seconds"] for r in results["rows"]
             if r["reader"] == "h5py (local file)"}  # fmt: skip
    table = c.markdown_table(
        ["selection", "variable", "reader", "seconds", "x h5py local", "requests",
         "bytes moved", "x answer"],
        [[r["selection"], r["variable"], r["reader"], f"{r['seconds']:.3f}",
          f"{r['seconds'] / floor[(r['selection'], r['variable'])]:.1f}",
          f"{r['requests']:.0f}" + (f" ({r['client_requests']:.0f} HTTP)"
                                    if "client_requests" in r else ""),
          c.fmt_bytes(r["bytes"]), f"{r['bytes'] / r['answer_bytes']:.1f}"]
         for r in results["rows"]])  # fmt: skip
    return f"{head}\n\n{table}"


def main(args: argparse.Namespace) -> dict[str, Any]:
    # one README table per granule width: <!-- subchunk --> at the default, else by chunk columns
    cols = -(-args.sites // CHUNKS[1])
    name = "subchunk" if args.sites == DEFAULT_SITES else f"subchunk-{cols}"
    return c.run_and_report(name, args, run, report)
