"""Plain xarray (``engine="zarr"`` over fsspec ``reference://``, no h5sidecar reader) on
never-written chunks of our sidecars, against h5py and xarray + h5netcdf (issue 24, item 5).

A never-written chunk is a null row of a Parquet record file (absent key in JSON): plain readers
must read it as the fill value, as HDF5 does.  fsspec's default Parquet engine (fastparquet)
does; its pyarrow engine under pandas >= 3 takes the null for a NaN URL and fails -- whatever
the file holds, so nothing in our files can help -- but it must never return wrong values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
from fsspec.implementations.reference import LazyReferenceMapper

from h5sidecar.indexer import index_granule
from h5sidecar.references import write_refs
from tests._unwritten import KEPT_MISSING, unwritten_index, write_unwritten_granule


@pytest.fixture(scope="module")
def sidecars(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("plain-unwritten")
    granule = write_unwritten_granule(folder / "g.h5")
    refs = index_granule(str(granule))
    for path in KEPT_MISSING:
        assert refs.arrays[path].manifest.get(unwritten_index(path)) is None, path
    return granule, {
        "json": write_refs(refs, folder / "g.h5.json", format="json"),
        "parquet": write_refs(refs, folder / "g.h5.parq"),
    }


def _plain(fo: Any, **kwargs: Any) -> xr.Dataset:
    return xr.open_dataset(
        "reference://",
        engine="zarr",
        backend_kwargs={"storage_options": {"fo": fo, "remote_protocol": "file"}},
        **kwargs,
    )


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_plain_xarray_reads_unwritten_chunks_as_h5py(
    sidecars: tuple[Path, dict[str, str]], fmt: str
) -> None:
    if fmt == "parquet":
        pytest.importorskip("fastparquet")  # fsspec's default engine for Parquet references
    granule, paths = sidecars
    truth = xr.open_dataset(granule, engine="h5netcdf", phony_dims="access")
    with _plain(paths[fmt], mask_and_scale=False) as raw, _plain(paths[fmt]) as decoded, \
            truth, h5py.File(granule, "r") as f:
        assert set(raw.data_vars) == set(f)
        for name in f:
            want, got = f[name][()], raw[name].values
            if want.dtype.kind == "O":  # variable-length strings: h5py bytes, zarr StringDType
                want = np.array([b.decode() for b in want.ravel()]).reshape(want.shape)
                got = np.array(got.tolist())
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=f"{name} ({fmt}, raw)")
            # CF-decoded: the never-written chunk of the f8 variables masked as _FillValue
            np.testing.assert_array_equal(
                decoded[name].values, truth[name].values, err_msg=f"{name} ({fmt}, decoded)"
            )


def test_fsspec_pyarrow_engine_never_returns_wrong_values(
    sidecars: tuple[Path, dict[str, str]],
) -> None:
    granule, paths = sidecars
    with h5py.File(granule, "r") as f:
        for name in KEPT_MISSING:
            mapper = LazyReferenceMapper(paths["parquet"], engine="pyarrow")
            try:
                with _plain(mapper, mask_and_scale=False) as ds:
                    got = ds[name].values
            except TypeError:  # pandas >= 3: a missing chunk's NaN URL
                continue
            np.testing.assert_array_equal(got, f[name][()], err_msg=name)
