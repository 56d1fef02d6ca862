"""CF attribute types survive JSON: packed data decodes to h5netcdf's dtype (issue 9.8)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.indexer import index_granule
from h5sidecar.references import write_parquet


@pytest.mark.parametrize(
    ("scale", "offset"),
    [
        (np.float64(0.5), np.float64(1.0)),  # float64 values that are also float32 values
        (np.float32(0.5), np.float32(1.0)),
        (np.float32(0.1), None),
        (np.float64(0.01), None),
    ],
)
def test_packed_dtype_is_h5netcdfs(tmp_path: Path, scale: np.floating, offset: object) -> None:
    path = tmp_path / "packed.h5"
    with h5py.File(path, "w") as f:
        v = f.create_dataset("v", data=np.arange(-3, 7, dtype="i2"))
        v.attrs["scale_factor"] = scale
        if offset is not None:
            v.attrs["add_offset"] = offset
        v.attrs["_FillValue"] = np.int16(-3)
    refs = index_granule(str(path))
    sidecar = write_parquet(refs, tmp_path / "packed.parq")
    want = xr.open_dataset(path, engine="h5netcdf", phony_dims="access")["v"]
    got = xr.open_dataset(sidecar, engine="h5sidecar")["v"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.values, want.values)
