"""Storage layouts: chunked, contiguous (virtual chunks), compact, external, unallocated, empty."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.indexer import index_granule
from h5sidecar.indexer.layout._chunk_table import split_rows
from h5sidecar.references import INLINE, MISSING
from h5sidecar.settings import IndexSettings
from tests.indexer._compare import assert_refs_match_h5py


def test_chunked_gzip_shuffle(make_h5) -> None:
    data = np.arange(10_000, dtype="<f8").reshape(100, 100)
    path = make_h5(
        lambda f: f.create_dataset(
            "x", data=data, chunks=(30, 40), compression="gzip", shuffle=True
        )
    )
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    assert arr.meta.chunks == (30, 40)
    assert arr.manifest.grid_shape == (4, 3)
    assert arr.manifest.n_stored == 12
    assert [f["id"] for f in arr.meta.filters] == ["shuffle", "zlib"]
    assert arr.status == "virtual"
    with h5py.File(path) as f:
        info = f["x"].id.get_chunk_info_by_coord((30, 40))
    assert arr.manifest.get((1, 1)) == (str(path), info.byte_offset, info.size)
    assert_refs_match_h5py(refs, path)


def test_unallocated_chunks_read_as_storage_fill(make_h5) -> None:
    def build(f: h5py.File) -> None:
        d = f.create_dataset("x", shape=(10, 10), chunks=(5, 5), dtype="i4", fillvalue=-7)
        d[:5, :5] = 1

    path = make_h5(build)
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    # never-written chunks are stored as -7: a Zarr fill_value would be a CF mask (issue 9)
    assert (arr.manifest.n_stored, arr.manifest.n_inline, arr.manifest.n_missing) == (1, 3, 0)
    assert arr.meta.fill_value == -7
    assert arr.zarray_fill_value() is None  # no _FillValue attribute: nothing masked
    assert_refs_match_h5py(refs, path)


def test_unlimited_edge_chunks_and_shrunk_dataset(make_h5) -> None:
    def build(f: h5py.File) -> None:
        d = f.create_dataset("grow", shape=(0, 3), maxshape=(None, 3), chunks=(4, 3), dtype="i2")
        d.resize((11, 3))
        d[...] = np.arange(33).reshape(11, 3)
        s = f.create_dataset("shrunk", data=np.arange(20), maxshape=(None,), chunks=(5,))
        s.resize((12,))  # chunk 2 (elements 10..14) keeps stale values past the extent

    path = make_h5(build)
    refs = index_granule(str(path))
    assert refs.arrays["grow"].manifest.grid_shape == (3, 1)
    assert refs.arrays["shrunk"].manifest.grid_shape == (3,)
    with h5py.File(path) as f:
        assert f["shrunk"].id.get_num_chunks() == 3  # HDF5 dropped chunk 3 on shrinking
    assert_refs_match_h5py(refs, path)


def test_contiguous_split_into_virtual_chunks(make_h5) -> None:
    data = np.arange(1000 * 16, dtype="<i4").reshape(1000, 16)  # 64 000 bytes, 64 per row

    def build(f: h5py.File) -> None:
        f.create_dataset("x", data=data)
        f.create_dataset("pad", data=np.zeros(10_000, "u1"))  # bytes after x, so no EOF issue

    path = make_h5(build)
    refs = index_granule(str(path), settings=IndexSettings(contiguous_chunk_bytes=6400))
    arr = refs.arrays["x"]
    assert arr.meta.chunks == (100, 16)  # 100 rows divide 1000 exactly: no overhang
    assert arr.manifest.n_stored == 10
    with h5py.File(path) as f:
        base = f["x"].id.get_offset()
    assert arr.manifest.get((3, 0)) == (str(path), base + 3 * 6400, 6400)
    assert_refs_match_h5py(refs, path)


def test_contiguous_split_overhang_reads_past_the_dataset(make_h5) -> None:
    data = np.arange(997 * 2, dtype="<f8").reshape(997, 2)  # 997 is prime: no exact divisor

    def build(f: h5py.File) -> None:
        f.create_dataset("x", data=data)
        f.create_dataset("after", data=np.ones(4096, "f8"))

    path = make_h5(build)
    refs = index_granule(str(path), settings=IndexSettings(contiguous_chunk_bytes=1600))
    arr = refs.arrays["x"]
    assert arr.meta.chunks == (100, 2)
    assert arr.manifest.n_stored == 10
    assert "reads past the dataset" in arr.note
    assert_refs_match_h5py(refs, path)


def test_split_rows_rules() -> None:
    assert split_rows(1000, 64, 6400, room=0) == (100, False)  # exact divisor
    assert split_rows(997, 16, 1600, room=10**6) == (100, True)  # overhang into room
    assert split_rows(997, 16, 1600, room=0) == (997, False)  # at EOF: one chunk
    assert split_rows(10, 64, 6400, room=0) == (10, False)  # small: one chunk


def test_unallocated_contiguous(make_h5) -> None:
    path = make_h5(lambda f: f.create_dataset("x", shape=(6,), dtype="f4", fillvalue=np.nan))
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    # stored as NaN in the sidecar: a null fill_value reads as 0 in zarr (issue 9)
    assert arr.manifest.n_inline == 1 and arr.manifest.n_stored == 0
    assert arr.meta.fill_value == "NaN" and arr.status == "inlined"
    assert_refs_match_h5py(refs, path)


def test_compact_dataset_of_several_kb_is_inlined(make_h5) -> None:
    data = np.arange(2000, dtype="<i4")  # 8000 bytes: kerchunk drops these, VirtualiZarr empties

    def build(f: h5py.File) -> None:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(data.shape)
        dsid = h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)

    path = make_h5(build)
    with h5py.File(path) as f:
        assert f["compact"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT
    refs = index_granule(str(path))
    arr = refs.arrays["compact"]
    assert arr.status == "inlined" and "compact" in arr.note
    assert arr.manifest.n_inline == 1 and arr.manifest.inline_bytes == data.nbytes
    assert_refs_match_h5py(refs, path)


def test_scalars_and_empty_datasets(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f["scalar"] = np.float32(3.5)
        f.create_dataset("empty1d", shape=(0,), dtype="i4")
        f.create_dataset("empty2d", shape=(3, 0), dtype="i4", chunks=(2, 2), maxshape=(3, None))
        f.create_dataset("scalar_unwritten", shape=(), dtype="i8", fillvalue=5)

    path = make_h5(build)
    refs = index_granule(str(path))
    assert refs.arrays["scalar"].meta.shape == ()
    assert refs.arrays["scalar"].manifest.n_stored == 1
    assert refs.arrays["empty2d"].manifest.n_chunks == 0
    assert refs.arrays["scalar_unwritten"].manifest.n_inline == 1  # reads 5, not 0 (issue 9)
    assert_refs_match_h5py(refs, path)


def test_inline_threshold_moves_tiny_chunks_into_the_sidecar(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f.create_dataset("small", data=np.arange(8, dtype="i1"), chunks=(4,))
        f.create_dataset("big", data=np.arange(400, dtype="i8"), chunks=(100,))

    path = make_h5(build)
    refs = index_granule(str(path), settings=IndexSettings(inline_threshold=16))
    assert refs.arrays["small"].manifest.n_inline == 2
    assert refs.arrays["small"].status == "inlined"
    assert refs.arrays["big"].manifest.n_inline == 0
    assert (refs.arrays["small"].manifest.codes == INLINE).all()
    assert_refs_match_h5py(refs, path)


def test_external_storage_segments(make_h5, tmp_path: Path) -> None:
    data = np.arange(60, dtype="<i4").reshape(12, 5)  # 20 bytes per row
    segments = [("raw_a.bin", 0, 80), ("raw_b.bin", 16, 160)]  # 4 rows + 8 rows
    # relative names, written beside the HDF5 file (efile_prefix), as the corpus has them
    path = make_h5(
        lambda f: f.create_dataset("ext", data=data, external=segments, efile_prefix=str(tmp_path))
    )
    refs = index_granule(str(path), settings=IndexSettings(contiguous_chunk_bytes=40))
    arr = refs.arrays["ext"]
    assert arr.manifest.urls == (str(tmp_path / "raw_a.bin"), str(tmp_path / "raw_b.bin"))
    assert arr.meta.chunks == (2, 5)  # divides the 4-row boundary, <= 40 bytes
    assert arr.manifest.get((2, 0)) == (str(tmp_path / "raw_b.bin"), 16, 40)
    assert "external file" in arr.note
    assert_refs_match_h5py(refs, path)


def test_external_storage_problems_are_skipped(make_h5, tmp_path: Path) -> None:
    data = np.arange(12, dtype="<i4").reshape(4, 3)  # 12 bytes per row

    def build(f: h5py.File) -> None:
        where = {"efile_prefix": str(tmp_path)}
        f.create_dataset("cut", data=data, external=[("c1.bin", 0, 18), ("c2.bin", 0, 30)], **where)
        f.create_dataset("gone", data=data, external=[("gone.bin", 0, 48)], **where)

    path = make_h5(build)
    (tmp_path / "gone.bin").unlink()
    refs = index_granule(str(path))
    skipped = {s.path: s for s in refs.skipped}
    assert skipped["cut"].kind == "external_storage" and "inside a row" in skipped["cut"].reason
    assert skipped["gone"].kind == "external_storage" and "does not exist" in skipped["gone"].reason


@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_extensible_array_with_unlimited_dim_not_first(make_h5, libver: str) -> None:
    """HDF5's chunk iteration reports swizzled extensible-array chunks at wrong offsets."""

    def build(f: h5py.File) -> None:
        x = f.create_dataset("x", shape=(4, 6), chunks=(2, 3), maxshape=(10, None), dtype="i4")
        x[...] = np.arange(24).reshape(4, 6)
        y = f.create_dataset(
            "y", shape=(3, 4, 5), chunks=(1, 2, 2), maxshape=(6, None, 7), dtype="i4"
        )
        y[...] = np.arange(60).reshape(3, 4, 5)

    path = make_h5(build, libver=libver)
    refs = index_granule(str(path))
    assert refs.arrays["x"].manifest.n_stored == 4
    assert refs.arrays["y"].manifest.n_stored == 18
    if libver == "latest":
        assert "extensible-array" in refs.arrays["x"].note
    assert_refs_match_h5py(refs, path)


def test_missing_chunks_are_missing_not_zero_length(make_h5) -> None:
    def build(f: h5py.File) -> None:
        d = f.create_dataset("x", shape=(8,), chunks=(2,), dtype="u1")
        d[6:] = 9

    refs = index_granule(str(make_h5(build)))
    codes = refs.arrays["x"].manifest.codes
    assert codes.tolist() == [MISSING, MISSING, MISSING, 0]


def test_creation_property_list_copied_once_per_dataset(make_h5, tmp_path: Path) -> None:
    """Every part of the indexer reads one copy of a dataset's creation property list (HDF5
    copies it on each ``get_create_plist()``), and it says what a fresh copy says, for every
    layout."""
    from h5sidecar.indexer._failures import dcpl

    (tmp_path / "raw.bin").write_bytes(np.arange(4, dtype="<i4").tobytes())

    def build(f: h5py.File) -> None:
        f.create_dataset("chunked", data=np.arange(100.0), chunks=(30,), compression="gzip",
                         shuffle=True, fillvalue=-1.0)  # fmt: skip
        f.create_dataset("grown", data=np.arange(10), chunks=(4,), maxshape=(None,))
        f.create_dataset("contiguous", data=np.arange(10))
        space = h5py.h5s.create_simple((2,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.NATIVE_INT32, space, plist)
        f.create_dataset("external", shape=(4,), dtype="<i4", external=[("raw.bin", 0, 16)])

    path = make_h5(build, libver="latest")
    with h5py.File(path, "r") as f:
        for name in ("chunked", "grown", "contiguous", "compact", "external"):
            dset = f[name]
            fresh = dset.id.get_create_plist()
            kept = dcpl(dset)
            assert dcpl(dset) is kept, name
            assert kept.get_layout() == fresh.get_layout(), name
            assert kept.get_nfilters() == fresh.get_nfilters(), name
            assert kept.get_external_count() == fresh.get_external_count(), name
            if fresh.get_layout() == h5py.h5d.CHUNKED:
                assert kept.get_chunk() == fresh.get_chunk(), name
    refs = index_granule(str(path))
    assert set(refs.arrays) == {"chunked", "grown", "contiguous", "compact", "external"}
    assert_refs_match_h5py(refs, path)
