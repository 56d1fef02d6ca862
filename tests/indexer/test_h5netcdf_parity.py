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


def _per_group(path: Path, tmp_path: Path, groups: list[str]) -> None:
    """Every group opened alone (``group=``) gives the same dims, shapes and values."""
    refs = index_granule(str(path))
    sidecar = write_json(refs, tmp_path / "refs.json")
    for group in groups:
        truth = xr.open_dataset(path, engine="h5netcdf", phony_dims="access", group=group or "/")
        ours = xr.open_dataset(
            "reference://",
            engine="zarr",
            zarr_format=2,
            group=group or None,
            backend_kwargs={"consolidated": True, "storage_options": {"fo": str(sidecar)}},
        )
        _assert_same(truth.load(), ours.load())


def test_unscaled_axes_are_named_as_h5netcdf_names_them(tmp_path: Path) -> None:
    """Phony names per group and length, numbered after the ancestors' (root first); an
    unscaled axis of the length of one of the group's dimension scales takes that scale's
    name, so a character array sharing it stays a character array."""
    path = tmp_path / "phony.h5"
    with h5py.File(path, "w") as f:
        f["b"] = np.zeros((2, 3, 2, 2))
        f["a"] = np.ones(7)
        g = f.create_group("g")
        x = g.create_dataset("x", data=np.arange(8.0))
        x.make_scale("x")
        g["temp"] = np.arange(8.0)
        g["temp"].dims[0].attach_scale(x)
        g["chars"] = np.array([list("abcdefgh")] * 3, "S1")  # (3, 8): axis 1 is "x"
        g["m"] = np.zeros((3, 3, 5))
        h = g.create_group("h")
        h["v"] = np.zeros((5, 2))
        f.create_group("k")["w"] = np.zeros(4)
    _per_group(path, tmp_path, ["", "g", "g/h", "k"])
    dims = {p: a.meta.dimension_names for p, a in index_granule(str(path)).arrays.items()}
    assert dims["a"] == ("phony_dim_0",)  # name order: "a" before "b"
    assert dims["b"] == ("phony_dim_1", "phony_dim_4", "phony_dim_2", "phony_dim_3")
    assert dims["g/chars"] == ("phony_dim_5", "x")
    assert dims["g/h/v"][0] == "phony_dim_8"  # after root's 5 and g's 3


def test_a_virtual_dataset_gets_the_names_of_its_extent(tmp_path: Path) -> None:
    """A VDS read through a file object has extent 0 for HDF5 until its sources are found:
    its phony names follow the extent h5py gives when it opens the file by path."""
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("d", data=np.arange(12.0).reshape(3, 4), chunks=(1, 4))
    path = tmp_path / "vds.h5"
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        unlimited = h5py.h5s.UNLIMITED
        spaces = []
        for _ in range(2):
            space = h5py.h5s.create_simple((0, 4), (unlimited, 4))
            space.select_hyperslab((0, 0), (unlimited, 1), (1, 1), (1, 4))
            spaces.append(space)
        dcpl.set_virtual(spaces[0], b"src.h5", b"d", spaces[1])
        extent = h5py.h5s.create_simple((0, 4), (unlimited, 4))
        h5py.h5d.create(f.id, b"v", h5py.h5t.IEEE_F64LE, extent, dcpl=dcpl)
        f["w"] = np.zeros(3)
    _per_group(path, tmp_path, [""])


def test_unscaled_axes_known_from_the_dimension_lists_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which arrays have no scale on any axis (h5netcdf gives those phony names) is read from
    the ``DIMENSION_LIST`` attributes already decoded from the bytes, not asked of HDF5 axis
    by axis; the names are those HDF5's answers give, with a scale on every axis, on one axis
    only (which h5netcdf refuses to open) and on none."""
    from h5sidecar.indexer.attrs._native import NativeAttrs

    path = tmp_path / "unscaled.h5"
    with h5py.File(path, "w", libver=("earliest", "latest")) as f:
        for group in (f, f.create_group("g")):
            x = group.create_dataset("x", data=np.arange(4.0))
            x.make_scale("x")
            group["half"] = np.zeros((4, 3))
            group["half"].dims[0].attach_scale(x)  # axis 1 without a scale
            group["none"] = np.zeros((3, 4))
            group["both"] = np.zeros((4, 4))
            group["both"].dims[0].attach_scale(x)
            group["both"].dims[1].attach_scale(x)
    asked: list[int] = []
    get_num_scales = h5py.h5ds.get_num_scales

    def spy(dsid: h5py.h5d.DatasetID, axis: int) -> int:
        asked.append(axis)
        return int(get_num_scales(dsid, axis))

    def names() -> dict[str, tuple[str, ...] | None]:
        refs = index_granule(str(path))
        return {p: a.meta.dimension_names for p, a in refs.arrays.items()}

    monkeypatch.setattr(h5py.h5ds, "get_num_scales", spy)
    native = names()
    assert asked == []
    monkeypatch.setattr(NativeAttrs, "dimension_list", lambda self, obj: None)
    assert names() == native  # every answer from HDF5
    assert len(asked) > 0
    assert native["none"] == ("phony_dim_0", "x") and native["g/half"] == ("x", "phony_dim_1")
