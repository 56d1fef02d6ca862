"""Values HDF5 can decode but Zarr cannot address in place: decode with h5py, store inline.

Three situations:

* **whole variables** whose bytes are not their values: variable-length strings, object
  references (replaced by target paths), types HDF5 converts on read, compact datasets (their
  bytes sit in the object header).  They get their own encoding (none, or ``vlen-utf8`` /
  ``vlen-bytes``) since every chunk is inline.
* **single chunks** stored with another pipeline than the array's (a non-zero filter mask, or a
  partial edge chunk of a dataset created with ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``): the
  chunk's values are read with h5py, padded to a full chunk with the fill value and re-encoded
  with the array's pipeline, so a Zarr reader decodes it like any other chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numcodecs
import numpy as np
from numcodecs.compat import ensure_bytes

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import H5PY_ERRORS, describe_h5_error, fail, reraise_io_failure
from h5sidecar.indexer.dtypes._dtype_plan import DtypePlan
from h5sidecar.references import INLINE

__all__ = [
    "Materialized",
    "chunk_slices",
    "encode_chunk",
    "materialize_chunks",
    "materialize_variable",
]

Config = dict[str, Any]


def chunk_slices(
    index: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[slice, ...]:
    """The region of the array covered by the chunk at grid ``index`` (clipped to ``shape``)."""
    return tuple(
        slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape, strict=True)
    )


def encode_chunk(data: np.ndarray, pipeline: Sequence[Config]) -> bytes:
    """Encode a full chunk with ``pipeline`` (numcodecs configs in encode order).

    Raises
    ------
    Skip
        ``unsupported_filter`` when a codec of the pipeline cannot encode.
    """
    buf: Any = np.ascontiguousarray(data)
    for cfg in pipeline:
        codec = numcodecs.get_codec(dict(cfg))
        try:
            buf = codec.encode(buf)
        except NotImplementedError:
            fail(
                ErrorKind.UNSUPPORTED_FILTER,
                f"a chunk must be re-encoded with codec {cfg.get('id')!r}, which cannot encode",
            )
    return ensure_bytes(buf) if not isinstance(buf, bytes) else buf


def _blank(shape: tuple[int, ...], dtype: np.dtype, fill: bytes | None) -> np.ndarray:
    """An array of ``shape`` filled with the raw fill value bytes (zeros without one)."""
    if dtype.kind == "O":
        return np.full(shape, "", dtype=object)
    out = np.zeros(shape, dtype=dtype)
    if fill and any(fill) and out.size:
        out.view(np.uint8).reshape(-1, dtype.itemsize)[:] = np.frombuffer(fill, np.uint8)
    return out


def _read(dset: h5py.Dataset, selection: Any, what: str) -> Any:
    try:
        return dset[selection]
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        fail(ErrorKind.UNREADABLE, f"HDF5 cannot read {what}: {describe_h5_error(exc)}")


def materialize_chunks(
    dset: h5py.Dataset,
    indices: Iterable[tuple[int, ...]],
    chunks: tuple[int, ...],
    extra_shape: tuple[int, ...],
    np_dtype: np.dtype,
    pipeline: Sequence[Config],
    fill: bytes | None,
) -> dict[tuple[int, ...], bytes]:
    """Read the given chunks through h5py and re-encode them with ``pipeline``.

    Returns
    -------
    dict
        HDF5 grid index -> encoded chunk bytes.
    """
    shape = tuple(dset.shape)
    out = {}
    for index in indices:
        region = chunk_slices(index, chunks, shape)
        values = np.asarray(_read(dset, region, f"chunk {index}"))
        buf = _blank(chunks + extra_shape, np_dtype, fill)
        buf[tuple(slice(0, r.stop - r.start) for r in region)] = values.view(np_dtype)
        out[index] = encode_chunk(buf, pipeline)
    return out


@dataclass
class Materialized:
    """A whole variable decoded and re-chunked for the sidecar."""

    filters: tuple[Config, ...]
    codes: np.ndarray
    inline: dict[int, bytes]
    note: str


def _string_codec(values: np.ndarray) -> tuple[np.ndarray, Config, str]:
    """Strings as ``vlen-utf8`` when they all decode as UTF-8, else bytes as ``vlen-bytes``.

    HDF5's ASCII/UTF-8 character set tag is not trusted: writers label UTF-8 text ASCII and
    vice versa, and what matters is whether a ``str`` round trip is lossless.
    """
    flat = [b"" if v is None else v for v in values.reshape(-1)]
    try:
        text = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in flat]
    except UnicodeDecodeError:
        raw = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat]
        return np.array(raw, dtype=object).reshape(values.shape), {"id": "vlen-bytes"}, "bytes"
    return np.array(text, dtype=object).reshape(values.shape), {"id": "vlen-utf8"}, "utf-8"


def _scalar_array(raw: Any, dset: h5py.Dataset, plan: DtypePlan) -> np.ndarray:
    """A 0-d array of the element type h5py reads, for a scalar dataset's value.

    h5py returns a scalar as a Python/numpy scalar: a string as ``bytes``/``str``, a fixed-length
    string as ``numpy.bytes_`` *without its trailing NULs* (a NUL-terminated or space-padded
    value shorter than its type).  Letting numpy infer the dtype from that gives ``|S<n>`` of
    the value's length, not the type's; the element type must come from the dataset.
    """
    if plan.np_dtype.kind == "O":
        return np.asarray(raw, dtype=object)  # a variable-length string stays a Python object
    return np.asarray(raw, dtype=dset.dtype)


def _decoded_values(
    dset: h5py.Dataset, plan: DtypePlan, deref: Callable[[h5py.Reference], str | None]
) -> tuple[np.ndarray, tuple[Config, ...], str]:
    raw = _read(dset, (), "the variable")
    values = raw if isinstance(raw, np.ndarray) else _scalar_array(raw, dset, plan)
    if plan.mode == "vlen_str":
        strings, codec, kind = _string_codec(values)
        return strings, (codec,), f"variable-length strings stored in the sidecar ({kind})"
    if plan.mode == "objref":
        paths = [(deref(r) or "") if r else "" for r in values.reshape(-1)]
        arr = np.array(paths, dtype=object).reshape(values.shape)
        return arr, ({"id": "vlen-utf8"},), "object references stored as target paths"
    # same itemsize: the view only renames/flattens fields, bytes stay as h5py decoded them
    return np.ascontiguousarray(values).view(plan.np_dtype), (), ""


def materialize_variable(
    dset: h5py.Dataset,
    plan: DtypePlan,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    fill: bytes | None,
    limit: int,
    deref: Callable[[h5py.Reference], str | None],
) -> Materialized:
    """Decode a whole variable with h5py and cut it into inline chunks.

    Parameters
    ----------
    shape, chunks : tuple of int
        Zarr shape and chunk shape (with any trailing element-type dimensions).
    fill : bytes or None
        Raw fill value used to pad edge chunks of fixed-size types.
    limit : int
        ``materialize_limit``: larger variables are skipped.

    Raises
    ------
    Skip
        ``too_large_to_materialize`` or ``unreadable``.
    """
    n = math.prod(shape)
    per_item = plan.np_dtype.itemsize if plan.np_dtype.kind != "O" else 8
    if n * per_item > limit:
        fail(
            ErrorKind.TOO_LARGE_TO_MATERIALIZE,
            f"decoding it would hold {n * per_item} bytes in the "
            f"sidecar, above materialize_limit={limit}; raise the limit to include it",
        )
    values, filters, note = _decoded_values(dset, plan, deref)
    extent = tuple(dset.shape or ())
    values = values.reshape(extent + shape[len(extent) :])
    if values.shape != shape:  # shown longer than HDF5's extent: padded as netCDF readers pad
        padded = _blank(shape, values.dtype, fill)
        padded[tuple(slice(0, s) for s in values.shape)] = values
        values = padded
    grid = tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))
    codes = np.full(grid, INLINE, dtype=np.int32)
    inline: dict[int, bytes] = {}
    total = 0
    for flat, index in enumerate(np.ndindex(*grid)):
        region = chunk_slices(index, chunks, shape)
        selection: tuple[Any, ...] = (*region, Ellipsis)  # Ellipsis: a 0-d block stays an array
        block = values[selection]
        if block.shape != chunks:
            buf = _blank(chunks, values.dtype, fill)
            buf[tuple(slice(0, b) for b in block.shape)] = block
            block = buf
        inline[flat] = encode_chunk(block, filters)
        total += len(inline[flat])
        if total > limit:
            fail(
                ErrorKind.TOO_LARGE_TO_MATERIALIZE,
                f"its encoded values exceed materialize_limit={limit}"
                " bytes; raise the limit to include it",
            )
    return Materialized(filters, codes, inline, note)
