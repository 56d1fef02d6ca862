"""Each use of another library's private API (``h5sidecar._compat``) on the installed versions.

An upgrade that removes or changes one of them fails the test named for it here, instead of
some path far from the cause.  ``make test-upstream`` runs this module against the newest
releases of xarray, zarr, s3fs, fsspec, h5py and h5netcdf.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
from fsspec.exceptions import FSTimeoutError
from xarray.backends import BackendArray
from xarray.backends.store import StoreBackendEntrypoint
from xarray.core import indexing

from h5sidecar._compat import fsspec as c_fsspec
from h5sidecar._compat import h5netcdf as c_h5netcdf
from h5sidecar._compat import h5py as c_h5py
from h5sidecar._compat import s3fs as c_s3fs
from h5sidecar._compat import stdlib as c_stdlib
from h5sidecar._compat import xarray as c_xarray
from h5sidecar._compat import zarr as c_zarr


# -- versions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", [c_xarray, c_h5py], ids=["xarray", "h5py"])
def test_installed_version_was_checked(module: object) -> None:
    """Outside the checked range the private paths are off: widen the range once checked."""
    assert module.IN_CHECKED, f"{module.__name__}: installed version not in {module.CHECKED}"  # type: ignore[attr-defined]


def test_installed_s3fs_zarr_and_h5netcdf_were_checked() -> None:
    import zarr

    assert c_s3fs.in_checked()
    assert c_h5netcdf.in_checked()
    assert zarr.__version__ in c_zarr.CHECKED


# -- xarray ---------------------------------------------------------------------------------------
class _Backend(BackendArray):
    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.shape = values.shape
        self.dtype = values.dtype
        self.reads = 0

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                  self._raw)

    def _raw(self, key: tuple) -> np.ndarray:
        self.reads += 1
        return self.values[key]


def _wrapped(values: np.ndarray) -> tuple[xr.Variable, _Backend]:
    backend = _Backend(values)
    lazy = indexing.LazilyIndexedArray(backend)
    var = xr.Variable(("x",), indexing.MemoryCachedArray(indexing.CopyOnWriteArray(lazy)))
    return var, backend


def test_construct_dataset_equals_the_public_constructor() -> None:
    assert c_xarray.CONSTRUCT_DIRECT
    x = xr.Variable(("x",), np.arange(3.0))
    v = xr.Variable(("x", "y"), np.ones((3, 2)), {"units": "m"})
    ours = c_xarray.construct_dataset(variables={"v": v, "x": x}, coord_names={"x"},
                                      dims={"x": 3, "y": 2}, attrs={"title": "t"}, indexes={},
                                      encoding={"source": "s"})
    public = xr.Dataset({"v": v}, coords=xr.Coordinates({"x": x}, indexes={}),
                        attrs={"title": "t"})
    xr.testing.assert_identical(ours, public)
    assert ours.encoding == {"source": "s"} and not ours.xindexes


def test_normalize_source_path_is_what_open_datatree_records(tmp_path: Path) -> None:
    assert c_xarray.NORMALIZE_PATH
    rel = os.path.relpath(tmp_path / "a.h5.parq")
    assert c_xarray.normalize_source_path(rel) == str(tmp_path / "a.h5.parq")
    assert c_xarray.normalize_source_path(tmp_path / "b") == str(tmp_path / "b")
    assert c_xarray.normalize_source_path("s3://bucket/a.h5.parq") == "s3://bucket/a.h5.parq"


def test_variable_data_does_not_load() -> None:
    var, backend = _wrapped(np.arange(4))
    assert type(c_xarray.variable_data(var)) is indexing.MemoryCachedArray
    assert backend.reads == 0


def test_cached_lazy_array_unwraps_xarrays_chain_and_nothing_else() -> None:
    var, backend = _wrapped(np.arange(4))
    lazy = c_xarray.cached_lazy_array(var)
    assert lazy is not None and lazy.array is backend
    assert isinstance(lazy.key, indexing.BasicIndexer)
    assert c_xarray.cached_lazy_array(xr.Variable(("x",), np.arange(4))) is None
    assert c_xarray.is_in_memory_or_cached(var)
    assert c_xarray.is_in_memory_or_cached(xr.Variable(("x",), np.arange(4)))


def test_set_loaded_data_leaves_the_variable_as_load_leaves_it() -> None:
    var, backend = _wrapped(np.arange(4))
    cache = c_xarray.variable_data(var)
    c_xarray.set_loaded_data(var, np.arange(4) * 10)
    np.testing.assert_array_equal(var.values, np.arange(4) * 10)
    np.testing.assert_array_equal(cache.get_duck_array(), np.arange(4) * 10)  # the cache too
    assert backend.reads == 0
    # as xarray's own load leaves it
    ref, ref_backend = _wrapped(np.arange(4) * 10)
    ref_cache = c_xarray.variable_data(ref)
    ref.load()
    assert type(c_xarray.variable_data(ref)) is type(c_xarray.variable_data(var)) is np.ndarray
    assert type(ref_cache.array) is type(cache.array)
    np.testing.assert_array_equal(ref_cache.get_duck_array(), cache.get_duck_array())
    assert ref_backend.reads == 1


def test_protect_variables_wraps_as_xarrays_openers() -> None:
    var, _ = _wrapped(np.arange(3))
    ds = xr.Dataset({"v": xr.Variable(("x",), c_xarray.cached_lazy_array(var))},
                    coords={"x": np.arange(3)})
    c_xarray.protect_variables(ds, cache=True)
    assert type(c_xarray.variable_data(ds["v"].variable)) is indexing.MemoryCachedArray
    assert c_xarray.cached_lazy_array(ds["v"].variable) is not None
    assert isinstance(c_xarray.variable_data(ds["x"].variable), indexing.PandasIndexingAdapter)
    c_xarray.protect_variables(ds2 := xr.Dataset({"v": ("x", np.arange(3))}), cache=False)
    assert type(c_xarray.variable_data(ds2["v"].variable)) is indexing.CopyOnWriteArray


@pytest.mark.parametrize("key", [(slice(1, 7, 2), 3), (slice(None), slice(2, 3)), (4, -1)])
def test_split_basic_key_reads_what_explicit_indexing_adapter_reads(key: tuple) -> None:
    values = np.arange(40).reshape(10, 4)
    basic = indexing.BasicIndexer(key)
    raw, in_memory = c_xarray.split_basic_key(basic, values.shape)
    assert isinstance(raw, indexing.BasicIndexer)
    got = c_xarray.apply_in_memory_key(values[raw.tuple], in_memory)
    want = indexing.explicit_indexing_adapter(basic, values.shape, indexing.IndexingSupport.BASIC,
                                              values.__getitem__)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, values[key])


def test_calculate_dimensions_and_explicitly_indexed_are_what_the_constructor_sees() -> None:
    variables = {"v": xr.Variable(("x", "y"), np.ones((3, 2))), "x": xr.Variable(("x",), [1, 2, 3])}
    assert c_xarray.calculate_dimensions(variables) == dict(xr.Dataset(variables).sizes)
    with pytest.raises(ValueError):
        c_xarray.calculate_dimensions({**variables, "w": xr.Variable(("x",), [1, 2])})
    var, _ = _wrapped(np.arange(4))
    assert c_xarray.is_explicitly_indexed(c_xarray.variable_data(var))
    assert c_xarray.is_explicitly_indexed(c_xarray.cached_lazy_array(var))
    assert not c_xarray.is_explicitly_indexed(np.arange(4))


@pytest.mark.parametrize(("units", "calendar"), [("days since 2000-01-01", "standard"),
                                                  ("hours since 1999-12-31 12:00", "noleap")])
def test_cf_datetime_converters_decode_as_decode_cf_and_encode_exactly_or_warn(
    units: str, calendar: str
) -> None:
    raw = np.array([0, 36, 59 * 24], "i4")
    dates = c_xarray.decode_cf_datetime(raw, units, calendar)
    public = xr.decode_cf(xr.Dataset({"t": ("t", raw, {"units": units, "calendar": calendar})}))
    np.testing.assert_array_equal(dates, public["t"].values)  # as open_dataset decodes them
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # units that hold the dates: no warning, those units
        num, got_units, got_calendar = c_xarray.encode_cf_datetime(dates, units, calendar,
                                                                   np.dtype("i4"))
    assert got_calendar == calendar and num.dtype.kind == "i"
    np.testing.assert_array_equal(c_xarray.decode_cf_datetime(num, got_units, calendar), dates)
    coarse = "days since 1999-01-01 06:00"  # every date a fraction of a day after it
    with pytest.warns(UserWarning):  # what _cube_time reads as "not exact"
        num, got_units, _ = c_xarray.encode_cf_datetime(dates, coarse, calendar, np.dtype("i4"))
    assert got_units != coarse
    np.testing.assert_array_equal(c_xarray.decode_cf_datetime(num, got_units, calendar), dates)


def test_zarr_store_adapter_passes_every_variable_through_its_hook(tmp_path: Path) -> None:
    import zarr

    xr.Dataset({"v": ("x", np.arange(5, dtype="i2"))}).to_zarr(tmp_path / "z", zarr_format=2,
                                                                consolidated=True)
    seen: list[str] = []

    class Store(c_xarray.ZarrStoreAdapter):
        def adapt_variable(self, name: str, var: xr.Variable) -> xr.Variable:
            seen.append(name)
            return xr.Variable(var.dims, c_xarray.variable_data(var), {"hooked": 1}, var.encoding)

    store = Store(zarr.open_group(tmp_path / "z", mode="r"), mode="r")
    ds = StoreBackendEntrypoint().open_dataset(store)
    assert seen == ["v"] and ds["v"].attrs == {"hooked": 1}
    xr.testing.assert_equal(ds.load(), xr.open_zarr(tmp_path / "z").load().drop_attrs())


def test_zarr_backend_names() -> None:
    import zarr

    assert c_xarray.ZARR_DIMENSION_KEY == "_ARRAY_DIMENSIONS"
    arr = zarr.create_array(zarr.storage.MemoryStore(), shape=(4,), chunks=(2,), dtype="i4")
    arr[:] = np.arange(4)
    wrapper = c_xarray.ZarrArrayWrapper(arr)
    key = indexing.BasicIndexer((slice(1, 3),))
    np.testing.assert_array_equal(wrapper[key], [1, 2])
    frozen = c_xarray.FrozenDict({"a": 1})
    assert dict(frozen) == {"a": 1} and not hasattr(frozen, "__setitem__")


# -- zarr -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("zarray", "expected"), [
    ({"dtype": "<f8", "fill_value": "NaN"}, np.nan),
    ({"dtype": "<i4", "fill_value": -7}, -7),
    ({"dtype": "|S4", "fill_value": "YWJjZA=="}, b"abcd"),
    ({"dtype": "<f4", "fill_value": None}, None),
])
def test_v2_fill_value_as_zarr_parses_it(zarray: dict, expected: object) -> None:
    doc = {"zarr_format": 2, "shape": [4], "chunks": [2], "order": "C", "compressor": None,
           "filters": None, **zarray}
    got = c_zarr.v2_fill_value(doc)
    if expected is None:
        assert got is None
    elif isinstance(expected, float) and np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == expected


@pytest.mark.parametrize(("filters", "fill", "expected"), [
    ([{"id": "vlen-utf8"}], None, ""),
    ([{"id": "vlen-utf8"}], "n/a", "n/a"),
    ([{"id": "vlen-bytes"}], None, None),  # Python objects (bytes): left to zarr
])
def test_v2_string_dtype_is_what_zarr_reads(filters: list, fill: object, expected: object) -> None:
    import json

    import zarr
    import zarr.buffer

    doc = {"zarr_format": 2, "shape": [3], "chunks": [2], "order": "C", "compressor": None,
           "filters": filters, "dtype": "|O", "fill_value": fill}
    got = c_zarr.v2_string_dtype(doc)
    store = zarr.storage.MemoryStore()
    asyncio.run(store.set(".zarray", zarr.buffer.default_buffer_prototype().buffer.from_bytes(
        json.dumps(doc).encode())))
    read = zarr.open_array(store, mode="r", zarr_format=2)[:]  # no chunk written: all fill
    if expected is None:
        assert got is None and read.dtype == np.dtype(object)
        return
    assert got is not None and got[0] == read.dtype and got[1] == expected
    assert read.tolist() == [expected] * 3


def test_validate_array_v3_metadata_accepts_zarrs_own_and_refuses_garbage() -> None:
    import json

    import zarr
    import zarr.buffer

    store = zarr.storage.MemoryStore()
    zarr.create_array(store, shape=(4,), chunks=(2,), dtype="f4", zarr_format=3)
    doc = json.loads(asyncio.run(store.get("zarr.json", zarr.buffer.default_buffer_prototype()))
                     .to_bytes())
    c_zarr.validate_array_v3_metadata(doc)
    with pytest.raises((ValueError, TypeError, KeyError)):
        c_zarr.validate_array_v3_metadata({**doc, "shape": "four"})


def test_numcodecs_codec_bases_are_zarrs_own(recwarn: pytest.WarningsRecorder) -> None:
    """A subclass named ``x`` is the v3 codec ``numcodecs.x``, as zarr's own wrappers are."""
    import zarr.codecs.numcodecs as zn

    assert issubclass(zn.Zlib, c_zarr.NumcodecsBytesBytesCodec)
    assert issubclass(zn.Delta, c_zarr.NumcodecsArrayArrayCodec)

    class Zlib(c_zarr.NumcodecsBytesBytesCodec, codec_name="zlib"):
        pass

    assert Zlib.codec_name == "numcodecs.zlib"
    codec = Zlib(level=1)  # zarr warns that numcodecs codecs are not in the v3 spec
    assert codec.to_dict() == {"name": "numcodecs.zlib", "configuration": {"level": 1}}


# -- h5netcdf -------------------------------------------------------------------------------------
def _unlimited_file(path: Path) -> None:
    """An unlimited dimension at the root used by variables of two lengths in a subgroup, and
    one of the subgroup's own."""
    import h5netcdf

    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"t": None, "x": 4}
        g = f.create_group("g")
        g.dimensions = {"s": None}
        for name in ("a", "b"):
            g.create_variable(name, ("t",), "f4")
        g.create_variable("w", ("s", "x"), "i2")
        f.create_variable("r", ("t",), "f8")
    with h5py.File(path, "a") as f:  # unlimited: each variable its own length
        for name, shape in (("g/a", (3,)), ("g/b", (5,)), ("g/w", (7, 4))):
            f[name].resize(shape)
            f[name][...] = np.arange(np.prod(shape)).reshape(shape)


def test_freeze_dimension_sizes_gives_h5netcdfs_sizes_once(tmp_path: Path) -> None:
    import h5netcdf

    _unlimited_file(tmp_path / "u.nc")
    with h5netcdf.File(tmp_path / "u.nc", "r") as plain, \
            h5netcdf.File(tmp_path / "u.nc", "r") as frozen:  # fmt: skip
        c_h5netcdf.freeze_dimension_sizes(frozen["g"])
        for name in ("g/a", "g/b", "g/w", "r"):
            assert frozen[name].shape == plain[name].shape, name
        assert frozen["g/b"].shape == (5,) and frozen["g/w"].shape == (7, 4)
        for group in (frozen, frozen["g"]):  # the group and its parents
            for dim in group.dimensions.values():
                assert type(dim) is not h5netcdf.dimensions.Dimension
                assert "_h5sidecar_size" in dim.__dict__  # computed once, then kept
        for dim in plain["g"].dimensions.values():  # another file's objects are untouched
            assert type(dim) is h5netcdf.dimensions.Dimension


def test_freeze_dimension_sizes_leaves_a_writable_file_alone(tmp_path: Path) -> None:
    import h5netcdf

    _unlimited_file(tmp_path / "u.nc")
    with h5netcdf.File(tmp_path / "u.nc", "a") as f:
        c_h5netcdf.freeze_dimension_sizes(f["g"])
        assert type(f.dimensions["t"]) is h5netcdf.dimensions.Dimension
        f["g/b"]._h5ds.resize((9,))  # a writer growing a variable on "t"
        assert f["g/a"].shape == (9,)  # sizes still follow the file


# -- h5py and libhdf5 -----------------------------------------------------------------------------
def test_creation_plist_is_h5pys_cached_copy(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "a.h5", "w") as f:
        d = f.create_dataset("d", shape=(10,), dtype="f4", chunks=(5,), compression="gzip")
        plist = c_h5py.creation_plist(d)
        assert plist is c_h5py.creation_plist(d)  # one copy per Dataset object
        fresh = d.id.get_create_plist()
        assert plist.get_chunk() == fresh.get_chunk() == (5,)
        assert plist.get_nfilters() == fresh.get_nfilters() == 1


def test_open_member_gives_what_group_getitem_gives(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("g/d", data=np.arange(6, dtype="i2").reshape(2, 3))
        f["t"] = np.dtype("<f8")  # a committed datatype
    with h5py.File(tmp_path / "a.h5", "r") as f:
        for name in (b"g", b"t"):
            got, want = c_h5py.open_member(f, name, True), f[name]
            assert type(got) is type(want) and got == want
        d = c_h5py.open_member(f["g"], b"d", True)
        assert type(d) is h5py.Dataset and d == f["g/d"] and d.shape == (2, 3)
        np.testing.assert_array_equal(d[()], f["g/d"][()])
        with pytest.raises(KeyError):
            c_h5py.open_member(f, b"absent", True)


@pytest.mark.parametrize(("libver", "maxshape", "expected"), [
    ("earliest", (None,), 0),  # H5D_CHUNK_IDX_BTREE (H5Dpublic.h)
    ("latest", (20,), 3),  # H5D_CHUNK_IDX_FARRAY
    ("latest", (None,), 4),  # H5D_CHUNK_IDX_EARRAY
    ("latest", (None, None), 5),  # H5D_CHUNK_IDX_BT2
])
def test_chunk_index_code_through_h5pys_libhdf5(tmp_path: Path, libver: str,
                                                maxshape: tuple, expected: int) -> None:
    assert c_h5py.hdf5_library() is not None
    shape = (20,) * len(maxshape)
    with h5py.File(tmp_path / "a.h5", "w", libver=libver) as f:
        d = f.create_dataset("d", shape=shape, dtype="f4", chunks=(5,) * len(shape),
                              maxshape=maxshape)
        assert c_h5py.chunk_index_code(d.id) == expected


def test_chunk_opts_reads_what_was_set(tmp_path: Path) -> None:
    lib = c_h5py.hdf5_library()
    assert lib is not None
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((5,))
    assert c_h5py.chunk_opts(dcpl) == 0
    lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    assert lib.H5Pset_chunk_opts(dcpl.id, 0x2) >= 0
    assert c_h5py.chunk_opts(dcpl) == 0x2


def test_h5py_lock_is_h5pys_reentrant_lock(tmp_path: Path) -> None:
    with c_h5py.h5py_lock(), c_h5py.h5py_lock(), h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = 1  # h5py takes the same lock inside: reentrant
    held = threading.Event()
    free = threading.Event()

    def hold() -> None:
        with c_h5py.h5py_lock():
            held.set()
            free.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    started = time.monotonic()
    free.set()
    with h5py.File(tmp_path / "a.h5", "r") as f:  # waits for the other thread's lock
        assert f["x"][()] == 1
    t.join()
    assert time.monotonic() - started < 5


# -- s3fs -----------------------------------------------------------------------------------------
def test_s3_get_object_answers_bytes_with_their_etag(s3, s3_bucket: str) -> None:  # type: ignore[no-untyped-def]
    s3.pipe(f"{s3_bucket}/a.bin", b"hello")
    assert c_s3fs.get_object_available(s3)

    async def get() -> tuple[dict, bytes]:
        resp = await c_s3fs.s3_get_object(s3, f"{s3_bucket}/a.bin")
        try:
            return resp, await resp["Body"].read()
        finally:
            resp["Body"].close()

    resp, data = c_fsspec.run_sync(get, loop=s3.loop)
    assert data == b"hello"
    assert resp["ETag"] == s3.info(f"{s3_bucket}/a.bin")["ETag"]
    assert resp["ContentLength"] == 5


def test_list_objects_pages_is_s3fss_listing(s3, s3_bucket: str) -> None:  # type: ignore[no-untyped-def]
    for name in ("a/1", "a/2", "a/b/3", "c"):
        s3.pipe(f"{s3_bucket}/{name}", b"x")
    s3.invalidate_cache()

    def listed(delimiter: str, prefix: str) -> list[tuple[str, str]]:
        pages = c_s3fs.list_objects_pages(s3, s3_bucket, delimiter=delimiter, prefix=prefix)
        assert pages is not None

        async def take() -> list[tuple[str, str]]:
            return [(i["name"], i["type"]) async for i in pages]

        return sorted(c_fsspec.run_sync(take, loop=s3.loop))

    everything = listed("", "a/")
    assert everything == sorted((p, "file") for p in s3.find(f"{s3_bucket}/a/"))
    assert listed("/", "a/") == sorted(
        (i["name"].rstrip("/"), i["type"]) for i in s3.ls(f"{s3_bucket}/a/", detail=True))
    from fsspec.implementations.local import LocalFileSystem

    assert c_s3fs.list_objects_pages(LocalFileSystem(), "x", delimiter="", prefix="") is None


# -- the standard library -------------------------------------------------------------------------
def test_kill_pool_workers_ends_a_busy_worker_now() -> None:
    pool = ProcessPoolExecutor(max_workers=1)
    try:
        pool.submit(os.getpid).result(timeout=60)  # the worker is up
        future = pool.submit(time.sleep, 60)
        started = time.monotonic()
        c_stdlib.kill_pool_workers(pool)
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=30)
        assert time.monotonic() - started < 30
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- the sync bridge ------------------------------------------------------------------------------
def test_run_sync_runs_on_fsspecs_io_loop() -> None:
    import fsspec.asyn

    async def where(x: int, *, y: int) -> tuple[asyncio.AbstractEventLoop, int]:
        return asyncio.get_running_loop(), x + y

    loop, total = c_fsspec.run_sync(where, 1, y=2)
    assert loop is c_fsspec.io_loop() is fsspec.asyn.get_loop() and total == 3


def test_run_sync_timeout_and_errors() -> None:
    async def slow() -> None:
        await asyncio.sleep(5)

    async def fails() -> None:
        raise KeyError("k")

    with pytest.raises(FSTimeoutError):
        c_fsspec.run_sync(slow, timeout=0.05)
    with pytest.raises(KeyError):
        c_fsspec.run_sync(fails)
