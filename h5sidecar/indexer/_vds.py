"""Virtual datasets (VDS): map each source dataset's chunks onto one chunk grid, or skip.

A VDS stitches blocks of other datasets (often in other files) into one array.  Its values are
addressable by reference when the pieces line up with one chunk grid:

* every mapping is "whole blocks": the virtual selection and the source selection are ``ALL``
  or regular hyperslabs with the same number of blocks of the same shape (``%b`` in a source
  file or dataset name is the block number, as HDF5 expands it);
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
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5sidecar.errors import ErrorKind, NotHDF5Error, SourceNotFoundError
from h5sidecar.indexer._common import H5PY_ERRORS, fail, reraise_io_failure
from h5sidecar.indexer._dtypes import plan_dtype
from h5sidecar.indexer._external import resolve_external
from h5sidecar.indexer._filters import pipeline_for
from h5sidecar.indexer._layout import ChunkTable, chunked_table, contiguous_table
from h5sidecar.indexer._materialize import encode_chunk
from h5sidecar.indexer._values import fill_bytes
from h5sidecar.references import INLINE

__all__ = ["Piece", "vds_extent", "vds_pieces", "vds_table"]

_UNLIMITED = h5py.h5s.UNLIMITED
#: ``%b`` source files probed at most (HDF5 stops at the first missing one anyway).
_MAX_BLOCKS = 100_000
#: Opens a source (url) as an h5py.File inside the caller's exit stack.
Opener = Callable[[str], h5py.File]


@dataclass(frozen=True)
class Piece:
    """One block: ``shape`` elements at ``vstart`` in the VDS come from ``sstart`` in a source."""

    vstart: tuple[int, ...]
    shape: tuple[int, ...]
    file: str
    dataset: str
    sstart: tuple[int, ...] | None  # None: the whole source dataset
    #: the source is read whole, block after block in C order: valid only when a block spans
    #: the source's trailing dimensions entirely (then block b is a slab of rows)
    rows_of_all: bool = False


class _Blocks:
    """The blocks of an ``ALL`` or regular-hyperslab selection, numbered as HDF5 numbers them.

    With an unlimited count (one dimension, every other count 1) block ``b`` is the ``b``-th
    along that dimension; otherwise blocks are numbered in C order over the counts.
    """

    def __init__(self, space: h5py.h5s.SpaceID, rank: int) -> None:
        kind = space.get_select_type()
        if kind == h5py.h5s.SEL_ALL:
            self.all = True
            return
        if kind != h5py.h5s.SEL_HYPERSLABS or not space.is_regular_hyperslab():
            fail(
                ErrorKind.VIRTUAL_DATASET,
                "a virtual mapping selects something other than whole blocks",
            )
        self.all = False
        start, stride, count, block = space.get_regular_hyperslab()
        self.start = tuple(int(v) for v in start)
        self.stride = tuple(int(v) for v in stride)
        self.count = tuple(int(v) for v in count)
        self.block = tuple(int(v) for v in block)
        self.unlimited = [d for d, c in enumerate(self.count) if c == _UNLIMITED]
        if self.unlimited and (
            len(self.unlimited) > 1
            or any(c != 1 for d, c in enumerate(self.count) if d != self.unlimited[0])
        ):
            fail(
                ErrorKind.VIRTUAL_DATASET,
                "an unlimited mapping repeats along more than one dimension",
            )

    def n_within(self, extent: tuple[int, ...]) -> int:
        """How many blocks start inside ``extent``."""
        if self.all:
            return 1
        if self.unlimited:
            d = self.unlimited[0]
            return max(-(-(extent[d] - self.start[d]) // self.stride[d]), 0)
        return math.prod(self.count)

    def __getitem__(self, b: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(start, shape) of block ``b`` (``ALL``: the caller supplies the extent)."""
        if self.unlimited:
            idx = [0] * len(self.count)
            idx[self.unlimited[0]] = b
        else:
            idx = [int(i) for i in np.unravel_index(b, self.count)]
        start = tuple(
            s + int(i) * st for s, i, st in zip(self.start, idx, self.stride, strict=True)
        )
        return start, self.block


def _expand(pattern: str, b: int) -> str:
    """HDF5's printf-style source names: ``%b`` is the block number, ``%%`` a percent sign."""
    return re.sub(r"%%|%b", lambda m: "%" if m.group() == "%%" else str(b), pattern)


def _source_dataset(url: str, name: str, opener: Opener) -> h5py.Dataset | None:
    """The source dataset, or ``None`` when its file or the dataset does not exist."""
    try:
        h5 = opener(url)
    except SourceNotFoundError:
        return None  # HDF5 reads a missing source as the fill value too
    except NotHDF5Error as exc:
        fail(ErrorKind.VIRTUAL_DATASET, f"the source file {url} cannot be opened: {exc}")
    try:
        obj = h5.get(name)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return None
    return obj if isinstance(obj, h5py.Dataset) else None


def _source_url(name: str, granule_url: str) -> str:
    return granule_url if name == "." else resolve_external(name, granule_url)


def _require_a_source(dset: h5py.Dataset, granule_url: str, opener: Opener) -> None:
    """Skip a VDS none of whose source datasets can be found.

    HDF5 reads such a VDS as fill values only, and gives it no extent at all along an unlimited
    dimension; either way the values it was made to show are elsewhere (source files not
    beside the granule), so an empty or fill-only array would be a silent loss.
    """
    dcpl = dset.id.get_create_plist()
    count = dcpl.get_virtual_count()
    names = []
    for i in range(count):
        fname, dname = dcpl.get_virtual_filename(i), dcpl.get_virtual_dsetname(i)
        url = _source_url(_expand(fname, 0), granule_url)
        if _source_dataset(url, _expand(dname, 0), opener) is not None:
            return
        names.append(f"{fname}:{dname}")
    if count:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        fail(
            ErrorKind.VIRTUAL_DATASET,
            f"none of its {count} source dataset(s) can be found ({shown}), so HDF5 would read "
            "it as fill values only (with no extent along an unlimited dimension); put the "
            "source files beside the granule (paths are relative to it) and index it again",
        )


def vds_extent(dset: h5py.Dataset, granule_url: str, opener: Opener) -> tuple[int, ...]:
    """The extent HDF5 gives the VDS (view "last available"), computed from its sources.

    h5py reports the extent HDF5 computed, but HDF5 can only find source files when it knows
    where the VDS file is, which it does not for a file object.  For unlimited mappings the
    extent is therefore worked out here: ``%b`` patterns count source files until the first
    missing one; other mappings count the source blocks inside the source's extent.
    """
    _require_a_source(dset, granule_url, opener)
    shape = list(dset.shape)
    dcpl = dset.id.get_create_plist()
    for i in range(dcpl.get_virtual_count()):
        vblocks = _Blocks(dcpl.get_virtual_vspace(i), len(shape))
        if vblocks.all or not vblocks.unlimited:
            continue
        d = vblocks.unlimited[0]
        fname, dname = dcpl.get_virtual_filename(i), dcpl.get_virtual_dsetname(i)
        if "%b" in fname + dname:
            n = 0
            while (
                n < _MAX_BLOCKS
                and _source_dataset(
                    _source_url(_expand(fname, n), granule_url), _expand(dname, n), opener
                )
                is not None
            ):
                n += 1
        else:
            src = _source_dataset(_source_url(fname, granule_url), dname, opener)
            sblocks = _Blocks(dcpl.get_virtual_srcspace(i), len(shape))
            n = 0
            if src is not None and not sblocks.all and sblocks.unlimited:
                sd = sblocks.unlimited[0]
                room = src.shape[sd] - sblocks.start[sd] - sblocks.block[sd]
                n = room // sblocks.stride[sd] + 1 if room >= 0 else 0
        if n:
            end = vblocks.start[d] + (n - 1) * vblocks.stride[d] + vblocks.block[d]
            shape[d] = max(shape[d], end)
    return tuple(shape)


def vds_pieces(dset: h5py.Dataset, shape: tuple[int, ...]) -> list[Piece]:
    """The blocks of a virtual dataset that start inside ``shape``."""
    dcpl = dset.id.get_create_plist()
    pieces = []
    for i in range(dcpl.get_virtual_count()):
        vblocks = _Blocks(dcpl.get_virtual_vspace(i), len(shape))
        sblocks = _Blocks(dcpl.get_virtual_srcspace(i), len(shape))
        fname = dcpl.get_virtual_filename(i)
        dname = dcpl.get_virtual_dsetname(i)
        pattern = "%b" in fname + dname
        for b in range(vblocks.n_within(shape)):
            vstart, vshape = ((0,) * len(shape), shape) if vblocks.all else vblocks[b]
            rows_of_all = False
            if sblocks.all and (pattern or vblocks.n_within(shape) == 1):
                sstart = None
            elif sblocks.all:
                sstart, rows_of_all = (b * vshape[0],) + (0,) * (len(shape) - 1), True
            else:
                # with a %b pattern every block has its own source: its selection's first block
                sstart, sshape = sblocks[0 if pattern else b]
                if sshape != vshape:
                    fail(
                        ErrorKind.VIRTUAL_DATASET, "virtual and source selections have other blocks"
                    )
            pieces.append(
                Piece(vstart, vshape, _expand(fname, b), _expand(dname, b), sstart, rows_of_all)
            )
    return pieces


@dataclass
class _Source:
    piece: Piece
    url: str
    dset: h5py.Dataset | None  # None: the file or dataset does not exist (reads as fill)


def _open_sources(pieces: list[Piece], granule_url: str, opener: Opener) -> list[_Source]:
    out = []
    for p in pieces:
        url = _source_url(p.file, granule_url)
        out.append(_Source(p, url, _source_dataset(url, p.dataset, opener)))
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
    pieces = vds_pieces(dset, shape)
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
    pipeline = _common([tuple(pipeline_for(s.dset)) for s in sources], "filter pipeline")
    zchunks, slab = _zarr_chunks(sources, shape, pipeline)
    table = _assemble(dset, shape, zchunks, slab, sources, pipeline)
    if missing:
        table.note += (
            f"; {len(missing)} source(s) missing ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}): their blocks read as the fill value, as "
            "in HDF5"
        )
    return table, pipeline, (src_dtype if src_dtype != dset.dtype else None)


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
) -> ChunkTable:
    urls = list(dict.fromkeys(s.url for s in sources))
    table = ChunkTable.empty(shape, zchunks, urls)
    vds_fill = fill_bytes(dset)
    fills: dict[bytes, bytes] = {}
    for s in sources:
        src = s.dset
        assert src is not None
        sshape = tuple(src.shape)
        sstart = np.asarray(s.piece.sstart or (0,) * len(shape), dtype=np.int64)
        if src.chunks is not None:
            st = chunked_table(src, sshape, s.url)
        else:
            st = contiguous_table(src, sshape, src.dtype.itemsize, s.url, 2**63, 2**63)
        cshape = np.asarray(st.chunks, dtype=np.int64)
        row_bytes = math.prod(st.chunks[1:]) * src.dtype.itemsize
        code = urls.index(s.url)
        fill_raw = fill_bytes(src)
        count = tuple(-(-n // z) for n, z in zip(s.piece.shape, zchunks, strict=True))
        for rel in np.ndindex(*count):
            vidx = tuple(v // z + r for v, z, r in zip(s.piece.vstart, zchunks, rel, strict=True))
            if any(i >= g for i, g in zip(vidx, table.grid, strict=True)):
                continue
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
    table.note = f"virtual dataset mapped onto {len(urls)} source file(s)"
    return table
