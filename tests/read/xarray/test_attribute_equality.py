"""Attributes read back equal to xarray + h5netcdf's, value and type (issue 24, item 3).

The truth is ``xr.open_dataset(file, engine="h5netcdf", phony_dims="access")`` per group.
h5sidecar's engine and ``open_datatree`` give the same values *and* types; plain xarray
``engine="zarr"`` over ``reference://`` gives them in JSON form, with the exemptions of
:data:`tests._attrs_equal.JSON_EXEMPTIONS` (JSON numbers have no width, JSON has no bytes, and
the sidecars keep JSON valid Unicode).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.indexer import index_granule
from h5sidecar.references import write_json, write_parquet
from tests._attrs_equal import attr_differences


def _netcdf_file(path: Path) -> None:
    """What netCDF-C writes (NC_CHAR, NC_STRING, every numeric type) through netCDF4-python."""
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("x", 3)
        v = ds.createVariable("v", "f4", ("x",))
        v[:] = [1, 2, 3]
        v.setncattr_string("string", "hello")
        v.setncattr_string("string_empty", "")
        v.setncattr_string("strings", ["a", "bc"])
        v.setncattr("char", "hello")
        v.setncattr("char_empty", "")
        v.setncattr("char_not_utf8", b"\x80\x7fAZ$&")  # netCDF-C's ref_nc_test_netcdf4_4_0.nc
        v.setncattr("char_utf8", "héllo".encode())
        for t in ("i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f4", "f8"):
            v.setncattr(f"n_{t}", np.array(3, t))
            v.setncattr(f"a_{t}", np.array([1, 2], t))
        v.setncattr("f4_inexact", np.float32(0.1))
        v.setncattr("one_f8", np.array([1.5]))
        ds.setncattr("g_char_not_utf8", b"\x80")
        ds.setncattr("g_char", "global")
        ds.setncattr("g_char_empty", "")
        sub = ds.createGroup("sub")
        sub.setncattr("s_char", "x")
        sub.setncattr("s_f4", np.float32(2.5))
        sub.setncattr("s_char_not_utf8", b"\xff")


def _hdf5_file(path: Path) -> None:
    """String and number attributes netCDF-C never writes, but h5py and other tools do."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("d", data=np.arange(3))
        a = d.attrs
        a["fixed_ascii"] = np.bytes_(b"abc")
        a.create("fixed_utf8", np.array("héllo".encode(), dtype=h5py.string_dtype("utf-8", 6)))
        a.create("fixed_utf8_invalid", np.array(b"\xffab", dtype=h5py.string_dtype("utf-8", 3)))
        a["fixed_empty"] = np.bytes_(b"")
        a["fixed_nul"] = np.bytes_(b"ab\x00cd")
        a["fixed_array"] = np.array([b"a", b"bc"], "S2")
        a["fixed_one"] = np.array([b"ab"], "S2")
        a["char_array"] = np.array([b"a", b"\x80", b""], "S1")
        a["vlen"] = "héllo"
        a.create("vlen_ascii", "abc", dtype=h5py.string_dtype("ascii"))
        a.create("vlen_invalid", np.array(b"\x80ab", dtype=h5py.string_dtype("utf-8")))
        a["vlen_empty"] = ""
        a["vlen_array"] = np.array(["a", "bc"], dtype=h5py.string_dtype())
        a["vlen_one"] = np.array(["ab"], dtype=h5py.string_dtype())
        a["null_char"] = h5py.Empty(np.dtype("S1"))  # netCDF-C 4.0's empty NC_CHAR
        a["null_f4"] = h5py.Empty(np.dtype("f4"))
        a["f4_scalar"] = np.float32(0.1)
        a["f4_one"] = np.array([0.1], "f4")
        a["f4_2d"] = np.arange(6, dtype="f4").reshape(2, 3)
        a["row"] = np.arange(3, dtype="i2").reshape(1, 3)  # h5netcdf drops the first axis
        a["big_endian"] = np.array([1, 2], ">f4")
        a["u8_big"] = np.array([2**64 - 1, 1], "u8")
        a["bool"] = np.bool_(True)
        a["complex"] = np.complex64(1 + 2j)
        a["complex_array"] = np.array([1 + 2j, 3j])
        a["nan"] = np.float32(np.nan)
        f.attrs["root_f4"] = np.float32(1.5)
        f.attrs["root_char"] = np.bytes_(b"\x80")


FILES = {"netcdf": _netcdf_file, "hdf5": _hdf5_file}


def _truth(path: Path, group: str) -> xr.Dataset:
    with warnings.catch_warnings():  # xarray warns about the bytes it cannot decode
        warnings.simplefilter("ignore", UnicodeWarning)
        return xr.open_dataset(path, engine="h5netcdf", phony_dims="access", group=group or None)


def _differences(got: Any, want: xr.Dataset, strength: Any) -> list[str]:
    out = [f"<group>: {d}" for d in attr_differences(got.attrs, want.attrs, strength)]
    for name in want.variables:
        out += [f"{name}: {d}" for d in attr_differences(got[name].attrs, want[name].attrs,
                                                          strength)]  # fmt: skip
    return out


@pytest.fixture(params=sorted(FILES))
def granule(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / f"{request.param}.nc"
    FILES[request.param](path)
    refs = index_granule(str(path))
    return {
        "path": path,
        "groups": sorted(refs.groups),
        "json": write_json(refs, tmp_path / "refs.json"),
        "parquet": write_parquet(refs, tmp_path / "refs.parq"),
    }


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_engine_and_datatree_give_h5netcdfs_values_and_types(granule: dict[str, Any],
                                                             fmt: str) -> None:  # fmt: skip
    tree = h5sidecar.open_datatree(granule[fmt])
    for group in granule["groups"]:
        want = _truth(granule["path"], group)
        got = xr.open_dataset(granule[fmt], engine="h5sidecar", group=group or None)
        assert not _differences(got, want, "exact"), group
        assert not _differences(tree[f"/{group}"].to_dataset(), want, "exact"), group


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_plain_zarr_gives_their_json_form(granule: dict[str, Any], fmt: str) -> None:
    for group in granule["groups"]:
        so = {"fo": str(granule[fmt]), "remote_protocol": "file"}
        got = xr.open_dataset("reference://", engine="zarr", group=group or None,
                              backend_kwargs={"storage_options": so})  # fmt: skip
        assert not _differences(got, _truth(granule["path"], group), "json"), group


def test_the_reported_attributes(tmp_path: Path) -> None:
    """netCDF-C's ``ref_nc_test_netcdf4_4_0.nc`` case: an empty (null dataspace) char attribute,
    a char attribute that is not UTF-8, a one-character global char attribute that is not."""
    path = tmp_path / "reported.nc"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("v", data=np.arange(2))
        d.attrs["empty"] = h5py.Empty(np.dtype("S1"))
        d.attrs["not_utf8"] = np.bytes_(b"\x80\x7fAZ$&")
        f.attrs["char"] = np.bytes_(b"\x80")
    sidecar = write_parquet(index_granule(str(path)), tmp_path / "reported.parq")
    ds = xr.open_dataset(sidecar, engine="h5sidecar")
    assert ds["v"].attrs["empty"] == ""
    assert ds["v"].attrs["not_utf8"] == "\udc80\x7fAZ$&"
    assert type(ds.attrs["char"]) is np.bytes_ and ds.attrs["char"] == b"\x80"
    so = {"fo": str(sidecar), "remote_protocol": "file"}
    plain = xr.open_dataset("reference://", engine="zarr", backend_kwargs={"storage_options": so})
    assert plain["v"].attrs["empty"] == ""  # JSON can hold this one
