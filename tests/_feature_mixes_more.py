"""More feature mixes (see :mod:`tests._feature_mixes`): never-written chunks under every
filter, packing attributes of unusual types, time units and calendars xarray decodes or
refuses, never-written chunks of strings, enums, booleans and complex numbers, dimension scales
shared across groups under one name, netCDF-4 user types and groups on unlimited dimensions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np


def filter_holes(p: Path) -> None:
    """Chunks never written under each filter, with fill values (and ``_FillValue``)."""
    import hdf5plugin

    data = np.linspace(-5, 5, 60, dtype="f4").reshape(6, 10)
    ints = (np.arange(60) % 37).astype("i4").reshape(6, 10)
    specs: dict[str, dict[str, Any]] = {
        "fl32": {"fletcher32": True, "compression": "gzip", "shuffle": True, "fillvalue": -1},
        "soi": {"scaleoffset": 0, "fillvalue": 7},
        "sof": {"scaleoffset": 2, "fillvalue": -9.5},
        "lzf": {"compression": "lzf", "fillvalue": 3},
        "nbit": {"compression": h5py.h5z.FILTER_NBIT, "fillvalue": 2},
        "bshuf": dict(fillvalue=4, **hdf5plugin.Bitshuffle()),
        "zstd": dict(fillvalue=5, **hdf5plugin.Zstd()),
        "blosc2": dict(fillvalue=6, **hdf5plugin.Blosc2()),
        "bz2": dict(fillvalue=8, **hdf5plugin.BZip2()),
        "lz4": dict(fillvalue=9, **hdf5plugin.LZ4()),
    }
    with h5py.File(p, "w") as f:
        for name, kw in specs.items():
            for dt, arr in (("i4", ints), ("f4", data)):
                if name == "soi" and dt == "f4":
                    continue
                if name == "sof" and dt == "i4":
                    continue
                d = f.create_dataset(f"{name}_{dt}", shape=(6, 10), dtype=dt, chunks=(3, 4), **kw)
                d[:3, :] = arr[:3, :]
                if dt == "f4" and name in ("fl32", "lzf", "bz2"):
                    d.attrs["_FillValue"] = np.float32(kw["fillvalue"])


def packing_types(p: Path) -> None:
    """Integer ``scale_factor``, ``add_offset`` alone, float32 packing of float64, ``_Unsigned``
    spelled otherwise, uint64 packing, a float ``_FillValue`` on integers, ``valid_*``."""
    with h5py.File(p, "w") as f:
        a = f.create_dataset("int_scale", data=np.array([1, 2, 3], "i2"))
        a.attrs["scale_factor"] = np.int32(2)
        b = f.create_dataset("offset_only", data=np.array([0, 200, 255], "u1"))
        b.attrs["add_offset"] = np.float32(-10.5)
        c = f.create_dataset("f8_f4scale", data=np.array([1.0, 2.5, -1], "f8"))
        c.attrs["scale_factor"] = np.float32(0.1)
        d = f.create_dataset("unsigned_false", data=np.array([-1, 5], "i1"))
        d.attrs["_Unsigned"] = "false"
        e = f.create_dataset("unsigned_upper", data=np.array([-1, 5], "i2"))
        e.attrs["_Unsigned"] = "TRUE"
        g = f.create_dataset("u8_scale", data=np.array([0, 2**63 + 5], "u8"))
        g.attrs["scale_factor"] = np.float64(1e-3)
        h = f.create_dataset("i4_fill_f", data=np.array([1, -999, 3], "i4"))
        h.attrs["_FillValue"] = np.float32(-999)
        k = f.create_dataset("valid_only", data=np.array([1, 50, 300], "i2"))
        k.attrs["valid_max"] = np.int16(100)
        k.attrs["valid_min"] = np.int16(2)
        m = f.create_dataset("mv_scalar_bytes", data=np.array([1.0, -1.0, 2.0], "f4"))
        m.attrs["missing_value"] = np.float64(-1)
        n = f.create_dataset("scale_str", data=np.array([1, 2], "i2"))
        n.attrs["units"] = "1"
        n.attrs["scale_factor"] = np.float32(1.0)
        n.attrs["add_offset"] = np.float32(0.0)


def time_units(p: Path) -> None:
    """``UTC`` units, months, calendar ``none`` and ``all_leap``, milliseconds past 2**31,
    unsigned seconds, negative days, bounds-like 2-D times."""
    with h5py.File(p, "w") as f:
        for name, units, cal, vals, dt in [
            ("utc", "days since 2000-01-01 00:00:00 UTC", None, [0, 1, 2], "i4"),
            ("months", "months since 2000-01-01", None, [0, 1, 2], "i4"),
            ("calnone", "days since 2000-01-01", "none", [0, 1, 2], "f8"),
            ("allleap", "days since 2000-02-28", "all_leap", [0, 1, 2], "f8"),
            ("msec", "milliseconds since 2020-01-01T00:00:00.000", None, [0, 1500, 2**40], "i8"),
            ("uns", "seconds since 1980-01-06", None, [0, 2**31 + 5, 4e9], "u4"),
            ("tai", "seconds since 1993-1-1 0:0:0", "standard", [0.5, 1.5, 2.5], "f8"),
            ("neg", "days since 2000-01-01", "gregorian", [-1, -1000, -700000], "i4"),
        ]:
            d = f.create_dataset(name, data=np.array(vals, dt))
            d.attrs["units"] = units
            if cal:
                d.attrs["calendar"] = cal
        d = f.create_dataset("tbounds", data=np.array([[0, 1], [1, 2], [2, 3]], "i4"))
        d.attrs["units"] = "days since 2000-01-01"


def typed_holes(p: Path) -> None:
    """Never-written chunks of variable-length strings, enums, booleans, complex numbers."""
    with h5py.File(p, "w") as f:
        s = f.create_dataset("vs", shape=(6,), dtype=h5py.string_dtype(), chunks=(2,))
        s[0] = "x"
        s[1] = "ß"
        g = f.create_dataset(
            "vs2", shape=(3, 4), dtype=h5py.string_dtype("ascii"), chunks=(2, 2), compression="gzip"
        )
        g[0, 0] = b"ab"
        e = f.create_dataset(
            "enum_holes",
            shape=(6,),
            dtype=h5py.enum_dtype({"A": 1, "B": 2}, basetype="i1"),
            chunks=(2,),
            fillvalue=2,
        )
        e[0] = 1
        b = f.create_dataset("bool_holes", shape=(6,), dtype=bool, chunks=(2,), fillvalue=True)
        b[0] = False
        c = f.create_dataset("cplx_holes", shape=(6,), dtype="c16", chunks=(2,), fillvalue=1 + 1j)
        c[0] = 2j


def scales_across_groups(p: Path) -> None:
    """A child group's scale named like the root's, a child dataset on the root's scale, one
    scale on both axes, two scales on one axis, ``coordinates`` naming a missing variable."""
    with h5py.File(p, "w") as f:
        t = f.create_dataset("time", data=np.array([0.0, 1.0, np.nan]))
        t.make_scale("time")
        t.attrs["units"] = "hours since 2000-01-01"
        t.attrs["_FillValue"] = np.nan
        v = f.create_dataset("v", data=np.arange(3.0))
        v.dims[0].attach_scale(t)
        g = f.create_group("g")
        w = g.create_dataset("time", data=np.array([5, 6, 7, 8], "i4"))
        w.make_scale("time")
        u = g.create_dataset("u", data=np.arange(4))
        u.dims[0].attach_scale(w)
        u2 = g.create_dataset("u2", data=np.arange(3))
        u2.dims[0].attach_scale(t)
        x = f.create_dataset("x", data=np.arange(2))
        x.make_scale("x name with space")
        y = f.create_dataset("yy", data=np.arange(4).reshape(2, 2))
        y.dims[0].attach_scale(x)
        y.dims[1].attach_scale(x)
        z = f.create_dataset("lat", data=np.array([1.0, 2.0]))
        z.make_scale("lat")
        z2 = f.create_dataset("lat2", data=np.array([3.0, 4.0]))
        z2.make_scale("lat2")
        q = f.create_dataset("q", data=np.arange(2.0))
        q.dims[0].attach_scale(z)
        q.dims[0].attach_scale(z2)
        q.attrs["coordinates"] = "lat missing_var"


def netcdf_user_types(p: Path) -> None:
    """netCDF-4 enum (fill 255) and compound types; in groups, an unlimited dimension shared
    by strings, packed unsigned values with never-written chunks, a 360_day time and chars."""
    import netCDF4

    with netCDF4.Dataset(p, "w") as f:
        f.createDimension("n", 4)
        et = f.createEnumType(np.uint8, "cloud_t", {"clear": 0, "cloudy": 1, "missing": 255})
        v = f.createVariable("cloud", et, ("n",), fill_value=255)
        v[:] = np.array([0, 1, 255, 1], "u1")
        ct = f.createCompoundType(np.dtype([("a", "<i4"), ("b", "<f8")]), "pair_t")
        c = f.createVariable("pair", ct, ("n",))
        arr = np.zeros(4, np.dtype([("a", "<i4"), ("b", "<f8")]))
        arr["a"], arr["b"] = [1, 2, 3, 4], [0.5, 1.5, np.nan, 2]
        c[:] = arr
        g = f.createGroup("grp")
        g.createDimension("t", None)
        s = g.createVariable("label", str, ("t",))
        s[0], s[1], s[2] = "first", "\u00df", ""
        u = g.createVariable("val", "u2", ("t", "n"), fill_value=np.uint16(65535),
                             chunksizes=(2, 3))  # fmt: skip
        u[:3, :2] = np.arange(6).reshape(3, 2)  # chunk (1, 1) never written
        u.scale_factor = np.float32(0.5)
        tt = g.createVariable("t", "f8", ("t",))
        tt.units, tt.calendar = "days since 2000-01-01", "360_day"
        tt[:3] = [0, 1, 2]
        h = g.createGroup("deeper")
        h.createVariable("x", "i8", ("t",))[:3] = [1, 2, 3]
        h.createVariable("ch", "S1", ("n",))[:] = np.array([b"a", b"b", b"", b"d"], "S1")


def h5netcdf_groups(p: Path) -> None:
    """h5netcdf: a NaN-filled variable partly written along an unlimited dimension, ``_Unsigned``
    bytes with a fill of -128, a subgroup on the root's unlimited dimension, complex values."""
    import h5netcdf

    with h5netcdf.File(p, "w") as f:
        f.dimensions = {"x": 3, "t": None}
        f.resize_dimension("t", 5)
        v = f.create_variable("v", ("t", "x"), "f8", chunks=(2, 2), fillvalue=np.nan)
        v[:3, :] = 1.0
        w = f.create_variable("w", ("x",), "i1", fillvalue=np.int8(-128))
        w.attrs["_Unsigned"] = "true"
        w[:] = np.array([-128, 0, 127], "i1")
        g = f.create_group("sub")
        g.dimensions = {"y": 2}
        z = g.create_variable("z", ("t", "y"), "f4", chunks=(3, 1))
        z[:] = np.arange(10, dtype="f4").reshape(5, 2)
        g.create_variable("y", ("y",), "i4")[:] = [10, 20]
        q = g.create_variable("q", ("x", "y"), "c16")
        q[:] = (np.arange(6) + 1j).reshape(3, 2)


def short_records(p: Path) -> None:
    """Variables shorter than their unlimited dimension (netCDF readers pad them with the fill
    value): ``val`` written for 2 of 3 records, a chunk the extent cuts holding values past it
    (plain and zlib), a subgroup's variable on the root's dimension written for fewer records
    and one deeper written for more (the dimension, ``t`` included, is as long as it)."""
    import zlib

    import netCDF4
    from numcodecs import Shuffle

    with netCDF4.Dataset(p, "w") as f:
        f.createDimension("t", None)
        f.createDimension("n", 4)
        f.createVariable("t", "f8", ("t",))[:3] = [0.0, 1.0, 2.0]
        val = f.createVariable("val", "u2", ("t", "n"), fill_value=np.uint16(65535),
                               chunksizes=(2, 3))  # fmt: skip
        val[:2, :] = np.arange(8).reshape(2, 4)
        for name, z in (("stale", False), ("stale_z", True)):
            v = f.createVariable(name, "i4", ("t", "n"), fill_value=np.int32(-1), zlib=z,
                                 chunksizes=(2, 3))  # fmt: skip
            v[:1, :] = [[1, 2, 3, 4]]
        g = f.createGroup("g")
        g.createVariable("gv", "f4", ("t",), fill_value=np.float32(-9.5))[:1] = [7.0]
        g.createGroup("deeper").createVariable("long", "i2", ("t",))[:5] = np.arange(5)
    with h5py.File(p, "r+") as h5:  # bytes past the extent that are not the fill value
        for name, z in (("stale", False), ("stale_z", True)):
            for j in (0, 1):
                block = np.full((2, 3), 777 + j, "<i4")
                block[0, : 4 - 3 * j] = np.arange(1, 5)[3 * j : 3 * j + 3]
                raw = block.tobytes()  # netCDF's zlib=True is shuffle, then deflate
                raw = zlib.compress(Shuffle(4).encode(raw)) if z else raw
                h5[name].id.write_direct_chunk((0, 3 * j), raw)


#: file name -> builder
BUILDERS: dict[str, Callable[[Path], None]] = {
    f"{fn.__name__}.nc": fn
    for fn in (filter_holes, packing_types, time_units, typed_holes, scales_across_groups,
               netcdf_user_types, h5netcdf_groups, short_records)
}
