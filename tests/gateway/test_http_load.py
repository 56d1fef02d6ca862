"""The gateway under load: upstream reads are bounded, a full queue answers 503 + Retry-After
at once (no timeouts), caches stay within their byte budgets.

The object store sits behind a proxy that holds every request until the test releases it, so
"the upstream is busy" is a state the test sets up, not a race it hopes to win.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import h5py
import httpx

from tests.faultproxy import FaultProxy
from tests.gateway._http import ATL03, SMALL, Corpus, gateway, http, http_corpus, settled

__all__ = ["http", "http_corpus"]

H_PH = f"{SMALL}/gt1l/heights/h_ph"


class HoldingProxy(FaultProxy):
    """A FaultProxy that holds every request until :attr:`release` is set."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.release = threading.Event()

    async def _answer(self, writer, head, body, fault):  # type: ignore[no-untyped-def,override]
        while not self.release.is_set():
            await asyncio.sleep(0.005)
        return await super()._answer(writer, head, body, fault)


def wait_until(predicate, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.005)


def test_saturated_gateway_answers_503_with_retry_after(
    http: httpx.Client, http_corpus: Corpus,
) -> None:
    with HoldingProxy(http_corpus.endpoint) as proxy, \
            gateway(http_corpus.dest, {"endpoint_url": proxy.url}, max_upstream=1,
                    max_pending=1) as (url, app), ThreadPoolExecutor(4) as pool:  # fmt: skip
        admission = app.state.gateway.admission
        assert http.get(f"{url}/zarr/{SMALL}/.zmetadata").status_code == 200  # no upstream I/O
        first = pool.submit(http.get, f"{url}/zarr/{H_PH}/0", timeout=60)
        wait_until(lambda: proxy.in_flight == 1, "the first upstream read")
        second = pool.submit(http.get, f"{url}/zarr/{H_PH}/1", timeout=60)
        wait_until(lambda: admission.waiting == 1, "the second request to queue")
        third = http.get(f"{url}/zarr/{H_PH}/2")  # the queue (max_pending=1) is full
        assert third.status_code == 503
        assert third.headers["retry-after"] == "1"
        assert third.json()["error"] == "saturated"
        # answered from memory: metadata and shard indexes never wait for the upstream
        assert http.get(f"{url}/zarr/{H_PH}/.zarray").status_code == 200
        index = http.get(f"{url}/zarr3-shard/4/{H_PH}/0", headers={"Range": "bytes=-68"})
        assert index.status_code == 206
        proxy.release.set()
        assert first.result().status_code == 200 and second.result().status_code == 200
        assert proxy.peak_in_flight == 1
        m = settled(app)
        assert m.value("h5sidecar_http_requests_total", route="zarr", method="GET",
                       status="503") == 1  # fmt: skip
        assert m.value("h5sidecar_rejected_total") == 1


def test_upstream_concurrency_is_bounded(http: httpx.Client, http_corpus: Corpus) -> None:
    with HoldingProxy(http_corpus.endpoint) as proxy, \
            gateway(http_corpus.dest, {"endpoint_url": proxy.url}, max_upstream=3,
                    max_pending=64) as (url, app), ThreadPoolExecutor(12) as pool:  # fmt: skip
        admission = app.state.gateway.admission
        http.get(f"{url}/zarr/{ATL03}/.zmetadata")
        keys = [f"{url}/zarr/{ATL03}/gt{b}{s}/heights/{v}/0" for b in (1, 2, 3) for s in "lr"
                for v in ("h_ph", "lat_ph")]  # fmt: skip
        futures = [pool.submit(http.get, k, timeout=60) for k in keys]
        wait_until(lambda: proxy.in_flight == 3 and admission.waiting == len(keys) - 3,
                   "three reads in flight and the rest queued")  # fmt: skip
        proxy.release.set()
        responses = [f.result() for f in futures]
        assert [r.status_code for r in responses] == [200] * len(keys)
        assert proxy.peak_in_flight == 3
    with h5py.File(http_corpus.local[ATL03]) as f:
        d = f["gt3r/heights/lat_ph"]
        _, raw = d.id.read_direct_chunk((0,))
        assert responses[-1].content == bytes(raw)


def test_caches_stay_within_their_byte_budget(http: httpx.Client, http_corpus: Corpus) -> None:
    budget = 64 * 1024  # the small granule's sidecar fits, its chunks (~70 KB) do not
    chunks = [(f"gt1l/heights/{v}", i) for v in ("h_ph", "lat_ph", "delta_time", "quality_ph")
              for i in range(5)]  # fmt: skip
    with gateway(http_corpus.dest, http_corpus.options, cache_bytes=budget) as (url, app), \
            h5py.File(http_corpus.local[SMALL]) as f:  # fmt: skip
        def want(name: str, i: int) -> bytes:
            return bytes(f[name].id.read_direct_chunk((i * f[name].chunks[0],))[1])

        for _ in range(2):
            for name, i in chunks:
                r = http.get(f"{url}/zarr/{SMALL}/{name}/{i}")
                assert r.status_code == 200
                assert r.content == want(name, i)
        stats = app.state.gateway.cache_stats()
        assert sum(s["current_bytes"] for s in stats.values()) <= budget
        for s in stats.values():
            assert s["current_bytes"] <= s["max_bytes"]
        assert stats["chunk"]["evictions"] > 0  # the chunks did not all fit: LRU evicted
        assert stats["sidecar"]["entries"] == 1  # parsed once, kept
        assert stats["sidecar"]["hits"] >= 2 * len(chunks) - 1
