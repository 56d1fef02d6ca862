"""The gateway over an object-store DEST (moto S3) with a record in parts answers granule
lookups from the record cache (SQLite on this machine), as it does from a local record: no
listing of DEST and no tuple of every granule's source held; a granule outside the runs' roots
is allowed by a lookup, and one indexed after the gateway started is found on its first miss."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np

from h5sidecar.gateway._dest import DestIndex
from h5sidecar.gateway.core import MISS_REFRESH_SECONDS
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows import index_many
from tests.gateway._http import gateway
from tests.gateway.test_http_record import all_pages
from tests.workflows.conftest import write_granule
from tests.workflows.test_record_cache import PARTS, _Reads, reads  # noqa: F401 (a fixture)


def _chunk_equals_h5py(url: str, name: str, local: Path) -> None:
    r = httpx.get(f"{url}/zarr/{name}/gt1l/heights/quality/0", timeout=30)
    assert r.status_code == 200, r.text
    with h5py.File(local) as f:
        np.testing.assert_array_equal(np.frombuffer(r.content, "i1"),
                                      f["gt1l/heights/quality"][:1000])  # fmt: skip


def test_an_s3_dest_is_served_from_its_record_cache(
        tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any],
        ) -> None:
    local = {f"G{i}.h5": write_granule(tmp_path / f"G{i}.h5", seed=i, n=1500) for i in range(4)}
    for name in ("G0.h5", "G1.h5"):
        s3.put(str(local[name]), f"{s3_bucket}/in/{name}")
    s3.put(str(local["G2.h5"]), f"{s3_bucket}/elsewhere/G2.h5")  # under no run's root
    dest = f"s3://{s3_bucket}/out"
    opts = s3_storage_options
    assert index_many(f"s3://{s3_bucket}/in", dest, storage_options=opts, executor="serial").ok
    assert index_many([f"s3://{s3_bucket}/elsewhere/G2.h5"], dest, storage_options=opts,
                      executor="serial").ok  # fmt: skip

    snap = DestIndex(dest, storage_options=opts).snapshot()
    assert snap.record is not None and snap.sidecars == {}  # not listed
    assert snap.sources == (f"s3://{s3_bucket}/in",)  # the roots, not every granule's source
    assert snap.relist_on_miss

    with gateway(dest, opts) as (url, _app):
        names, _ = all_pages(httpx.Client(timeout=30), f"{url}/api/granules?limit=2")
        assert names == ["G0.h5", "G1.h5", "G2.h5"]
        for name in names:  # G2.h5's source is allowed by its row in the cache
            _chunk_equals_h5py(url, name, local[name])
        r = httpx.get(f"{url}/zarr/G3.h5/.zgroup", timeout=30)
        assert r.status_code == 404
        missed = time.monotonic()
        # indexed while the gateway runs: its first request refreshes the cache
        s3.put(str(local["G3.h5"]), f"{s3_bucket}/late/G3.h5")
        assert index_many([f"s3://{s3_bucket}/late/G3.h5"], dest, storage_options=opts,
                          executor="serial").ok  # fmt: skip
        # a miss refreshes the cache at most every MISS_REFRESH_SECONDS (the 404 above did)
        time.sleep(max(0.0, missed + MISS_REFRESH_SECONDS + 0.1 - time.monotonic()))
        _chunk_equals_h5py(url, "G3.h5", local["G3.h5"])
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200



def test_with_the_cache_off_the_gateway_keeps_a_private_one(
        tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any],
        reads: _Reads) -> None:  # noqa: F811 (the fixture imported above)
    """``--record-cache off``: the gateway still looks sources up in SQLite (a cache of its
    own, removed when it stops), never listing DEST or holding every source; a refresh reads
    only the parts written since."""
    local = {f"G{i}.h5": write_granule(tmp_path / f"G{i}.h5", seed=i, n=1500) for i in range(4)}
    for name in ("G0.h5", "G1.h5"):
        s3.put(str(local[name]), f"{s3_bucket}/in/{name}")
    s3.put(str(local["G2.h5"]), f"{s3_bucket}/elsewhere/G2.h5")  # under no run's root
    dest, opts = f"s3://{s3_bucket}/out", s3_storage_options
    assert index_many(f"s3://{s3_bucket}/in", dest, storage_options=opts, executor="serial").ok
    assert index_many([f"s3://{s3_bucket}/elsewhere/G2.h5"], dest, storage_options=opts,
                      executor="serial").ok  # fmt: skip
    # a sidecar of a source DEST's record does not hold, in another DEST
    assert index_many([f"s3://{s3_bucket}/elsewhere/G2.h5"], f"s3://{s3_bucket}/stray",
                      storage_options=opts, executor="serial").ok  # fmt: skip
    s3.put(str(local["G3.h5"]), f"{s3_bucket}/late/G3.h5")
    off = RecordSettings(record_cache="")

    with gateway(dest, opts, record_settings=off) as (url, app):
        index = app.state.gateway.dest
        snap = index.snapshot()
        assert snap.record is not None and snap.sidecars == {}  # not listed
        assert snap.sources == (f"s3://{s3_bucket}/in",)  # the roots, not every source
        private = index._private
        assert private is not None and os.path.isdir(private)
        names, _ = all_pages(httpx.Client(timeout=30), f"{url}/api/granules?limit=2")
        assert names == ["G0.h5", "G1.h5", "G2.h5"]
        for name in names:  # allowed: G2.h5's source by its row in the private cache
            _chunk_equals_h5py(url, name, local[name])
        # refused: G1.h5's sidecar replaced by one reading a source the record does not hold
        s3.rm(f"{s3_bucket}/out/G1.h5.parq", recursive=True)
        s3.put(str(_fetched(s3, f"{s3_bucket}/stray/G2.h5.parq", tmp_path)),
               f"{s3_bucket}/out/G1.h5.parq", recursive=True)  # fmt: skip
        app.state.gateway._entries.clear()  # as after the revalidation interval
        r = httpx.get(f"{url}/zarr/G1.h5/gt1l/heights/quality/0", timeout=30)
        assert r.status_code == 403 and r.json()["error"] == "forbidden_source", r.text
        assert httpx.get(f"{url}/zarr/G3.h5/.zgroup", timeout=30).status_code == 404
        missed = time.monotonic()
        # added later: found on a miss, the refresh reading only the part written since
        assert index_many([f"s3://{s3_bucket}/late/G3.h5"], dest, storage_options=opts,
                          executor="serial").ok  # fmt: skip
        with contextlib.closing(sqlite3.connect(snap.record.path)) as db:
            new = _part_names(s3, s3_bucket) - {n for (n,) in db.execute("SELECT name FROM parts")}
        time.sleep(max(0.0, missed + MISS_REFRESH_SECONDS + 0.1 - time.monotonic()))
        reads.clear()
        _chunk_equals_h5py(url, "G3.h5", local["G3.h5"])
        assert new and reads.parts() == new
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
    assert not os.path.exists(private)  # removed when the gateway stops

    # a cache folder that cannot be made (under a file): a private cache too, not a listing
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    index = DestIndex(dest, storage_options=opts,
                      record_settings=RecordSettings(str(blocker / "records")))
    snap = index.snapshot()
    assert snap.record is not None and snap.sources == (f"s3://{s3_bucket}/in",)
    assert index._private is not None and snap.record.locate(["G3.h5"]) is not None
    index.close()


def _fetched(s3: Any, path: str, tmp_path: Path) -> Path:
    out = tmp_path / "fetched" / path.rsplit("/", 1)[-1]
    s3.get(path, str(out), recursive=True)
    return out


def _part_names(s3: Any, bucket: str) -> set[str]:
    s3.invalidate_cache()
    return {p.rsplit("/", 1)[-1] for p in s3.ls(f"{bucket}/out/{PARTS}")}
