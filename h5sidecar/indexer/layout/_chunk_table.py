"""Where each chunk's bytes are: one columnar table per dataset, from its storage layout.

* **chunked**: the chunk index is read in one pass with ``DatasetID.chunk_iter`` (one callback
  per allocated chunk, collected into numpy arrays), falling back to ``get_chunk_info`` only
  where ``chunk_iter`` is unavailable.  Chunks past the current shape (a shrunk unlimited
  dimension) are ignored; unallocated chunks are ``MISSING``.
* **contiguous**: one byte range, split along the first dimension into virtual chunks of about
  ``contiguous_chunk_bytes`` so readers fetch them in parallel (see :func:`split_rows`).
* **external** (``H5Pset_external``): byte ranges into the raw data file(s) beside the granule.

Compact and virtual layouts are handled elsewhere (their bytes are not addressable here).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer.layout._earray import swizzled_unlimited_dim, unswizzle_positions
from h5sidecar.references import MISSING

__all__ = [
    "MAX_GRID_CHUNKS",
    "ChunkTable",
    "chunked_table",
    "contiguous_table",
    "split_rows",
]

#: A dense manifest is refused beyond this many chunk positions (~20 bytes of memory each).
MAX_GRID_CHUNKS = 2**25


@dataclass
class ChunkTable:
    """Chunk references of one dataset on its HDF5 chunk grid (mutable while being built).

    ``masks`` holds each stored chunk's filter mask (0 = every declared filter applied).
    """

    chunks: tuple[int, ...]
    urls: list[str]
    codes: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    masks: np.ndarray
    inline: dict[int, bytes] = field(default_factory=dict)
    note: str = ""

    @classmethod
    def empty(cls, shape: tuple[int, ...], chunks: tuple[int, ...], urls: list[str]) -> ChunkTable:
        grid = tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))
        n = math.prod(grid)
        if n > MAX_GRID_CHUNKS:
            fail(
                ErrorKind.UNSUPPORTED_LAYOUT,
                f"the chunk grid has {n} positions ({grid}, chunks {chunks}), more than the "
                f"{MAX_GRID_CHUNKS} a dense manifest holds; rechunk the source with larger chunks",
            )
        return cls(
            chunks=chunks,
            urls=urls,
            codes=np.full(grid, MISSING, dtype=np.int32),
            offsets=np.zeros(grid, dtype=np.uint64),
            lengths=np.zeros(grid, dtype=np.uint64),
            masks=np.zeros(grid, dtype=np.uint32),
        )

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)


# -- chunked --------------------------------------------------------------------------------------
_UNDEFINED = np.uint64(2**64 - 1)  # HADDR_UNDEF


@dataclass
class _ChunkRecords:
    coords: np.ndarray  # (n, rank) int64 element offsets
    masks: np.ndarray  # (n,) uint32
    offsets: np.ndarray  # (n,) uint64
    sizes: np.ndarray  # (n,) uint64


def _chunk_records(dsid: h5py.h5d.DatasetID) -> _ChunkRecords:
    """Every allocated chunk of ``dsid``: offset in elements, filter mask, byte range."""
    infos: list[tuple[tuple[int, ...], int, int | None, int]] = []
    try:
        # the list's own append as the callback: no Python frame per chunk; h5py's StoreInfo
        # is a namedtuple, so zip(*) below transposes the records in C
        dsid.chunk_iter(infos.append)
    except (AttributeError, NotImplementedError):
        # HDF5 < 1.12.3 / h5py < 3.8: one call per chunk is the only way left
        infos = [dsid.get_chunk_info(i) for i in range(dsid.get_num_chunks())]
    n = len(infos)
    if not n:
        coords: tuple[Any, ...] = ()
        masks: tuple[Any, ...] = ()
        offsets: tuple[Any, ...] | list[Any] = ()
        sizes: tuple[Any, ...] = ()
    else:
        coords, masks, offsets, sizes = zip(*infos, strict=True)
    if None in offsets:
        offsets = [_UNDEFINED if o is None else o for o in offsets]
    rank = dsid.rank
    if n > 1:  # numpy converts a tuple of tuples slowly (~1 us a chunk): flattened instead
        flat = np.fromiter(itertools.chain.from_iterable(coords), dtype=np.int64, count=n * rank)
    else:
        flat = np.array(coords, dtype=np.int64)
    return _ChunkRecords(
        coords=flat.reshape(n, rank),
        masks=np.array(masks, dtype=np.uint32),
        offsets=np.array(offsets, dtype=np.uint64),
        sizes=np.array(sizes, dtype=np.uint64),
    )


def chunked_table(dset: h5py.Dataset, shape: tuple[int, ...], url: str) -> ChunkTable:
    """References of a chunked dataset's allocated chunks (see the module docstring)."""
    chunks = tuple(int(c) for c in dset.chunks)
    table = ChunkTable.empty(shape, chunks, [url])
    if 0 in shape:
        return table
    rec = _chunk_records(dset.id)
    unlimited = swizzled_unlimited_dim(dset)
    if unlimited is None:
        pos = rec.coords // np.asarray(chunks, dtype=np.int64)
    else:
        pos = unswizzle_positions(dset, unlimited, rec.coords)
        table.note = (
            "chunk positions recomputed from the extensible-array numbering (HDF5's chunk "
            "iteration reports them unswizzled for an unlimited dimension that is not first)"
        )
    keep = np.all(pos < np.asarray(table.grid, dtype=np.int64), axis=1)
    # chunks past the current extent (a shrunk dimension) and indexed-but-unwritten chunks
    keep &= (rec.offsets != _UNDEFINED) & (rec.sizes > 0)
    if keep.all():  # the usual case: no copies of the records through the boolean mask
        idx = tuple(pos.T)
        masks, offsets, sizes = rec.masks, rec.offsets, rec.sizes
    else:
        idx = tuple(pos[keep].T)
        masks, offsets, sizes = rec.masks[keep], rec.offsets[keep], rec.sizes[keep]
    table.codes[idx] = 0
    table.masks[idx] = masks
    table.offsets[idx] = offsets
    table.lengths[idx] = sizes
    return table


# -- contiguous -----------------------------------------------------------------------------------
def split_rows(n_rows: int, row_bytes: int, target: int, room: int) -> tuple[int, bool]:
    """Rows per virtual chunk for a contiguous block of ``n_rows`` rows.

    Zarr expects every stored chunk to hold a *full* chunk, so the last virtual chunk must
    either divide the rows exactly or may read past the block's end (harmless: the extra rows
    are cropped), which needs ``room`` readable bytes after the block.

    Parameters
    ----------
    n_rows, row_bytes : int
        Rows along the first dimension and bytes per row.
    target : int
        Wanted bytes per virtual chunk.
    room : int
        Readable bytes after the block (until the end of the file).

    Returns
    -------
    rows : int
        Rows per chunk (``n_rows`` means no split).
    overhang : bool
        Whether the last chunk's byte range extends past the block.
    """
    total = n_rows * row_bytes
    if total <= target * 1.5 or n_rows <= 1 or row_bytes == 0:
        return max(n_rows, 1), False
    want = max(1, target // row_bytes)
    # an exact divisor close to the target keeps every range inside the block
    for rows in range(want, max(want // 2, 1) - 1, -1):
        if n_rows % rows == 0:
            return rows, False
    k = -(-n_rows // want)
    if (k * want - n_rows) * row_bytes <= room:
        return want, True
    return max(n_rows, 1), False


def contiguous_table(
    dset: h5py.Dataset,
    shape: tuple[int, ...],
    itemsize: int,
    url: str,
    file_size: int,
    target: int,
) -> ChunkTable:
    """References of a contiguous dataset, split into virtual chunks along dimension 0."""
    if not shape:
        chunks: tuple[int, ...] = ()
        offset = dset.id.get_offset()
        table = ChunkTable.empty(shape, chunks, [url])
        if offset is not None and itemsize:
            table.codes[()] = 0
            table.offsets[()] = offset
            table.lengths[()] = itemsize
        return table
    n_rows = shape[0]
    row_bytes = itemsize * math.prod(shape[1:])
    offset = dset.id.get_offset()
    if offset is None or 0 in shape:
        chunks = tuple(max(s, 1) for s in shape)
        return ChunkTable.empty(shape, chunks, [url])
    room = max(file_size - (offset + n_rows * row_bytes), 0)
    rows, overhang = split_rows(n_rows, row_bytes, target, room)
    chunks = (rows, *(max(s, 1) for s in shape[1:]))
    table = ChunkTable.empty(shape, chunks, [url])
    k = table.grid[0]
    starts = np.arange(k, dtype=np.uint64) * np.uint64(rows * row_bytes)
    table.codes[...] = 0
    table.offsets[...] = (np.uint64(offset) + starts).reshape((k,) + (1,) * (len(shape) - 1))
    table.lengths[...] = np.uint64(rows * row_bytes)
    if overhang:
        table.note = (
            "the last virtual chunk's byte range reads past the dataset (the extra rows are "
            "cropped) so that every chunk is a full chunk"
        )
    return table
