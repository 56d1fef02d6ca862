"""Quirk: chunk coordinates of extensible-array indexes whose unlimited dimension is not first.

A chunked dataset with exactly one unlimited dimension ``u`` (new file format) indexes its
chunks with an *extensible array*.  When ``u > 0`` HDF5 "swizzles" the chunk coordinates before
numbering them: ``u`` is moved to the slowest position and the element number is the row-major
offset over the *maximum* chunk grid (``H5VM_swizzle_coords`` + ``swizzled_max_down_chunks`` in
``H5Dearray.c``).  Reads use that numbering.  But the iteration behind ``H5Dchunk_iter`` /
``H5Dget_chunk_info`` numbers the same elements row-major *without* swizzling, so it reports
wrong chunk offsets (HDF5 up to 2.0 at least): e.g. the chunk holding rows 2-3 of a (4, 6)
array with chunks (2, 3) and maximum shape (10, unlimited) is reported at offset (0, 3).

:func:`unswizzle_positions` recovers each element number from the offset the iteration
reported, then the chunk position the *read* path assigns to that number, so references match
what h5py reads.
"""

from __future__ import annotations

import math

import h5py
import numpy as np

from h5sidecar.indexer._hdf5lib import chunk_index_type

__all__ = ["swizzled_unlimited_dim", "unswizzle_positions"]


def swizzled_unlimited_dim(dset: h5py.Dataset) -> int | None:
    """``u`` when ``dset`` uses an extensible-array index with unlimited dimension ``u > 0``."""
    maxshape = dset.maxshape or ()
    unlimited = [i for i, m in enumerate(maxshape) if m is None]
    if len(unlimited) != 1 or unlimited[0] == 0 or dset.chunks is None:
        return None
    if chunk_index_type(dset) != "extensible_array":
        return None
    return unlimited[0]


def _max_chunks(dset: h5py.Dataset) -> list[int]:
    return [
        0 if m is None else -(-int(m) // int(c))
        for m, c in zip(dset.maxshape, dset.chunks, strict=True)
    ]


def unswizzle_positions(dset: h5py.Dataset, u: int, reported: np.ndarray) -> np.ndarray:
    """Chunk grid positions (n, rank) for the chunk offsets (in elements) chunk_iter reported.

    Parameters
    ----------
    dset : h5py.Dataset
    u : int
        The unlimited dimension (from :func:`swizzled_unlimited_dim`).
    reported : numpy.ndarray
        (n, rank) int64 chunk offsets in elements, as ``chunk_iter`` gave them.
    """
    chunks = np.asarray(dset.chunks, dtype=np.int64)
    maxc = _max_chunks(dset)
    rank = len(maxc)
    scaled = reported // chunks
    # 1. the element number the iteration walked to: row-major over the dimensions after u
    #    (the dimensions before u never advance, u itself never wraps)
    after = list(range(u + 1, rank))
    k = scaled[:, u] * math.prod(maxc[i] for i in after)
    stride = 1
    for i in reversed(after):
        k = k + scaled[:, i] * stride
        stride *= maxc[i]
    # 2. the read path's position for that number: u slowest, then the others row-major
    others = [i for i in range(rank) if i != u]
    block = math.prod(maxc[i] for i in others)
    out = np.zeros_like(scaled)
    out[:, u] = k // block
    rest = k % block
    for i in reversed(others):
        out[:, i] = rest % maxc[i]
        rest = rest // maxc[i]
    return out
