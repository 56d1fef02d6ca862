"""Listings walked a page at a time: an S3 prefix (and a ``**`` glob) lists exactly what
s3fs's ``find``/``glob`` list, without holding every object, whatever their number."""

from __future__ import annotations

import contextlib
import json
import posixpath
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs

from h5sidecar.workflows import index_many
from h5sidecar.workflows.listing import _listing_walk, _staged_listing
from h5sidecar.workflows.listing._listing import identity_from_info, list_granules, stage_granules
from tests.conftest import free_port, moto_seed
from tests.workflows.conftest import assert_matches_h5py, observe_calls, write_granule


def _keys(bucket: str, n: int) -> dict[str, bytes]:
    """``n`` tiny objects under ``in/`` in a few folders, with names the listing leaves out."""
    out = {f"{bucket}/in/{i % 7}/{i // 7 % 3}/g{i:05d}.h5": b"x" * (i % 5 + 1) for i in range(n)}
    out[f"{bucket}/in/readme.txt"] = b"x"
    out[f"{bucket}/in/.hidden.h5"] = b"x"
    out[f"{bucket}/in/.tmp/x.h5"] = b"x"
    out[f"{bucket}/other/g.h5"] = b"x"
    return out


def _as_find_lists(fs: Any, found: dict[str, dict[str, Any]], root: str
                   ) -> list[tuple[str, str, Any]]:
    """``(name, url, identity)`` of what s3fs listed, named as the listing names them."""
    out = []
    for path, info in found.items():
        url = "s3://" + path
        out.append((path[len(root):].lstrip("/"), url, identity_from_info(url, info)))
    return sorted(out)


@pytest.fixture
def no_find(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths s3fs's whole-listing ``find`` is called with from now on."""
    yield observe_calls(monkeypatch, [(s3fs.S3FileSystem, "find")])


def test_s3_prefix_listed_page_by_page_as_find_lists_it(
    s3, s3_bucket: str, s3_storage_options, monkeypatch: pytest.MonkeyPatch,
    no_find: list[str],
) -> None:
    moto_seed(_keys(s3_bucket, 3_000))
    s3.invalidate_cache()
    expected = _as_find_lists(s3, {
        p: i for p, i in s3.find(f"{s3_bucket}/in", detail=True).items()
        if p.endswith(".h5") and "/." not in p}, f"{s3_bucket}/in")
    assert len(expected) == 3_000
    no_find.clear()
    pages: list[int] = []
    real_take = _listing_walk._iter_objects

    def paged(fs, prefix, start="", one_level=False):  # type: ignore[no-untyped-def]
        for info in real_take(fs, prefix, start, one_level):
            pages.append(1)
            yield info

    monkeypatch.setattr(_listing_walk, "_PAGE", 128)  # many calls into the listing's pages
    monkeypatch.setattr(_listing_walk, "_iter_objects", paged)
    granules = list_granules(f"s3://{s3_bucket}/in", storage_options=s3_storage_options)
    assert [(g.name, g.url, g.identity) for g in granules] == expected
    assert no_find == []  # not listed whole
    assert len(pages) == 3_000 + 3  # every object under in/ (those left out included)

    globbed = list_granules(f"s3://{s3_bucket}/in/**/g0001*.h5",
                            storage_options=s3_storage_options)
    assert no_find == []
    assert [g.url for g in globbed] == sorted(
        "s3://" + p for p in s3.glob(f"{s3_bucket}/in/**/g0001*.h5"))
    assert len(globbed) == 10


def test_s3_prefix_indexed_from_a_paged_listing(
    tmp_path: Path, s3, s3_bucket: str, s3_storage_options, no_find: list[str]
) -> None:
    files = [write_granule(tmp_path / f"g{i}.h5", seed=i, n=2_000) for i in range(3)]
    for i, f in enumerate(files):
        s3.put(str(f), f"{s3_bucket}/in/{'sub/' if i else ''}{f.name}")
    dest = tmp_path / "out"
    report = index_many(f"s3://{s3_bucket}/in", str(dest), format="json", executor="serial",
                        storage_options=s3_storage_options)
    assert report.counts["ok"] == 3 and no_find == []
    again = index_many(f"s3://{s3_bucket}/in", str(dest), format="json", executor="serial",
                       storage_options=s3_storage_options)
    assert again.counts == {"ok": 0, "failed": 0, "up_to_date": 3}
    for g in report.granules:
        local = tmp_path / posixpath.basename(g.url)
        assert_matches_h5py(g.sidecar, local, s3_storage_options, remote_protocol="s3")


#: A moto server in a process of its own (the session's runs in this process's threads, where
#: what it allocates per request would be traced too), seeded before it serves with the objects
#: of a JSON file (``"bucket/key"`` -> size; see :func:`tests.conftest.moto_seed`).
_MOTO_SEEDED = (
    "import json, sys, time\n"
    "from moto.core import DEFAULT_ACCOUNT_ID\n"
    "from moto.s3.models import s3_backends\n"
    "from moto.server import ThreadedMotoServer\n"
    "from tests.conftest import moto_seed\n"
    "sizes = json.loads(open(sys.argv[2]).read())\n"
    "for bucket in sorted({p.split('/', 1)[0] for p in sizes}):\n"
    "    s3_backends[DEFAULT_ACCOUNT_ID]['aws'].create_bucket(bucket, 'us-east-1')\n"
    "moto_seed({path: b'x' * size for path, size in sizes.items()})\n"
    "ThreadedMotoServer(ip_address='127.0.0.1', port=int(sys.argv[1]), verbose=False).start()\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)


@contextlib.contextmanager
def _moto_process(objects: dict[str, bytes], tmp: Path) -> Iterator[dict[str, object]]:
    """Storage options of a moto server in a process of its own on 127.0.0.1, holding
    ``objects``."""
    port = free_port()
    seed = tmp / "seed.json"
    seed.write_text(json.dumps({k: len(v) for k, v in objects.items()}))
    proc = subprocess.Popen([sys.executable, "-c", _MOTO_SEEDED, str(port), str(seed)],
                            cwd=Path(__file__).resolve().parents[3],  # imports tests.conftest
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing",
               "secret": "testing", "token": "testing"}
    finally:
        proc.terminate()
        proc.wait(10)


def _staging_peak(prefix: str, storage_options: dict[str, object]) -> int:
    tracemalloc.start()
    try:
        with stage_granules(prefix, storage_options=storage_options) as staged:
            assert len(staged)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_s3_listing_memory_does_not_grow_with_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the staging writes 10,000 rows at a time (~5 MB held at most): smaller here, so that
    # what is measured is the listing's pages
    monkeypatch.setattr(_staged_listing, "BATCH", 500)
    small, large = 2_000, 6_000  # both over one page (a single page is ~1.5 MB less)
    objects = {k.replace("/in/", "/small/"): v for k, v in _keys("bucket", small).items()}
    objects.update(_keys("bucket", large))
    with _moto_process(objects, tmp_path) as options:
        _staging_peak("s3://bucket/small", options)  # imports, connections
        peaks = [_staging_peak(f"s3://bucket/{p}", options) for p in ("small", "in")]
    # held whole (s3fs's find), 4,000 more objects cost ~1 KB each (~4 MB); a page at a time,
    # nothing grows but noise (~0.2 MB measured)
    assert peaks[1] - peaks[0] < 1_000_000, peaks
