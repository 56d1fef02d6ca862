"""Attributes: every JSON-holdable type kept, bookkeeping dropped, unreadable ones reported."""

from __future__ import annotations

import math

import h5py
import numpy as np

from h5sidecar.indexer import index_granule
from tests.indexer._compare import open_refs


def test_attribute_types_become_json(make_h5) -> None:
    def build(f: h5py.File) -> None:
        d = f.create_dataset("x", data=np.arange(3))
        a = d.attrs
        a["int"] = np.int16(-3)
        a["uint64"] = np.uint64(2**63 + 1)
        a["float"] = np.float32(0.5)
        a["nan"] = np.float64(np.nan)
        a["inf"] = np.array([np.inf, -np.inf])
        a["one_element"] = np.array([7], "i4")
        a["array2d"] = np.arange(6, dtype="u1").reshape(2, 3)
        a["bool"] = np.bool_(True)
        a["complex"] = np.complex64(1 + 2j)
        a["fixed"] = np.bytes_(b"metres")
        a["latin1"] = np.bytes_(b"caf\xe9")
        a["vlen"] = "héllo"
        a["strings"] = np.array([b"a", b"bc"], "S2")
        a["compound"] = np.array((1, 2.5), dtype=[("i", "<i4"), ("f", "<f8")])
        a["compound_array"] = np.array([(1, b"x"), (2, b"y")], dtype=[("i", "<i4"), ("s", "S1")])
        a["ref"] = f["x"].ref
        a["empty"] = h5py.Empty("f4")
        a.create(
            "ragged",
            data=np.array([np.arange(2), np.arange(3)], dtype=object),
            dtype=h5py.vlen_dtype("i4"),
        )
        a["_FillValue"] = np.int64(-1)

    refs = index_granule(str(make_h5(build)))
    attrs = dict(refs.arrays["x"].meta.attrs)
    assert attrs["int"] == -3 and attrs["uint64"] == 2**63 + 1 and attrs["float"] == 0.5
    assert math.isnan(attrs["nan"]) and attrs["inf"] == [math.inf, -math.inf]
    assert attrs["one_element"] == 7  # netCDF readers unpack one-element arrays too
    assert attrs["array2d"] == [[0, 1, 2], [3, 4, 5]]
    assert attrs["bool"] is True and attrs["complex"] == [1.0, 2.0]
    assert attrs["fixed"] == "metres" and attrs["latin1"] == "café" and attrs["vlen"] == "héllo"
    assert attrs["strings"] == ["a", "bc"]
    assert attrs["compound"] == {"i": 1, "f": 2.5}
    assert attrs["compound_array"] == [{"i": 1, "s": "x"}, {"i": 2, "s": "y"}]
    assert attrs["ref"] == "/x" and attrs["empty"] == []  # h5netcdf: an empty float32 array
    assert attrs["ragged"] == [[0, 1], [0, 1, 2]]
    assert attrs["_FillValue"] == -1
    # zarr reads the same attributes back (NaN/Infinity survive the JSON round trip)
    zattrs = open_refs(refs)["x"].attrs.asdict()
    assert zattrs["compound"] == {"i": 1, "f": 2.5} and math.isnan(zattrs["nan"])


def test_unrepresentable_attributes_are_reported_not_fatal(make_h5) -> None:
    def build(f: h5py.File) -> None:
        d = f.create_dataset("x", data=np.arange(3))
        d.attrs["opaque"] = np.void(b"\x01\x02\x03")
        d.attrs["region"] = d.regionref[0:2]
        d.attrs["fine"] = 1
        f.attrs["opaque_root"] = np.void(b"\x00")

    refs = index_granule(str(make_h5(build)))
    arr = refs.arrays["x"]
    assert dict(arr.meta.attrs) == {"fine": 1}
    assert "'opaque'" in arr.note and "'region'" in arr.note and "region reference" in arr.note
    assert "opaque_root" in refs.extra["group_attributes_left_out"][""]


def test_bookkeeping_attributes_are_dropped(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f["x"] = np.arange(4.0)
        f["x"].make_scale("x")
        f["v"] = np.arange(4.0)
        f["v"].dims[0].attach_scale(f["x"])
        f["v"].dims[0].label = "label"
        f["v"].attrs["_Netcdf4Coordinates"] = np.array([0], "i4")
        f["v"].attrs["CLASS"] = b"TABLE"  # not a scale marker, but h5netcdf hides it too
        f["v"].attrs["units"] = "m"

    refs = index_granule(str(make_h5(build)))
    assert dict(refs.arrays["x"].meta.attrs) == {}  # CLASS/NAME/REFERENCE_LIST dropped
    assert dict(refs.arrays["v"].meta.attrs) == {"units": "m"}
    assert "'CLASS' (hidden, as netCDF readers (h5netcdf) hide it)" in refs.arrays["v"].note


def test_group_attributes_and_nested_groups(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f.attrs["title"] = "root"
        g = f.create_group("a/b/c")
        g.attrs["depth"] = 3
        f.create_group("empty")
        f["a/b/c/v"] = np.arange(2)

    refs = index_granule(str(make_h5(build)))
    assert set(refs.groups) == {"", "a", "a/b", "a/b/c", "empty"}
    assert refs.groups[""]["title"] == "root" and refs.groups["a/b/c"]["depth"] == 3
    assert open_refs(refs)["a/b/c"].attrs["depth"] == 3
