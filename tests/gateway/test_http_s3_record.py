"""The gateway over an object-store DEST (moto S3) with a record in parts answers granule
lookups from the record cache (SQLite on this machine), as it does from a local record: no
listing of DEST and no tuple of every granule's source held; a granule outside the runs' roots
is allowed by a lookup, and one indexed after the gateway started is found on its first miss."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest

from h5sidecar.gateway._dest import DestIndex
from h5sidecar.gateway.core import MISS_REFRESH_SECONDS
from h5sidecar.workflows import index_many
from tests.gateway._http import gateway
from tests.gateway.test_http_record import all_pages
from tests.workflows.conftest import write_granule


def _chunk_equals_h5py(url: str, name: str, local: Path) -> None:
    r = httpx.get(f"{url}/zarr/{name}/gt1l/heights/quality/0", timeout=30)
    assert r.status_code == 200, r.text
    with h5py.File(local) as f:
        np.testing.assert_array_equal(np.frombuffer(r.content, "i1"),
                                      f["gt1l/heights/quality"][:1000])  # fmt: skip


def test_an_s3_dest_is_served_from_its_record_cache(
        tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
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

    # without a cache the DEST is listed and every source held, as before
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE", "")
    snap = DestIndex(dest, storage_options=opts).snapshot()
    assert snap.record is None and sorted(snap.sidecars) == ["G0.h5", "G1.h5", "G2.h5", "G3.h5"]
    assert f"s3://{s3_bucket}/elsewhere/G2.h5" in snap.sources
