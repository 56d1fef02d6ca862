"""The gateway over an object-store DEST (moto S3) whose record must first be loaded (an empty
record cache: here ``--record-cache off``, a private one) listens at once and loads the record
in a thread as it starts: ``/healthz`` says "warming" with the parts and rows loaded so far,
routes that need the record answer 503 with ``Retry-After`` (never 404), then everything is
served; a load that fails is "degraded" with its reason and tried again after a backoff.

The fill is held at a part by its progress hook (``DestIndex.fill.on_part``), not slowed by
sleeps: while it is held, nothing may wait for it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest

from h5sidecar.dest import FillProgress
from h5sidecar.gateway.app import create_app
from h5sidecar.settings import GatewaySettings, RecordSettings
from h5sidecar.workflows import index_many
from tests.gateway._http import running, wait_status
from tests.workflows.conftest import write_granule
from tests.workflows.test_record_cache import PARTS

#: The record cache off: the gateway fills a private one as it starts, every time.
OFF = RecordSettings(record_cache="")
QUALITY = "gt1l/heights/quality"


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


def test_the_gateway_warms_up_then_serves(two_runs: tuple[str, dict[str, Path]],
                                          s3_storage_options: dict[str, Any]) -> None:  # fmt: skip
    dest, local = two_runs
    app = create_app(GatewaySettings(), dest, storage_options=s3_storage_options,
                     record_settings=OFF)  # fmt: skip
    gw = app.state.gateway
    held, release = threading.Event(), threading.Event()

    def hold(progress: FillProgress) -> None:  # in the filling thread, after each part
        if progress.parts_done == 1:
            held.set()
            release.wait(60)

    gw.dest.fill.on_part = hold
    gw.warming.wait_seconds = 0.2  # a request waits this long before 503
    try:
        with running(app, lifespan="on") as url:
            # started as the server started, before any request
            assert held.wait(60), "the record was not loaded as the gateway started"
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
    finally:
        release.set()
        gw.close()


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

            s3.rm(damaged)
            wait_status(url, "ok")  # tried again after the backoff, without a restart
            assert gw.dest.fill.started != attempt
            _chunk_equals_h5py(url, "G0.h5", local["G0.h5"])
    finally:
        gw.close()
