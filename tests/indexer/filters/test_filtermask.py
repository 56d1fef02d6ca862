"""Chunks stored with another pipeline than the array's (filter masks, unfiltered edges)."""

from __future__ import annotations

import ctypes
import zlib

import h5py
import numpy as np

from h5sidecar._compat.h5py import hdf5_library
from h5sidecar.indexer import index_granule
from h5sidecar.references import INLINE
from tests.indexer._compare import assert_refs_match_h5py


def _gzip_dataset(f: h5py.File, name: str, n_chunks: int, raw_chunks: set[int]) -> np.ndarray:
    """A gzip dataset whose chunks in ``raw_chunks`` are stored with the filter skipped."""
    data = np.arange(n_chunks * 100, dtype="<i4")
    d = f.create_dataset(name, shape=data.shape, chunks=(100,), dtype="<i4", compression="gzip")
    for i in range(n_chunks):
        block = data[i * 100 : (i + 1) * 100].tobytes()
        if i in raw_chunks:
            d.id.write_direct_chunk((i * 100,), block, filter_mask=1)
        else:
            d.id.write_direct_chunk((i * 100,), zlib.compress(block), filter_mask=0)
    return data


def test_chunk_with_nonzero_filter_mask_is_reencoded(make_h5) -> None:
    path = make_h5(lambda f: _gzip_dataset(f, "x", 4, raw_chunks={2}))
    with h5py.File(path) as f:
        assert f["x"].id.get_chunk_info(2).filter_mask == 1
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    assert [c["id"] for c in arr.meta.filters] == ["zlib"]  # the pipeline most chunks use
    assert arr.manifest.codes.tolist() == [0, 0, INLINE, 0]
    assert zlib.decompress(arr.manifest.inline[2]) == np.arange(200, 300, dtype="<i4").tobytes()
    assert arr.status == "virtual" and "re-encoded" in arr.note
    assert_refs_match_h5py(refs, path)


def test_filter_skipped_for_every_chunk_leaves_it_out(make_h5) -> None:
    path = make_h5(lambda f: _gzip_dataset(f, "x", 3, raw_chunks={0, 1, 2}))
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    assert arr.meta.filters == ()  # every chunk is raw: still fully virtual
    assert arr.manifest.n_stored == 3 and arr.manifest.n_inline == 0
    assert "without filter(s)" in arr.note
    assert_refs_match_h5py(refs, path)


def test_partial_edge_chunks_stored_unfiltered(make_h5) -> None:
    """``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``: edge chunks raw although their mask is 0."""
    lib = hdf5_library()
    assert lib is not None
    data = np.arange(12 * 6, dtype="<f4").reshape(12, 6)

    def build(f: h5py.File) -> None:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((5, 5))
        dcpl.set_deflate(4)
        lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
        assert lib.H5Pset_chunk_opts(dcpl.id, 0x2) >= 0
        space = h5py.h5s.create_simple(data.shape)
        dsid = h5py.h5d.create(f.id, b"edge", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)

    path = make_h5(build)
    with h5py.File(path) as f:
        info = f["edge"].id.get_chunk_info_by_coord((10, 5))
        assert info.filter_mask == 0 and info.size == 100  # stored raw, mask says filtered
    refs = index_granule(str(path))
    arr = refs.arrays["edge"]
    # 4 partial chunks against 2 full ones: the raw pipeline wins, full chunks are re-encoded
    assert arr.meta.filters == ()
    assert arr.manifest.n_stored == 4 and arr.manifest.n_inline == 2
    assert_refs_match_h5py(refs, path)
