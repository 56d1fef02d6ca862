"""Content hashes of every stored chunk (``IndexSettings.checksums``; reads all the data).

The hash of a chunk is the first 8 bytes of ``blake2b`` over its *encoded* bytes, read as a
little-endian uint64; missing chunks hash to 0.  Readers can verify a chunk with
:func:`chunk_hash` before decoding it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from h5sidecar.references import INLINE, ChunkManifest

__all__ = ["chunk_hash", "manifest_checksums"]


def chunk_hash(data: bytes) -> int:
    """The uint64 content hash of one encoded chunk."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def manifest_checksums(
    manifest: ChunkManifest, read_many: Callable[[str, list[tuple[int, int]]], list[bytes]]
) -> np.ndarray:
    """uint64[grid] hashes of every stored and inline chunk of ``manifest``.

    Stored chunks are read per source object in offset order, in one batch (coalesced and
    concurrent for S3 sources).
    """
    out = np.zeros(manifest.grid_shape, dtype=np.uint64)
    flat_out = out.reshape(-1)
    codes = manifest.codes.reshape(-1)
    offsets = manifest.offsets.reshape(-1)
    lengths = manifest.lengths.reshape(-1)
    for flat in np.flatnonzero(codes == INLINE):
        flat_out[flat] = chunk_hash(manifest.inline[int(flat)])
    for code, url in enumerate(manifest.urls):
        stored = np.flatnonzero(codes == code)
        stored = stored[np.argsort(offsets[stored], kind="stable")]
        ranges = [(int(offsets[f]), int(lengths[f])) for f in stored]
        for flat, data in zip(stored, read_many(url, ranges), strict=True):
            flat_out[flat] = chunk_hash(data)
    return out
