"""Granule-level behaviour: bad input, on_unsupported="raise", fill values, checksums."""

from __future__ import annotations

import hashlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.errors import NotHDF5Error, SourceNotFoundError, UnsupportedFeatureError
from h5sidecar.indexer import chunk_hash, index_granule
from h5sidecar.references import INLINE
from h5sidecar.settings import IndexSettings
from tests.indexer._compare import assert_refs_match_h5py, open_refs


def _sample(f: h5py.File) -> None:
    f.create_dataset("x", data=np.arange(100, dtype="i4"), chunks=(30,), compression="gzip")


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"", "empty"),
        (b"just some text, not HDF5\n" * 10, "no HDF5 signature"),
        (b"CDF\x01" + bytes(100), r"netCDF-3 \(classic or 64-bit offset\) file, not HDF5"),
    ],
    ids=["empty", "text", "netcdf3"],
)
def test_not_hdf5(tmp_path: Path, content: bytes, phrase: str) -> None:
    path = tmp_path / "bad.h5"
    path.write_bytes(content)
    with pytest.raises(NotHDF5Error, match=phrase):
        index_granule(str(path))


def test_truncated_file(make_h5, tmp_path: Path) -> None:
    good = make_h5(_sample).read_bytes()
    path = tmp_path / "truncated.h5"
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(NotHDF5Error, match="truncated"):
        index_granule(str(path))


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError):
        index_granule(str(tmp_path / "absent.h5"))


def test_on_unsupported_raise(make_h5) -> None:
    def build(f: h5py.File) -> None:
        _sample(f)
        f["dangling"] = h5py.SoftLink("/nowhere")  # loses nothing: never raises
        f.create_dataset("ragged", shape=(2,), dtype=h5py.vlen_dtype("i4"))

    path = make_h5(build)
    with pytest.raises(UnsupportedFeatureError, match=r"ragged.*variable-length sequences"):
        index_granule(str(path), settings=IndexSettings(on_unsupported="raise"))
    refs = index_granule(str(path))
    assert {s.path for s in refs.skipped} == {"dangling", "ragged"}
    assert refs.status("ragged") == "skipped" and refs.status("x") == "virtual"


def test_storage_fill_value_is_not_the_fillvalue_attribute(make_h5) -> None:
    """The trap: HDF5's storage fill (-9) and the CF _FillValue attribute (-1) differ."""

    def build(f: h5py.File) -> None:
        d = f.create_dataset("x", shape=(6,), chunks=(3,), dtype="i2", fillvalue=-9)
        d[:3] = [-1, 5, 6]
        d.attrs["_FillValue"] = np.int16(-1)

    path = make_h5(build)
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    assert arr.meta.fill_value == -9 and arr.meta.attrs["_FillValue"] == -1
    # Zarr readers would read the missing chunk as .zarray's fill_value (the CF -1): it is
    # stored in the sidecar as HDF5's -9 instead (issue 9)
    assert arr.manifest.codes.tolist() == [0, INLINE]
    assert arr.zarray_fill_value() == -1
    group = assert_refs_match_h5py(refs, path)  # the missing chunk reads -9, as in HDF5
    assert group["x"][3:].tolist() == [-9, -9, -9]


@pytest.mark.parametrize(
    ("dtype", "fill", "expected"),
    [
        ("f4", np.nan, "NaN"),
        ("f8", -np.inf, "-Infinity"),
        ("c8", 1 + 2j, [1.0, 2.0]),
        ("S4", b"ab", "YWIAAA=="),
        ("?", True, True),
    ],
)
def test_fill_value_json_forms(make_h5, dtype: str, fill, expected) -> None:
    path = make_h5(
        lambda f: f.create_dataset("x", shape=(4,), chunks=(2,), dtype=dtype, fillvalue=fill)
    )
    refs = index_granule(str(path))
    assert refs.arrays["x"].meta.fill_value == expected
    assert_refs_match_h5py(refs, path)


def test_checksums_hash_every_stored_chunk(make_h5) -> None:
    def build(f: h5py.File) -> None:
        d = f.create_dataset("x", shape=(100,), chunks=(30,), dtype="i4", compression="gzip")
        d[:60] = np.arange(60)
        f["compact_strings"] = np.array(["a", "b"], dtype=h5py.string_dtype())

    path = make_h5(build)
    refs = index_granule(str(path), settings=IndexSettings(checksums=True))
    arr = refs.arrays["x"]
    raw = path.read_bytes()
    for index in [(0,), (1,)]:
        _, offset, length = arr.manifest.get(index)
        expected = hashlib.blake2b(raw[offset : offset + length], digest_size=8).digest()
        assert int(arr.checksums[index]) == int.from_bytes(expected, "little")
    assert arr.checksums[2] == 0 and arr.checksums[3] == 0  # missing chunks
    inline = refs.arrays["compact_strings"]
    assert int(inline.checksums[0]) == chunk_hash(inline.manifest.inline[0])
    assert index_granule(str(path)).arrays["x"].checksums is None


def test_provenance_and_source_identity(make_h5) -> None:
    path = make_h5(_sample)
    refs = index_granule(f"file://{path}")
    assert refs.source.url == str(path)  # absolute path, no scheme
    assert refs.source.size == path.stat().st_size
    assert refs.extra["indexer"].startswith("h5sidecar ")
    assert refs.extra["settings"]["on_unsupported"] == "skip"
    assert open_refs(refs)["x"][...].tolist() == list(range(100))


def test_threads_index_one_granule_at_a_time(tmp_path: Path) -> None:
    """HDF5 through h5py's file-object driver is not thread-safe (under a thread pool it failed
    on random variables, which would have left them out of "ok" sidecars): in one process a
    second granule waits until the first is closed."""
    import threading

    from h5sidecar.indexer.crawl._h5file import open_granule
    from tests._granules import read_h5, write_small_granule

    paths = [write_small_granule(tmp_path / f"g{i}.h5") for i in range(2)]
    inside, release, events = threading.Event(), threading.Event(), []

    def first() -> None:
        with open_granule(str(paths[0])):
            events.append("first in")
            inside.set()
            release.wait(10)
            events.append("first out")

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    second: list = []

    def run_second() -> None:
        second.append(index_granule(str(paths[1])))
        events.append("second done")

    t2 = threading.Thread(target=run_second)
    t2.start()
    t2.join(0.5)
    assert t2.is_alive() and events == ["first in"]  # waiting for the first granule
    release.set()
    t.join(10)
    t2.join(30)
    assert events == ["first in", "first out", "second done"]
    [refs] = second
    assert refs.arrays["gt1l/heights/h_ph"].meta.shape == read_h5(paths[1], "gt1l/heights/h_ph").shape


def test_indexing_pauses_the_garbage_collector(make_h5) -> None:
    """Indexing allocates tens of objects per dataset and attribute, freed by reference
    counting: the cyclic collector is paused meanwhile (its collections were 6% of the index
    CPU of a granule of 1,000 arrays) and left as it was found."""
    import gc

    def build(f: h5py.File) -> None:
        for g in range(20):
            for v in range(15):
                d = f.create_dataset(f"g{g}/v{v}", data=np.arange(50, dtype="f4") * v,
                                     chunks=(10,), compression="gzip")
                d.attrs.update({"units": "m", "long_name": f"v {v}", "valid_max": 99.0})

    path = make_h5(build)
    collections = [0]

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections[0] += 1

    gc.collect()
    gc.callbacks.append(count)
    try:
        refs = index_granule(str(path))
    finally:
        gc.callbacks.remove(count)
    assert collections[0] <= 1, collections[0]  # one, once it is back on
    assert gc.isenabled()
    gc.disable()
    try:
        index_granule(str(path))
        assert not gc.isenabled()  # a caller's disabled collector stays disabled
    finally:
        gc.enable()
    assert len(refs.arrays) == 300
    assert_refs_match_h5py(refs, path)
