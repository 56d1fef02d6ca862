"""Small HDF5 / netCDF-4 files that combine features the corpus and the other tests keep apart.

Each builder writes one file with h5py, netCDF4 or h5netcdf (as a user's file would be
written): packing with ``_Unsigned`` and attributes of other types, NaN and extreme fill values,
big-endian storage, byte and variable-length strings, enums and compounds, scalar, empty and
never-written datasets, unlimited dimensions with partial last chunks, calendars and time units,
CF attributes and dimension scales across groups, filters, and names that need escaping.
:mod:`tests.test_feature_mixes` reads each through every reader.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5netcdf
import h5py
import netCDF4
import numpy as np


def _no_auto(v: netCDF4.Variable) -> netCDF4.Variable:
    v.set_auto_maskandscale(False)
    return v


def unsigned_packed(p: Path) -> None:
    """``_Unsigned`` bytes with ``_FillValue``, ``valid_range`` and packing of other types;
    ``missing_value`` as a list that differs from ``_FillValue``."""
    with netCDF4.Dataset(p, "w") as f:
        f.createDimension("x", 6)
        u = _no_auto(f.createVariable("u", "i1", ("x",), fill_value=np.int8(-1)))
        u._Unsigned = "true"
        u.valid_range = np.array([1, 120], "i1")
        u.scale_factor = np.float32(0.5)
        u.add_offset = np.float64(10.0)
        u[:] = np.array([-1, 0, 5, -6, 100, 127], "i1")
        m = _no_auto(f.createVariable("m", "i2", ("x",), fill_value=np.int16(-999)))
        m.missing_value = np.array([-1, -2], "i2")
        m.scale_factor = np.float64(0.01)
        m[:] = np.array([-999, -1, -2, 3, 4, 5], "i2")
        s = _no_auto(f.createVariable("us", "i2", ("x",)))
        s._Unsigned = "true"
        s[:] = np.array([-1, 0, 1, -32768, 32767, 2], "i2")


def nan_fill(p: Path) -> None:
    """NaN ``_FillValue`` in float16 / float32 (partly never written), NaN ``missing_value``,
    a float16 ``scale_factor``."""
    with h5netcdf.File(p, "w") as f:
        f.dimensions = {"x": 5}
        h = f.create_variable("h", ("x",), "f2", fillvalue=np.float16(np.nan))
        h[:3] = np.array([1, 2, np.nan], "f2")
        s = f.create_variable("s", ("x",), "f4", fillvalue=np.float32(np.nan), chunks=(2,))
        s[:2] = np.array([1.5, -0.0], "f4")
        m = f.create_variable("m", ("x",), "f4")
        m.attrs["missing_value"] = np.float32(np.nan)
        m[:] = np.array([1, np.nan, 3, 4, 5], "f4")
        hp = f.create_variable("hp", ("x",), "i2", fillvalue=np.int16(-1))
        hp.attrs["scale_factor"] = np.float16(0.5)
        hp[:] = np.array([-1, 2, 4, 6, 8], "i2")


def big_endian(p: Path) -> None:
    """Big-endian packed integers (gzip + shuffle) with big-endian attributes; floats,
    unsigned with a fill past a resize, complex."""
    with h5py.File(p, "w") as f:
        d = f.create_dataset("be", data=np.array([1, 2, -3, 400, 32000], ">i2"), chunks=(2,),
                             compression="gzip", shuffle=True)  # fmt: skip
        d.attrs["scale_factor"] = np.array(0.25, ">f4")
        d.attrs["add_offset"] = np.array(1.0, ">f8")
        d.attrs["_FillValue"] = np.array(-3, ">i2")
        f.create_dataset("bef", data=np.array([1.5, np.nan, -3e300], ">f8"))
        u = f.create_dataset("beu", data=np.array([1, 2, 65535], ">u4"), fillvalue=7, chunks=(2,),
                             maxshape=(None,))  # fmt: skip
        u.resize((5,))
        f.create_dataset("bec", data=np.array([1 + 2j, 3 - 1j], ">c8"))


def chars(p: Path) -> None:
    """netCDF ``char`` arrays with and without ``_Encoding`` (UTF-8 multi-byte), string dims,
    a netCDF ``string`` variable."""
    with netCDF4.Dataset(p, "w") as f:
        f.createDimension("n", 3)
        f.createDimension("strlen", 5)
        v = f.createVariable("names", "S1", ("n", "strlen"))
        v._Encoding = "utf-8"
        v[:] = netCDF4.stringtochar(np.array(["ab", "cde", ""], "S5"))
        w = f.createVariable("raw", "S1", ("n", "strlen"))
        w.set_auto_chartostring(False)
        w[:] = netCDF4.stringtochar(np.array(["xy", "z", "qwert"], "S5"))
        u = f.createVariable("utf", "S1", ("n", "strlen"))
        u._Encoding = "utf-8"
        u.set_auto_chartostring(False)
        raw = np.zeros((3, 5), "S1")
        for i, word in enumerate(["é".encode(), b"ab", "ü€".encode()]):
            raw[i, : len(word)] = [bytes([c]) for c in word]
        u[:] = raw
        s = f.createVariable("vs", str, ("n",))
        s[:] = np.array(["\u03b1", "", "tab\tx"], object)


def vlen_strings(p: Path) -> None:
    """Variable-length UTF-8 and ASCII strings (chunked, scalar), fixed-size strings holding
    NUL, fixed-size UTF-8."""
    with h5py.File(p, "w") as f:
        utf8 = h5py.string_dtype("utf-8")
        f.create_dataset("u", data=np.array(["\u03b1", "", "日本語", "x" * 40], object), dtype=utf8,
                         chunks=(2,))  # fmt: skip
        f.create_dataset("a", data=np.array([b"abc", b"", b"de"], object),
                         dtype=h5py.string_dtype("ascii"))  # fmt: skip
        f.create_dataset("fixed", data=np.array([b"ab\x00c", b"xyz"], "S4"))
        f.create_dataset("scalar_s", data="héllo", dtype=utf8)
        fixed_utf = np.array(["é".encode(), b"a"], "S3").astype(h5py.string_dtype("utf-8", 3))
        f.create_dataset("fixed_utf", data=fixed_utf)


def enum_compound(p: Path) -> None:
    """An enum with a 255 member (chunked), compounds with big-endian, string and array
    members, a nested compound, a scalar compound, a compound with never-written chunks and a
    fill value."""
    with h5py.File(p, "w") as f:
        e = h5py.enum_dtype({"LAND": 0, "SEA": 1, "ICE": 255}, basetype="u1")
        f.create_dataset("flag", data=np.array([0, 1, 255, 1], "u1"), dtype=e, chunks=(2,))
        ct = np.dtype([("a", "<i4"), ("b", ">f8"), ("c", "S3"), ("d", "<u2", (2,))])
        arr = np.zeros(3, ct)
        arr["a"], arr["b"], arr["c"] = [1, 2, 3], [0.5, np.nan, -1], [b"x", b"yz", b"abc"]
        arr["d"] = [[1, 2], [3, 4], [5, 6]]
        f.create_dataset("comp", data=arr, chunks=(2,))
        nested = np.zeros(2, np.dtype([("p", "<f4"), ("q", np.dtype([("r", "i1"), ("s", "<i8")]))]))
        nested["p"], nested["q"]["r"], nested["q"]["s"] = [1, 2], [3, -4], [5, 2**40]
        f.create_dataset("nested", data=nested)
        f.create_dataset("scomp", data=arr[0])
        flat = np.dtype([("i", "<i4"), ("x", "<f8")])
        c = f.create_dataset("cfill", shape=(6,), dtype=flat, chunks=(2,),
                             fillvalue=np.array((7, 1.5), flat))  # fmt: skip
        c[0] = (1, 2.0)


def scalars_empty(p: Path) -> None:
    """Scalars (one never written), zero-size datasets (contiguous, chunked, NaN fill)."""
    with h5py.File(p, "w") as f:
        f.create_dataset("s", data=np.float32(3.5)).attrs["units"] = "K"
        f.create_dataset("si", data=np.int64(-7))
        f.create_dataset("z", shape=(0,), dtype="f4")
        f.create_dataset("zc", shape=(0, 3), dtype="i2", chunks=(4, 3), maxshape=(None, 3))
        f.create_dataset("zcf", shape=(0,), dtype="f8", chunks=(4,), maxshape=(None,),
                         fillvalue=np.nan)  # fmt: skip
        f.create_dataset("sfill", shape=(), dtype="i4", fillvalue=42)


def unwritten(p: Path) -> None:
    """Never-written chunked datasets (default, custom, NaN fill; with a matching
    ``_FillValue``), a never-written contiguous one, one chunk written of a compressed one."""
    with h5py.File(p, "w") as f:
        f.create_dataset("nf", shape=(5, 4), dtype="f4", chunks=(2, 3))
        f.create_dataset("ff", shape=(5, 4), dtype="i2", chunks=(2, 3), fillvalue=-5)
        d = f.create_dataset("ffa", shape=(7,), dtype="f8", chunks=(3,), fillvalue=-9.0)
        d.attrs["_FillValue"] = -9.0
        d[0] = 1.0
        f.create_dataset("cont", shape=(4,), dtype="u2", fillvalue=3)
        f.create_dataset("nanf", shape=(4,), dtype="f4", chunks=(3,), fillvalue=np.nan,
                         compression="gzip")  # fmt: skip
        g = f.create_dataset("partial", shape=(10,), dtype="i4", chunks=(3,), fillvalue=11,
                             compression="gzip")  # fmt: skip
        g[4:5] = 1


def unlimited(p: Path) -> None:
    """An unlimited dimension with partial last chunks, a chunk larger than the data."""
    with h5netcdf.File(p, "w") as f:
        f.dimensions = {"t": None, "x": 3}
        v = f.create_variable("v", ("t", "x"), "f4", chunks=(4, 2))
        f.resize_dimension("t", 7)
        v[:] = np.arange(21, dtype="f4").reshape(7, 3)
        f.create_variable("t", ("t",), "f8")[:] = np.arange(7.0)
        f.create_variable("wchunk", ("t",), "i8", chunks=(1000,))[:] = np.arange(7)


def times(p: Path) -> None:
    """Calendars (noleap, 360_day, julian, proleptic), year-1 and ``Z`` units, time with
    ``_FillValue``, a duration."""
    with netCDF4.Dataset(p, "w") as f:
        f.createDimension("t", 4)
        for name, units, calendar, values in [
            ("noleap", "days since 2000-01-01", "noleap", [0, 59, 365, 1000]),
            ("d360", "days since 2000-01-01", "360_day", [0, 29, 30, 359]),
            ("julian", "days since 1582-10-01", "julian", [0, 3, 10, 20]),
            ("y1", "days since 1-1-1", "standard", [0, 1, 365, 700000]),
            ("zulu", "hours since 1970-01-01T00:00:00Z", "gregorian", [0, 1, 24, 500000]),
            ("prolep", "seconds since 1970-01-01 00:00:00", "proleptic_gregorian",
             [0, 1, -86400, 1e9]),
        ]:  # fmt: skip
            v = f.createVariable(name, "f8", ("t",))
            v.units, v.calendar = units, calendar
            v[:] = values
        tf = _no_auto(f.createVariable("tfill", "i4", ("t",), fill_value=np.int32(-1)))
        tf.units = "days since 2000-01-01"
        tf[:] = np.array([0, -1, 5, 10], "i4")
        dt = f.createVariable("dt", "f4", ("t",))
        dt.units = "seconds"
        dt[:] = [0, 1.5, 60, 3600]


def time_attrs(p: Path) -> None:
    """Time attributes as HDF5 writers leave them: bytes units, a NUL-padded fixed-size
    calendar, a one-element array of units; packed time with ``_FillValue``, 360_day from
    year 1, a NaN-filled float32 time, a duration with ``_FillValue``."""
    with h5py.File(p, "w") as f:
        t = f.create_dataset("t", data=np.array([0, 1, 2], "i4"))
        t.attrs["units"] = np.bytes_(b"days since 2001-01-01 00:00:00")
        t.attrs["calendar"] = np.array(b"noleap\x00\x00", "S8")
        t.make_scale("t")
        f.create_dataset("v", data=np.array([1.0, 2.0, 3.0], "f4")).dims[0].attach_scale(t)
        t2 = f.create_dataset("t2", data=np.array([0.0, 1.5, np.nan], "f4"))
        t2.attrs["units"] = "hours since 1970-01-01T00:00:00Z"
        t2.attrs["_FillValue"] = np.float32(np.nan)
        t3 = f.create_dataset("t3", data=np.array([-1, 10, 20], "i8"))
        t3.attrs["units"] = "seconds since 1993-01-01"
        t3.attrs["_FillValue"] = np.int64(-1)
        t3.attrs["scale_factor"] = np.float64(0.5)
        t4 = f.create_dataset("t4", data=np.array([0, 360, 720], "i2"))
        t4.attrs["units"] = "days since 1-1-1 00:00:0.0"
        t4.attrs["calendar"] = "360_day"
        d = f.create_dataset("dur", data=np.array([1, 2, -9999], "i4"))
        d.attrs["units"] = "minutes"
        d.attrs["_FillValue"] = np.int32(-9999)
        e = f.create_dataset("tstr", data=np.array([0, 1], "u2"))
        e.attrs["units"] = np.array([b"days since 2000-1-1"], "S19")


def extreme_fills(p: Path) -> None:
    """Fill values at the ends of int64 / uint64 (past 2**53), netCDF's float32 default fill,
    a float64 ``_FillValue`` on float32, one-element array attributes, a NaN ``scale_factor``,
    -0.0 and infinities, booleans, ``missing_value`` holding the fill."""
    with h5py.File(p, "w") as f:
        low = -9223372036854775806
        d = f.create_dataset("i64", data=np.array([low, 1, 2**62 + 1], "i8"), chunks=(2,),
                             fillvalue=low)  # fmt: skip
        d.attrs["_FillValue"] = np.int64(low)
        d.attrs["valid_max"] = np.int64(2**62 + 3)
        high = 18446744073709551614
        u = f.create_dataset("u64", data=np.array([high, 5, 2**60 + 7], "u8"), chunks=(2,),
                             maxshape=(None,), fillvalue=high)  # fmt: skip
        u.attrs["_FillValue"] = np.uint64(high)
        u.resize((5,))
        g = f.create_dataset("f32def", data=np.array([9.96921e36, 1.5, 2.25], "f4"))
        g.attrs["_FillValue"] = np.float32(9.96921e36)
        h = f.create_dataset("f32fv64", data=np.array([-999.0, 1.5, 2.25], "f4"))
        h.attrs["_FillValue"] = np.float64(-999.0)
        k = f.create_dataset("i2arr", data=np.array([1, 2, -32767], "i2"))
        k.attrs["_FillValue"] = np.array([-32767], "i2")
        k.attrs["scale_factor"] = np.array([0.1], "f4")
        k.attrs["add_offset"] = np.int16(5)
        m = f.create_dataset("negz", data=np.array([0.0, -0.0, np.inf, -np.inf], "f8"))
        m.attrs["valid_min"] = -0.0
        m.attrs["valid_max"] = np.inf
        m.attrs["big"] = np.float32(3.4028235e38)
        m.attrs["tiny"] = np.float32(1e-45)
        n = f.create_dataset("nanpack", data=np.array([1, 2, 3], "i2"))
        n.attrs["_FillValue"] = np.int16(2)
        n.attrs["scale_factor"] = np.float32(np.nan)
        f.create_dataset("bool", data=np.array([True, False, True]))
        b = f.create_dataset("u1fill", data=np.array([0, 255, 7], "u1"), chunks=(2,),
                             fillvalue=255)  # fmt: skip
        b.attrs["_FillValue"] = np.uint8(255)
        b.attrs["missing_value"] = np.array([7, 255], "u1")


def string_fills(p: Path) -> None:
    """Byte strings with a text ``_FillValue`` equal to some values (and to the storage fill
    of chunks past a resize), with a storage fill only, with ``_Encoding``; 2-D chars; a long ASCII variable-length
    string; variable-length strings with a ``_FillValue`` (in their own group)."""
    with h5py.File(p, "w") as f:
        c = f.create_dataset("s_cf", data=np.array([b"ab", b"", b"cd"], "S2"))
        c.attrs["_Encoding"] = "utf-8"
        s = f.create_dataset("s_fill", data=np.array([b"ab", b"zz", b"cd"], "S2"),
                             fillvalue=b"zz", chunks=(2,), maxshape=(None,))  # fmt: skip
        s.attrs["_FillValue"] = np.bytes_(b"zz")
        s.resize((5,))
        q = f.create_dataset("s_storefill", data=np.array([b"ab", b"qq"], "S2"), fillvalue=b"qq",
                             chunks=(2,), maxshape=(None,))  # fmt: skip
        q.resize((5,))
        c2 = f.create_dataset("s2d", data=np.array([[b"a", b"b"], [b"c", b""]], "S1"))
        c2.attrs["_Encoding"] = "ascii"
        f.create_dataset("long", data=np.array(["x" * 300, "y"], object),
                         dtype=h5py.string_dtype("ascii"))  # fmt: skip
        v = f.create_group("vlen").create_dataset("vfill", shape=(5,), chunks=(2,),
                                                  dtype=h5py.string_dtype("utf-8"))  # fmt: skip
        v[0], v[1], v[2] = "a", "ñ", "N/A"
        v.attrs["_FillValue"] = "N/A"


def cf_groups(p: Path) -> None:
    """``bounds``, ``coordinates`` and ``grid_mapping`` naming variables of a parent group,
    dimensions inherited two levels down."""
    with netCDF4.Dataset(p, "w") as f:
        for name, size in (("x", 3), ("y", 2), ("nv", 2)):
            f.createDimension(name, size)
        x = f.createVariable("x", "f8", ("x",))
        x[:], x.bounds = [1, 2, 3], "x_bnds"
        f.createVariable("x_bnds", "f8", ("x", "nv"))[:] = [[0.5, 1.5], [1.5, 2.5], [2.5, 3.5]]
        f.createVariable("lat", "f4", ("y", "x"))[:] = np.arange(6).reshape(2, 3)
        f.createVariable("crs", "i4", ()).grid_mapping_name = "latitude_longitude"
        g = f.createGroup("sub")
        g.createDimension("z", 4)
        v = g.createVariable("v", "f4", ("y", "x"))
        v[:], v.coordinates, v.grid_mapping = np.ones((2, 3)), "lat", "crs"
        g.createVariable("z", "i4", ("z",))[:] = [10, 20, 30, 40]
        g.createVariable("w", "f8", ("z", "x"))[:] = np.arange(12).reshape(4, 3)
        g.createGroup("deeper").createVariable("q", "i2", ("z",))[:] = [1, 2, 3, 4]


def shared_scales(p: Path) -> None:
    """Dimension scales of the root attached to datasets of a child group too."""
    with h5py.File(p, "w") as f:
        x = f.create_dataset("x", data=np.arange(4.0))
        x.make_scale("x")
        f.create_dataset("a", data=np.arange(4)).dims[0].attach_scale(x)
        g = f.create_group("child")
        b = g.create_dataset("b", data=np.arange(8).reshape(4, 2))
        b.dims[0].attach_scale(x)
        y = g.create_dataset("y", data=np.array([5, 6]))
        y.make_scale("y")
        b.dims[1].attach_scale(y)
        g.create_dataset("c", data=np.arange(4.0) * 2).dims[0].attach_scale(x)


def filters(p: Path) -> None:
    """fletcher32 (alone, after gzip + shuffle), scale-offset (integer, float, with a fill),
    lzf, n-bit, and the hdf5plugin filters."""
    import hdf5plugin

    data = np.linspace(-5, 5, 120, dtype="f4").reshape(12, 10)
    ints = (np.arange(120) % 37).astype("i4").reshape(12, 10)
    with h5py.File(p, "w") as f:
        f.create_dataset("fl32", data=data, chunks=(5, 4), fletcher32=True)
        f.create_dataset("fl32gz", data=ints, chunks=(5, 4), fletcher32=True, compression="gzip",
                         shuffle=True)  # fmt: skip
        f.create_dataset("soi", data=ints, chunks=(5, 4), scaleoffset=0)
        f.create_dataset("sof", data=data, chunks=(5, 4), scaleoffset=2)
        f.create_dataset("sofill", data=ints, chunks=(5, 4), scaleoffset=0, fillvalue=36)
        f.create_dataset("lzf", data=data, chunks=(5, 4), compression="lzf")
        f.create_dataset("nbit", data=np.arange(10, dtype="f4"), chunks=(4,),
                         compression=h5py.h5z.FILTER_NBIT)  # fmt: skip
        f.create_dataset("bshuf", data=data, chunks=(5, 4), **hdf5plugin.Bitshuffle())
        f.create_dataset("zstd", data=ints, chunks=(5, 4), **hdf5plugin.Zstd())
        f.create_dataset("lz4", data=data, chunks=(5, 4), **hdf5plugin.LZ4())
        f.create_dataset("blosc2", data=data, chunks=(5, 4), **hdf5plugin.Blosc2())
        f.create_dataset("bz2", data=ints, chunks=(5, 4), **hdf5plugin.BZip2())


def names(p: Path) -> None:
    """Names with a space, non-ASCII letters, a leading dot, ``%``, ``:``, a group and a
    dataset of one name (``x/x``), a group name with a space."""
    with h5py.File(p, "w") as f:
        f.create_dataset("a b", data=np.arange(3))
        f.create_dataset("ünï", data=np.arange(2.0))
        f.create_dataset(".hidden", data=np.arange(4))
        g = f.create_group("x")
        g.create_dataset("y", data=np.array([1, 2], "i1"))
        g.create_dataset("x", data=np.array([7.5]))
        f.create_dataset("per%cent", data=np.arange(2))
        f.create_group("g r").create_dataset("d:e", data=np.arange(5))


def cube_member(p: Path, day: int) -> None:
    """One granule of a daily datacube: two steps of a noleap time (``_FillValue`` too),
    float32-packed int16 with ``_FillValue``, ``_Unsigned`` bytes with a ``_FillValue`` and
    ``valid_range``, a big-endian variable, a chunk never written on odd days."""
    with netCDF4.Dataset(p, "w") as f:
        f.createDimension("time", None)
        f.createDimension("x", 5)
        t = _no_auto(f.createVariable("time", "i4", ("time",), fill_value=np.int32(-1)))
        t.units, t.calendar = "days since 2001-02-27", "noleap"
        t[:] = [2 * day, 2 * day + 1]
        x = f.createVariable("x", "f8", ("x",))
        x[:] = np.arange(5.0)
        tas = _no_auto(f.createVariable("tas", "i2", ("time", "x"), fill_value=np.int16(-32767),
                                        chunksizes=(1, 3)))  # fmt: skip
        tas.scale_factor, tas.add_offset = np.float32(0.01), np.float32(273.15)
        tas[0, :] = np.array([0, 100, -32767, 250, -250], "i2") + day
        if day % 2 == 0:
            tas[1, :] = np.array([1, 2, 3, 4, 5], "i2")
        else:
            tas[1, :3] = np.array([1, 2, 3], "i2")  # chunk (1, 1) never written
        flag = _no_auto(f.createVariable("flag", "i1", ("time", "x"), fill_value=np.int8(-1)))
        flag._Unsigned, flag.valid_range = "true", np.array([0, 100], "i1")
        flag[:] = np.array([[-1, 0, 1, -56, 127], [5, -1, -2, 3, 4]], "i1")
        be = f.createVariable("be", np.dtype(">f4"), ("time",), endian="big")
        be[:] = [day + 0.5, -day - 0.25]


#: file name -> builder
BUILDERS: dict[str, Callable[[Path], None]] = {
    f"{fn.__name__}.nc": fn
    for fn in (unsigned_packed, nan_fill, big_endian, chars, vlen_strings, enum_compound,
               scalars_empty, unwritten, unlimited, times, time_attrs, extreme_fills,
               string_fills, cf_groups, shared_scales, filters, names)
}  # fmt: skip
