"""Cached chunks never outlive their source (issue: "cached chunks outlive their source").

Read part (or all) of a variable, replace or delete the source, read the whole variable again:
every reader must raise ``StaleReferenceError`` (HTTP 409 for the gateway), never return the old
bytes from its chunk cache.  Replacements are same-size rewrites 1.4 s after indexing, the case a
float mtime compared with ``math.isclose`` missed, and they still decode: only the freshness
guard can tell.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

import h5sidecar
from h5sidecar.errors import StaleReferenceError
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import write_json
from h5sidecar.settings import ReadSettings
from tests.gateway._http import gateway

VAR = "values"  # uncompressed: a rewrite of its bytes still decodes, to other values
N, CHUNK = 4000, 1000


def write_source(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset(VAR, data=np.arange(N, dtype="i4"), chunks=(CHUNK,))
    return path


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, str, Any]:
    src = write_source(tmp_path / "g.h5")
    refs = h5sidecar.index_granule(str(src))
    sidecar = tmp_path / "g.h5.json"
    write_json(refs, sidecar)
    return src, str(sidecar), refs


def rewrite_same_size(src: Path, refs: Any) -> None:
    """Replace ``src`` by a same-size copy whose chunks hold other (decodable) values, with an
    mtime 1.4 s after the original's (within the old ``isclose`` tolerance)."""
    data = bytearray(src.read_bytes())
    man = refs.arrays[VAR].manifest
    for off, length in zip(man.offsets.ravel().tolist(), man.lengths.ravel().tolist(), strict=True):
        data[off : off + length] = (np.frombuffer(data[off : off + length], "<i4") + 7).tobytes()
    before = os.stat(src).st_mtime_ns
    tmp = src.with_suffix(".tmp")
    tmp.write_bytes(bytes(data))
    os.replace(tmp, src)
    os.utime(src, ns=(before + 1_400_000_000, before + 1_400_000_000))


def delete(src: Path, refs: Any) -> None:
    src.unlink()


CHANGES = {"rewrite": rewrite_same_size, "delete": delete}


def read_with(kind: str, sidecar: str, key: slice, settings: ReadSettings | None = None) -> Any:
    """One fresh open of ``sidecar`` with reader ``kind``, reading ``values[key]``."""
    if kind == "read_arrays":
        return h5sidecar.read_arrays(sidecar, {VAR: key}, settings=settings)[VAR]
    if kind == "open_dataset":
        ds = h5sidecar.open_dataset(sidecar, settings=settings)
        return ds[VAR][key].values
    if kind == "xarray_engine":
        ds = xr.open_dataset(sidecar, engine="h5sidecar", settings=settings)
        return ds[VAR][key].values
    if kind == "zarr_store":
        root = zarr.open_group(SidecarStore(sidecar, settings=settings), mode="r")
        return root[VAR][key]
    raise AssertionError(kind)


READERS = ("read_arrays", "open_dataset", "xarray_engine", "zarr_store")


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("kind", READERS)
@pytest.mark.parametrize("first", ["part", "whole"])
def test_new_open_after_change_is_stale(indexed, kind: str, change: str, first: str) -> None:
    src, sidecar, refs = indexed
    truth = np.arange(N, dtype="i4")
    key = slice(0, CHUNK) if first == "part" else slice(None)
    np.testing.assert_array_equal(read_with(kind, sidecar, key), truth[key])
    CHANGES[change](src, refs)
    # every chunk the first read fetched is in the process-wide chunk cache: a new open must
    # still check the source once before serving any of them
    with pytest.raises(StaleReferenceError, match="re-index"):
        read_with(kind, sidecar, slice(None))


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_same_store_revalidates_after_the_window(indexed, change: str) -> None:
    src, sidecar, refs = indexed
    settings = ReadSettings(revalidate_seconds=0.0)
    store = SidecarStore(sidecar, settings=settings)
    np.testing.assert_array_equal(h5sidecar.read_arrays(store, [VAR])[VAR], np.arange(N))
    CHANGES[change](src, refs)
    with pytest.raises(StaleReferenceError):
        h5sidecar.read_arrays(store, [VAR])
    with pytest.raises(StaleReferenceError):
        zarr.open_group(store, mode="r")[VAR][:]


def test_within_the_window_cached_chunks_are_served_without_a_check(indexed) -> None:
    """The documented window: within ``revalidate_seconds`` of a check, hits cost no request."""
    _, sidecar, _ = indexed
    store = SidecarStore(sidecar, settings=ReadSettings(revalidate_seconds=3600.0))
    h5sidecar.read_arrays(store, [VAR])
    before = store.stats
    np.testing.assert_array_equal(h5sidecar.read_arrays(store, [VAR])[VAR], np.arange(N))
    after = store.stats
    assert after["requests"] == before["requests"]
    assert after["revalidations"] == before["revalidations"] == 0  # the fetch confirmed it
    assert after["cache_hits"] > 0


def test_a_new_open_revalidates_once_then_serves_hits(indexed) -> None:
    _, sidecar, _ = indexed
    h5sidecar.read_arrays(sidecar, [VAR])  # fills the process-wide chunk cache
    store = SidecarStore(sidecar, settings=ReadSettings(revalidate_seconds=3600.0))
    for _ in range(3):
        np.testing.assert_array_equal(h5sidecar.read_arrays(store, [VAR])[VAR], np.arange(N))
    assert store.stats["requests"] == 0 and store.stats["revalidations"] == 1


def test_fetch_of_same_size_rewrite_is_stale_not_a_decode_error(indexed) -> None:
    src, sidecar, refs = indexed
    rewrite_same_size(src, refs)
    for kind in READERS:
        with pytest.raises(StaleReferenceError):
            read_with(kind, sidecar, slice(0, CHUNK))


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_gateway_cached_chunk_answers_409(indexed, change: str) -> None:
    import httpx

    src, sidecar, refs = indexed
    dest = Path(sidecar).parent
    read = ReadSettings(revalidate_seconds=0.0)
    with gateway(str(dest), read_settings=read, allow=(str(dest),)) as (url, _app), \
            httpx.Client(timeout=30) as http:
        chunk = f"{url}/zarr/g.h5/{VAR}/0"
        first = http.get(chunk)
        assert first.status_code == 200, first.text
        assert np.frombuffer(first.content, "<i4").tolist() == list(range(CHUNK))
        assert http.get(chunk).status_code == 200  # cached now
        CHANGES[change](src, refs)
        again = http.get(chunk)
        assert again.status_code == 409, again.text
        assert "re-index" in again.text
