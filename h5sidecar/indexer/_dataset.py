"""One HDF5 dataset -> one :class:`~h5sidecar.references.ArrayRefs` (or a :class:`Skip`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import h5py
import numpy as np

from h5sidecar.errors import ErrorKind, UnsupportedFeatureError
from h5sidecar.indexer._failures import H5PY_ERRORS, dcpl, fail, reraise_io_failure
from h5sidecar.indexer._materialize import materialize_chunks, materialize_variable
from h5sidecar.indexer._values import fill_bytes, fill_value_json
from h5sidecar.indexer._walk import DatasetEntry
from h5sidecar.indexer.attrs._native import NativeAttrs
from h5sidecar.indexer.attrs._zarr_attrs import read_attrs
from h5sidecar.indexer.dims._dim_names import DimensionNamer
from h5sidecar.indexer.dtypes._dtype_plan import DtypePlan, plan_dtype
from h5sidecar.indexer.filters import chunk_pipeline, hdf5_filters, pipeline_for
from h5sidecar.indexer.filters._mask import describe_mask, effective_masks, pick_mask
from h5sidecar.indexer.layout._chunk_table import ChunkTable, chunked_table, contiguous_table
from h5sidecar.indexer.layout._external import external_segments, external_table
from h5sidecar.indexer.layout._fillchunks import materialize_missing
from h5sidecar.indexer.layout._past_extent import extend_table, extended_note
from h5sidecar.indexer.layout._refcheck import check_references
from h5sidecar.indexer.vds._table import vds_extent, vds_table
from h5sidecar.references import (
    DIMENSION_ONLY_REASON,
    INLINE,
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
)
from h5sidecar.settings import IndexSettings

__all__ = ["IndexContext", "index_alias", "index_dataset"]


@dataclass
class IndexContext:
    """What every dataset of one granule needs."""

    url: str
    file_size: int
    settings: IndexSettings
    dims: DimensionNamer
    deref: Callable[[h5py.Reference], str | None]
    identity: Callable[[str], Mapping[str, Any]]
    #: reads ``(offset, length)`` ranges of one URL, batched (concurrent on S3)
    read_many: Callable[[str, list[tuple[int, int]]], list[bytes]]
    #: opens another HDF5 file (sources of virtual datasets); closed with the granule
    open_h5: Callable[[str], h5py.File]
    #: array path -> attribute -> type spec JSON loses (float width, bytes, ...; see
    #: :mod:`h5sidecar.references._typed_attrs`); the granule adds its groups'
    attribute_dtypes: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    #: reads attributes from the granule's metadata bytes (``None``: all through h5py)
    native_attrs: NativeAttrs | None = None
    #: paths of the arrays whose file type is a plain integer or float (``DtypePlan.number``):
    #: no enumeration or reference to describe, without mapping the type again (~25 us each)
    numbers: set[str] = dataclasses.field(default_factory=set)
    #: array path -> HDF5's extent, of the arrays shown longer (on an unlimited dimension)
    extended: dict[str, list[int]] = dataclasses.field(default_factory=dict)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


#: CF attributes whose numeric type decides how xarray decodes (packing, masks, ranges).
CF_TYPED_ATTRS = (
    "scale_factor", "add_offset", "_FillValue", "missing_value", "valid_min", "valid_max",
    "valid_range",
)  # fmt: skip


def cf_attribute_dtypes(dset: h5py.Dataset, kept: Collection[str] | None = None,
                        known: Mapping[str, np.dtype] | None = None) -> dict[str, str]:
    """Numeric types of the CF attributes of ``dset`` (JSON loses float32 vs float64, which
    decides the dtype xarray unpacks to: a float64 ``scale_factor`` of 0.5 means float64).

    ``kept``: the names of the attributes already read (only those can be kept, and asking
    HDF5 whether each CF name exists cost a lookup per name and variable, ~7,000 on a granule
    of ~1,000 variables)."""
    out: dict[str, str] = {}
    for name in CF_TYPED_ATTRS:
        try:
            if name not in (dset.attrs if kept is None else kept):
                continue
            dtype = known[name] if known and name in known else dset.attrs.get_id(name).dtype
        except H5PY_ERRORS:
            continue
        if dtype.kind in "biuf":
            out[name] = dtype.newbyteorder("=").str
    return out


# -- quirks ---------------------------------------------------------------------------------------
#: Zarr v2 JSON of number fill values by (dtype, bytes): most datasets of a granule share a
#: few (0, or the product's one _FillValue), and the JSON of a number is immutable.
_NUMBER_FILLS: dict[tuple[str, bytes], Any] = {}


def _number_fill(dset: h5py.Dataset, plan: DtypePlan) -> tuple[Any, bytes]:
    """:func:`_fill` of a plain (not array-element) integer or float dataset: the fill value's
    bytes read straight into one element (what ``fill_bytes`` returns, without h5py's scalar).

    ``plan.np_dtype`` is h5py's dtype of such a dataset; asking ``dset.dtype`` instead would
    map the file type again (~11 us a dataset, h5py caches it only once asked)."""
    one = np.zeros(1, dtype=plan.np_dtype)
    dcpl(dset).get_fill_value(one)
    raw = one.tobytes()
    key = (plan.np_dtype.str, raw)
    if key not in _NUMBER_FILLS:
        if len(_NUMBER_FILLS) >= 4096:
            _NUMBER_FILLS.clear()
        scalar = np.frombuffer(raw, dtype=plan.np_dtype).reshape(())
        _NUMBER_FILLS[key] = fill_value_json(scalar, plan.np_dtype)
    return _NUMBER_FILLS[key], raw


def _fill(dset: h5py.Dataset, plan: DtypePlan) -> tuple[Any, bytes | None]:
    """The storage fill value: (Zarr v2 JSON form, raw bytes of one element or None)."""
    kind = plan.np_dtype.kind
    if kind == "O":
        return None, None
    try:
        if kind in "iuf" and not plan.extra_shape:
            return _number_fill(dset, plan)
        raw = fill_bytes(dset)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return fill_value_json(np.zeros((), plan.np_dtype), plan.np_dtype), None
    if len(raw) != plan.np_dtype.itemsize:
        return None, None
    scalar = np.frombuffer(raw, dtype=plan.np_dtype).reshape(())
    return fill_value_json(scalar, plan.np_dtype), raw


def _hdf5_shape(dset: h5py.Dataset) -> tuple[int, ...]:
    shape = dset.shape
    if shape is None:
        fail(
            ErrorKind.OTHER,
            "the dataset has a null dataspace (no shape and no values); Zarr arrays "
            "always have a shape",
        )
    return tuple(int(s) for s in shape)


def _pipeline(dset: h5py.Dataset) -> tuple[dict[str, Any], ...]:
    try:
        return tuple(dict(c) for c in pipeline_for(dset))
    except UnsupportedFeatureError as exc:
        fail(ErrorKind.UNSUPPORTED_FILTER, str(exc))


# -- layouts --------------------------------------------------------------------------------------
def _table(
    dset: h5py.Dataset, plan: DtypePlan, shape: tuple[int, ...], ctx: IndexContext
) -> tuple[ChunkTable, tuple[dict[str, Any], ...]]:
    """Chunk table (with its note) and pipeline of a raw (byte-addressable) variable."""
    layout = dcpl(dset).get_layout()
    itemsize = plan.np_dtype.itemsize * math.prod(plan.extra_shape)  # dset.dtype's, not mapped again
    target = ctx.settings.contiguous_chunk_bytes
    if layout == h5py.h5d.CHUNKED:
        table = chunked_table(dset, shape, ctx.url)
        check_references(table, ctx.url, ctx.file_size)  # a corrupt index: skip, not a bad ref
        return _reconcile_pipeline(dset, plan, table)
    if external_segments(dset):
        table = external_table(dset, shape, itemsize, ctx.url, target, ctx.identity)
        table.note = _join(table.note, "raw data in external file(s): " + ", ".join(table.urls))
        return table, ()
    if layout == h5py.h5d.CONTIGUOUS:
        table = contiguous_table(dset, shape, itemsize, ctx.url, ctx.file_size, target)
        check_references(table, ctx.url, ctx.file_size)
        return table, ()
    fail(ErrorKind.UNSUPPORTED_LAYOUT, f"HDF5 storage layout {layout} is not understood")


def _reconcile_pipeline(
    dset: h5py.Dataset, plan: DtypePlan, table: ChunkTable
) -> tuple[ChunkTable, tuple[dict[str, Any], ...]]:
    """Pick the array's pipeline from the chunks' filter masks; re-encode the odd chunks."""
    filters = hdf5_filters(dset)
    if not filters:
        return table, ()
    stored = table.codes >= 0
    masks = effective_masks(dset, table, len(filters))
    chosen = pick_mask(masks, stored)
    if chosen == (1 << len(filters)) - 1:
        pipeline: tuple[dict[str, Any], ...] = ()  # no filter ran: no codec needed at all
    elif chosen:
        try:
            pipeline = tuple(dict(c) for c in chunk_pipeline(dset, chosen))
        except UnsupportedFeatureError as exc:
            fail(ErrorKind.UNSUPPORTED_FILTER, str(exc))
    else:
        pipeline = _pipeline(dset)
    notes = []
    if chosen:
        names = [f.name or str(f.id) for f in filters]
        notes.append(
            f"most chunks were stored without filter(s) {describe_mask(chosen, names)}"
            ", so the array's pipeline leaves them out"
        )
    odd = np.argwhere(stored & (masks != chosen))
    if len(odd):
        _, fill_raw = _fill(dset, plan)
        encoded = materialize_chunks(
            dset,
            [tuple(int(i) for i in ix) for ix in odd],
            table.chunks,
            plan.extra_shape,
            plan.np_dtype,
            pipeline,
            fill_raw,
        )
        for index, data in encoded.items():
            flat = int(np.ravel_multi_index(index, table.grid)) if index else 0
            table.codes[index] = INLINE
            table.inline[flat] = data
            table.lengths[index] = len(data)
        notes.append(
            f"{len(odd)} chunk(s) stored with another filter pipeline (filter mask or "
            "unfiltered partial edge chunk) were decoded and re-encoded in the sidecar"
        )
    table.note = _join(table.note, *notes)
    return table, pipeline


def _inline_small(table: ChunkTable, threshold: int, ctx: IndexContext) -> None:
    """Move chunks of at most ``threshold`` bytes into the sidecar (saves a request each)."""
    if threshold <= 0:
        return
    small = (table.codes >= 0) & (table.lengths <= threshold)
    for code, url in enumerate(table.urls):
        index = np.argwhere(small & (table.codes == code))
        ranges = [(int(table.offsets[tuple(ix)]), int(table.lengths[tuple(ix)])) for ix in index]
        for ix, data in zip(index, ctx.read_many(url, ranges), strict=True):
            flat = int(np.ravel_multi_index(tuple(ix), table.grid)) if len(ix) else 0
            table.inline[flat] = data
            table.codes[tuple(ix)] = INLINE


def _manifest(table: ChunkTable, n_extra: int) -> ChunkManifest:
    grid = table.grid + (1,) * n_extra
    urls = list(table.urls)
    codes = table.codes.reshape(grid)
    if not np.any(codes >= 0):
        urls = []  # nothing points into the source (all inline or missing)
    return ChunkManifest.from_arrays(
        urls=urls,
        codes=codes,
        offsets=table.offsets.reshape(grid),
        lengths=table.lengths.reshape(grid),
        inline=table.inline,
    )


# -- the variable ---------------------------------------------------------------------------------
def index_dataset(entry: DatasetEntry, ctx: IndexContext) -> ArrayRefs:
    """Build the references of one dataset.

    Raises
    ------
    Skip
        When the variable cannot be represented (with the kind and reason to record).
    """
    dset = entry.dset
    is_scale = ctx.dims.is_scale(entry)  # asked once: a lookup of the CLASS attribute
    if is_scale and ctx.dims.dimension_only(entry):
        fail(
            ErrorKind.OTHER,
            f"{DIMENSION_ONLY_REASON}: HDF5 holds no values for it and "
            "netCDF readers hide it; its name is kept as a dimension name",
        )
    hshape = _hdf5_shape(dset)
    layout = dcpl(dset).get_layout()
    plan = plan_dtype(dset)
    if plan.number:
        ctx.numbers.add(entry.path)
    if layout == h5py.h5d.VIRTUAL:
        if plan.mode != "raw":
            fail(
                ErrorKind.VIRTUAL_DATASET,
                f"virtual dataset of values HDF5 must convert ({plan.note})",
            )
        hshape = vds_extent(dset, ctx.url, ctx.open_h5)
        extent = hshape
    else:  # longer than HDF5's extent on an unlimited netCDF dimension (_unlimited_dims)
        extent = ctx.dims.shape_of(entry)
    if extent != hshape:
        ctx.extended[entry.path] = list(hshape)
    shape = extent + plan.extra_shape
    attrs = read_attrs(dset, ctx.deref, is_scale=is_scale, native=ctx.native_attrs)
    # the CF attributes' types keep the readers' CF rules (native byte order)
    types = {k: v for k, v in attrs.types.items() if k not in plan.attrs}
    types.update(cf_attribute_dtypes(dset, attrs.attrs, attrs.dtypes))
    if types:
        ctx.attribute_dtypes[entry.path] = types
    dim_names, dim_note = ctx.dims.names(entry, shape, len(plan.extra_shape))
    fill_json, fill_raw = _fill(dset, plan)
    all_attrs = {**attrs.attrs, **plan.attrs}
    if plan.mode != "raw" or layout == h5py.h5d.COMPACT:
        chunks = tuple(dset.chunks) if dset.chunks else tuple(max(s, 1) for s in hshape)
        chunks += plan.extra_shape
        mat = materialize_variable(
            dset, plan, shape, chunks, fill_raw, ctx.settings.materialize_limit, ctx.deref
        )
        why = (
            "compact layout (values held in the object header)"
            if layout == h5py.h5d.COMPACT
            else ""
        )
        manifest = ChunkManifest.from_arrays(
            urls=[],
            codes=mat.codes,
            offsets=np.zeros(mat.codes.shape, np.uint64),
            lengths=np.zeros(mat.codes.shape, np.uint64),
            inline=mat.inline,
        )
        meta = ArrayMeta(
            shape, chunks, plan.zarr_dtype, fill_json, mat.filters, None, dim_names, all_attrs
        )
        longer = extended_note(extent, hshape) if extent != hshape else ""
        note = _join(why, mat.note, longer, plan.note, dim_note, attrs.note())
        arr = ArrayRefs(entry.path, meta, manifest, "inlined", note)
        return materialize_missing(arr, fill_raw, ctx.settings.materialize_limit)
    if layout == h5py.h5d.VIRTUAL:
        table, pipeline, source_dtype = vds_table(dset, hshape, ctx.url, ctx.open_h5)
        zarr_dtype = plan.zarr_dtype if source_dtype is None else source_dtype.str
    else:
        table, pipeline = _table(dset, plan, hshape, ctx)
        if extent != hshape:
            table = extend_table(dset, table, extent, plan, pipeline, fill_raw)
        zarr_dtype = plan.zarr_dtype
    _inline_small(table, ctx.settings.inline_threshold, ctx)
    manifest = _manifest(table, len(plan.extra_shape))
    chunks = table.chunks + plan.extra_shape
    meta = ArrayMeta(shape, chunks, zarr_dtype, fill_json, pipeline, None, dim_names, all_attrs)
    status: Literal["virtual", "inlined"] = (
        "inlined" if manifest.n_inline and not manifest.n_stored else "virtual"
    )
    note = _join(table.note, plan.note, dim_note, attrs.note())
    arr = ArrayRefs(entry.path, meta, manifest, status, note)
    return materialize_missing(arr, fill_raw, ctx.settings.materialize_limit)


def index_alias(entry: DatasetEntry, first: ArrayRefs, ctx: IndexContext) -> ArrayRefs:
    """A second name (hard or soft link) of a dataset already indexed as ``first``.

    The references are shared; only the dimension names are worked out again, because phony
    names and name conflicts depend on the group the new name lives in.
    """
    n_extra = len(first.meta.shape) - len(entry.dset.shape or ())
    names, _ = ctx.dims.names(entry, first.meta.shape, n_extra)
    meta = dataclasses.replace(first.meta, dimension_names=names)
    if entry.link == "soft":
        why = f"soft link to {entry.target!r} (same data as {first.path!r})"
    else:
        why = f"another hard link to the dataset indexed as {first.path!r} (same data)"
    note = _join(why, first.note)
    if first.path in ctx.attribute_dtypes:
        ctx.attribute_dtypes[entry.path] = ctx.attribute_dtypes[first.path]
    return dataclasses.replace(first, path=entry.path, meta=meta, note=note)
