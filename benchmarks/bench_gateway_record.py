"""The gateway over an object-store DEST of N recorded granules: startup and refreshes.

DEST ``s3://b/dest`` on the local S3 endpoint (``benchmarks/s3server.py``, no latency) holds a
record in parts of N synthetic granules (100,000 rows written once through ``write_report``,
then copied under other names, ten parts at a million).  In a fresh process each, a
:class:`~h5sidecar.gateway._dest.DestIndex` (what ``h5sidecar serve`` lists DEST with) is made
and its first snapshot taken (startup), then refreshed with nothing new, then after one run
wrote one small part (a granule pruned); wall time and peak RSS above the process's after
imports, and how many allowed sources it holds:

- ``off``: the record cache off (``--record-cache off``);
- ``cold``: the shared cache, empty (the first command on this machine);
- ``warm``: the shared cache, filled by an earlier command (what an index run leaves).

With ``--serve``, the same three modes through ``h5sidecar serve`` itself (a fresh process,
timed from its launch): when ``/healthz`` first answers, when it says "ok", how long a
granule request takes meanwhile (503 while warming), and the first lookup of a granule once
served (``/api/granules/NAME``, whose sidecar is a real one); the longest ``/healthz`` answer
while warming; the server's peak RSS.

    python -m benchmarks.bench_gateway_record --n 100000 1000000 --work /tmp/gwrecord [--serve]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_gateway import free_port
from benchmarks.s3server import start_server

ROOT = Path(__file__).resolve().parents[1]
#: Rows written through write_report; larger N are copies of them under other names.
BASE = 100_000


def make_dest(data: Path, n: int, options: dict[str, Any]) -> None:
    """The record of ``n`` granules in parts under ``data/b/dest`` (served by the endpoint)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from h5sidecar.dest._record_parts import part_key
    from h5sidecar.dest._report import GranuleResult, RunReport
    from h5sidecar.workflows import write_report

    base = min(n, BASE)
    granules = tuple(GranuleResult(
        url=f"s3://b/old/g{i:07d}.h5", sidecar=f"s3://b/dest/old/g{i:07d}.h5.parq",
        status="ok", name=f"old/g{i:07d}.h5", n_virtual=2, n_chunks=3, sidecar_bytes=100,
        source={"url": f"s3://b/old/g{i:07d}.h5", "size": 10, "etag": "e", "mtime": None})
        for i in range(base))  # fmt: skip
    write_report(RunReport(source="s3://b/old", dest="s3://b/dest", format="parquet",
                           options={}, started="2026-01-01T00:00:00+00:00",
                           finished="2026-01-01T00:00:00+00:00", seconds=1.0,
                           granules=granules, version="0"),
                 "s3://b/dest", storage_options=options, record_settings=_off())  # fmt: skip
    parts = data / "b" / "dest" / "_h5sidecar_record"
    table = pq.read_table(glob.glob(str(parts / "*.parquet"))[0])
    for k in range(1, n // base):
        copy = table
        for c in ("url", "name", "sidecar", "source", "source_url"):
            i = copy.schema.get_field_index(c)
            copy = copy.set_column(i, copy.schema.field(i),
                                   pc.replace_substring(copy.column(c), "old/g", f"o{k}/g"))
        pq.write_table(copy, str(parts / f"{part_key()}.parquet"), compression="zstd",
                       row_group_size=20_000)


#: The granule given a real sidecar in DEST (the others' rows name sidecars never written).
NAMED = "old/g0000001.h5"


def add_sidecar(data: Path) -> None:
    """A real sidecar for :data:`NAMED` (of a small HDF5 file), where its row says it is."""
    import h5py
    import numpy as np

    from h5sidecar.workflows import index_many

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "g0000001.h5"
        with h5py.File(src, "w") as f:
            f.create_dataset("x", data=np.arange(1000, dtype="f4"), chunks=(100,))
        index_many(str(src), f"{tmp}/dest", format="parquet", executor="serial",
                   record_settings=_off())  # fmt: skip
        shutil.copytree(f"{tmp}/dest/g0000001.h5.parq", data / "b" / "dest" / f"{NAMED}.parq")


def serve_child(endpoint: str, cache: str) -> dict[str, Any]:
    """``h5sidecar serve`` over DEST, timed from its launch (see the module's docstring)."""
    port = free_port()
    cmd = [sys.executable, "-m", "h5sidecar.cli", "serve", "s3://b/dest", "--port", str(port),
           "--record-cache", cache or "off", "--storage-option", f"endpoint_url={endpoint}",
           "--storage-option", "key=x", "--storage-option", "secret=y"]  # fmt: skip
    with tempfile.TemporaryFile() as log:  # not a pipe: nobody reads it while the server runs
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            return _watch(proc, f"http://127.0.0.1:{port}", t0, log)
        finally:
            proc.terminate()
            proc.wait(30)


def _watch(proc: Any, base: str, t0: float, log: Any) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    asked = 0.0
    with httpx.Client(timeout=120) as client:
        while "ok" not in out:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(log.read().decode()[-2000:])
            t = time.perf_counter()
            try:
                status = client.get(f"{base}/healthz").json()["status"]
            except httpx.TransportError:
                time.sleep(0.02)
                continue
            if status == "warming":  # how long /healthz takes while the record loads
                out["healthz_max"] = round(max(out.get("healthz_max", 0.0),
                                               time.perf_counter() - t), 3)  # fmt: skip
            now = round(time.perf_counter() - t0, 2)
            out.setdefault("healthz", now)
            out.setdefault(status, now)
            # a granule asked for while warming: at first (the load's first 2 s, when a
            # request waits for it), and later (the last one, answered 503 at once)
            later = "granule_503" in out and now - out["warming"] > 2.5 and now - asked > 0.5
            if status == "warming" and ("granule_503" not in out or later):
                asked = now
                t = time.perf_counter()
                r = client.get(f"{base}/api/granules/{NAMED}")
                took = (r.status_code, round(time.perf_counter() - t, 3))
                out["granule_503_later" if later else "granule_503"] = took
            time.sleep(0.02)
        t = time.perf_counter()
        r = client.get(f"{base}/api/granules/{NAMED}")
        assert r.status_code == 200, r.text
        out["lookup"] = round(time.perf_counter() - t, 3)
    with open(f"/proc/{proc.pid}/status") as f:
        out["peak_mb"] = next(int(line.split()[1]) for line in f
                              if line.startswith("VmHWM")) // 1024  # fmt: skip
    return out


def _off() -> Any:
    from h5sidecar.settings import RecordSettings

    return RecordSettings(record_cache="")


def child(endpoint: str, cache: str) -> dict[str, Any]:
    """In this process: startup, a refresh with nothing new, one after a new part."""
    import pyarrow as pa

    from h5sidecar.dest import store_of
    from h5sidecar.dest._parts_writer import PartsWriter
    from h5sidecar.gateway._dest import DestIndex
    from h5sidecar.settings import RecordSettings

    pa.array([], type=pa.string())  # pandas, imported as the gateway warms up
    options = {"endpoint_url": endpoint, "key": "x", "secret": "y"}
    settings = RecordSettings(record_cache=cache)

    def peak() -> float:
        # VmHWM, not ru_maxrss: Linux keeps the parent's peak in ru_maxrss across execve
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024

    out: dict[str, Any] = {}
    index = DestIndex("s3://b/dest", storage_options=options, record_settings=settings)
    for step in ("startup", "refresh", "new_part"):
        if step == "new_part":  # a run's small part: one granule pruned (its tombstone)
            writer = PartsWriter(*store_of("s3://b/dest", options))
            writer.add("s3://b/old/g0000000.h5")
            writer.flush(None)
        before = peak()
        t0 = time.perf_counter()
        snap = index.snapshot(max_age=0)
        out[step] = {"seconds": round(time.perf_counter() - t0, 2),
                     "rss_added_mb": round(peak() - before), "sources": len(snap.sources)}
    out["peak_mb"] = round(peak())
    index.close()
    return out


def _run_child(endpoint: str, cache: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_gateway_record", "--child",
                           endpoint, cache], cwd=ROOT, check=True, capture_output=True,
                          text=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run_size(n: int, work: Path, *, serve: bool = False) -> dict[str, Any]:
    """The three modes at ``n`` granules (DEST as made again before ``off`` and ``cold``);
    ``serve``: through ``h5sidecar serve`` (:func:`serve_child`)."""
    data, pristine = work / f"n{n}", work / f"n{n}-pristine"
    if not pristine.exists():
        (pristine / "b").mkdir(parents=True)
        url, stop = start_server(pristine)
        try:
            make_dest(pristine, n, {"endpoint_url": url, "key": "x", "secret": "y"})
        finally:
            stop()
        add_sidecar(pristine)
    out = {}
    port = free_port()  # one endpoint URL: the cache file is named by DEST's storage options
    for mode in ("off", "cold", "warm"):
        if mode != "warm":  # warm: DEST and the cache as cold left them
            shutil.rmtree(data, ignore_errors=True)
            shutil.copytree(pristine, data)
            shutil.rmtree(work / "cache", ignore_errors=True)
        url, stop = start_server(data, port=port)
        try:
            cache = "" if mode == "off" else str(work / "cache")
            out[mode] = serve_child(url, cache) if serve else _run_child(url, cache)
        finally:
            stop()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[100_000])
    p.add_argument("--work", type=Path, default=Path("/tmp/bench_gateway_record"))
    p.add_argument("--serve", action="store_true",
                   help="time `h5sidecar serve` itself: /healthz, 'ok', a lookup")
    p.add_argument("--child", nargs=2, metavar=("ENDPOINT", "CACHE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    for n in args.n:
        if args.serve:
            for mode, r in run_size(n, args.work, serve=True).items():
                print(f"{n:>8} {mode:<5} {json.dumps(r)}  (load {os.getloadavg()[0]:.1f})",
                      flush=True)  # fmt: skip
            continue
        for mode, r in run_size(n, args.work).items():
            steps = "  ".join(f"{s} {r[s]['seconds']} s +{r[s]['rss_added_mb']} MB "
                              f"({r[s]['sources']} sources)"
                              for s in ("startup", "refresh", "new_part"))  # fmt: skip
            print(f"{n:>8} {mode:<5} {steps}  peak {r['peak_mb']} MB", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("H5SIDECAR_RECORD_CACHE", "")  # no command here fills a cache unasked
    main()
