"""One DMR++ variable -> :class:`~h5sidecar.references.ArrayRefs` (or a ``Skip`` with why).

The variable's chunk grid, filters and fill value come from the document (its type from
:mod:`._variable_type`); its name, dimension names and attributes are worked out for the whole
granule (:mod:`._dmrpp_granule`) and given here.  What the document cannot say exactly is
skipped, never guessed: filters it names that no codec decodes, chunks whose sizes contradict
its type, values held in the document in a form not converted (``dmrpp:missingdata``).
Contradictions within the document (chunks off the grid, past the end of the file) raise.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5sidecar.errors import ErrorKind, InvalidDmrppError
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer._values import fill_value_json
from h5sidecar.indexer.dmrpp._dmrpp_document import DRIFT, DmrChunks, DmrVariable
from h5sidecar.indexer.dmrpp._filter_order import ReadRanges, settle_pipeline
from h5sidecar.indexer.dmrpp._variable_type import Conversion, VariableType, variable_type
from h5sidecar.indexer.layout._fillchunks import materialize_missing
from h5sidecar.references import INLINE, MISSING, ArrayMeta, ArrayRefs, ChunkManifest

__all__ = ["ArraySpec", "UrlInfo", "convert_variable"]


@dataclass(frozen=True, slots=True)
class UrlInfo:
    """Where a chunk's ``href`` points: the resolved URL and its size (``None``: not found)."""

    url: str
    size: int | None


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """What the granule decided for one variable (name, axes, attributes)."""

    path: str
    shape: tuple[int, ...]
    dimension_names: tuple[str, ...]
    attrs: Mapping[str, Any]
    note: str = ""


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


# -- filters --------------------------------------------------------------------------------------
def _filters(chunks: DmrChunks, dt: np.dtype) -> tuple[tuple[Mapping[str, Any], ...], str]:
    """numcodecs configs in encode order, and a note."""
    out: list[Mapping[str, Any]] = []
    notes: list[str] = []
    n_deflate = 0
    for name in chunks.filters:
        word = name.lower()
        if word == "deflate":
            levels = chunks.deflate_levels
            level = levels[min(n_deflate, len(levels) - 1)] if levels else None
            out.append({"id": "zlib", "level": level} if level is not None else {"id": "zlib"})
            n_deflate += 1
        elif word == "shuffle":
            if dt.itemsize == 1:  # shuffling one-byte elements leaves them as they are
                notes.append("shuffle of one-byte elements (a no-op) left out")
                continue
            out.append({"id": "shuffle", "elementsize": dt.itemsize})
        elif word == "fletcher32":
            out.append({"id": "fletcher32"})
        else:
            fail(ErrorKind.UNSUPPORTED_FILTER,
                 f"the document names filter {name!r}, which h5sidecar does not map from DMR++")  # fmt: skip
    return tuple(out), _join(*notes)


def _fill(chunks: DmrChunks | None, dt: np.dtype, attrs: Mapping[str, Any]) -> Any:
    """The storage fill value in Zarr v2 JSON form (``fillValue``, else ``_FillValue``, else 0)."""
    if dt.kind in "OSV":
        return None if dt.kind == "O" else fill_value_json(np.zeros((), dt), dt)
    text = chunks.fill_value if chunks is not None else None
    value: Any = attrs.get("_FillValue", 0) if text in (None, "") else text
    try:
        scalar = np.array(value).astype(dt) if dt.kind == "b" else np.array(value, dtype=dt)
    except (ValueError, TypeError, OverflowError):
        fail(ErrorKind.OTHER, f"fill value {value!r} does not fit the type {dt}")
    return fill_value_json(scalar.reshape(()), dt)


# -- chunks ---------------------------------------------------------------------------------------
def _grid_index(chunks: DmrChunks, shape: tuple[int, ...], chunk_shape: tuple[int, ...],
                where: str) -> np.ndarray:  # fmt: skip
    """int64[n, rank] chunk-grid index of every row (checked to lie on the grid)."""
    n = chunks.n_chunks
    rank = len(shape)
    if not rank:
        if n > 1:
            raise InvalidDmrppError(f"{where}: {n} chunks for a scalar")
        return np.zeros((n, 0), np.int64)
    if chunks.chunk_shape is None:  # contiguous: one chunk covering the array
        return np.zeros((n, rank), np.int64)
    pos = chunks.positions
    if n and (pos < 0).any():
        raise InvalidDmrppError(f"{where}: a chunk has no chunkPositionInArray")
    step = np.asarray(chunk_shape, np.int64)
    grid = np.asarray([-(-s // c) for s, c in zip(shape, chunk_shape, strict=True)], np.int64)
    index = pos // step
    bad = (pos % step != 0).any(axis=1) | (index >= grid).any(axis=1)
    if bad.any():
        first = pos[int(np.argmax(bad))].tolist()
        raise InvalidDmrppError(
            f"{where}: chunk at position {first} is not on the grid of chunks "
            f"{list(chunk_shape)} over shape {list(shape)}; the chunk grid does not cover the shape"
        )
    return index


def _manifest(var: DmrVariable, spec: ArraySpec, chunk_shape: tuple[int, ...],
              urls: Callable[[int], UrlInfo],
              read: ReadRanges | None) -> tuple[ChunkManifest, str]:  # fmt: skip
    """The manifest of a chunked or contiguous variable (``urls(-1)`` is the granule's).

    A chunk made of adjacent blocks is one byte range; one made of scattered blocks is read
    (``read``) and held in the sidecar, as a Zarr reference is one byte range.
    """
    chunks = var.chunks
    assert chunks is not None
    where = f"/{var.path}"
    index = _grid_index(chunks, spec.shape, chunk_shape, where)
    grid = tuple(-(-s // c) for s, c in zip(spec.shape, chunk_shape, strict=True))
    offsets, lengths = chunks.offsets.copy(), chunks.lengths.copy()
    if chunks.chunk_shape is None and chunks.n_chunks > 1:  # contiguous data in several pieces
        spans = tuple(zip(offsets.tolist(), lengths.tolist(), strict=True))
        offsets, lengths, index = (
            offsets[:1],
            np.array([sum(lengths.tolist())], np.uint64),
            index[:1],
        )
        blocks = {0: spans}
        hrefs = chunks.hrefs[:1]
    else:
        blocks, hrefs = dict(chunks.blocks), chunks.hrefs
    scattered = {
        row: spans
        for row, spans in blocks.items()
        if any(o + n != nxt for (o, n), (nxt, _) in itertools.pairwise(spans))
    }
    if scattered and read is None:
        fail(ErrorKind.UNSUPPORTED_LAYOUT,
             f"chunk {index[next(iter(scattered))].tolist()} is made of blocks that are not "
             "adjacent in the file; a Zarr reference is one byte range")  # fmt: skip
    flat = (
        np.ravel_multi_index(tuple(index.T), grid) if len(grid) else np.zeros(len(index), np.intp)
    )
    if len(np.unique(flat)) != len(flat):
        raise InvalidDmrppError(f"{where}: two chunks at the same position of the chunk grid")
    resolved = [urls(-1)] + [urls(i) for i in range(len(chunks.urls))]
    table: dict[str, int] = {}
    codes_of = np.empty(len(resolved), np.int32)
    for i, info in enumerate(resolved):
        if info.size is None and bool(np.any(hrefs == i - 1)):
            fail(ErrorKind.EXTERNAL_STORAGE,
                 f"its chunks are in {info.url}, which does not exist (named by the document)")  # fmt: skip
        codes_of[i] = table.setdefault(info.url, len(table))
        if info.size is not None:
            mine = hrefs == i - 1
            ends = offsets[mine] + lengths[mine]
            if scattered:  # a scattered chunk ends where its last-ending block does
                ends = np.array([_end(scattered.get(int(r)), int(o + n)) for r, o, n in
                                 zip(np.flatnonzero(mine), offsets[mine], lengths[mine],
                                     strict=True)], np.uint64)  # fmt: skip
            end = ends.max(initial=0)
            if int(end) > info.size:
                raise InvalidDmrppError(
                    f"{where}: a chunk ends at byte {int(end)}, past the end of {info.url} "
                    f"({info.size} bytes); {DRIFT}"
                )
    codes = np.full(grid, MISSING, np.int32)
    offs = np.zeros(grid, np.uint64)
    lens = np.zeros(grid, np.uint64)
    stored = lengths > 0  # a chunk of 0 bytes was never written: it reads as the fill value
    flat_codes = codes.reshape(-1)
    flat_codes[flat[stored]] = codes_of[hrefs[stored] + 1]
    offs.reshape(-1)[flat[stored]] = offsets[stored]
    lens.reshape(-1)[flat[stored]] = lengths[stored]
    inline: dict[int, bytes] = {}
    for row, spans in scattered.items():
        assert read is not None
        url = resolved[int(hrefs[row]) + 1].url
        inline[int(flat[row])] = b"".join(read(url, list(spans)))
        flat_codes[flat[row]] = INLINE
        lens.reshape(-1)[flat[row]] = len(inline[int(flat[row])])
    used = list(table) if bool((codes >= 0).any()) else []  # nothing points into a file
    manifest = ChunkManifest.from_arrays(urls=used, codes=codes, offsets=offs, lengths=lens,
                                         inline=inline)  # fmt: skip
    notes = []
    if len(blocks) > len(scattered):
        notes.append("chunks held in several adjacent blocks were joined")
    if scattered:
        notes.append(f"{len(scattered)} chunk(s) made of scattered blocks held in the sidecar")
    return manifest, _join(*notes)


def _end(spans: tuple[tuple[int, int], ...] | None, default: int) -> int:
    return default if spans is None else max(o + n for o, n in spans)


def _check_raw_sizes(manifest: ChunkManifest, chunk_shape: tuple[int, ...], dt: np.dtype) -> None:
    """Unfiltered chunks hold exactly a chunk's elements: anything else means the document's
    type or shape is not the file's (seen: ``Int16`` for an HDF5 8-bit integer)."""
    want = int(np.prod(chunk_shape, dtype=np.int64)) * dt.itemsize
    got = manifest.lengths[manifest.codes >= 0]
    if got.size and (got != want).any():
        fail(ErrorKind.OTHER,
             f"the document's unfiltered chunks are {int(got[got != want][0])} bytes where its "
             f"type and chunk shape need {want} ({dt}, {list(chunk_shape)}): {DRIFT}; index the "
             "HDF5 file instead")  # fmt: skip


# -- the variable ---------------------------------------------------------------------------------
def _compact(var: DmrVariable, spec: ArraySpec, typ: VariableType, fill: Any) -> ArrayRefs:
    """Values written in the document itself: one chunk held in the sidecar."""
    assert var.compact is not None
    dt, note = typ.dt, typ.note
    data = var.compact
    filters: tuple[Mapping[str, Any], ...] = ()
    if dt.kind == "O":
        from numcodecs import VLenUTF8

        text = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
        data = bytes(VLenUTF8().encode(np.array([text], dtype=object)))
        filters = ({"id": "vlen-utf8"},)
    elif len(data) != int(np.prod(spec.shape, dtype=np.int64)) * dt.itemsize:
        fail(ErrorKind.OTHER,
             f"dmrpp:compact holds {len(data)} bytes, not the {dt.itemsize} x {list(spec.shape)} "
             "its type and shape need")  # fmt: skip
    grid = (1,) * len(spec.shape)
    chunks = tuple(max(s, 1) for s in spec.shape)
    manifest = ChunkManifest.from_arrays(
        urls=[], codes=np.full(grid, INLINE, np.int32), offsets=np.zeros(grid, np.uint64),
        lengths=np.full(grid, len(data), np.uint64), inline={0: data},
    )  # fmt: skip
    meta = ArrayMeta(spec.shape, chunks, typ.zarr, fill, filters, None, spec.dimension_names,
                     spec.attrs)  # fmt: skip
    why = "compact values written in the DMR++ (dmrpp:compact)"
    return ArrayRefs(spec.path, meta, manifest, "inlined", _join(why, note, spec.note))


def convert_variable(var: DmrVariable, spec: ArraySpec, ctx: Conversion,
                     urls: Callable[[int], UrlInfo]) -> ArrayRefs:  # fmt: skip
    """The references of one variable.

    ``urls(i)`` resolves the i-th per-chunk ``href`` of the variable (``-1``: the granule).

    Raises
    ------
    Skip
        The variable cannot be represented exactly (kind and reason recorded).
    InvalidDmrppError
        The document contradicts itself or the file (chunks off the grid, past the end).
    """
    if var.missing_data:
        fail(ErrorKind.UNSUPPORTED_LAYOUT,
             "its values are written in the DMR++ itself (dmrpp:missingdata), not in the "
             "granule; they are not converted")  # fmt: skip
    typ = variable_type(var, ctx)
    dt, note = typ.dt, typ.note
    fill = _fill(var.chunks, dt, spec.attrs)
    if var.compact is not None:
        return _compact(var, spec, typ, fill)
    if var.chunks is None:
        fail(ErrorKind.OTHER, "the document gives no dmrpp:chunks (no location for its values)")
    chunk_shape = var.chunks.chunk_shape or tuple(max(s, 1) for s in spec.shape)
    if len(chunk_shape) != len(spec.shape):
        raise InvalidDmrppError(
            f"/{var.path}: chunks of rank {len(chunk_shape)} for a {len(spec.shape)}-d variable "
            f"of shape {list(spec.shape)}; the chunk grid does not cover the shape"
        )
    filters, filter_note = _filters(var.chunks, dt)
    manifest, layout_note = _manifest(var, spec, chunk_shape, urls, ctx.read)
    filters, order_note = settle_pipeline(
        filters, manifest, chunk_shape, dt.itemsize, ctx.read, check_size=typ.check_size
    )
    filter_note = _join(filter_note, order_note)
    if not filters:
        _check_raw_sizes(manifest, chunk_shape, dt)
    meta = ArrayMeta(spec.shape, chunk_shape, typ.zarr, fill, filters, None, spec.dimension_names,
                     spec.attrs)  # fmt: skip
    arr = ArrayRefs(spec.path, meta, manifest, "virtual",
                    _join(note, filter_note, layout_note, spec.note))  # fmt: skip
    # chunks the document lists no location for were never written: as when indexing the
    # HDF5 file, they are stored in the sidecar where a Zarr reader would read them as
    # anything but the fill value (a v2 fill_value that is not the _FillValue would be masked)
    return materialize_missing(arr, _fill_bytes(fill, meta.numpy_dtype), ctx.materialize_limit)


def _fill_bytes(fill: Any, dt: np.dtype) -> bytes | None:
    """One element of the storage fill value (``fill`` in Zarr v2 JSON form) as raw bytes."""
    if fill is None or dt.kind not in "biufc":
        return None
    value = complex(*(float(x) for x in fill)) if dt.kind == "c" else fill
    return np.array(float(value) if isinstance(value, str) else value, dtype=dt).tobytes()
