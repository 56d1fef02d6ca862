"""Request budgets, counted at the S3 server: opening reads no HDF5 bytes, a selection reads
only its chunks."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs, write_refs
from tests._granules import read_h5, refs_for
from tests.faultproxy import FaultProxy

#: xarray reads data at open time for two things: the values of dimension coordinates (to build
#: indexes) and the first and last value of every CF time variable (to choose its dtype).
#: Without both, opening must not read a single byte of the granule.
NO_INDEXES = {"create_default_indexes": False}
NO_DATA_AT_OPEN = {"create_default_indexes": False, "decode_times": False}


@pytest.fixture
def on_s3(
    small_h5: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any], proxy: FaultProxy
) -> dict[str, Any]:
    """The small granule and its sidecar on S3; sources are read through the counting proxy."""
    url = f"s3://{s3_bucket}/granules/small.h5"
    s3.put(str(small_h5), url)
    refs = refs_for(url, storage_options=s3_storage_options)
    sidecar = write_refs(refs, f"{url}.parq", storage_options=s3_storage_options)
    proxy.clear()
    return {
        "refs": refs,
        "key": "/granules/small.h5",
        "store": lambda: SidecarStore(
            sidecar,
            storage_options=s3_storage_options,  # the sidecar itself: straight to the server
            remote_options={**s3_storage_options, "endpoint_url": proxy.url},
        ),
    }


def _source_gets(proxy: FaultProxy, key: str) -> list[tuple[int, int]]:
    """``(start, stop)`` of every GET of the granule seen at the server."""
    out = []
    for r in proxy.gets():
        assert r.path.split("?")[0].endswith(key), r  # nothing but the granule is fetched
        assert r.range is not None, r  # never the whole object
        a, b = r.range.removeprefix("bytes=").split("-")
        out.append((int(a), int(b) + 1))
    return out


def _chunk_spans(refs: GranuleRefs, path: str, chunks: list[int]) -> list[tuple[int, int]]:
    m = refs.arrays[path].manifest
    return [(int(m.offsets[i]), int(m.offsets[i] + m.lengths[i])) for i in chunks]


def test_opening_reads_no_hdf5_bytes(on_s3: dict[str, Any], proxy: FaultProxy) -> None:
    store = on_s3["store"]()
    ds = xr.open_dataset(
        store, engine="h5sidecar", group="gt1l/heights", chunks={}, **NO_DATA_AT_OPEN
    )
    tree = h5sidecar.open_datatree(store, **NO_DATA_AT_OPEN)
    assert set(ds.data_vars) >= {"h_ph", "quality_ph"} and len(list(tree.subtree)) > 3
    assert proxy.requests == []
    assert store.stats["requests"] == 0 and store.stats["bytes_fetched"] == 0


def test_default_indexes_read_only_the_coordinate(on_s3: dict[str, Any], proxy: FaultProxy) -> None:
    # by default xarray peeks at the first and last time value and loads the coordinate to
    # index it: the coordinate's chunks are read, nothing else (no HDF5 metadata, no data)
    store = on_s3["store"]()
    ds = xr.open_dataset(store, engine="h5sidecar", group="gt1l/heights", chunks={})
    refs = on_s3["refs"]
    coord = refs.arrays["gt1l/heights/delta_time"].manifest
    spans = _chunk_spans(refs, "gt1l/heights/delta_time", list(range(coord.n_chunks)))
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    gets = _source_gets(proxy, on_s3["key"])
    assert all(lo <= a and b <= hi for a, b in gets)
    # each byte of the coordinate fetched once: the GETs tile [lo, hi) without overlap
    tiles = sorted(gets)
    assert tiles[0][0] == lo and tiles[-1][1] == hi
    assert all(b == c for (_, b), (c, _) in itertools.pairwise(tiles))
    assert store.stats["cache_hits"] == 2  # the peeked first/last chunks are not re-read
    assert ds.indexes["delta_time"].size == 5000


def test_selection_fetches_only_its_chunks(
    on_s3: dict[str, Any], proxy: FaultProxy, small_h5: Path
) -> None:
    store = on_s3["store"]()
    ds = xr.open_dataset(
        store, engine="h5sidecar", group="gt1l/heights", chunks={}, **NO_DATA_AT_OPEN
    )
    values = ds["h_ph"][1000:2500].values  # source chunks 1 and 2 (chunks of 1000)
    np.testing.assert_array_equal(values, read_h5(small_h5, "gt1l/heights/h_ph")[1000:2500])
    wanted = _chunk_spans(on_s3["refs"], "gt1l/heights/h_ph", [1, 2])
    gets = _source_gets(proxy, on_s3["key"])
    # every byte fetched belongs to the two chunks or to the gap coalescing bridged
    lo, hi = min(a for a, _ in wanted), max(b for _, b in wanted)
    assert all(lo <= a and b <= hi for a, b in gets)
    assert 1 <= len(gets) <= 2 and len(gets) == store.stats["requests"]
    assert store.stats["bytes_used"] == sum(b - a for a, b in wanted)


def test_local_budget_whole_granule(
    atl03_h5: Path, atl03_refs: GranuleRefs, tmp_path: Path
) -> None:
    refs = atl03_refs
    store = SidecarStore(write_refs(refs, tmp_path / "a.h5.json", format="json"))
    h5sidecar.open_datatree(store, **NO_DATA_AT_OPEN)
    assert store.stats["requests"] == 0
    path = max(refs.arrays, key=lambda p: refs.arrays[p].manifest.n_stored)
    group, _, name = path.rpartition("/")
    ds = xr.open_dataset(store, engine="h5sidecar", group=group, chunks={}, **NO_DATA_AT_OPEN)
    np.testing.assert_array_equal(ds[name].values, read_h5(atl03_h5, path))
    m = refs.arrays[path].manifest
    assert m.n_stored > 2
    assert store.stats["bytes_used"] == m.stored_bytes  # each chunk read exactly once
    assert store.stats["requests"] < m.n_stored  # and coalesced
