"""Helpers of the HTTP gateway tests: granules on the moto S3 server, DEST folders indexed by
the real batch workflow, and the gateway running under uvicorn on a free port of 127.0.0.1.

Fixtures are defined here and imported by the ``test_http_*`` modules (pytest collects fixtures
from a module's namespace).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.settings import GatewaySettings, ReadSettings, RecordSettings
from tests._granules import write_small_granule
from tests.conftest import free_port

#: Photons of the ATL03-like sample: strong beams get two 10,000-row chunks, weak beams one.
PHOTONS = 60_000
ATL03 = "ATL03_20190329130645_00010301_006_01.h5"
SMALL = "small.h5"


@dataclass(frozen=True)
class Corpus:
    """Sample granules on S3 and the DEST folders the batch workflow indexed them into."""

    endpoint: str
    bucket: str
    local: Mapping[str, Path]  # granule name -> local copy (what h5py reads)
    dest: str  # local folder, JSON sidecars of every granule
    dest_s3: str  # s3:// prefix, Parquet sidecar of the small granule
    options: Mapping[str, Any]  # storage options of the moto server (endpoint only)

    def source_url(self, name: str) -> str:
        return f"s3://{self.bucket}/src/{name}"


#: Corpora built in this process, by S3 endpoint (see ``http_corpus``).
_CORPORA: dict[str, Corpus] = {}


@pytest.fixture(scope="session")
def http_corpus(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Granules uploaded to moto once per session and indexed with ``index_many``."""
    # Test modules import this fixture, so pytest registers one copy per module: build once.
    corpus = _CORPORA.get(s3_endpoint)
    if corpus is None:
        corpus = _CORPORA[s3_endpoint] = _build_corpus(s3_endpoint, tmp_path_factory)
    return corpus


def _build_corpus(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    import s3fs

    from h5sidecar.sample import write_atl03_like
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("gateway")
    (root / "src").mkdir()
    local = {
        ATL03: write_atl03_like(root / "src" / ATL03, photons=PHOTONS, seed=3),
        SMALL: write_small_granule(root / "src" / SMALL),
    }
    options = {"endpoint_url": s3_endpoint}
    bucket = f"gw-{uuid.uuid4().hex[:10]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.mkdir(bucket)
    for name, path in local.items():
        fs.put_file(str(path), f"{bucket}/src/{name}")
    dest = root / "dest"
    report = index_many(f"s3://{bucket}/src", str(dest), format="json", executor="serial",
                        storage_options=options)  # fmt: skip
    assert report.ok, report.to_dict()
    dest_s3 = f"s3://{bucket}/dest"
    report = index_many(f"s3://{bucket}/src/{SMALL}", dest_s3, format="parquet",
                        executor="serial", storage_options=options)  # fmt: skip
    assert report.ok, report.to_dict()
    return Corpus(s3_endpoint, bucket, local, str(dest), dest_s3, options)


@contextmanager
def running(app: Any, port: int | None = None, *, lifespan: str = "off") -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread on ``port`` (a free one by default) of
    127.0.0.1; yield its URL.  ``lifespan="on"``: the app's startup runs as under ``serve``
    (the gateway starts loading DEST before the first request)."""
    import uvicorn

    port = free_port() if port is None else port
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan=lifespan, access_log=False)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextmanager
def gateway(dest: str, options: Mapping[str, Any] | None = None, *,
            read_settings: ReadSettings | None = None, cubes: Any = None,
            record_settings: RecordSettings | None = None,
            **settings: Any) -> Iterator[tuple[str, Any]]:  # fmt: skip
    """``create_app`` over ``dest`` (and ``cubes``), running: yields ``(base URL, app)``;
    closed at the end as ``serve`` closes it."""
    from h5sidecar.gateway.app import create_app

    app = create_app(GatewaySettings(**settings), dest, storage_options=options,
                     read_settings=read_settings, cubes=cubes,
                     record_settings=record_settings)  # fmt: skip
    try:
        with running(app) as url:
            yield url, app
    finally:
        app.state.gateway.close()


@pytest.fixture(scope="session")
def http() -> Iterator[Any]:
    """One HTTP client for the session (a client per request costs ~50 ms of TLS setup)."""
    import httpx

    with httpx.Client(timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def served(http_corpus: Corpus) -> Iterator[tuple[str, Any]]:
    """The gateway over the local JSON DEST (default settings, CORS '*')."""
    with gateway(http_corpus.dest, http_corpus.options) as running_app:
        yield running_app


def settled(app: Any, timeout: float = 10.0) -> Any:
    """The app's metrics once no request is in flight.

    The gateway records a request's metrics after its last byte is sent, so a client may see
    the answer a moment before the counters move; wait for them to settle.
    """
    metrics = app.state.gateway.metrics
    deadline = time.monotonic() + timeout
    while metrics.value("h5sidecar_http_requests_in_flight") > 0:
        assert time.monotonic() < deadline, "requests still in flight"
        time.sleep(0.002)
    return metrics


def raw_get(url: str, path: bytes, headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
    """Send ``GET <path>`` exactly as given (no client-side normalisation); status and body."""
    host, _, port = url.removeprefix("http://").partition(":")
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n" + extra
                     + b"Connection: close\r\n\r\n")  # fmt: skip
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body



def wait_healthy(proc: Any, url: str, log: Path, timeout: float = 60.0) -> None:
    """Wait until the ``h5sidecar serve`` process ``proc`` answers ``/healthz`` at ``url`` with
    "ok" (not "warming": DEST loaded); its output, in ``log``, is the failure message when it
    exits or never comes up."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            r = httpx.get(f"{url}/healthz")
            if r.status_code == 200 and r.json()["status"] == "ok":
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.1)


def wait_status(url: str, wanted: str = "ok", timeout: float = 60.0) -> Any:
    """``/healthz`` of the gateway at ``url`` once its status is ``wanted`` (the gateway loads
    DEST in a thread as it starts: "warming" until then)."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(f"{url}/healthz", timeout=30)
        if r.json()["status"] == wanted:
            return r
        assert time.monotonic() < deadline, r.json()
        time.sleep(0.05)
