"""Shared fixtures: a real S3 server (moto, server mode) on 127.0.0.1, reached through s3fs.

Fixtures that start servers bind only to 127.0.0.1 on a free port.  moto copies the whole object
on every ranged GET, so tests keep the objects they upload small.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from tests.faultproxy import FaultProxy

# Hypothesis: CI draws the same examples every run ("ci", derandomized), so a failure is
# reproducible and never shows up by chance; `--hypothesis-profile=fuzz` draws new random ones
# (with `--hypothesis-seed=N` to replay a run).  Tests that set max_examples keep their own.
settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None)
settings.register_profile("fuzz", derandomize=False, max_examples=2000, deadline=None)
settings.load_profile("ci")

# no test may reach the instance metadata service (169.254.169.254) when it looks for credentials
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: An xdist group of at least this many tests is one of the long ones (the corpus conformance
#: files, the catalog's modules): see :func:`pytest_collection_modifyitems`.
BIG_GROUP = 40


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.kwargs.get("name", mark.args[0] if mark.args else "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest work first, so that a parallel run never waits at its end on one long test
    that started late: the big xdist groups, largest first (one worker runs each whole), then the
    tests marked ``slow``, then the other groups (a documentation page, a module sharing one S3 granule),
    then the rest, each in collection order.

    pytest-xdist keeps this order under ``--dist loadgroup --no-loadscope-reorder`` (the
    Makefile's): a work unit (a group, or a test of none) is sent when a worker is nearly idle,
    in the order of its first test.  Its default order, by the number of tests in a unit, sends
    the tests of no group in collection order after every group, so a two-minute test at the
    end of the collection started in the run's last minutes."""
    groups = [_group(item) for item in items]
    sizes: dict[str, int] = {}
    for g in groups:
        if g is not None:
            sizes[g] = sizes.get(g, 0) + 1

    def rank(pair: tuple[pytest.Item, str | None]) -> tuple[int, int]:
        item, g = pair
        if g is not None and sizes[g] >= BIG_GROUP:
            return 0, -sizes[g]
        if item.get_closest_marker("slow") is not None:
            return 1, 0
        return (2 if g is not None else 3), 0

    items[:] = [item for item, _ in sorted(zip(items, groups, strict=True), key=rank)]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def moto_seed(objects: dict[str, bytes]) -> None:
    """Put ``objects`` (``"bucket/key"`` -> bytes, buckets existing) straight into the store of
    the moto server this process runs (:func:`s3_endpoint`), as a PUT would leave them (size,
    ETag, date).  For the thousands of small objects a listing test needs: ~0.07 ms an object
    where a PUT over HTTP costs ~9 ms, and they are setup, not what is tested (every listing
    and read still goes over HTTP through s3fs)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for path, data in objects.items():
        bucket, key = path.split("/", 1)
        backend.put_object(bucket, key, data)


def moto_seed_tree(folder: Path, prefix: str) -> None:
    """Every file under ``folder`` put into moto's store as ``prefix/<its relative path>`` (see
    :func:`moto_seed`): a sidecar written locally, then published as it would be on S3, for the
    tests that read it (a kerchunk-layout sidecar is ~900 PUTs over HTTP, ~9 ms each)."""
    moto_seed({f"{prefix}/{p.relative_to(folder).as_posix()}": p.read_bytes()
               for p in sorted(folder.rglob("*")) if p.is_file()})


@pytest.fixture(scope="session", autouse=True)
def record_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder of object-store DESTs' record caches for this session (and the processes it
    starts): not the user's cache."""
    folder = tmp_path_factory.mktemp("record-cache")
    old = os.environ.get("H5SIDECAR_RECORD_CACHE")
    os.environ["H5SIDECAR_RECORD_CACHE"] = str(folder)
    try:
        yield folder
    finally:
        if old is None:
            os.environ.pop("H5SIDECAR_RECORD_CACHE", None)
        else:
            os.environ["H5SIDECAR_RECORD_CACHE"] = old


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server on 127.0.0.1 (one per test session / xdist worker)."""
    from moto.server import ThreadedMotoServer

    # one access-log line per request from the server's threads is noise in every failure report
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    old = {k: os.environ.get(k) for k in S3_CREDENTIALS}
    os.environ.update(S3_CREDENTIALS)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[FaultProxy]:
    """A recording (and fault-injecting) proxy in front of the S3 server: every request that
    reaches the server through it is recorded (``tests.faultproxy``)."""
    from tests.faultproxy import FaultProxy

    with FaultProxy(s3_endpoint) as p:
        yield p


@pytest.fixture
def s3_storage_options(s3_endpoint: str) -> dict[str, object]:
    """s3fs storage options pointing at the moto server (what users pass for a custom endpoint)."""
    return {
        "endpoint_url": s3_endpoint,
        "key": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "secret": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "token": S3_CREDENTIALS["AWS_SESSION_TOKEN"],
    }


@pytest.fixture
def s3(s3_storage_options: dict[str, object]):  # type: ignore[no-untyped-def]
    """A fresh s3fs filesystem (no instance cache) on the moto server."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_storage_options)  # type: ignore[arg-type]
    return fs


@pytest.fixture
def s3_bucket(s3) -> str:  # type: ignore[no-untyped-def]
    """A new, empty bucket name on the moto server."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    s3.mkdir(name)
    return name


def corpus_hdf5_names() -> list[str]:
    """Names of the corpus's HDF5 files in ``MANIFEST.json`` ([] when the corpus is absent)."""
    path = CORPUS / "MANIFEST.json"
    files = json.loads(path.read_text())["files"] if path.exists() else []
    return [e["name"] for e in files if e["hdf5"]]


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The shared conformance corpus (tests that need it skip with a message when absent)."""
    if not (CORPUS / "MANIFEST.json").exists():
        pytest.skip(f"conformance corpus not found at {CORPUS} (shared/corpus beside the repo)")
    return CORPUS
