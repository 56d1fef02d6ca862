"""One granule reader under every reader of a granule: the xarray engine opens it directly (no
zarr store for arrays the batch reader decodes), and the zarr store, the fsspec filesystem and
``read_arrays`` wrap one, sharing its fetcher and batch reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

from h5sidecar.read import H5SidecarFileSystem, SidecarStore, read_arrays
from h5sidecar.read._granule_reader import GranuleReader
from tests._granules import read_h5

PATH = "gt1l/heights/h_ph"


def test_the_engine_reads_through_a_granule_reader_without_a_zarr_store(
    small_sidecars: dict[str, Path], small_h5: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[GranuleReader] = []
    real = GranuleReader.open

    def recorded(*args: Any, **kwargs: Any) -> GranuleReader:
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(GranuleReader, "open", recorded)
    ds = xr.open_dataset(small_sidecars["json"], engine="h5sidecar", group="gt1l/heights",
                         chunks=None)
    np.testing.assert_array_equal(ds["h_ph"].values, read_h5(small_h5, PATH))
    (reader,) = opened
    assert reader.zarr_stores == {}  # zarr was never asked for anything
    assert reader.fetcher.stats.snapshot()["requests"] > 0


def test_store_and_filesystem_wrap_one_reader(small_sidecars: dict[str, Path],
                                              small_h5: Path) -> None:
    reader = GranuleReader.open(small_sidecars["json"])
    store = SidecarStore.for_reader(reader)
    assert SidecarStore.for_reader(reader) is store
    assert store.reader is reader and store.fetcher is reader.fetcher
    assert store.native is reader.native and store.keyspace is reader.keys(2)
    want = read_h5(small_h5, PATH)
    np.testing.assert_array_equal(zarr.open_group(store, mode="r")[PATH][...], want)
    np.testing.assert_array_equal(read_arrays(store, [PATH])[PATH], want)
    assert store.stats["requests"] == reader.fetcher.stats.snapshot()["requests"]

    fs = H5SidecarFileSystem(small_sidecars["json"])
    assert fs.reader.refs is reader.refs  # parsed once per process
    with h5py.File(small_h5) as f:
        assert fs.cat_file(f"{PATH}/.zarray") == reader.keys(2).documents[f"{PATH}/.zarray"]
        assert f[PATH].shape == tuple(zarr.open_array(fs.get_mapper(PATH), mode="r").shape)
