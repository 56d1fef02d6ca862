"""The native batch reader (``SidecarStore.native``): what the xarray engine reads through.

Values are always compared with h5py; batching, de-duplication and the cache rule are checked
on the fetcher's own counters (local files: one ``pread`` per request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import ChunkDecodeError, InvalidReferenceError
from h5sidecar.read import SidecarStore
from h5sidecar.read._byte_lru import ByteLRU
from h5sidecar.read.native._batch_reader import NativeReader
from h5sidecar.read.native._selection import chunk_selection
from h5sidecar.read.xarray._lazy_array import SidecarArray
from h5sidecar.references import ArrayRefs, ChunkManifest, GranuleRefs
from tests._granules import read_h5

ALL = slice(None)


def _store(refs: GranuleRefs, **kw: Any) -> SidecarStore:
    return SidecarStore(refs, **kw)


# -- values ------------------------------------------------------------------------------------

KEYS_1D: list[tuple[Any, ...]] = [
    (ALL,),
    (slice(1500, 3700),),  # crosses chunk boundaries
    (slice(999, 1001),),
    (slice(10, 4990, 7),),  # a step
    (slice(None, None, -3),),  # a negative step
    (slice(4000, 10),),  # empty
    (4321,),  # an integer drops the axis
    (-1,),
]


@pytest.mark.parametrize("key", KEYS_1D, ids=repr)
@pytest.mark.parametrize(
    "var", ["gt1l/heights/h_ph", "gt1l/heights/quality_ph", "gt1l/heights/lat_ph"]
)
def test_selections_equal_h5py(small_refs: GranuleRefs, small_h5: Path, var: str, key: Any) -> None:
    (got,) = _store(small_refs).native.read_sync([(var, key)])
    want = read_h5(small_h5, var)[key]
    assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape  # native order
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "key",
    [(ALL, ALL), (slice(2, 8), slice(3, 9)), (slice(5, 10), 4), (7, slice(None, None, -1))],
    ids=repr,
)
def test_unstored_chunks_read_as_the_fill_value(
    small_refs: GranuleRefs, small_h5: Path, key: Any
) -> None:
    var = "ancillary_data/sparse"  # 3 of its 4 chunks were never written: fill value -1
    assert small_refs.arrays[var].manifest.n_missing == 3
    (got,) = _store(small_refs).native.read_sync([(var, key)])
    np.testing.assert_array_equal(got, read_h5(small_h5, var)[key])


def test_every_numeric_array_of_a_granule_in_one_batch(
    atl03_refs: GranuleRefs, atl03_h5: Path
) -> None:
    store = _store(atl03_refs)
    paths = [p for p in atl03_refs.arrays if store.native.supports(p)]
    assert len(paths) > 900
    items = [(p, (ALL,) * len(atl03_refs.arrays[p].meta.shape)) for p in paths]
    got = store.native.read_sync(items)
    with h5py.File(atl03_h5, "r") as f:
        for p, values in zip(paths, got, strict=True):
            np.testing.assert_array_equal(values, f[p][()], err_msg=p)
    # one plan for the whole batch: far fewer requests than arrays
    assert store.stats["requests"] < len(paths) / 5


def test_compact_structured_and_scalar_arrays(small_refs: GranuleRefs, small_h5: Path) -> None:
    reader = _store(small_refs).native
    for var in ("ancillary_data/compact_table", "gt1l/geolocation/records",
                "ancillary_data/atlas_sdp_gps_epoch", "gt1l/geolocation/names"):
        shape = small_refs.arrays[var].meta.shape
        (got,) = reader.read_sync([(var, (ALL,) * len(shape))])
        np.testing.assert_array_equal(got, read_h5(small_h5, var), err_msg=var)


# -- batching -----------------------------------------------------------------------------------


def test_reads_in_one_loop_turn_share_one_plan(small_refs: GranuleRefs, small_h5: Path) -> None:
    var = "gt1l/heights/h_ph"

    async def separately(reader: NativeReader) -> None:
        for part in (slice(0, 1000), slice(1000, 2000)):
            await reader.read([(var, (part,))])

    async def together(reader: NativeReader) -> list[Any]:
        return await asyncio.gather(
            reader.read([(var, (slice(0, 1000),))]), reader.read([(var, (slice(1000, 2000),))])
        )

    one = _store(small_refs, chunk_cache=None)
    asyncio.run(separately(one.native))
    two = _store(small_refs, chunk_cache=None)
    (a,), (b,) = asyncio.run(together(two.native))
    assert one.stats["requests"] == 2 and two.stats["requests"] == 1  # adjacent chunks coalesce
    np.testing.assert_array_equal(np.concatenate([a, b]), read_h5(small_h5, var)[:2000])


def test_a_chunk_wanted_twice_is_fetched_once(small_refs: GranuleRefs) -> None:
    var = "gt1l/heights/h_ph"
    store = _store(small_refs, chunk_cache=None)
    whole, part = store.native.read_sync([(var, (slice(0, 1000),)), (var, (slice(10, 20),))])
    assert store.stats["bytes_fetched"] == small_refs.arrays[var].manifest.lengths[0]
    np.testing.assert_array_equal(part, whole[10:20])


def test_a_batch_of_a_few_mib_takes_few_requests(tmp_path: Path) -> None:
    """A batch under 32 x 2 MiB (a read-ahead batch of a per-variable loop) is fetched in
    groups of at least 2 MiB, as a batch of the whole granule is: 12 MB of chunks in 6
    requests or fewer, not one per MiB."""
    from h5sidecar.indexer import index_granule

    path = tmp_path / "noise.h5"
    data = np.random.default_rng(7).normal(size=1_500_000)  # incompressible: 12 MB stored
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=data, chunks=(50_000,), compression="gzip",
                         compression_opts=1)
    refs = index_granule(str(path))
    store = _store(refs, chunk_cache=None)
    (got,) = store.native.read_sync([("v", (ALL,))])
    stored = int(refs.arrays["v"].manifest.lengths.sum())
    assert stored > 11 * 2**20
    assert store.stats["requests"] <= stored // (2 * 2**20) + 1, store.stats["requests"]
    np.testing.assert_array_equal(got, read_h5(path, "v"))


def test_a_bad_key_fails_its_own_caller_only(small_refs: GranuleRefs, small_h5: Path) -> None:
    reader = _store(small_refs).native
    var = "gt1l/heights/h_ph"

    async def both() -> list[Any]:
        return await asyncio.gather(
            reader.read([(var, (10_000,))]), reader.read([(var, (slice(0, 5),))]),
            return_exceptions=True,
        )

    bad, good = asyncio.run(both())
    assert isinstance(bad, IndexError) and "out of bounds" in str(bad)
    np.testing.assert_array_equal(good[0], read_h5(small_h5, var)[:5])


def test_scans_do_not_flush_the_chunk_cache(small_refs: GranuleRefs) -> None:
    var = "gt1l/heights/h_ph"
    size = int(small_refs.arrays[var].manifest.lengths.sum())
    small = ByteLRU[bytes](size * 8)  # the whole array is a small read for this cache
    _store(small_refs, chunk_cache=small).native.read_sync([(var, (ALL,))])
    assert len(small) == 5
    tiny = ByteLRU[bytes](size)  # reading the whole array is a scan for this one
    _store(small_refs, chunk_cache=tiny).native.read_sync([(var, (ALL,))])
    assert len(tiny) == 0
    again = _store(small_refs, chunk_cache=small)
    again.native.read_sync([(var, (ALL,))])
    assert again.stats["cache_hits"] == 5 and again.stats["requests"] == 0


# -- errors -------------------------------------------------------------------------------------


def _shifted(refs: GranuleRefs, var: str, by: int) -> GranuleRefs:
    """``refs`` with ``var``'s chunk offsets moved by ``by`` bytes (wrong bytes, same sizes)."""
    arr = refs.arrays[var]
    m = arr.manifest
    moved = ChunkManifest.from_arrays(
        urls=m.urls, codes=m.codes, offsets=m.offsets + by, lengths=m.lengths, inline=m.inline
    )
    arrays = dict(refs.arrays)
    arrays[var] = ArrayRefs(path=arr.path, meta=arr.meta, manifest=moved)
    return dataclasses.replace(refs, arrays=arrays)


def test_bytes_that_do_not_decode_raise_chunk_decode_error(small_refs: GranuleRefs) -> None:
    var = "gt1l/heights/h_ph"  # gzip: shifted bytes are not a zlib stream
    reader = _store(_shifted(small_refs, var, 3)).native
    with pytest.raises(ChunkDecodeError, match=r"gt1l/heights/h_ph \(0,\) did not decode.*re-index"):
        reader.read_sync([(var, (slice(0, 10),))])


def test_wrong_size_after_decoding_raises(small_refs: GranuleRefs) -> None:
    var = "gt1l/geolocation/segment_id"  # uncompressed: shortened bytes decode to too few
    arr = small_refs.arrays[var]
    m = arr.manifest
    short = ChunkManifest.from_arrays(
        urls=m.urls, codes=m.codes, offsets=m.offsets, lengths=m.lengths - 4, inline=m.inline
    )
    arrays = dict(small_refs.arrays)
    arrays[var] = ArrayRefs(path=arr.path, meta=arr.meta, manifest=short)
    reader = _store(dataclasses.replace(small_refs, arrays=arrays)).native
    # without codecs the stored length is the decoded one: refused before anything is read
    with pytest.raises(InvalidReferenceError, match=r"stored in 1196 bytes .* 1200 bytes"):
        reader.read_sync([(var, (ALL,))])
    # with a codec, the size is known only once decoded
    meta = dataclasses.replace(arr.meta, filters=({"id": "shuffle", "elementsize": 4},))
    arrays[var] = ArrayRefs(path=arr.path, meta=meta, manifest=short)
    reader = _store(dataclasses.replace(small_refs, arrays=arrays)).native
    with pytest.raises(ChunkDecodeError, match=r"re-index the granule"):
        reader.read_sync([(var, (ALL,))])


@pytest.mark.parametrize("shuffle", [False, True])
def test_whole_chunks_with_the_wrong_stream_raise_as_others(tmp_path: Path, shuffle: bool) -> None:
    """Whole chunks decoded straight into the output (gzip, gzip + shuffle) take a short path;
    a chunk whose reference points at another array's valid zlib stream (fewer or more bytes
    than one chunk) or at bytes that are no stream still fails with the chunk named, and the
    arrays around it still equal h5py's."""
    from h5sidecar.indexer import index_granule

    path = tmp_path / "streams.h5"
    data = np.arange(400, dtype="<i4") * 3 - 7
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=data, chunks=(100,), compression="gzip", shuffle=shuffle)
        f.create_dataset("b", data=data[:200], chunks=(50,), compression="gzip", shuffle=shuffle)
    refs = index_granule(str(path))
    a, b = refs.arrays["a"], refs.arrays["b"]
    got_a, got_b = _store(refs).native.read_sync([("a", (ALL,)), ("b", (ALL,))])
    np.testing.assert_array_equal(got_a, data)
    np.testing.assert_array_equal(got_b, data[:200])

    def planted(arr: ArrayRefs, index: int, offset: Any, length: Any) -> GranuleRefs:
        m = arr.manifest
        offsets, lengths = m.offsets.copy(), m.lengths.copy()
        offsets[index], lengths[index] = offset, length
        moved = ChunkManifest.from_arrays(urls=m.urls, codes=m.codes, offsets=offsets,
                                          lengths=lengths, inline=m.inline)
        arrays = dict(refs.arrays)
        arrays[arr.path] = ArrayRefs(path=arr.path, meta=arr.meta, manifest=moved)
        return dataclasses.replace(refs, arrays=arrays)

    short = planted(a, 1, b.manifest.offsets[0], b.manifest.lengths[0])  # 200 bytes of 400
    with pytest.raises(ChunkDecodeError, match=r"chunk a \(1,\) decoded to 200 bytes, expected 400"):
        _store(short).native.read_sync([("a", (ALL,))])
    long = planted(b, 2, a.manifest.offsets[0], a.manifest.lengths[0])  # 400 bytes of 200
    with pytest.raises(ChunkDecodeError, match=r"chunk b \(2,\) decoded to 400 bytes, expected 200"):
        _store(long).native.read_sync([("b", (ALL,))])
    garbage = planted(a, 2, a.manifest.offsets[2] + 3, a.manifest.lengths[2] - 3)
    with pytest.raises(ChunkDecodeError, match=r"chunk a \(2,\) did not decode"):
        _store(garbage).native.read_sync([("a", (ALL,))])


def test_unknown_array_and_wrong_key_length(small_refs: GranuleRefs) -> None:
    reader = _store(small_refs).native
    with pytest.raises(KeyError, match="no array 'nope'"):
        reader.read_sync([("nope", (ALL,))])
    with pytest.raises(IndexError, match="has 2 axes, the array 1"):
        reader.read_sync([("gt1l/heights/h_ph", (ALL, ALL))])


def test_chunk_selection_covers_exactly_the_touched_chunks() -> None:
    sel = chunk_selection((100, 10), (30, 4), (slice(29, 61), 5))
    assert sel.grid.tolist() == [[0, 1], [1, 1], [2, 1]]
    assert sel.shape == (32, 1) and sel.lo == (29, 5)


# -- the xarray engine reads through it ----------------------------------------------------------


def test_xarray_engine_uses_the_batch_reader(small_refs: GranuleRefs, small_h5: Path) -> None:
    store = _store(small_refs)
    ds = xr.open_dataset(store, engine="h5sidecar", group="gt1l/heights", chunks=None,
                         decode_cf=False, create_default_indexes=False)
    assert "SidecarArray(" in repr(ds["h_ph"].variable._data)  # xarray's wrappers around it
    np.testing.assert_array_equal(
        ds["h_ph"][100:2100].values, read_h5(small_h5, "gt1l/heights/h_ph")[100:2100]
    )
    zarr_only = xr.open_dataset(store, engine="h5sidecar", group="gt1l/heights", chunks=None,
                                native=False)
    assert "SidecarArray(" not in repr(zarr_only["h_ph"].variable._data)


def test_load_async_reads_every_variable_in_one_batch(
    small_refs: GranuleRefs, small_h5: Path
) -> None:
    store = _store(small_refs, chunk_cache=None)
    ds = xr.open_dataset(store, engine="h5sidecar", group="gt1l/heights", chunks=None,
                         decode_cf=False, create_default_indexes=False)
    asyncio.run(ds.load_async())
    with h5py.File(small_h5, "r") as f:
        for name in ("h_ph", "quality_ph", "lat_ph", "delta_time"):
            np.testing.assert_array_equal(ds[name].values, f[f"gt1l/heights/{name}"][()])
    # four arrays, 20 chunks, one plan: contiguous chunks coalesce into a few requests
    assert store.stats["requests"] <= 4


def test_orthogonal_and_vectorized_indexing(small_refs: GranuleRefs, small_h5: Path) -> None:
    ds = xr.open_dataset(_store(small_refs), engine="h5sidecar", group="ancillary_data",
                         chunks=None, decode_cf=False)
    want = read_h5(small_h5, "ancillary_data/sparse")
    got = ds["sparse"].isel({ds["sparse"].dims[0]: [1, 7, 3], ds["sparse"].dims[1]: [0, 9]})
    np.testing.assert_array_equal(got.values, want[[1, 7, 3]][:, [0, 9]])


def test_arrays_pickle_to_workers_without_caches(small_refs: GranuleRefs, small_h5: Path) -> None:
    store = _store(small_refs)
    array = SidecarArray(store.native, "gt1l/heights/h_ph")
    clone = pickle.loads(pickle.dumps(array))
    assert clone.reader is not store.native and clone.shape == array.shape
    np.testing.assert_array_equal(
        clone._read((slice(0, 50),)), read_h5(small_h5, "gt1l/heights/h_ph")[:50]
    )


STRING_KEYS: list[tuple[Any, ...]] = [(ALL, ALL), (1, ALL), (slice(0, 3, 2), slice(1, 4)),
                                      (ALL, -1), (2, 3)]


@pytest.mark.parametrize("key", STRING_KEYS, ids=repr)
def test_strings_are_read_natively_as_zarr_reads_them(tmp_path: Path, key: Any) -> None:
    """Variable-length strings (scalars, chunked 2-d arrays, non-ASCII and empty text) are
    decoded by the batch reader, without opening a zarr array: the same values and dtype as
    zarr's own read of the same references, the text h5py and h5netcdf give."""
    from h5sidecar.indexer import index_granule

    path = tmp_path / "strings.h5"
    text = np.array(["a", "été", "", "ccc", "x" * 70] * 3, dtype=object).reshape(3, 5)
    with h5py.File(path, "w") as f:
        f.create_dataset("names", data=text, dtype=h5py.string_dtype(), chunks=(2, 2))
        f.create_dataset("release", data="006", dtype=h5py.string_dtype())
        f.create_dataset("ascii", data=np.array([b"x", b"yy"], dtype=object),
                         dtype=h5py.string_dtype("ascii"))
    store = _store(index_granule(str(path)))
    reader = store.native
    assert all(reader.supports(p) for p in ("names", "release", "ascii"))
    names, release, ascii_ = reader.read_sync([("names", key), ("release", ()),
                                               ("ascii", (ALL,))])
    zarr_names = store.zarr_array("names")[key]
    assert names.dtype == zarr_names.dtype and names.dtype.kind == "T"
    np.testing.assert_array_equal(names, zarr_names)
    with h5py.File(path) as f:
        want = f["names"].asstr()[()][key]
        assert np.asarray(names, dtype=object).tolist() == np.asarray(want).tolist()
        assert release[()] == f["release"].asstr()[()] and release.dtype.kind == "T"
        assert ascii_.tolist() == [v.decode() for v in f["ascii"][()]]
    ds = xr.open_dataset(store, engine="h5sidecar", chunks=None)
    ref = xr.open_dataset(path, engine="h5netcdf", phony_dims="access")
    for name in ("names", "release", "ascii"):
        assert ds[name].dtype == reader.codec(name).dtype  # type: ignore[union-attr]
        assert ds[name].values.tolist() == ref[name].values.tolist()
    ref.close()


def test_other_object_arrays_stay_with_zarr(tmp_path: Path) -> None:
    """Python objects zarr reads as such (here, variable-length bytes) are left to zarr."""
    from h5sidecar.indexer import index_granule

    path = tmp_path / "bytes.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("names", data=np.array(["a", "bb", "ccc"], dtype=h5py.string_dtype()))
    refs = index_granule(str(path))
    arr = refs.arrays["names"]
    meta = dataclasses.replace(arr.meta, filters=({"id": "vlen-bytes"},))
    refs = dataclasses.replace(refs, arrays={"names": ArrayRefs(path="names", meta=meta,
                                                                 manifest=arr.manifest)})
    store = _store(refs)
    assert not store.native.supports("names")
    with pytest.raises(TypeError, match="read it through zarr"):
        store.native.read_sync([("names", (ALL,))])
    ds = xr.open_dataset(store, engine="h5sidecar", chunks=None)
    assert ds["names"].values.tolist() == [b"a", b"bb", b"ccc"]


def test_read_arrays_mixes_whole_arrays_selections_and_object_arrays(tmp_path: Path) -> None:
    import h5sidecar
    from h5sidecar.indexer import index_granule
    from h5sidecar.references import write_parquet

    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(5000.0), chunks=(700,), compression="gzip")
        f.create_dataset("m", data=np.arange(60).reshape(6, 10), chunks=(4, 4), shuffle=True)
        f.create_dataset("names", data=np.array(["x", "yy"], dtype=h5py.string_dtype()))
    sidecar = write_parquet(index_granule(str(path)), tmp_path / "mixed.h5.parq")
    got = h5sidecar.read_arrays(sidecar, {"a": slice(100, 4000, 3), "m": (2, slice(1, 9)),
                                          "names": None})
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(got["a"], f["a"][100:4000:3])
        np.testing.assert_array_equal(got["m"], f["m"][2, 1:9])
        assert [s.decode() if isinstance(s, bytes) else s for s in got["names"]] == ["x", "yy"]
    assert list(h5sidecar.read_arrays(sidecar, ["m", "a"])) == ["m", "a"]
    with pytest.raises(KeyError, match="no array 'zz'"):
        h5sidecar.read_arrays(sidecar, ["zz"])


def test_load_reads_a_whole_datatree_in_one_batch(atl03_refs: GranuleRefs, atl03_h5: Path) -> None:
    import h5sidecar

    store = _store(atl03_refs, chunk_cache=None)
    tree = h5sidecar.open_datatree(store, chunks=None, decode_cf=False,
                                   create_default_indexes=False)
    assert store.stats["requests"] == 0
    assert h5sidecar.load(tree) is tree
    requests = store.stats["requests"]
    assert 0 < requests < 100  # ~940 arrays, one coalesced plan
    with h5py.File(atl03_h5, "r") as f:
        for node in tree.subtree:
            for name, var in node.variables.items():
                path = f"{node.path.strip('/')}/{name}".strip("/")
                if path in f:
                    np.testing.assert_array_equal(np.asarray(var.data), f[path][()],
                                                  err_msg=path)
    h5sidecar.load(tree)  # already in memory: nothing more is fetched
    assert store.stats["requests"] == requests


def test_load_inside_a_running_event_loop(small_refs: GranuleRefs, small_h5: Path) -> None:
    import h5sidecar

    ds = xr.open_dataset(_store(small_refs), engine="h5sidecar", group="gt1l/heights",
                         chunks=None, decode_cf=False)

    async def in_a_loop() -> None:  # as in Jupyter, where asyncio.run() is refused
        h5sidecar.load(ds["h_ph"])

    asyncio.run(in_a_loop())
    np.testing.assert_array_equal(ds["h_ph"].values, read_h5(small_h5, "gt1l/heights/h_ph"))
    with pytest.raises(TypeError, match="takes a Dataset, DataArray or DataTree"):
        h5sidecar.load([1, 2])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("key", [(ALL, ALL), (slice(0, 8), slice(0, 8)), (slice(3, 13), ALL)],
                         ids=repr)
def test_chunks_decoded_in_place_or_copied_agree(tmp_path: Path, shuffle: bool, key: Any) -> None:
    """Whole chunks inside the selection are inflated straight into the output, others are
    decoded apart and copied: both must give h5py's values (also for an edge chunk)."""
    from h5sidecar.indexer import index_granule

    path = tmp_path / "grid.h5"
    data = np.random.default_rng(1).normal(size=(13, 9)).astype(">f4")  # big-endian: copied
    with h5py.File(path, "w") as f:
        f.create_dataset("le", data=data.astype("<f8"), chunks=(4, 9), compression="gzip",
                         shuffle=shuffle)
        f.create_dataset("be", data=data, chunks=(4, 4), compression="gzip", shuffle=shuffle)
    reader = _store(index_granule(str(path))).native
    le, be = reader.read_sync([("le", key), ("be", key)])
    np.testing.assert_array_equal(le, data.astype("<f8")[key])
    np.testing.assert_array_equal(be, data[key])


@pytest.mark.parametrize("shuffle", [False, True])
def test_edge_and_cut_chunks_inflate_without_zlib(tmp_path: Path, shuffle: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks that cannot be inflated straight into the output (an array smaller than one
    chunk, an edge chunk, a chunk a selection cuts) are inflated by libdeflate into a buffer
    of the known chunk size, not by zlib growing one; values equal h5py's."""
    from h5sidecar.indexer import index_granule
    from h5sidecar.read.native import _decode

    if _decode._deflate_decode is None:
        pytest.skip("imagecodecs (libdeflate) is not installed")
    path = tmp_path / "edges.h5"
    data = np.arange(25, dtype="<i8") * 7 - 30
    with h5py.File(path, "w") as f:
        # a resizable array smaller than its one chunk (as ATL03's short variables)
        f.create_dataset("tiny", data=data[:5], chunks=(10,), maxshape=(None,),
                         compression="gzip", shuffle=shuffle)
        f.create_dataset("edge", data=data, chunks=(10,), compression="gzip", shuffle=shuffle)
    reader = _store(index_granule(str(path))).native

    def no_zlib(*_: Any) -> bytes:
        raise AssertionError("zlib.decompress used for a chunk of known size")

    monkeypatch.setattr(_decode.zlib, "decompress", no_zlib)
    tiny, edge, cut = reader.read_sync([("tiny", (ALL,)), ("edge", (ALL,)),
                                        ("edge", (slice(3, 17),))])
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(tiny, f["tiny"][()])
        np.testing.assert_array_equal(edge, f["edge"][()])
        np.testing.assert_array_equal(cut, f["edge"][3:17])


def test_an_uninstalled_codec_is_left_to_zarr(small_refs: GranuleRefs) -> None:
    from h5sidecar.references import ArrayMeta

    var = "gt1l/heights/h_ph"
    arr = small_refs.arrays[var]
    meta = dataclasses.replace(arr.meta, compressor={"id": "no-such-codec"})
    arrays = dict(small_refs.arrays)
    arrays[var] = ArrayRefs(path=var, meta=meta, manifest=arr.manifest)
    reader = _store(dataclasses.replace(small_refs, arrays=arrays)).native
    assert isinstance(meta, ArrayMeta) and not reader.supports(var)
    with pytest.raises(InvalidReferenceError, match="no-such-codec"):
        reader.read_sync([(var, (ALL,))])


def test_open_datatree_reads_index_coordinates_and_time_ends_in_one_batch(
    atl03_refs: GranuleRefs, atl03_h5: Path
) -> None:
    import h5sidecar

    dims = [p for p, a in atl03_refs.arrays.items()
            if len(a.meta.shape) == 1 and a.meta.dimension_names == (p.rpartition("/")[2],)]
    assert len(dims) > 50
    store = _store(atl03_refs, chunk_cache=ByteLRU[bytes](64 * 2**20))
    h5sidecar.open_datatree(store, chunks=None)  # indexes and CF times decoded
    # one batch for every index coordinate and time variable's ends, instead of a read each
    assert store.stats["requests"] < len(dims) / 3
    assert store.native._prefetched == {}  # every coordinate read ahead was used by xarray
    store = _store(atl03_refs)
    tree = h5sidecar.open_datatree(store, chunks=None, decode_times=False)
    assert store.stats["requests"] < len(dims) / 3 and store.native._prefetched == {}
    with h5py.File(atl03_h5, "r") as f:
        for path in dims[:20]:
            group, _, name = path.rpartition("/")
            node = tree[group] if group else tree
            np.testing.assert_array_equal(node[name].values, f[path][()], err_msg=path)
    # opting out of indexes and time decoding still opens without reading anything
    quiet = _store(atl03_refs)
    h5sidecar.open_datatree(quiet, chunks=None, create_default_indexes=False, decode_times=False)
    assert quiet.stats["requests"] == 0


# -- read_arrays(mask_and_scale=True): what the xarray engine decodes ---------------------------
@pytest.mark.parametrize("key", [None, slice(2, 9), 3], ids=repr)
def test_read_arrays_mask_and_scale_equals_h5netcdf(cf_nc: Path, key: Any) -> None:
    from h5sidecar.read import read_arrays
    from tests._granules import refs_for

    refs = refs_for(cf_nc)
    names = ["tas", "pr", "orog"]  # packed int16 with _FillValue; float with _FillValue; plain
    sel = {n: key for n in names}
    got = read_arrays(refs, sel, mask_and_scale=True)
    raw = read_arrays(refs, sel)
    truth = xr.open_dataset(cf_nc, engine="h5netcdf", decode_times=False)
    for n in names:
        want = truth[n].values if key is None else truth[n].values[key]
        assert got[n].dtype == want.dtype, n
        np.testing.assert_array_equal(got[n], want)
        with h5py.File(cf_nc) as f:
            stored = f[n][()] if key is None else f[n][key]
        np.testing.assert_array_equal(raw[n], stored)  # default: stored values
    assert np.isnan(got["pr"]).any() and not np.isnan(raw["pr"]).any()  # masking happened
    assert got["tas"].dtype.kind == "f" and raw["tas"].dtype == np.int16
