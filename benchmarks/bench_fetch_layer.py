"""Which HTTP layer should the fetch executor use?  Client CPU per ranged GET and throughput.

Compares, against the local S3-compatible server (``benchmarks/s3server.py``, a child process so
its CPU is not counted), with injected first-byte latency:

* ``obstore get_range``      -- obstore's plain ranged GET (bytes only);
* ``obstore get+meta``       -- ranged GET keeping the response metadata (what the executor
  does: the ETag/size of every response feeds the freshness guard at no extra request);
* ``s3fs (aiohttp)``         -- ``S3FileSystem._cat_file`` with a byte range;
* ``ChunkFetcher``           -- the executor end to end (allow-list, plan, semaphore, retries,
  freshness check, slicing) with coalescing disabled so it issues one GET per range.

Client CPU is ``time.process_time()`` of this process (all its threads, so obstore's tokio
runtime counts too) divided by the number of requests.

Usage::

    python benchmarks/bench_fetch_layer.py [--requests 2000] [--size 65536] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3server import start_server

from h5sidecar.settings import ReadSettings
from h5sidecar.sources._source_identity import source_identity
from h5sidecar.sources.fetch._chunk_fetcher import ChunkFetcher
from h5sidecar.sources.stores._backends import NO_RETRY
from h5sidecar.sources.stores._store_cache import resolve_store

OBJECT_BYTES = 256 * 2**20
CONCURRENCY = 32


async def bounded(jobs: list[Callable[[], Awaitable[object]]], limit: int) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[object]]) -> None:
        async with sem:
            await job()

    await asyncio.gather(*(one(j) for j in jobs))


def measure(name: str, run: Callable[[], None], n: int, nbytes: int) -> dict[str, float]:
    run()  # warm-up: connections, credentials, imports
    c0, t0 = time.process_time(), time.perf_counter()
    run()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    row = {"cpu_ms_per_req": 1e3 * cpu / n, "req_per_s": n / wall, "MB_per_s": nbytes / wall / 1e6}
    print(
        f"{name:<24} {row['cpu_ms_per_req']:8.3f} ms CPU/GET {row['req_per_s']:9.0f} GET/s "
        f"{row['MB_per_s']:8.1f} MB/s"
    )
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--size", type=int, default=64 * 1024, help="bytes per ranged GET")
    p.add_argument("--latency-ms", type=float, default=20.0)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "bench").mkdir()
        obj = Path(root) / "bench" / "granule.h5"
        obj.write_bytes(np.random.default_rng(0).bytes(OBJECT_BYTES))
        endpoint, stop = start_server(root, latency_ms=args.latency_ms)
        try:
            run_all(endpoint, args.requests, args.size)
        finally:
            stop()


def run_all(endpoint: str, n: int, size: int) -> None:
    import fsspec.asyn
    import obstore
    import s3fs

    url = "s3://bench/granule.h5"
    options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    # disjoint ranges spread over the object, so nothing can be coalesced
    stride = OBJECT_BYTES // n
    starts = [i * stride for i in range(n)]
    total = n * size
    loop = fsspec.asyn.get_loop()

    def on_loop(coro_fn: Callable[[], Awaitable[object]]) -> Callable[[], None]:
        return lambda: fsspec.asyn.sync(loop, coro_fn)

    store, loc = resolve_store(url, options, retry_config=NO_RETRY)

    async def ob_range() -> None:
        await bounded(
            [
                lambda s=s: obstore.get_range_async(store, loc.path, start=s, length=size)
                for s in starts
            ],
            CONCURRENCY,
        )

    async def ob_meta() -> None:
        async def one(s: int) -> object:
            r = await obstore.get_async(store, loc.path, options={"range": (s, s + size)})
            return (await r.bytes_async(), r.meta)

        await bounded([lambda s=s: one(s) for s in starts], CONCURRENCY)

    fs = s3fs.S3FileSystem(skip_instance_cache=True, asynchronous=False, **options)

    async def s3fs_cat() -> None:
        await bounded(
            [lambda s=s: fs._cat_file("bench/granule.h5", start=s, end=s + size) for s in starts],
            CONCURRENCY,
        )

    fetcher = ChunkFetcher(
        ReadSettings(max_gap=0, max_concurrency=CONCURRENCY),
        storage_options=options,
        sources=[source_identity(url, options)],
    )
    reqs = [(url, s, size) for s in starts]

    print(f"{n} ranged GETs of {size} bytes, {CONCURRENCY} in flight, endpoint {endpoint}")
    measure("obstore get_range", on_loop(ob_range), n, total)
    measure("obstore get+meta", on_loop(ob_meta), n, total)
    measure("s3fs (aiohttp)", on_loop(s3fs_cat), n, total)
    measure("ChunkFetcher", lambda: fetcher.fetch_sync(reqs), n, total)


if __name__ == "__main__":
    main()
