"""The S3 endpoints the read and index benchmarks run against (``--endpoint``).

* ``fast``: ``s3server.py`` serving the data folder, ``--latency-ms`` before each answer and no
  other cost (what the earlier figures used);
* ``costly``: the same server with a per-request cost: each request, after its latency,
  holds one of :data:`COSTLY_SLOTS` slots for :data:`COSTLY_COST_MS` (an object store that
  serves a client a few requests at a time: many small requests queue);
* ``moto``: moto's own S3 server (a second implementation, slow per request) behind
  ``s3server.py`` in proxy mode, which adds the same latency and keeps the same counters; the
  files a benchmark reads are uploaded to it with :meth:`Endpoint.publish`.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import _common as c
from benchmarks.s3server import start_server

ENDPOINTS = ("fast", "costly", "moto")
COSTLY_COST_MS = 10.0
COSTLY_SLOTS = 4


@dataclass
class Endpoint:
    """A running endpoint: its URL and how to make a local file under ``S3_ROOT`` visible."""

    kind: str
    url: str
    upload: Callable[[Path], None] | None = None
    published: set[Path] = field(default_factory=set)

    def publish(self, path: Path) -> None:
        """Make ``path`` (a file or folder under :data:`_common.S3_ROOT`) readable at its
        key; a no-op for the folder-serving endpoints."""
        if self.upload is not None:
            self.upload(path)

    def describe(self) -> str:
        if self.kind == "costly":
            return (f"costly (s3server.py, {COSTLY_COST_MS:g} ms per request on one of "
                    f"{COSTLY_SLOTS} slots)")
        return {"fast": "fast (s3server.py)",
                "moto": "moto (moto's server behind s3server.py's proxy)"}[self.kind]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _moto() -> Iterator[str]:
    """moto's S3 server in a child process on 127.0.0.1 (its CPU off the client's GIL)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        for _ in range(200):
            try:
                opener.open(url + "/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("moto's server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _uploader(moto_url: str) -> Callable[[Path], None]:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=moto_url, key="x", secret="x",
                           skip_instance_cache=True)
    # readers come anonymous (``anon=True``), as to the other endpoints: a public bucket
    fs.mkdir(c.BUCKET, acl="public-read")
    fs.call_s3("put_bucket_policy", Bucket=c.BUCKET, Policy=json.dumps({
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
            "Resource": [f"arn:aws:s3:::{c.BUCKET}", f"arn:aws:s3:::{c.BUCKET}/*"]}]}))

    def upload(path: Path) -> None:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            fs.put_file(str(f), c.s3_key(f))

    return upload


@contextmanager
def endpoint(kind: str, latency_ms: float) -> Iterator[Endpoint]:
    """Start the endpoint ``kind`` (one of :data:`ENDPOINTS`) with ``latency_ms``."""
    if kind == "moto":
        with _moto() as moto_url:
            url, stop = start_server(c.S3_ROOT, latency_ms, upstream=moto_url)
            try:
                yield Endpoint(kind, url, _uploader(moto_url))
            finally:
                stop()
        return
    cost = {"request_cost_ms": COSTLY_COST_MS, "max_concurrent": COSTLY_SLOTS} \
        if kind == "costly" else {}
    url, stop = start_server(c.S3_ROOT, latency_ms, **cost)  # type: ignore[arg-type]
    try:
        yield Endpoint(kind, url)
    finally:
        stop()
