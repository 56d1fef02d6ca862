"""Fault-and-abuse cases of the read path and the gateway (fast; runs in CI).

Planted and malformed sidecars, bad requests, a source that blocks forever: every case must end
in a clear error (``InvalidReferenceError`` / HTTP 4xx with the reason, never 500), within a
bounded time and a bounded amount of memory.  The longer soak is ``benchmarks/soak_gateway.py``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest

import h5sidecar
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import read_refs, write_json
from tests.gateway._http import gateway, raw_get, wait_status
from tests.references._h5refs import edit_zarray

VAR = "values"
N, CHUNK = 4000, 1000

#: Memory a planted sidecar may cost a reader (parsing it is refused before any allocation).
PARSE_BUDGET = 20 * 2**20


def write_source(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset(VAR, data=np.arange(N, dtype="i4"), chunks=(CHUNK,))
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A good source and its JSON sidecar document."""
    root = tmp_path_factory.mktemp("faults")
    src = write_source(root / "g.h5")
    write_json(h5sidecar.index_granule(str(src)), root / "g.h5.json")
    return root, json.loads((root / "g.h5.json").read_text())


def _zarray(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``doc`` with ``values/.zarray`` changed (in the document and the consolidated copy)."""
    return edit_zarray(doc, VAR, **changes)


def _chunk(doc: dict[str, Any], ref: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["refs"][f"{VAR}/0"] = ref
    return doc


def _url(doc: dict[str, Any], url: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for k, v in doc["refs"].items():
        if isinstance(v, list):
            doc["refs"][k] = [url, *v[1:]]
    doc["h5sidecar"]["urls"] = [url]
    doc["h5sidecar"]["source"]["url"] = url
    return doc


#: Planted sidecars: name -> document factory.  All are refused when parsed (422).
PLANTED: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "grid_5e8": lambda d: _zarray(d, shape=[500_000_000], chunks=[1]),
    "grid_1e18": lambda d: _zarray(d, shape=[10**18], chunks=[1]),
    "chunk_1e18": lambda d: _zarray(d, shape=[10**18], chunks=[10**18]),
    "shape_2e64": lambda d: _zarray(d, shape=[2**64], chunks=[2**64]),
    "ndim_40": lambda d: _zarray(d, shape=[1] * 40, chunks=[1] * 40),
    "dtype_garbage": lambda d: _zarray(d, dtype="<zz9"),
    "dtype_huge": lambda d: _zarray(d, dtype="|V99999999999"),
    "dtype_fields_garbage": lambda d: _zarray(d, dtype=[["a"], [1, 2, 3]]),
    "dtype_number": lambda d: _zarray(d, dtype=7),
    "chunks_zero": lambda d: _zarray(d, chunks=[0]),
    "rank_mismatch": lambda d: _zarray(d, chunks=[10, 10]),
}

#: Sidecars that parse but whose chunk references are wrong: refused when a chunk is read.
BAD_REFS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "past_end": lambda d: _chunk(d, [d["h5sidecar"]["source"]["url"], 10**9, 4000]),
    "huge_length": lambda d: _chunk(d, [d["h5sidecar"]["source"]["url"], 0, 2**62]),
    "wrong_length": lambda d: _chunk(d, [d["h5sidecar"]["source"]["url"], 3496, 17]),
    "nul_url": lambda d: _url(d, d["h5sidecar"]["source"]["url"] + "\x00.h5"),
    "unknown_codec": lambda d: _zarray(d, compressor={"id": "no-such-codec"}),
}

#: Sidecars a careful reader may serve but must not decode into the gateway's memory.
TOO_BIG_TO_LOOK = {
    # chunks of 1 GiB of int32 each (a zlib stream of 1 MiB can inflate so)
    "chunk_1gib": lambda d: _zarray(d, shape=[2**30], chunks=[2**28]),
}


@pytest.fixture(scope="module")
def planted_dest(base: tuple[Path, dict[str, Any]]) -> Path:
    root, doc = base
    dest = root / "dest"
    dest.mkdir()
    for name, make in {**PLANTED, **BAD_REFS, **TOO_BIG_TO_LOOK}.items():
        (dest / f"{name}.h5.json").write_text(json.dumps(make(doc)))
    (dest / "good.h5.json").write_text(json.dumps(doc))
    return dest


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_sidecar_is_refused_before_allocating(planted_dest: Path, name: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(InvalidReferenceError) as info:
            read_refs(planted_dest / f"{name}.h5.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PARSE_BUDGET, f"{name}: {peak} bytes traced while refusing it"
    assert "values/.zarray" in str(info.value)


def test_reader_limit_is_the_indexers() -> None:
    from h5sidecar.indexer.layout._chunk_table import MAX_GRID_CHUNKS
    from h5sidecar.references._zmeta import MAX_GRID_POSITIONS

    assert MAX_GRID_POSITIONS == MAX_GRID_CHUNKS == 33_554_432


@pytest.mark.parametrize("name", ["grid_5e8", "grid_1e18", "dtype_huge"])
def test_inspect_of_planted_sidecar_exits_2_within_memory(planted_dest: Path, name: str) -> None:
    # the child may not take more than 1.5 GiB of address space: old readers allocated 2.6 GB+
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 * 2**29, 3 * 2**29))"
    code = f"{limit}; import sys; from h5sidecar.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "inspect", str(planted_dest / f"{name}.h5.json")],
        check=False, capture_output=True, text=True, timeout=120,
        # one thread per pool: thread stacks and BLAS buffers of a many-core machine would
        # count against the address-space limit
        env={**os.environ, "COLUMNS": "200", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "values/.zarray" in proc.stdout + proc.stderr


# -- the gateway over planted sidecars ------------------------------------------------------------
def _routes(g: str) -> list[str]:
    return [
        f"/zarr/{g}/.zmetadata",
        f"/zarr/{g}/{VAR}/.zarray",
        f"/zarr/{g}/{VAR}/0",
        f"/zarr3/{g}/zarr.json",
        f"/zarr3/{g}/{VAR}/zarr.json",
        f"/zarr3/{g}/{VAR}/0",
        f"/zarr3-shard/2/{g}/{VAR}/zarr.json",
        f"/zarr3-shard/2/{g}/{VAR}/0",
        f"/zarr3-rechunk/1k/{g}/{VAR}/zarr.json",
        f"/zarr3-rechunk/1k/{g}/{VAR}/0",
        f"/zarr-rechunk/1k/{g}/.zmetadata",
        f"/api/granules/{g}",
        f"/quicklook.png?granule={g}&variable={VAR}",
    ]


@pytest.fixture(scope="module")
def planted_gateway(planted_dest: Path) -> Iterator[tuple[str, Any]]:
    with gateway(str(planted_dest), allow=(str(planted_dest.parent),)) as running:
        yield running


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as c:
        yield c


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_gateway_answers_422_for_planted_sidecars(planted_gateway, client, name: str) -> None:
    url, _ = planted_gateway
    for route in _routes(f"{name}.h5"):
        r = client.get(url + route)
        assert r.status_code == 422, (route, r.status_code, r.text)
        assert "values/.zarray" in r.json()["message"]
    page = client.get(f"{url}/?granule={name}.h5")
    assert page.status_code == 200 and "values/.zarray" in page.text


@pytest.mark.parametrize("name", sorted(BAD_REFS))
def test_gateway_answers_4xx_for_bad_references(planted_gateway, client, name: str) -> None:
    url, _ = planted_gateway
    statuses = {}
    for route in _routes(f"{name}.h5"):
        r = client.get(url + route)
        statuses[route] = r.status_code
        assert r.status_code < 500, (route, r.status_code, r.text)
    # what reads the bad reference refuses it with the reason: the chunk route serves stored
    # bytes as they are (a wrong length or codec is the client's decode problem), the quick
    # look decodes them
    chunk, look = f"/zarr/{name}.h5/{VAR}/0", f"/quicklook.png?granule={name}.h5&variable={VAR}"
    if name in ("unknown_codec", "wrong_length"):
        assert statuses[chunk] == 200 and statuses[look] == 422, statuses
    else:
        assert statuses[chunk] == 422 and statuses[look] == 422, statuses


def test_quick_look_refuses_chunks_too_big_to_decode(planted_gateway, client) -> None:
    url, _ = planted_gateway
    rss = _rss()
    r = client.get(f"{url}/quicklook.png?granule=chunk_1gib.h5&variable={VAR}")
    assert r.status_code == 501 and "quick look" in r.json()["message"]
    assert _rss() - rss < 100 * 2**20


def test_good_sidecar_still_served(planted_gateway, client, planted_dest: Path) -> None:
    url, _ = planted_gateway
    r = client.get(f"{url}/zarr/good.h5/{VAR}/1")
    assert r.status_code == 200
    with h5py.File(planted_dest.parent / "g.h5") as f:
        np.testing.assert_array_equal(np.frombuffer(r.content, "<i4"), f[VAR][CHUNK : 2 * CHUNK])


def test_gateway_memory_stays_bounded_for_planted_sidecars(planted_gateway, client) -> None:
    """Three requests per planted granule: the process grows by far less than one grid."""
    url, _ = planted_gateway
    rss = _rss()
    for _ in range(3):
        for name in ("grid_5e8", "grid_1e18", "chunk_1e18"):
            assert client.get(f"{url}/zarr/{name}.h5/{VAR}/0").status_code == 422
    assert _rss() - rss < 100 * 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- bad requests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [b"/zarr/good.h5/%ff%fe", b"/zarr/%ff%fe/.zmetadata",
                                  b"/api/granules/%c3%28"])  # fmt: skip
def test_invalid_utf8_in_path_is_400(planted_gateway, path: bytes) -> None:
    url, _ = planted_gateway
    status, body = raw_get(url, path)
    assert status == 400, body
    assert b"UTF-8" in body


# -- blocking sources ------------------------------------------------------------------------------
def _two_granules(root: Path) -> Path:
    """DEST with granules ``a.h5`` and ``b.h5`` (sources beside DEST)."""
    dest = root / "dest"
    dest.mkdir()
    for name in ("a.h5", "b.h5"):
        src = write_source(root / name)
        write_json(h5sidecar.index_granule(str(src)), dest / f"{name}.json")
    return dest


def _get_many(url: str, paths: list[str], timeout: float) -> list[int]:
    """GET every path at once (one thread each); status codes (599 for a client timeout, 598
    when the server closed the connection without answering)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(path: str) -> int:
        try:
            return httpx.get(url + path, timeout=timeout).status_code
        except httpx.TimeoutException:
            return 599
        except httpx.TransportError:
            return 598

    with ThreadPoolExecutor(len(paths)) as pool:
        return list(pool.map(one, paths))


def test_fifo_source_does_not_wedge_the_gateway(tmp_path: Path) -> None:
    import time

    dest = _two_granules(tmp_path)
    src = tmp_path / "a.h5"
    kept = src.rename(tmp_path / "a.h5.kept")
    os.mkfifo(src)  # a reader opening it blocking would wait for a writer forever
    with gateway(str(dest), allow=(str(tmp_path),)) as (url, _app):
        t0 = time.monotonic()
        statuses = _get_many(url, [f"/zarr/a.h5/{VAR}/{i % 4}" for i in range(40)], timeout=20)
        assert set(statuses) == {409}, statuses  # the source is no longer the indexed file
        assert time.monotonic() - t0 < 10
        t1 = time.monotonic()
        r = httpx.get(f"{url}/zarr/b.h5/{VAR}/2", timeout=10)
        assert r.status_code == 200 and time.monotonic() - t1 < 2
        with h5py.File(tmp_path / "b.h5") as f:
            np.testing.assert_array_equal(np.frombuffer(r.content, "<i4"), f[VAR][2000:3000])
        src.unlink()
        kept.rename(src)  # restored: same bytes and mtime, but a new change time, which the
        # gateway cannot prove harmless: still refused (re-index to serve it again), never wedged
        assert httpx.get(f"{url}/zarr/a.h5/{VAR}/1", timeout=10).status_code == 409


@pytest.fixture
def stalled_s3(tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> Iterator[Any]:
    """Granules a.h5 and b.h5 on moto S3 behind a fault proxy; DEST holds their sidecars."""
    from tests.faultproxy import FaultProxy

    dest = tmp_path / "dest"
    dest.mkdir()
    for name in ("a.h5", "b.h5"):
        s3.put_file(str(write_source(tmp_path / name)), f"{s3_bucket}/{name}")
        refs = h5sidecar.index_granule(f"s3://{s3_bucket}/{name}", storage_options=s3_storage_options)
        write_json(refs, dest / f"{name}.json")
    with FaultProxy(str(s3_storage_options["endpoint_url"])) as proxy:
        yield dest, proxy, {**s3_storage_options, "endpoint_url": proxy.url}, s3_bucket


def test_stalled_upstream_times_out_and_other_granules_are_served(stalled_s3) -> None:
    import time

    from h5sidecar.settings import ReadSettings

    dest, proxy, options, bucket = stalled_s3
    proxy.inject("hang", times=1000, match=lambda r: r.path.endswith("/a.h5"))
    read = ReadSettings(request_timeout=0.5, retries=1, backoff=0.0)
    with gateway(str(dest), options, read_settings=read, allow=(f"s3://{bucket}/",),
                 max_upstream=8, max_per_granule=2) as (url, _app):  # fmt: skip
        t0 = time.monotonic()
        statuses = _get_many(url, [f"/zarr/a.h5/{VAR}/{i % 4}" for i in range(12)], timeout=30)
        # each answer is a clean error: 502 after the timeouts, or 503 when the granule's queue
        # is full -- never a hang, never 500
        assert set(statuses) <= {502, 503} and 502 in statuses, statuses
        assert time.monotonic() - t0 < 15
        # the stalled granule holds at most max_per_granule upstream slots: b.h5 is served
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            stuck = pool.submit(_get_many, url, [f"/zarr/a.h5/{VAR}/{i}" for i in range(4)], 30)
            time.sleep(0.1)
            t1 = time.monotonic()
            r = httpx.get(f"{url}/zarr/b.h5/{VAR}/0", timeout=10)
            assert r.status_code == 200 and time.monotonic() - t1 < 2
            assert set(stuck.result()) <= {502, 503}


def _timed_get_many(url: str, paths: list[str], timeout: float) -> list[tuple[int, float, str]]:
    """GET every path at once; (status, seconds from its own send to the answer, Retry-After)
    of each (its own: on a loaded machine the threads may send seconds apart, so times from a
    common start say when a request was sent, not how long the gateway held it)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    def one(path: str) -> tuple[int, float, str]:
        with httpx.Client(timeout=timeout) as client:  # (made before the clock starts)
            t0 = time.monotonic()
            r = client.get(url + path)
            return r.status_code, time.monotonic() - t0, r.headers.get("retry-after", "")

    with ThreadPoolExecutor(len(paths)) as pool:
        return list(pool.map(one, paths))


def test_requests_queue_up_to_max_pending_behind_a_hung_source(stalled_s3) -> None:
    """max_per_granule read, max_pending wait (however short request_timeout is), the rest
    get 503 at once; the queued ones get their turn and the stalled source's 502."""
    from h5sidecar.settings import ReadSettings

    dest, proxy, options, bucket = stalled_s3
    proxy.inject("hang", times=1000, match=lambda r: r.path.endswith("/a.h5"))
    read = ReadSettings(request_timeout=0.4, retries=0, backoff=0.0)
    with gateway(str(dest), options, read_settings=read, allow=(f"s3://{bucket}/",),
                 max_upstream=8, max_per_granule=2, max_pending=6) as (url, _app):  # fmt: skip
        wait_status(url)  # DEST loaded: requests are not held together by the warm-up
        got = _timed_get_many(url, [f"/zarr/a.h5/{VAR}/{i % 4}" for i in range(11)], timeout=30)
    statuses = sorted(status for status, _, _ in got)
    # 2 read + 6 queued (each reaching the source in turn: 502 after its request_timeout),
    # 3 beyond the queue: 503 + Retry-After at once
    assert statuses == [502] * 8 + [503] * 3, got
    assert all(after == "1" for status, _, after in got if status == 503), got
    # "at once": each refused in less time than any read took to reach its request_timeout
    assert max(t for s, t, _ in got if s == 503) < min(t for s, t, _ in got if s == 502), got
    assert max(t for _, t, _ in got) < 10


def test_the_queue_wait_is_bounded_by_queue_timeout(stalled_s3) -> None:
    from h5sidecar.settings import ReadSettings

    dest, proxy, options, bucket = stalled_s3
    proxy.inject("hang", times=1000, match=lambda r: r.path.endswith("/a.h5"))
    read = ReadSettings(request_timeout=4.0, retries=0, backoff=0.0)
    with gateway(str(dest), options, read_settings=read, allow=(f"s3://{bucket}/",),
                 max_upstream=8, max_per_granule=1, max_pending=4,
                 queue_timeout=1.0) as (url, _app):  # fmt: skip
        got = _timed_get_many(url, [f"/zarr/a.h5/{VAR}/{i % 4}" for i in range(5)], timeout=30)
    assert sorted(s for s, _, _ in got) == [502] + [503] * 4, got
    waited = [t for status, t, _ in got if status == 503]
    # the queue timeout (1 s), not request_timeout (4 s); a loaded machine adds ~2 s of its own
    assert all(1.0 <= t < read.request_timeout for t in waited), got
    assert all(after == "2" for status, _, after in got if status == 503), got


def test_sigterm_stops_the_server_within_the_shutdown_bound(stalled_s3) -> None:
    import signal
    import time

    from tests.conftest import free_port

    dest, proxy, options, bucket = stalled_s3
    proxy.inject("hang", times=1000, match=lambda r: r.path.endswith("/a.h5"))
    port = free_port()
    env = {**os.environ, "H5SIDECAR_REQUEST_TIMEOUT": "60", "H5SIDECAR_SHUTDOWN_SECONDS": "1",
           "AWS_ENDPOINT_URL": options["endpoint_url"]}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "h5sidecar.cli", "serve", str(dest), "--port", str(port),
         "--allow", f"s3://{bucket}/", "--storage-option", f"endpoint_url={options['endpoint_url']}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            hung = pool.submit(_get_many, url, [f"/zarr/a.h5/{VAR}/0"] * 3, 30)
            time.sleep(0.5)  # the requests now wait on the stalled source
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
            stopped = time.monotonic() - t0
            hung.result()
        assert stopped < 5, stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- fuzzing every route with malformed sidecars ----------------------------------------------------
def test_fuzzed_sidecars_never_answer_500(base, tmp_path_factory) -> None:
    """Hypothesis-generated sidecars through every route (the app in-process): 4xx, never 5xx
    from a malformed sidecar (502 would mean the source was read and failed: not expected)."""
    import asyncio

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from h5sidecar.gateway.app import create_app
    from h5sidecar.settings import GatewaySettings
    from tests.references.test_fuzz_sidecars import _chunk_refs, _plant, _zarray_changes

    root, doc = base
    counter = iter(range(10**6))

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(zchanges=_zarray_changes, chunk=st.none() | _chunk_refs)
    def run(zchanges: dict[str, Any], chunk: Any) -> None:
        dest = tmp_path_factory.mktemp("fuzzdest")
        name = f"f{next(counter)}.h5"
        (dest / f"{name}.json").write_text(json.dumps(_plant(doc, zchanges, chunk, None, None)))
        app = create_app(GatewaySettings(allow=(str(root),)), str(dest))

        async def go() -> list[tuple[str, int, str]]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                out = []
                for route in (*_routes(name), f"/?granule={name}", f"/zarr/{name}/{VAR}/1"):
                    r = await c.get(route)
                    out.append((route, r.status_code, r.text[:300]))
                return out

        for route, status, text in asyncio.run(go()):
            assert status < 500 or status == 501, (zchanges, chunk, route, status, text)

    run()
