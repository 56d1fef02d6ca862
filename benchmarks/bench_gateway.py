"""HTTP gateway under load: ``h5sidecar serve`` in front of a slow object store.

An ATL03-like granule (about ``--size-mb`` MB) sits on the local S3 endpoint
(``benchmarks/s3server.py``) with ``--latency-ms`` of first-byte latency per request.  It is
indexed with ``index_many`` into a JSON DEST, and ``h5sidecar serve DEST`` runs in its own
process (so its CPU and memory are its own).  Two experiments:

1. **random chunks**: ``--clients`` concurrent clients (aiohttp, one event loop) GET random
   chunk keys of the v2 view until ``--requests`` are done.  Reported: requests/s, p50/p99
   latency, errors (anything but 200), the gateway's upstream requests and cache hits (from its
   ``/metrics``) and its peak RSS (``VmHWM``).
2. **full-granule read**: every array of the granule (then only the many-chunk photon-rate
   variables, ``gtXX/heights/*``) read with zarr-python over HTTP, through
   the v2 view and through the virtually sharded v3 view (``/zarr3-shard/K/``), ``--readers``
   arrays at a time, each run on a freshly started gateway (cold chunk cache; the sidecar is
   parsed before the clock starts); time as a ratio to one full h5py read of the local file,
   the HTTP requests the client sent and the upstream requests (from the gateway's counters).

Run with ``python benchmarks/run.py gateway [--size-mb 20] [--clients 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

README = c.BENCH_DIR / "README.md"
#: What the full reads cover: the whole granule (~935 arrays, most of them one chunk), and the
#: photon-rate variables only (``gtXX/heights/*``: many chunks each, where shards pay off).
SCOPES = (("whole granule", ""), ("photon heights", "/heights/"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=float, default=20, help="granule size (default 20)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--clients", type=int, default=64, help="concurrent clients (default 64)")
    p.add_argument("--requests", type=int, default=4000,
                   help="random chunk GETs in the load test (default 4000)")
    p.add_argument("--shard", type=int, default=16, help="chunks per shard of the v3 view")
    p.add_argument("--readers", type=int, default=8,
                   help="arrays read at once in the full-granule read (default 8)")
    p.add_argument("--repeats", type=int, default=3, help="full-granule reads per view")
    p.add_argument("--small-cache-mb", type=float, default=8,
                   help="cache of the second load run, so most reads go upstream (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--update-readme", action="store_true",
                   help="write the result table into benchmarks/README.md")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


# ---------------------------------------------------------------------------- the gateway

def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_gateway(dest: Path, s3url: str, log: Path, cache_bytes: int | None = None
                  ) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "h5sidecar.cli", "serve", str(dest), "--port", str(port),
           "--storage-option", f"endpoint_url={s3url}", "--storage-option", "anon=true"]
    env = dict(os.environ)
    if cache_bytes is not None:
        env["H5SIDECAR_CACHE_BYTES"] = str(cache_bytes)
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited: {log.read_text()}")
        try:
            with opener.open(f"{url}/healthz", timeout=2):
                return proc, url
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def peak_rss(pid: int) -> int:
    """Peak resident set size of a process (``VmHWM``), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return -1


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(url: str) -> dict[str, float]:
    """The gateway's counters summed over labels: ``{"h5sidecar_x_total": value}``."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "_bucket" in line:
            continue
        name, value = line.rsplit(" ", 1)
        base = name.split("{", 1)[0]
        if 'cache="chunk"' in name:
            base += ":chunk"
        out[base] = out.get(base, 0.0) + float(value)
    return out


def delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


# ---------------------------------------------------------------------------- experiments

def chunk_keys(sidecar: Path, granule: str) -> list[str]:
    """Every stored (not inline) chunk key of the v2 view."""
    from h5sidecar.references import read_refs

    refs = read_refs(sidecar)
    keys = []
    for path, arr in refs.arrays.items():
        codes = arr.manifest.codes
        for idx in np.argwhere(codes >= 0) if codes.ndim else ([()] if int(codes) >= 0 else []):
            name = ".".join(str(int(i)) for i in idx) if len(idx) else "0"
            keys.append(f"/zarr/{granule}/{path}/{name}")
    return keys


async def random_load(url: str, keys: list[str], clients: int, total: int,
                      seed: int) -> dict[str, Any]:
    import aiohttp

    rng = random.Random(seed)
    plan = [rng.choice(keys) for _ in range(total)]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    nbytes = 0
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def client() -> None:
            nonlocal nbytes
            while plan:
                key = plan.pop()
                t0 = time.perf_counter()
                status: int | str
                try:
                    async with session.get(url + key) as r:
                        body = await r.read()
                        status = r.status
                except aiohttp.ClientError as exc:
                    status, body = type(exc).__name__, b""
                latencies.append(time.perf_counter() - t0)
                if status != 200:
                    errors[str(status)] = errors.get(str(status), 0) + 1
                nbytes += len(body)

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - t0
    lat = np.array(latencies) * 1e3
    return {"requests": total, "seconds": wall, "rps": total / wall,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "errors": errors, "bytes": nbytes}


def read_everything(base: str, readers: int, only: str = "") -> int:
    """Read every array under ``base`` (a Zarr group URL) whose path contains ``only`` with
    zarr; returns the bytes decoded."""
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs-in-v3 notices: expected, not news
        root = zarr.open_group(base, mode="r")
        arrays = [a for p, a in root.members(max_depth=None)
                  if isinstance(a, zarr.Array) and only in p]  # fmt: skip
        with ThreadPoolExecutor(readers) as pool:
            return sum(pool.map(lambda a: int(np.asarray(a[...]).nbytes), arrays))


def load_run(url: str, s3url: str, keys: list[str], args: argparse.Namespace,
             cache: int | None) -> dict[str, Any]:
    """Warm up (sidecar parsed), then ``--requests`` random chunk GETs from ``--clients``."""
    asyncio.run(random_load(url, keys, args.clients, min(200, args.requests), args.seed))
    reset_stats(s3url)
    before = metrics(url)
    load = asyncio.run(random_load(url, keys, args.clients, args.requests, args.seed + 1))
    after = metrics(url)
    load |= {"chunk_keys": len(keys), "cache_bytes": cache,
             "upstream_requests": delta(after, before, "h5sidecar_upstream_requests_total"),
             "s3_requests": int(get_stats(s3url)["requests"]),  # type: ignore[call-overload]
             "cache_hits": delta(after, before, "h5sidecar_cache_hits_total:chunk"),
             "rejected_503": load["errors"].get("503", 0)}
    print(f"  random chunks, cache {c.fmt_bytes(cache) if cache else 'default'}: "
          f"{load['rps']:.0f} req/s, p50 {load['p50_ms']:.1f} ms, p99 {load['p99_ms']:.1f} ms, "
          f"errors {load['errors'] or 0}, upstream {int(load['upstream_requests'])}",
          flush=True)
    return load


def warm_metadata(url: str, paths: list[str]) -> None:
    """GET metadata documents so the gateway has parsed the sidecar before the clock starts."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for path in paths:
        with opener.open(url + path, timeout=120) as r:
            r.read()


def h5py_read(path: Path, only: str) -> int:
    """Decode every dataset whose path contains ``only`` with h5py (the local floor)."""
    import h5py

    n = 0

    def visit(name: str, obj: object) -> None:
        nonlocal n
        if isinstance(obj, h5py.Dataset) and only in f"/{name}" and obj.shape is not None:
            n += obj[()].nbytes

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return n


def one_read(dest: Path, s3url: str, prefix: str, root_doc: str, only: str, workdir: Path,
             readers: int) -> dict[str, float]:
    """One timed read on a freshly started gateway (cold chunk cache, sidecar parsed)."""
    proc, url = start_gateway(dest, s3url, workdir / "gateway-full.log")
    try:
        warm_metadata(url, [prefix + root_doc])
        before = metrics(url)
        reset_stats(s3url)
        t0, cpu0, gw0 = time.perf_counter(), time.process_time(), cpu_seconds(proc.pid)
        read_everything(url + prefix, readers, only)
        out = {"seconds": time.perf_counter() - t0, "client_cpu_s": time.process_time() - cpu0,
               "gateway_cpu_s": cpu_seconds(proc.pid) - gw0,
               "s3_requests": int(get_stats(s3url)["requests"])}  # type: ignore[call-overload]
        after = metrics(url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the /metrics request of `before` is counted in `after`: leave it out
    out["requests"] = delta(after, before, "h5sidecar_http_requests_total") - 1
    out["upstream"] = delta(after, before, "h5sidecar_upstream_requests_total")
    return out


def full_reads(dest: Path, s3url: str, granule_name: str, local: Path, workdir: Path,
               args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per scope: h5py on the local file, then the v2 and the sharded v3 view over HTTP."""
    rows: list[dict[str, Any]] = []
    views = (("zarr v2 over HTTP", f"/zarr/{granule_name}/", ".zmetadata"),
             (f"zarr v3, {args.shard} chunks/shard", f"/zarr3-shard/{args.shard}/{granule_name}/",
              "zarr.json"))  # fmt: skip
    for scope, only in SCOPES:
        times, _ = c.repeat(lambda only=only: h5py_read(local, only), args.repeats)
        floor = float(np.median(times))
        rows.append({"scope": scope, "view": "h5py, local file", "median_s": floor,
                     "ratio": 1.0, "requests": None, "upstream": None})  # fmt: skip
        for view, prefix, root_doc in views:
            runs = [one_read(dest, s3url, prefix, root_doc, only, workdir, args.readers)
                    for _ in range(args.repeats)]  # fmt: skip
            med = float(np.median([r["seconds"] for r in runs]))
            row = {"scope": scope, "view": view, "median_s": med, "ratio": med / floor,
                   "runs": runs, **{k: int(runs[0][k]) for k in ("requests", "upstream",
                                                                  "s3_requests")},
                   **{k: float(np.median([r[k] for r in runs]))
                      for k in ("client_cpu_s", "gateway_cpu_s")}}  # fmt: skip
            rows.append(row)
            print(f"  {scope:14s} {view:28s} median {med:7.2f} s ({med / floor:5.1f}x h5py)  "
                  f"client requests {row['requests']}  upstream {row['upstream']}", flush=True)
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    from h5sidecar.workflows import index_many

    granule = c.sample_granule(args.size_mb)
    print(f"granule {granule.name}: {c.fmt_bytes(granule.stat().st_size)}", flush=True)
    s3url, stop_s3 = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-", dir=c.DATA_DIR))
    proc = None
    try:
        opts = {"endpoint_url": s3url, "anon": True}
        dest = workdir / "dest"
        report = index_many(f"s3://{c.s3_key(granule)}", str(dest), format="json",
                            executor="serial", storage_options=opts)
        assert report.ok, report.to_dict()
        keys = chunk_keys(dest / f"{granule.name}.json", granule.name)
        loads = []
        for cache in (None, int(args.small_cache_mb * 2**20)):
            proc, url = start_gateway(dest, s3url, workdir / "gateway.log", cache)
            loads.append(load_run(url, s3url, keys, args, cache) | {"peak_rss": peak_rss(proc.pid)})
            proc.terminate()
            proc.wait(timeout=30)
            proc = None
        reads = full_reads(dest, s3url, granule.name, granule, workdir, args)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        stop_s3()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"benchmark": "gateway", "env": c.environment(), "args": vars(args),
            "granule": {"name": granule.name, "bytes": granule.stat().st_size},
            "loads": loads, "full_reads": reads}


# ---------------------------------------------------------------------------- reporting

def report(results: dict[str, Any]) -> str:
    a, env, g = results["args"], results["env"], results["granule"]
    loads = results["loads"]
    rows = []
    for load in loads:
        errors = sum(load["errors"].values())
        rows.append((c.fmt_bytes(load["cache_bytes"]) if load["cache_bytes"] else "256 MiB "
                     "(default)", f"{load['rps']:.0f}", f"{load['p50_ms']:.1f}",
                     f"{load['p99_ms']:.1f}",
                     f"{errors} {json.dumps(load['errors']) if errors else ''}".strip(),
                     int(load["upstream_requests"]), int(load["cache_hits"]),
                     c.fmt_bytes(load["peak_rss"])))  # fmt: skip
    reads = [(r.get("scope", ""), r["view"], f"{r['median_s']:.2f}", f"{r['ratio']:.1f}",
              "-" if r["requests"] is None else r["requests"],
              "-" if r["upstream"] is None else r["upstream"],
              "-" if r.get("client_cpu_s") is None else f"{r['client_cpu_s']:.2f}",
              "-" if r.get("gateway_cpu_s") is None else f"{r['gateway_cpu_s']:.2f}")
             for r in results["full_reads"]]  # fmt: skip
    return "\n".join([
        (f"Granule `{g['name']}`, {c.fmt_bytes(g['bytes'])}; S3 latency {a['latency_ms']:g} ms "
         f"per request; {env['cpus']} CPUs shared by the gateway, the S3 endpoint and the "
         f"clients (load average {env['load_avg'][0]:.1f} at the end); code "
         f"{env.get('commit') or 'unknown'}; {env['when']}."), "",
        (f"**Random chunks**: {a['clients']} concurrent clients, {loads[0]['requests']} GETs "
         f"of random keys among {loads[0]['chunk_keys']} chunks (v2 view), after a warm-up; "
         "with the default cache, then with a small one so that most reads go upstream:"), "",
        c.markdown_table(["gateway cache", "requests/s", "p50 ms", "p99 ms", "errors",
                          "upstream requests", "chunk-cache hits", "gateway peak RSS"], rows),
        "",
        (f"**Full reads**: every array of the granule, then the photon-rate arrays only "
         f"(`gtXX/heights/*`, many chunks each), read with zarr-python, {a['readers']} arrays "
         f"at a time, each run on a fresh gateway (cold chunk cache, sidecar parsed "
         f"beforehand); median of {a['repeats']}; the ratio is to h5py decoding the same "
         "arrays from the local file:"), "",
        c.markdown_table(["arrays", "reader", "median s", "x h5py local", "client HTTP requests",
                          "upstream requests", "client CPU s", "gateway CPU s"], reads),
    ])


def main(args: argparse.Namespace) -> dict[str, Any]:
    return c.main_for("gateway", args, run, report, README)

