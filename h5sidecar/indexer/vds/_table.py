"""Virtual datasets (VDS): map each source dataset's chunks onto one chunk grid, or skip.

A VDS stitches blocks of other datasets (often in other files) into one array.  Where each
block comes from, and the extent, are resolved as HDF5 resolves them (``_vds_mapping``:
unlimited and ``%b`` mappings included).  The values are addressable by reference when the
blocks line up with one chunk grid:

* every mapping is "whole blocks": the virtual selection and the source selection are ``ALL``
  or regular hyperslabs with the same number of blocks of the same shape;
* all sources share a dtype (byte order may differ from the VDS: the sources' is used), a
  filter pipeline, and a chunk shape (chunked sources) or are contiguous with one block shape;
* each block starts on that grid, and a block that ends inside a chunk ends at the array's
  edge, so every Zarr chunk is exactly one source chunk.

Unmapped regions and missing source files read as the VDS fill value (``MISSING``), as in
HDF5; unwritten source chunks read as their source's fill value.  Zero-sized VDS are trivially
empty arrays.  Anything else is skipped with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer._materialize import encode_chunk
from h5sidecar.indexer._values import fill_bytes
from h5sidecar.indexer.dtypes._dtype_plan import plan_dtype
from h5sidecar.indexer.filters import pipeline_for
from h5sidecar.indexer.layout._chunk_table import ChunkTable, chunked_table, contiguous_table
from h5sidecar.indexer.vds._mapping import (
    Opener,
    Piece,
    source_dataset,
    source_url,
    vds_extent,
    vds_pieces,
)
from h5sidecar.references import INLINE, MISSING

__all__ = ["Piece", "vds_extent", "vds_pieces", "vds_table"]


@dataclass
class _Source:
    piece: Piece
    url: str
    dset: h5py.Dataset | None  # None: the file or dataset does not exist (reads as fill)


def _open_sources(pieces: list[Piece], granule_url: str, opener: Opener) -> list[_Source]:
    out = []
    for p in pieces:
        url = source_url(p.file, granule_url)
        out.append(_Source(p, url, source_dataset(url, p.dataset, opener)))
    return out


def _common(values: list[Any], what: str) -> Any:
    if any(v != values[0] for v in values[1:]):
        fail(ErrorKind.VIRTUAL_DATASET, f"the source datasets differ in {what}")
    return values[0]


def vds_table(
    dset: h5py.Dataset, shape: tuple[int, ...], granule_url: str, opener: Opener
) -> tuple[ChunkTable, tuple[dict[str, Any], ...], np.dtype | None]:
    """References of a virtual dataset (see the module docstring).

    Returns
    -------
    table : ChunkTable
    pipeline : tuple of dict
    dtype : numpy.dtype or None
        The sources' dtype when it differs from the VDS's in byte order only.
    """
    if 0 in shape or not shape:
        table = ChunkTable.empty(shape, tuple(max(s, 1) for s in shape), [])
        table.note = "virtual dataset without elements (HDF5 gives it the same extent)"
        return table, (), None
    pieces = vds_pieces(dset, shape, granule_url, opener)
    opened = _open_sources(pieces, granule_url, opener)
    sources = [s for s in opened if s.dset is not None]
    missing = sorted({s.url for s in opened if s.dset is None})
    if not sources:
        table = ChunkTable.empty(shape, shape, [])
        table.note = "virtual dataset whose mapped blocks have no source: fill values only"
        return table, (), None
    src_dtype = _common([s.dset.dtype for s in sources if s.dset is not None], "dtype")
    if src_dtype != dset.dtype and src_dtype.newbyteorder("=") != dset.dtype.newbyteorder("="):
        fail(
            ErrorKind.VIRTUAL_DATASET, f"sources hold {src_dtype}, the virtual dataset {dset.dtype}"
        )
    for s in sources:
        if plan_dtype(s.dset).mode != "raw":
            fail(ErrorKind.VIRTUAL_DATASET, "source values are not addressable in place")
    _check_whole_sources(sources)
    pipeline = _common([tuple(pipeline_for(s.dset)) for s in sources], "filter pipeline")
    zchunks, slab = _zarr_chunks(sources, shape, pipeline)
    table = _assemble(dset, shape, zchunks, slab, sources, pipeline, bool(missing))
    if missing:
        table.note += (
            f"; {len(missing)} source(s) missing ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}): their blocks read as the fill value, as "
            "in HDF5"
        )
    return table, pipeline, (src_dtype if src_dtype != dset.dtype else None)


def _check_whole_sources(sources: list[_Source]) -> None:
    """A mapping that takes a source whole (``ALL``) needs the source's extent to be its block's;
    HDF5 refuses to read it otherwise (a source grown or shrunk since the VDS was made)."""
    for s in sources:
        assert s.dset is not None
        if s.piece.sstart is None and tuple(s.dset.shape) != s.piece.shape:
            fail(
                ErrorKind.VIRTUAL_DATASET,
                f"the source {s.url}:{s.piece.dataset} has the extent {tuple(s.dset.shape)}, "
                f"not the {s.piece.shape} its mapping takes whole, so HDF5 cannot read it",
            )


def _aligned(s: _Source, z: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether a block starts on the grid ``z`` and ends on it or at the edges."""
    assert s.dset is not None
    sstart = s.piece.sstart or (0,) * len(shape)
    for d, (zd, v0, s0, n) in enumerate(zip(z, s.piece.vstart, sstart, s.piece.shape, strict=True)):
        ends_ok = n % zd == 0 or (v0 + n >= shape[d] and s0 + n >= s.dset.shape[d])
        if v0 % zd or s0 % zd or not ends_ok:
            return False
    return True


def _zarr_chunks(
    sources: list[_Source], shape: tuple[int, ...], pipeline: tuple[dict[str, Any], ...]
) -> tuple[tuple[int, ...], bool]:
    """The Zarr chunk shape, and whether chunks are row slabs inside source chunks.

    Source chunks are the Zarr chunks when every block lines up with them.  Blocks thinner than
    a source chunk along the first dimension (interleaved frames) still work for *unfiltered*
    sources: each block is then a contiguous byte range inside one source chunk.
    """
    datasets = [s.dset for s in sources if s.dset is not None]
    for s, d in zip(sources, datasets, strict=True):
        if s.piece.rows_of_all and tuple(d.shape[1:]) != s.piece.shape[1:]:
            fail(
                ErrorKind.VIRTUAL_DATASET, "blocks read a whole source in an order that is not rows"
            )
    if not _common([d.chunks is not None for d in datasets], "layout"):
        for s, d in zip(sources, datasets, strict=True):
            if s.piece.sstart not in (None, (0,) * len(shape)) or s.piece.shape != d.shape:
                fail(ErrorKind.VIRTUAL_DATASET, "a block maps part of a contiguous source dataset")
        return _common([s.piece.shape for s in sources], "block shape"), False
    chunks = _common([tuple(d.chunks) for d in datasets], "chunk shape")
    if all(_aligned(s, chunks, shape) for s in sources):
        return chunks, False
    blocks = {s.piece.shape for s in sources}
    block = blocks.pop() if len(blocks) == 1 else None
    if (
        not pipeline
        and block is not None
        and block[1:] == chunks[1:]
        and chunks[0] % block[0] == 0
        and all(_aligned(s, block, shape) for s in sources)
    ):
        return block, True
    fail(
        ErrorKind.VIRTUAL_DATASET,
        f"the mapped blocks do not line up with the source chunks {chunks}",
    )


def _assemble(
    dset: h5py.Dataset,
    shape: tuple[int, ...],
    zchunks: tuple[int, ...],
    slab: bool,
    sources: list[_Source],
    pipeline: tuple[dict[str, Any], ...],
    missing: bool,
) -> ChunkTable:
    """The chunk table; where mappings overlap, the last one wins, as HDF5 reads them in order.

    HDF5 fills the elements no mapping covers only when the mapped elements, counted once per
    mapping, are fewer than the selected ones: with an overlap it may leave them unfilled
    (undefined), so an overlap is accepted only when every chunk is mapped to a found source.
    """
    urls = list(dict.fromkeys(s.url for s in sources))
    table = ChunkTable.empty(shape, zchunks, urls)
    vds_fill = fill_bytes(dset)
    fills: dict[bytes, bytes] = {}
    tables: dict[tuple[str, str], ChunkTable] = {}  # interleaved frames: many blocks, one source
    taken = np.zeros(table.grid, dtype=bool)
    overlap = False
    for s in sources:
        src = s.dset
        assert src is not None
        sshape = tuple(src.shape)
        sstart = np.asarray(s.piece.sstart or (0,) * len(shape), dtype=np.int64)
        key = (s.url, src.name)
        if key not in tables and src.chunks is not None:
            tables[key] = chunked_table(src, sshape, s.url)
        elif key not in tables:
            tables[key] = contiguous_table(src, sshape, src.dtype.itemsize, s.url, 2**63, 2**63)
        st = tables[key]
        cshape = np.asarray(st.chunks, dtype=np.int64)
        row_bytes = math.prod(st.chunks[1:]) * src.dtype.itemsize
        code = urls.index(s.url)
        fill_raw = fill_bytes(src)
        count = tuple(-(-n // z) for n, z in zip(s.piece.shape, zchunks, strict=True))
        for rel in np.ndindex(*count):
            vidx = tuple(v // z + r for v, z, r in zip(s.piece.vstart, zchunks, rel, strict=True))
            if any(i >= g for i, g in zip(vidx, table.grid, strict=True)):
                continue
            overlap = overlap or bool(taken[vidx])
            taken[vidx] = True
            table.codes[vidx] = MISSING  # what an earlier, overlapping mapping put there
            table.inline.pop(int(np.ravel_multi_index(vidx, table.grid)), None)
            element = sstart + np.asarray(rel, dtype=np.int64) * np.asarray(zchunks)
            sidx = tuple(int(i) for i in element // cshape)
            within = element - np.asarray(sidx) * cshape  # rows into the source chunk (slabs)
            if any(i >= g for i, g in zip(sidx, st.grid, strict=True)) or st.codes[sidx] < 0:
                if fill_raw != vds_fill:  # an unwritten source chunk reads as ITS fill value
                    if fill_raw not in fills:
                        block = np.frombuffer(fill_raw * math.prod(zchunks), src.dtype)
                        fills[fill_raw] = encode_chunk(block.reshape(zchunks), pipeline)
                    table.codes[vidx] = INLINE
                    table.inline[int(np.ravel_multi_index(vidx, table.grid))] = fills[fill_raw]
                continue
            if st.masks[sidx]:
                fail(
                    ErrorKind.VIRTUAL_DATASET,
                    "a source chunk is stored with another filter pipeline",
                )
            table.codes[vidx] = code
            table.offsets[vidx] = int(st.offsets[sidx]) + int(within[0]) * row_bytes
            table.lengths[vidx] = (
                math.prod(zchunks) * src.dtype.itemsize if slab else int(st.lengths[sidx])
            )
    if overlap and (missing or not taken.all()):
        fail(
            ErrorKind.VIRTUAL_DATASET,
            "mappings overlap and leave elements unmapped (or map them to a missing source): "
            "HDF5 then leaves those elements unfilled, so their values are not defined",
        )
    table.note = f"virtual dataset mapped onto {len(urls)} source file(s)"
    return table
