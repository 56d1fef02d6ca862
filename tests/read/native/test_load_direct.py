"""``h5sidecar.load`` reads the variables that sit straight over the batch reader in one call
per reader (not through xarray's per-variable ``load_async`` chain): the result must be what
xarray's own ``load()`` gives, for whole and sliced variables, with and without CF decoding,
and every value must equal h5py's."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.read import SidecarStore
from h5sidecar.references import GranuleRefs

GROUP = "gt1l/heights"


@pytest.mark.parametrize("decode_cf", [True, False])
def test_load_equals_xarray_load(atl03_refs: GranuleRefs, decode_cf: bool) -> None:
    ours = h5sidecar.open_datatree(SidecarStore(atl03_refs), chunks=None, decode_cf=decode_cf)
    theirs = h5sidecar.open_datatree(SidecarStore(atl03_refs), chunks=None, decode_cf=decode_cf)
    h5sidecar.load(ours)
    theirs.load()
    xr.testing.assert_identical(ours, theirs)
    for node in ours.subtree:
        for name, v in node.variables.items():
            assert isinstance(v._data, np.ndarray | xr.core.indexing.PandasIndexingAdapter), name


def test_sliced_variables_and_shared_cache(atl03_refs: GranuleRefs, atl03_h5: Path) -> None:
    store = SidecarStore(atl03_refs)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None,
                         create_default_indexes=False, decode_cf=False)
    n = ds.sizes["delta_time"]
    part = ds.isel(delta_time=slice(n // 3, n // 3 + 1000, 2))  # a lazily indexed selection
    h5sidecar.load(part)
    with h5py.File(atl03_h5) as f:
        for name, v in part.variables.items():
            want = f[f"{GROUP}/{name}"][n // 3 : n // 3 + 1000 : 2]
            np.testing.assert_array_equal(v.values, want, err_msg=name)
    before = store.stats["requests"]
    h5sidecar.load(ds)
    twin = ds.copy()  # shares each variable's in-memory cache
    with h5py.File(atl03_h5) as f:
        for name, v in twin.variables.items():
            np.testing.assert_array_equal(v.values, f[f"{GROUP}/{name}"][()], err_msg=name)
    assert store.stats["requests"] - before <= 3  # one batch for the whole group


def test_load_mixes_dask_lazy_and_loaded_variables(atl03_refs: GranuleRefs,
                                                   atl03_h5: Path) -> None:
    """One ``load`` of a Dataset whose variables are Dask-chunked, lazy and already in memory
    computes the first, reads the second and keeps the third; all equal h5py's."""
    store = SidecarStore(atl03_refs)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None,
                         create_default_indexes=False, decode_cf=False)
    names = list(ds.data_vars)
    assert len(names) >= 3
    ds[names[0]] = ds[names[0]].chunk()  # Dask
    kept = ds[names[1]].values  # already in memory
    ds[names[1]] = ds[names[1]].copy(data=kept)
    assert ds[names[0]].chunks is not None and ds[names[2]].chunks is None
    h5sidecar.load(ds)
    assert ds[names[1]].variable._data is kept
    with h5py.File(atl03_h5, "r") as f:
        for name, v in ds.variables.items():
            assert isinstance(v._data, np.ndarray), name
            np.testing.assert_array_equal(v.values, f[f"{GROUP}/{name}"][()], err_msg=name)
