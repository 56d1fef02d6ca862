"""The gateway over an object-store DEST (moto S3) whose record must first be loaded (an empty
record cache: here ``--record-cache off``, a private one) listens at once and loads the record
in a thread as it starts: ``/healthz`` says "warming" with the parts and rows loaded so far,
routes that need the record answer 503 with ``Retry-After`` (never 404), then everything is
served; a load that fails is "degraded" with its reason and tried again after a backoff.

``/readyz`` (readiness) is 503 until everything is served, and a browser asking for the landing
page meanwhile gets a page that reloads itself rather than a JSON error.

The fill is held at a part by its progress hook (``DestIndex.fill.on_part``), not slowed by
sleeps: while it is held, nothing may wait for it."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest

from h5sidecar.dest import FillProgress
from h5sidecar.gateway._landing import render_waiting
from h5sidecar.gateway.app import create_app
from h5sidecar.settings import GatewaySettings, RecordSettings
from h5sidecar.workflows import index_many
from tests.gateway._http import running, wait_status
from tests.workflows.conftest import write_granule
from tests.workflows.test_record_cache import PARTS

#: The record cache off: the gateway fills a private one as it starts, every time.
OFF = RecordSettings(record_cache="")
QUALITY = "gt1l/heights/quality"
#: What a browser sends for a page.
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def _chunk_equals_h5py(url: str, name: str, local: Path) -> None:
    r = httpx.get(f"{url}/zarr/{name}/{QUALITY}/0", timeout=30)
    assert r.status_code == 200, r.text
    with h5py.File(local) as f:
        np.testing.assert_array_equal(np.frombuffer(r.content, "i1"), f[QUALITY][:1000])


@pytest.fixture
def two_runs(tmp_path: Path, s3: Any, s3_bucket: str,
             s3_storage_options: dict[str, Any]) -> tuple[str, dict[str, Path]]:  # fmt: skip
    """DEST on S3 recorded by two runs (two parts): G0, G1 under one root, G2 elsewhere."""
    local = {f"G{i}.h5": write_granule(tmp_path / f"G{i}.h5", seed=i, n=1500) for i in range(3)}
    for name in ("G0.h5", "G1.h5"):
        s3.put(str(local[name]), f"{s3_bucket}/in/{name}")
    s3.put(str(local["G2.h5"]), f"{s3_bucket}/elsewhere/G2.h5")
    dest, opts = f"s3://{s3_bucket}/out", s3_storage_options
    assert index_many(f"s3://{s3_bucket}/in", dest, storage_options=opts, executor="serial").ok
    assert index_many([f"s3://{s3_bucket}/elsewhere/G2.h5"], dest, storage_options=opts,
                      executor="serial").ok  # fmt: skip
    return dest, local


@contextmanager
def held(dest: str, options: dict[str, Any]) -> Iterator[tuple[str, Any, threading.Event]]:
    """The gateway over ``dest``, running, its record's fill held after its first part (of
    two) until the yielded event is set: ``(URL, gateway, release)``."""
    app = create_app(GatewaySettings(), dest, storage_options=options, record_settings=OFF)
    gw = app.state.gateway
    reached, release = threading.Event(), threading.Event()

    def hold(progress: FillProgress) -> None:  # in the filling thread, after each part
        if progress.parts_done == 1:
            reached.set()
            release.wait(60)

    gw.dest.fill.on_part = hold
    gw.warming.wait_seconds = 0.2  # a request waits this long before 503
    try:
        with running(app, lifespan="on") as url:
            # started as the server started, before any request
            assert reached.wait(60), "the record was not loaded as the gateway started"
            yield url, gw, release
    finally:
        release.set()
        gw.close()


def _waiting_message(page: str) -> str:
    found = re.search(r"<p class=error id=waiting>(.*?)</p>", page)
    assert found, page
    return html.unescape(found.group(1))


def _timeless(message: str) -> str:
    return re.sub(r"for \d+ s", "for S s", message)  # the seconds go on between two requests


def test_the_gateway_warms_up_then_serves(two_runs: tuple[str, dict[str, Path]],
                                          s3_storage_options: dict[str, Any]) -> None:  # fmt: skip
    dest, local = two_runs
    with held(dest, s3_storage_options) as (url, _, release):
        r = httpx.get(f"{url}/healthz", timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "warming", body
        assert body["parts"] == 2 and body["parts_done"] == 1 and body["rows"] >= 1, body
        assert body["since"] and body["seconds"] >= 0

        # every route needing the record: 503 + Retry-After at once, never 404; the fill
        # is held, so a request waiting for it would time out (10 s) instead
        paths = [f"/zarr/G0.h5/{QUALITY}/0", "/zarr/G0.h5/.zgroup", "/zarr3/G2.h5/zarr.json",
                 "/zarr/NOPE.h5/.zgroup", "/api/granules", "/api/granules/G0.h5", "/",
                 "/quicklook.png?granule=G0.h5&variable=gt1l/heights/h_ph"]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: httpx.get(url + p, timeout=10), paths * 2))
        for path, r in zip(paths * 2, answers, strict=True):
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert int(r.headers["Retry-After"]) >= 1, path
            assert r.json()["error"] == "warming", r.text
            assert "loading the record" in r.json()["message"]
            assert "1 of 2 parts" in r.json()["message"], r.text
        # the event loop answers meanwhile
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200
        assert httpx.get(f"{url}/healthz", timeout=10).json()["status"] == "warming"

        release.set()
        assert wait_status(url, "ok").status_code == 200
        for name in ("G0.h5", "G1.h5", "G2.h5"):  # G2.h5: allowed by its recorded row
            _chunk_equals_h5py(url, name, local[name])
        assert httpx.get(f"{url}/api/granules", timeout=30).json()["granules"] == [
            "G0.h5", "G1.h5", "G2.h5"]
        r = httpx.get(f"{url}/zarr/NOPE.h5/.zgroup", timeout=30)
        assert r.status_code == 404, r.text  # known not to exist, now


def test_readyz_and_the_landing_page_while_warming(two_runs: tuple[str, dict[str, Path]],
                                                   s3_storage_options: dict[str, Any],
                                                   ) -> None:  # fmt: skip
    dest, local = two_runs
    with held(dest, s3_storage_options) as (url, _, release):
        # readiness is 503 (a probe reads only the status), liveness stays 200: same body
        ready, live = httpx.get(f"{url}/readyz", timeout=10), httpx.get(f"{url}/healthz", timeout=10)
        assert ready.status_code == 503 and ready.headers["Retry-After"] == "5", ready.text
        assert live.status_code == 200 and "Retry-After" not in live.headers, live.text
        for r in (ready, live):
            assert r.json()["status"] == "warming" and r.json()["parts_done"] == 1, r.text
            assert r.headers["Cache-Control"] == "no-store"
        assert ready.json().keys() == live.json().keys()

        for path in ("/", "/?granule=G0.h5&variable=gt1l/heights/h_ph"):  # a granule's page too
            page = httpx.get(url + path, headers=BROWSER, timeout=10)
            assert page.status_code == 503 and page.headers["Retry-After"] == "5", page.text
            assert page.headers["Content-Type"].startswith("text/html")
            assert '<meta http-equiv="refresh" content="5">' in page.text
            assert '<link rel=stylesheet href="/static/landing.css">' in page.text
            message = _waiting_message(page.text)
            assert "loading the record" in message and "1 of 2 parts" in message, message
            for accept in ("application/json", "*/*", "text/html;q=0"):  # JSON as before
                r = httpx.get(url + path, headers={"Accept": accept}, timeout=10)
                assert r.status_code == 503 and r.headers["Retry-After"] == "5", r.text
                assert r.json()["error"] == "warming", r.text
                assert _timeless(r.json()["message"]) == _timeless(message)

        release.set()
        wait_status(url, "ok")
        r = httpx.get(f"{url}/readyz", timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        assert "Retry-After" not in r.headers
        page = httpx.get(f"{url}/?granule=G0.h5", headers=BROWSER, timeout=30)
        assert page.status_code == 200 and "http-equiv" not in page.text, page.text
        assert 'data-granule="G0.h5"' in page.text
        _chunk_equals_h5py(url, "G0.h5", local["G0.h5"])


def test_the_waiting_page_escapes_its_message() -> None:
    page = render_waiting('DEST s3://b/<script>alert("x")</script> & co', 7)
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)" in page
    assert _waiting_message(page) == 'DEST s3://b/<script>alert("x")</script> & co'
    assert '<meta http-equiv="refresh" content="7">' in page


def test_a_failed_load_is_degraded_then_retried(two_runs: tuple[str, dict[str, Path]],
                                                s3: Any, s3_storage_options: dict[str, Any],
                                                ) -> None:  # fmt: skip
    dest, local = two_runs
    damaged = f"{dest.removeprefix('s3://')}/{PARTS}/zzzz-damaged.parquet"
    s3.pipe(damaged, b"not a Parquet file")
    app = create_app(GatewaySettings(), dest, storage_options=s3_storage_options,
                     record_settings=OFF)  # fmt: skip
    gw = app.state.gateway
    gw.warming.wait_seconds = 0.2
    gw.warming.first_backoff = 4.0  # the damaged part is removed meanwhile
    try:
        with running(app, lifespan="on") as url:
            r = wait_status(url, "degraded")
            body = r.json()
            assert r.status_code == 503, body
            assert "zzzz-damaged.parquet" in body["reason"], body
            assert 1 <= body["retry_after"] <= 4, body
            attempt = gw.dest.fill.started
            for path in (f"/zarr/G0.h5/{QUALITY}/0", "/api/granules", "/zarr/NOPE.h5/.zgroup"):
                r = httpx.get(url + path, timeout=10)
                assert r.status_code == 503, r.text
                assert r.json()["error"] == "record_unavailable", r.text
                assert "zzzz-damaged.parquet" in r.json()["message"], r.text
                assert 1 <= int(r.headers["Retry-After"]) <= 4
            assert gw.dest.fill.started == attempt, "a request retried the load before its time"
            r = httpx.get(f"{url}/readyz", timeout=10)
            assert r.status_code == 503 and r.json()["status"] == "degraded", r.text
            assert "zzzz-damaged.parquet" in r.json()["reason"], r.text
            assert r.headers["Retry-After"] == str(r.json()["retry_after"]), r.headers
            page = httpx.get(f"{url}/", headers=BROWSER, timeout=10)
            assert page.status_code == 503, page.text
            assert "zzzz-damaged.parquet" in _waiting_message(page.text)
            refresh = page.headers["Retry-After"]
            assert f'<meta http-equiv="refresh" content="{refresh}">' in page.text

            s3.rm(damaged)
            wait_status(url, "ok")  # tried again after the backoff, without a restart
            assert gw.dest.fill.started != attempt
            assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200
            _chunk_equals_h5py(url, "G0.h5", local["G0.h5"])
    finally:
        gw.close()
