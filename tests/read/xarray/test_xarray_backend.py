"""The xarray engine: CF decoding identical to h5netcdf, engine detection, Dask chunks, DataTree."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.read.xarray.backend import H5SidecarBackend, aligned_chunks, cf_attributes
from h5sidecar.references import ArrayMeta, GranuleRefs, to_kerchunk, write_refs
from tests._granules import read_h5, refs_for


@pytest.fixture(scope="module")
def cf_sidecars(cf_nc: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    refs = refs_for(cf_nc)
    d = tmp_path_factory.mktemp("cf_sidecars")
    return {
        "json": write_refs(refs, d / "cf.nc.json", format="json"),
        "parquet": write_refs(refs, d / "cf.nc.parq", format="parquet"),
    }


@pytest.mark.parametrize("fmt", ["json", "parquet"])
@pytest.mark.parametrize(
    "decoding",
    [{}, {"mask_and_scale": False}, {"decode_times": False}, {"decode_coords": False}],
    ids=["default", "no-mask-scale", "no-times", "no-coords"],
)
def test_cf_decoding_identical_to_h5netcdf(
    fmt: str, decoding: dict[str, bool], cf_sidecars: dict[str, str], cf_nc: Path
) -> None:
    ours = xr.open_dataset(cf_sidecars[fmt], engine="h5sidecar", **decoding)
    truth = xr.open_dataset(cf_nc, engine="h5netcdf", **decoding)
    xr.testing.assert_identical(ours, truth)
    # the packed int16 variable decodes to float32 because its scale_factor is float32
    if not decoding:
        assert ours["tas"].dtype == truth["tas"].dtype == np.float32


def test_dask_chunks_align_to_source_chunks(cf_sidecars: dict[str, str], cf_nc: Path) -> None:
    ds = h5sidecar.open_dataset(cf_sidecars["parquet"], chunk_bytes=300_000)
    source = read_h5(cf_nc, "tas").shape, (10, 45, 90)  # chunks of tas in the file
    for dim, sizes in zip(ds["tas"].dims, ds["tas"].chunks, strict=True):
        src = source[1][ds["tas"].dims.index(dim)]
        assert all(s % src == 0 for s in sizes[:-1]), (dim, sizes)  # whole multiples
    assert ds["tas"].data.npartitions < 3 * 2 * 2  # fewer tasks than source chunks
    exact = h5sidecar.open_dataset(cf_sidecars["parquet"], chunk_bytes=0)
    assert exact["tas"].chunks == ((10, 10, 5), (45, 45), (90, 90))
    truth = xr.open_dataset(cf_nc, engine="h5netcdf")
    xr.testing.assert_identical(ds.compute(), truth)


def test_aligned_chunks_unit() -> None:
    assert aligned_chunks((100,), (10,), 8, 400) == (50,)
    assert aligned_chunks((100,), (10,), 8, 10**9) == (100,)
    assert aligned_chunks((4, 100), (1, 10), 8, 10 * 8 * 4 * 3) == (4, 30)
    assert aligned_chunks((5,), (10,), 8, 1000) == (5,)  # one chunk larger than the array
    assert aligned_chunks((5,), (2,), 8, 1000) == (5,)  # grown to the whole array
    assert aligned_chunks((), (), 8, 1000) == ()
    assert aligned_chunks((100,), (10,), 8, 0) == (10,)


def test_cf_attribute_types_unit() -> None:
    meta = ArrayMeta(
        shape=(4,),
        chunks=(4,),
        dtype="<i2",
        attrs={
            "scale_factor": float(np.float32(0.01)),
            "add_offset": 0.1,
            "_FillValue": -32767,
            "valid_range": [-100, 100],
            "missing_value": "NaN",
            "comment": "x",
        },
    )
    attrs = cf_attributes(meta)
    assert type(attrs["scale_factor"]) is np.float32
    assert type(attrs["add_offset"]) is np.float64  # 0.1 is not a float32 value
    assert type(attrs["_FillValue"]) is np.int16
    assert attrs["valid_range"].dtype == np.int16
    assert np.isnan(attrs["missing_value"]) and attrs["comment"] == "x"
    hinted = cf_attributes(meta, {"scale_factor": "<f8"})
    assert type(hinted["scale_factor"]) is np.float64


def _write_storage_fill_file(path: Path) -> Path:
    """A dimension-scaled file whose HDF5 fill value is NOT a CF _FillValue (the trap)."""
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(10.0))
        x.make_scale("x")
        v = f.create_dataset("v", shape=(10,), chunks=(5,), dtype="f4", fillvalue=-999.0)
        v[:5] = np.arange(5, dtype="f4")  # second chunk never written: reads as -999
        v.dims[0].attach_scale(x)
        w = f.create_dataset("w", data=np.array([1, -7, 3], "i4"), fillvalue=-7)
        w.attrs["_FillValue"] = np.int32(-7)  # here the CF attribute does mask
        w.dims[0].attach_scale(f.create_dataset("n", data=np.arange(3)))
        f["n"].make_scale("n")
    return path


def test_storage_fill_value_is_not_a_mask(tmp_path: Path) -> None:
    path = _write_storage_fill_file(tmp_path / "fill.h5")
    ours = xr.open_dataset(write_refs(refs_for(path), tmp_path / "fill.h5.json", format="json"))
    truth = xr.open_dataset(path, engine="h5netcdf")
    xr.testing.assert_identical(ours, truth)
    assert (ours["v"].values[5:] == -999.0).all()  # not NaN: no _FillValue attribute
    assert np.isnan(ours["w"].values[1])  # masked by the _FillValue attribute


def test_engine_detection(cf_sidecars: dict[str, str], cf_nc: Path, tmp_path: Path) -> None:
    backend = H5SidecarBackend()
    assert backend.guess_can_open(cf_sidecars["json"])
    assert backend.guess_can_open(cf_sidecars["parquet"])
    assert not backend.guess_can_open(cf_nc)
    assert not backend.guess_can_open(tmp_path / "missing.json")
    plain = to_kerchunk(refs_for(cf_nc))
    plain.pop("h5sidecar")  # a kerchunk sidecar that is not ours
    (tmp_path / "plain.json").write_text(__import__("json").dumps(plain))
    assert not backend.guess_can_open(tmp_path / "plain.json")
    ds = xr.open_dataset(cf_sidecars["parquet"])  # engine found by guess_can_open
    assert ds["tas"].dtype == np.float32
    assert "h5sidecar" in xr.backends.list_engines()
    assert "storage_options" in backend.open_dataset_parameters


def test_group_and_drop_variables(atl03_h5: Path, atl03_refs: GranuleRefs, tmp_path: Path) -> None:
    sidecar = write_refs(atl03_refs, tmp_path / "a.h5.json", format="json")
    ds = xr.open_dataset(sidecar, engine="h5sidecar", group="gt1l/heights", drop_variables=["h_ph"])
    truth = xr.open_dataset(
        atl03_h5, engine="h5netcdf", group="gt1l/heights", drop_variables="h_ph"
    )
    xr.testing.assert_identical(ds, truth)


def test_datatree_opens_every_group_equal_to_h5py(
    atl03_h5: Path, atl03_refs: GranuleRefs, tmp_path: Path
) -> None:
    refs = atl03_refs
    sidecar = write_refs(refs, tmp_path / "a.h5.json", format="json")
    raw = {"mask_and_scale": False, "decode_times": False, "decode_timedelta": False}
    tree = h5sidecar.open_datatree(sidecar, concat_characters=False, chunks=None, **raw).load()
    assert {n.path.strip("/") for n in tree.subtree} == set(refs.groups)
    n_vars = 0
    with h5py.File(atl03_h5, "r") as f:
        for node in tree.subtree:
            for name, var in node.to_dataset(inherit=False).variables.items():
                path = f"{node.path.strip('/')}/{name}".strip("/")
                np.testing.assert_array_equal(var.values, f[path][()], err_msg=path)
                n_vars += 1
    assert n_vars == len(refs.arrays)
    # CF decoding of a whole group is identical to h5netcdf's
    heights = tree["gt1l/heights"].to_dataset(inherit=False)
    truth = xr.open_dataset(atl03_h5, engine="h5netcdf", group="gt1l/heights", **raw)
    xr.testing.assert_identical(heights, truth.compute())


def _write_clashing_tree(path: Path) -> Path:
    """Parent and child groups with same-named dimension scales of different lengths."""
    with h5py.File(path, "w") as f:
        for group, n in (("", 3), ("child", 5), ("child/grandchild", 3)):
            g = f.require_group(group) if group else f
            t = g.create_dataset("time", data=np.arange(n) * 10.0 + len(group))
            t.make_scale("time")
            v = g.create_dataset("v", data=np.arange(n, dtype="i4") + n)
            v.dims[0].attach_scale(t)
    return path


def test_datatree_renames_clashing_dimensions(tmp_path: Path) -> None:
    path = _write_clashing_tree(tmp_path / "clash.h5")
    tree = h5sidecar.open_datatree(
        write_refs(refs_for(path), tmp_path / "clash.h5.json", format="json"), chunks=None
    )
    # the grandchild's "time" has the root's length but other values: renamed in the child only
    assert tree["child/grandchild"].encoding["h5sidecar_renamed"] == {"time_grandchild": "time"}
    assert "h5sidecar_renamed" not in tree.encoding
    np.testing.assert_array_equal(
        tree["child/grandchild"]["time_grandchild"].values, read_h5(path, "child/grandchild/time")
    )
    np.testing.assert_array_equal(tree["child"]["v"].values, read_h5(path, "child/v"))
    np.testing.assert_array_equal(
        tree["child/grandchild/v"].values, read_h5(path, "child/grandchild/v")
    )
    np.testing.assert_array_equal(tree["time"].values, read_h5(path, "time"))


def test_open_dataset_accepts_refs_objects(small_refs: GranuleRefs, small_h5: Path) -> None:
    ds = h5sidecar.open_dataset(small_refs, group="gt1l/heights", chunks=None)
    np.testing.assert_array_equal(ds["h_ph"].values, read_h5(small_h5, "gt1l/heights/h_ph"))
    assert ds["delta_time"].dtype.kind == "M"  # decoded with its CF units
