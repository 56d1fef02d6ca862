"""What plain xarray shows from a sidecar equals what ``xr.open_dataset(file,
engine="h5netcdf", phony_dims="access")`` shows: dimensions, decoded shapes, attributes."""

from __future__ import annotations

import warnings
from pathlib import Path

import h5netcdf
import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.indexer import ENUMS_KEY, index_granule
from h5sidecar.references import write_json


def _both(path: Path, tmp_path: Path) -> tuple[xr.Dataset, xr.Dataset]:
    refs = index_granule(str(path))
    sidecar = write_json(refs, tmp_path / "refs.json")
    with warnings.catch_warnings():
        # both readers warn alike on a variable that repeats a dimension (as the file does)
        warnings.filterwarnings("ignore", "Duplicate dimension names", UserWarning)
        truth = xr.open_dataset(path, engine="h5netcdf", phony_dims="access").load()
        ours = xr.open_dataset(
            "reference://",
            engine="zarr",
            zarr_format=2,
            backend_kwargs={"consolidated": False, "storage_options": {"fo": str(sidecar)}},
        ).load()
    return truth, ours


def _assert_same(truth: xr.Dataset, ours: xr.Dataset) -> None:
    assert set(ours.variables) == set(truth.variables)
    for name, want in truth.variables.items():
        got = ours[name].variable
        assert got.dims == want.dims, name
        assert got.shape == want.shape and got.dtype == want.dtype, name
        assert dict(got.attrs) == dict(want.attrs), name
        np.testing.assert_array_equal(got.values, want.values, err_msg=name)


@pytest.mark.parametrize("other", ["float", "none"])
def test_char_arrays_that_repeat_a_dimension(tmp_path: Path, other: str) -> None:
    """``c(n, n)`` of ``|S1``: renaming one axis made xarray join it into strings (another
    shape) when ``n`` is also used by a non-character variable."""
    path = tmp_path / "chars.nc"
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"n": 3}
        c = f.create_variable("c", ("n", "n"), "S1")
        c[...] = np.array([list("abc"), list("def"), list("ghi")], "S1")
        if other == "float":
            f.create_variable("y", ("n",), "f8")[...] = np.arange(3.0)
    truth, ours = _both(path, tmp_path)
    assert truth["c"].dims == (("n", "n") if other == "float" else ("n",))
    _assert_same(truth, ours)


def test_enum_and_hidden_attributes_are_not_shown(tmp_path: Path) -> None:
    path = tmp_path / "enum.h5"
    dt = h5py.enum_dtype({"clear": 0, "cloudy": 1}, basetype="u1")
    with h5py.File(path, "w") as f:
        f.create_dataset("mask", data=np.array([0, 1, 1], "u1"), dtype=dt)
        f["mask"].attrs["long_name"] = "cloud mask"
        f.create_dataset("table", data=np.arange(3))
        f["table"].attrs["CLASS"] = b"TABLE"
        f["table"].attrs["NAME"] = b"t"
    truth, ours = _both(path, tmp_path)
    _assert_same(truth, ours)
    assert dict(ours["mask"].attrs) == {"long_name": "cloud mask"}
    assert index_granule(str(path)).extra[ENUMS_KEY] == {"mask": {"clear": 0, "cloudy": 1}}
