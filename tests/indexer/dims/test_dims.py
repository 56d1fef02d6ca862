"""Dimension names: scales, netCDF-4 dimensions, labels, phony names, and xarray's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest
import xarray as xr
import zarr.storage

from h5sidecar.indexer import index_granule
from h5sidecar.references import GranuleRefs, to_kerchunk
from tests.indexer._compare import assert_refs_match_h5py


def _datatree(refs: GranuleRefs) -> xr.DataTree:
    fs = fsspec.filesystem(
        "reference", fo=to_kerchunk(refs), remote_protocol="file", asynchronous=True
    )
    store = zarr.storage.FsspecStore(fs, read_only=True)
    return xr.open_datatree(store, engine="zarr", consolidated=True, zarr_format=2)


def _dims(refs: GranuleRefs) -> dict[str, tuple[str, ...]]:
    return {p: a.meta.dimension_names for p, a in refs.arrays.items()}


def test_dimension_scales_name_dimensions(make_h5) -> None:
    def build(f: h5py.File) -> None:
        for beam, n in (("gt1l", 5), ("gt2l", 7)):
            t = f.create_dataset(f"{beam}/heights/delta_time", data=np.arange(n, dtype="f8"))
            t.make_scale("delta_time")
            h = f.create_dataset(f"{beam}/heights/h_ph", data=np.ones(n, "f4"))
            h.dims[0].attach_scale(t)
            q = f.create_dataset(f"{beam}/heights/quality", data=np.zeros((n, 3), "i1"))
            q.dims[0].attach_scale(t)

    refs = index_granule(str(make_h5(build)))
    dims = _dims(refs)
    assert dims["gt1l/heights/h_ph"] == ("delta_time",)
    assert dims["gt2l/heights/delta_time"] == ("delta_time",)  # sibling groups: other size, ok
    assert dims["gt1l/heights/quality"][0] == "delta_time"
    assert dims["gt1l/heights/quality"][1].startswith("phony_dim_")
    assert dims["gt1l/heights/quality"][1] != dims["gt2l/heights/quality"][1]  # other group
    tree = _datatree(refs)
    assert tree["gt2l/heights"].sizes["delta_time"] == 7


def test_phony_names_per_group_and_length(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f["a"] = np.zeros((5, 5))
        f["b"] = np.zeros(5)
        f["c"] = np.zeros(4)
        f["g/a"] = np.zeros(5)

    refs = index_granule(str(make_h5(build)))
    dims = _dims(refs)
    assert dims["a"][0] != dims["a"][1]  # never the same name twice in one array
    assert dims["b"] == (dims["a"][0],)  # same group, same length: shared
    assert dims["c"][0] not in dims["a"]
    assert dims["g/a"][0] not in dims["a"]  # other group: its own name
    for name in (*dims["a"], *dims["b"], *dims["c"], *dims["g/a"]):
        assert name.startswith("phony_dim_")
    _datatree(refs)  # xarray accepts the tree


@pytest.mark.parametrize("order", [("", "child"), ("child", "")])
def test_one_name_never_has_two_sizes_across_ancestors(make_h5, order) -> None:
    """The ancestor keeps the name whatever the link order; the subgroup falls back."""

    def build(f: h5py.File) -> None:
        for group in order:
            prefix = f"{group}/" if group else ""
            x = f.create_dataset(f"{prefix}x", data=np.arange(5 if group else 3))
            x.make_scale("x")
            v = f.create_dataset(f"{prefix}v", data=np.zeros(x.shape))
            v.dims[0].attach_scale(x)

    refs = index_granule(str(make_h5(build, track_order=True)))
    dims = _dims(refs)
    assert dims["x"] == dims["v"] == ("x",)
    assert dims["child/x"][0].startswith("phony_dim_") and dims["child/v"] == dims["child/x"]
    assert "another size" in refs.arrays["child/x"].note and not refs.arrays["x"].note
    _datatree(refs)


def test_dimension_labels_name_unscaled_dimensions(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f["img"] = np.zeros((2, 3))
        f["img"].dims[0].label = "y"
        f["img"].dims[1].label = "x"

    refs = index_granule(str(make_h5(build)))
    assert _dims(refs)["img"] == ("y", "x")


def test_netcdf4_file(tmp_path: Path) -> None:
    import netCDF4

    path = tmp_path / "t.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 3)
        nc.createDimension("nv", 2)  # a dimension without a variable
        t = nc.createVariable("time", "f8", ("time",))
        t[:] = [0.0, 1.0]
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat[:] = [10, 20, 30]
        v = nc.createVariable("temp", "f4", ("time", "lat"), fill_value=-999.0)
        v[0:2, :] = [[1, 2, 3], [4, 5, 6]]
        # written along "time" less far than "time" itself: HDF5 says (1, 3), "time" has 2
        nc.createVariable("short", "f4", ("time", "lat"))[0, :] = [7, 8, 9]
        nc.createVariable("bounds", "f4", ("lat", "nv"))[:] = np.ones((3, 2))
        g = nc.createGroup("sub")
        g.createVariable("w", "i2", ("lat",))[:] = [1, 2, 3]

    refs = index_granule(str(path))
    dims = _dims(refs)
    assert dims["temp"] == ("time", "lat") and dims["bounds"] == ("lat", "nv")
    assert dims["sub/w"] == ("lat",)  # a dimension of the parent group
    # shown at the length of "time", as netCDF readers show it (test_feature_mixes)
    assert dims["short"] == ("time", "lat") and refs.arrays["short"].meta.shape == (2, 3)
    assert "unlimited dimension's length" in refs.arrays["short"].note
    assert refs.extra["extended_past_hdf5_extent"] == {"short": [1, 3]}
    assert [(s.path, s.kind) for s in refs.skipped] == [("nv", "other")]
    assert "_Netcdf4Dimid" not in refs.arrays["lat"].meta.attrs
    assert "_NCProperties" not in refs.groups[""]
    assert refs.arrays["temp"].meta.attrs["_FillValue"] == -999.0
    assert_refs_match_h5py(refs, path)
    tree = _datatree(refs)
    assert tree["temp"].dims == ("time", "lat")
    assert tree["sub"]["w"].dims == ("lat",)


def test_links_to_a_netcdf_coordinate_name_it_as_h5netcdf_does(tmp_path: Path) -> None:
    """Hard and soft links to a netCDF-4 coordinate variable: h5netcdf registers a dimension
    per link and names the variable (and every link) by the last link carrying its id."""
    import netCDF4

    from h5sidecar.workflows.checks._dimcheck import sidecar_dimension_differences
    from tests.indexer._compare import open_plain

    path = tmp_path / "linked.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("lat", 3)
        nc.createVariable("lat", "f4", ("lat",))[:] = [1, 2, 3]
        nc.createVariable("t", "f4", ("lat",))[:] = [4, 5, 6]
    with h5py.File(path, "a") as f:
        f["lat_soft"] = h5py.SoftLink("/lat")
        f["lat_hard"] = f["lat"]
    refs = index_granule(str(path))
    dims = _dims(refs)
    assert dims["lat"] == dims["lat_soft"] == dims["lat_hard"] == ("lat_hard",)
    assert dims["t"] == ("lat",)  # DIMENSION_LIST: the scale's own path
    store = open_plain(to_kerchunk(refs)).store
    assert sidecar_dimension_differences(store, path, [""]) == {}


def _link_layouts(f: h5py.File, group_twice: bool = False) -> None:
    """Scales reachable by one path, and by more (a soft link named before the hard one, a
    second hard link, a group linked twice)."""
    for name in ("plain", "a_soft", "z_hard", "twice"):
        g = f.create_group(name) if name != "plain" else f
        scale = g.create_dataset(f"{name}_x" if name != "plain" else "x", data=np.arange(3))
        scale.make_scale()
        g.create_dataset("v", data=np.zeros(3)).dims[0].attach_scale(scale)
    f["a_soft/a_link"] = h5py.SoftLink("/a_soft/a_soft_x")
    f["z_hard/0_other"] = f["z_hard/z_hard_x"]
    if group_twice:
        f["again"] = f["twice"]
    deep = f.create_group("deep/er")
    deep.create_dataset("s", data=np.arange(2)).make_scale()


def test_scale_names_with_one_path_skip_hdf5s_search(make_h5) -> None:
    """A scale with a single path is named by it without asking HDF5 (which searches the
    file); every scale still gets the name HDF5 would give."""
    from h5sidecar.indexer._walk import object_key, walk
    from h5sidecar.indexer.dims._dim_names import DimensionNamer
    from h5sidecar.indexer.dims._scales import scale_name

    for libver, twice in (("earliest", False), ("latest", False), ("latest", True)):
        path = make_h5(lambda f, twice=twice: _link_layouts(f, twice), name=f"l-{libver}-{twice}.h5",
                       libver=libver)  # fmt: skip
        with h5py.File(path, "r") as f:
            hierarchy = walk(f)
            namer = DimensionNamer(hierarchy, lambda ref: object_key(f[ref]))
            singles = 0
            for entry in hierarchy.datasets:
                if entry.alias_of is None and namer.is_scale(entry):
                    assert namer.scale_names[entry.key] == scale_name(entry), entry.path
                    singles += namer.scales.single_path(entry)
            # x, twice_x and deep/er/s; the others ask HDF5, and all do when the walk left a
            # link out (the group linked twice)
            assert singles == (0 if twice else 3)


def test_dimension_only_scales_known_from_the_attributes_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a scale is a netCDF-4 dimension without a variable is read from the attributes
    already decoded from the metadata bytes: HDF5 is not asked for each scale's ``NAME``."""
    import netCDF4

    import h5sidecar.indexer.dims._dim_names as dims_module

    path = tmp_path / "t.nc"
    with netCDF4.Dataset(path, "w") as nc:
        for i in range(3):
            nc.createDimension(f"nv{i}", i + 2)  # dimensions without a variable
        nc.createDimension("lat", 3)
        nc.createVariable("lat", "f4", ("lat",))[:] = [10, 20, 30]
        nc.createVariable("bounds", "f4", ("lat", "nv0"))[:] = np.ones((3, 2))
    asked: list[str] = []
    h5py_attr = dims_module._attr

    def spy(dset: h5py.Dataset, name: str) -> object:
        asked.append(name)
        return h5py_attr(dset, name)

    monkeypatch.setattr(dims_module, "_attr", spy)
    refs = index_granule(str(path))
    assert "NAME" not in asked
    assert sorted(s.path for s in refs.skipped) == ["nv0", "nv1", "nv2"]
    assert _dims(refs)["bounds"] == ("lat", "nv0")
    assert_refs_match_h5py(refs, path)


def test_hdf5_is_asked_once_per_object_and_only_about_scale_markers(
    make_h5, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An array whose decoded attributes hold no ``CLASS`` is not a scale without asking HDF5
    (``H5DSis_scale`` searches the attribute storage by name), and the walk's ``H5Oget_info``
    of each object is the one the attribute reader uses (it asked again per object)."""
    from collections import Counter

    def build(f: h5py.File) -> None:
        x = f.create_dataset("x", data=np.arange(5.0))
        x.make_scale("x")
        for g in range(2):
            for v in range(3):
                d = f.create_dataset(f"g{g}/v{v}", data=np.arange(5.0) * v)
                d.dims[0].attach_scale(x)
                d.attrs.update({f"a{a}": a for a in range(10)})  # dense storage

    path = make_h5(build, libver="latest")
    infos: Counter[bytes] = Counter()
    scales: Counter[bytes] = Counter()
    get_info, is_scale = h5py.h5o.get_info, h5py.h5ds.is_scale

    def counting_info(oid, *args, **kwargs):  # type: ignore[no-untyped-def]
        infos[h5py.h5i.get_name(oid)] += 1
        return get_info(oid, *args, **kwargs)

    def counting_scale(oid):  # type: ignore[no-untyped-def]
        scales[h5py.h5i.get_name(oid)] += 1
        return is_scale(oid)

    monkeypatch.setattr(h5py.h5o, "get_info", counting_info)
    monkeypatch.setattr(h5py.h5ds, "is_scale", counting_scale)
    refs = index_granule(str(path))
    monkeypatch.undo()
    assert dict(scales) == {b"/x": 1}
    arrays = [f"/g{g}/v{v}".encode() for g in range(2) for v in range(3)]
    assert all(infos[a] == 1 for a in arrays) and infos[b"/g0"] == infos[b"/g1"] == 1
    assert _dims(refs) == {"x": ("x",), **{a.decode()[1:]: ("x",) for a in arrays}}
    assert_refs_match_h5py(refs, path)


def test_each_dimension_list_decoded_once(make_h5, monkeypatch: pytest.MonkeyPatch) -> None:
    """The namer asks for an array's ``DIMENSION_LIST`` twice (whether any axis has a scale,
    then which names it): its references are decoded from the bytes once per array, and the
    names are h5netcdf's."""
    import h5sidecar.indexer.attrs._native as native_module

    def build(f: h5py.File) -> None:
        x = f.create_dataset("x", data=np.arange(4.0))
        x.make_scale("x")
        for g in range(2):
            for v in range(3):
                d = f.create_dataset(f"g{g}/v{v}", data=np.ones((4, 2)) * v)
                d.dims[0].attach_scale(x)  # the second axis stays phony
        f.create_dataset("g0/plain", data=np.ones(7))  # no DIMENSION_LIST at all

    path = make_h5(build, libver="latest")
    decoded: list[bytes] = []
    object_addresses = native_module.object_addresses

    def counting(body: bytes, heaps: object) -> list[list[int]]:
        decoded.append(body)
        return object_addresses(body, heaps)  # type: ignore[arg-type]

    monkeypatch.setattr(native_module, "object_addresses", counting)
    refs = index_granule(str(path))
    monkeypatch.undo()
    assert len(decoded) == 6  # one per array with a DIMENSION_LIST (twice each before)
    dims = _dims(refs)
    assert all(dims[f"g{g}/v{v}"][0] == "x" for g in range(2) for v in range(3))
    assert dims["g0/v0"][1] == dims["g0/v2"][1] != dims["g1/v0"][1]  # per group, as h5netcdf
    assert_refs_match_h5py(refs, path)


def test_number_arrays_not_asked_for_enumerations(make_h5, monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer and float arrays are known from their dtype plan to be neither enumerations nor
    references: h5py is not asked to map their type again (it was, per array); enumerations
    and references are still described in the extras."""
    import h5sidecar.indexer._granule as granule_module
    from h5sidecar.indexer.dtypes._dtype_plan import ENUMS_KEY, REFERENCES_KEY

    def build(f: h5py.File) -> None:
        f.create_dataset("i", data=np.arange(3, dtype="i2"))
        f.create_dataset("f", data=np.arange(3, dtype=">f8"))
        f.create_dataset("e", data=np.array([0, 1, 0], "u1"),
                         dtype=h5py.enum_dtype({"off": 0, "on": 1}, basetype="u1"))  # fmt: skip
        f.create_dataset("r", data=[f["i"].ref], dtype=h5py.ref_dtype)

    path = make_h5(build)
    described: list[str] = []
    describe = granule_module._describe_type

    def spy(entry: Any, out: dict[str, Any]) -> None:
        described.append(entry.path)
        describe(entry, out)

    monkeypatch.setattr(granule_module, "_describe_type", spy)
    refs = index_granule(str(path))
    monkeypatch.undo()
    assert sorted(described) == ["e", "r"]
    assert refs.extra[ENUMS_KEY] == {"e": {"off": 0, "on": 1}}
    assert refs.extra[REFERENCES_KEY] == ["r"]
    assert_refs_match_h5py(refs, path)
