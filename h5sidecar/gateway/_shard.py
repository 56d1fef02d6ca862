"""Virtual sharding: a Zarr v3 view whose shards each hold K consecutive source chunks.

A client reading a whole granule through the plain v3 (or v2) view sends one HTTP request per
chunk.  The sharded view groups K consecutive chunks along the first dimension into one
``sharding_indexed`` shard, so the client sends one request per shard (or, for a partial read,
one suffix request for the shard index and one per chunk it needs).  Nothing is rewritten: a
shard is assembled on request from the source chunks' original bytes, laid end to end, followed
by a synthesized shard index.

Layout of shard ``(i, j, ...)`` of an array with chunk grid ``(g0, g1, ...)`` (Zarr v3 sharding
spec, ``index_location = "end"``)::

    [chunk (i*K + 0, j, ...)] [chunk (i*K + 1, j, ...)] ... [index: K x 2 uint64 LE] [crc32c]

Chunks that are not stored (and, in the last shard, positions past the chunk grid) take no bytes
and have ``(2**64 - 1, 2**64 - 1)`` in the index, which zarr reads as the fill value.  The inner
codecs are the array's own v3 codec chain (the HDF5 pipeline), so the bytes of each inner chunk
are exactly the source's.  The index is computed from the manifest alone, so the suffix request
zarr sends for it costs no upstream read.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5sidecar.read import ChunkRef
from h5sidecar.references import ArrayRefs

__all__ = [
    "INDEX_CODECS",
    "MAX_SHARD_FACTOR",
    "ShardLayout",
    "ShardPiece",
    "shard_layout",
    "sharded_array_doc",
    "sharded_documents",
]

#: Largest K accepted (chunks per shard); keeps shard indexes and responses bounded.
MAX_SHARD_FACTOR = 1024

#: Codecs of the shard index (what zarr-python writes and expects by default).
INDEX_CODECS: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {"name": "crc32c"},
]

_EMPTY = np.uint64(2**64 - 1)


def _effective_factor(grid0: int, k: int) -> int:
    """K for one array: never more than its chunk rows (a shard of a 1-chunk array is 1 chunk)."""
    return max(1, min(k, grid0))


def sharded_array_doc(doc: Mapping[str, Any], k: int) -> dict[str, Any]:
    """The ``zarr.json`` of an array in the sharded view, from its plain v3 document.

    Scalars (0-d) are left unsharded: they have exactly one chunk.  So are structured
    (compound) types: zarr 3.1's sharding codec fails on their fill value ("unhashable type:
    'writeable void-scalar'"), while it reads them fine as plain chunks.
    """
    out = copy.deepcopy(dict(doc))
    chunks = list(out["chunk_grid"]["configuration"]["chunk_shape"])
    shape = list(out["shape"])
    if not chunks or _structured(out.get("data_type")):
        return out
    grid0 = -(-shape[0] // chunks[0])
    kk = _effective_factor(grid0, k)
    out["chunk_grid"] = {
        "name": "regular",
        "configuration": {"chunk_shape": [kk * chunks[0], *chunks[1:]]},
    }
    out["codecs"] = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": chunks,
                "codecs": out["codecs"],
                "index_codecs": copy.deepcopy(INDEX_CODECS),
                "index_location": "end",
            },
        }
    ]
    return out


def _structured(data_type: Any) -> bool:
    return isinstance(data_type, dict) and data_type.get("name") == "structured"


def _shard_node(doc: dict[str, Any], k: int) -> dict[str, Any]:
    if doc.get("node_type") == "array":
        return sharded_array_doc(doc, k)
    consolidated = doc.get("consolidated_metadata")
    if consolidated:
        doc = dict(doc)
        doc["consolidated_metadata"] = {
            **consolidated,
            "metadata": {p: _shard_node(d, k) for p, d in consolidated["metadata"].items()},
        }
    return doc


def sharded_documents(documents: Mapping[str, Any], k: int) -> dict[str, Any]:
    """Every ``zarr.json`` document of the sharded view (parsed JSON in, parsed JSON out).

    Parameters
    ----------
    documents : mapping
        Key (``"zarr.json"``, ``"g/v/zarr.json"``) -> parsed plain v3 document.
    k : int
        Chunks per shard along the first dimension.
    """
    return {key: _shard_node(doc, k) for key, doc in documents.items()}


@dataclass(frozen=True, slots=True)
class ShardPiece:
    """A part of a byte window of a shard: source bytes, inline bytes or index bytes.

    ``ref`` is ``(url, offset, length)`` of the upstream bytes to read, or ``None`` when
    ``data`` already holds the bytes (inline chunk or synthesized index).  ``chunk`` is the
    whole inner chunk ``ref`` is a part of and ``skip`` where the part starts in it (so a
    cache of whole chunks can serve the part).
    """

    ref: ChunkRef | None
    data: bytes = b""
    chunk: ChunkRef | None = None
    skip: int = 0

    @property
    def whole(self) -> bool:
        """True when the piece is its whole inner chunk."""
        return self.ref is not None and self.ref == self.chunk


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """Where each inner chunk of one shard lies, and the shard's index (no I/O needed).

    Attributes
    ----------
    refs : tuple
        Per inner position (C order), the chunk's reference: ``(url, offset, length)``,
        inline ``bytes`` or ``None`` (not stored).
    starts : numpy.ndarray
        int64 byte offset of each inner chunk inside the shard (-1 where not stored).
    lengths : numpy.ndarray
        int64 byte length of each inner chunk (0 where not stored).
    index : bytes
        The encoded shard index (offsets/lengths uint64 LE + crc32c).
    """

    refs: tuple[ChunkRef | bytes | None, ...]
    starts: np.ndarray
    lengths: np.ndarray
    index: bytes

    @property
    def data_bytes(self) -> int:
        """Bytes of the chunk region (everything before the index)."""
        return int(self.lengths.sum())

    @property
    def size(self) -> int:
        """Total size of the shard in bytes."""
        return self.data_bytes + len(self.index)

    @property
    def n_stored(self) -> int:
        """Inner chunks that hold bytes."""
        return int(np.count_nonzero(self.lengths))

    def pieces(self, start: int, stop: int) -> Iterator[ShardPiece]:
        """The pieces that make up bytes ``[start, stop)`` of the shard, in order."""
        for i, ref in enumerate(self.refs):
            length = int(self.lengths[i])
            if not length:
                continue
            c0 = int(self.starts[i])
            lo, hi = max(start, c0), min(stop, c0 + length)
            if lo >= hi:
                continue
            if isinstance(ref, bytes):
                yield ShardPiece(None, ref[lo - c0 : hi - c0])
            else:
                assert ref is not None
                url, offset, _ = ref
                yield ShardPiece((url, offset + lo - c0, hi - lo), chunk=ref, skip=lo - c0)
        base = self.data_bytes
        lo, hi = max(start, base), min(stop, self.size)
        if lo < hi:
            yield ShardPiece(None, self.index[lo - base : hi - base])


def _crc32c(data: bytes) -> bytes:
    import google_crc32c  # zarr's own dependency for its crc32c codec

    return int(google_crc32c.value(data)).to_bytes(4, "little")


def shard_layout(arr: ArrayRefs, shard_index: tuple[int, ...], k: int) -> ShardLayout | None:
    """The layout of one shard of ``arr`` in the view with ``k`` chunks per shard.

    Returns ``None`` when the shard index lies outside the shard grid or no inner chunk is
    stored (zarr then reads the whole shard as the fill value).
    """
    grid = arr.manifest.grid_shape
    if not grid or isinstance(arr.meta.dtype, list):
        # scalars and structured types are not sharded (see sharded_array_doc): their chunks
        # are served as plain chunks
        return None
    kk = _effective_factor(grid[0], k)
    shard_grid = (-(-grid[0] // kk), *grid[1:])
    if len(shard_index) != len(grid) or any(
        not 0 <= i < g for i, g in zip(shard_index, shard_grid, strict=True)
    ):
        return None
    refs: list[ChunkRef | bytes | None] = []
    for t in range(kk):
        row = shard_index[0] * kk + t
        refs.append(arr.manifest.get((row, *shard_index[1:])) if row < grid[0] else None)
    lengths = np.array(
        [0 if r is None else (len(r) if isinstance(r, bytes) else r[2]) for r in refs],
        dtype=np.int64,
    )
    if not lengths.any():
        return None
    ends = np.cumsum(lengths)
    starts = np.where(lengths > 0, ends - lengths, -1)
    table = np.full((kk, *([1] * (len(grid) - 1)), 2), _EMPTY, dtype="<u8")
    flat = table.reshape(kk, 2)
    stored = lengths > 0
    flat[stored, 0] = starts[stored].astype(np.uint64)
    flat[stored, 1] = lengths[stored].astype(np.uint64)
    raw = table.tobytes()
    return ShardLayout(tuple(refs), starts, lengths, raw + _crc32c(raw))
