"""Never-written chunks that a Zarr reader would not read as the HDF5 storage fill value.

A chunk HDF5 never wrote reads as the dataset's *storage* fill value.  A Zarr reader reads a
missing chunk as the ``.zarray`` ``fill_value``, which the sidecar sets to the CF
``_FillValue`` (see :mod:`h5sidecar.references._cf`), or as zeros / NaN when it is ``null``.
When those differ (GPM-style files: storage fill 0, ``_FillValue`` -9999.9; float arrays never
written, which VirtualiZarr would read as NaN), the missing chunks are stored in the sidecar:
one chunk full of the storage fill value, encoded once with the array's codecs and referenced
by every missing position.  An array with no stored chunk at all gets a zlib pipeline, so a
never-written array costs a few hundred bytes per chunk whatever its size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.references import (
    INLINE,
    MISSING,
    ArrayRefs,
    ChunkManifest,
    cf_fill_value,
    reads_as_storage_fill,
)

__all__ = ["materialize_missing"]

#: Pipeline for arrays that have no stored chunk (any codec will do; zlib is everywhere).
_NEVER_WRITTEN_PIPELINE = ({"id": "zlib", "level": 1},)


def materialize_missing(arr: ArrayRefs, fill_raw: bytes | None, limit: int) -> ArrayRefs:
    """Store the missing chunks of ``arr`` in the sidecar when readers would misread them.

    Parameters
    ----------
    arr : ArrayRefs
    fill_raw : bytes or None
        One element of the storage fill value (``None``: zeros).
    limit : int
        Most bytes of encoded chunks to add; beyond it the variable is skipped.

    Raises
    ------
    Skip
        ``too_large_to_materialize`` when the chunks exceed ``limit``, ``unsupported_filter``
        when the array's codecs cannot encode.
    """
    manifest = arr.manifest
    meta = arr.meta
    # structured and opaque types too: xarray's Zarr v2 backend takes a fill_value that is not
    # null for a _FillValue and fails to open the group on a structured one (unhashable)
    if not manifest.n_missing or meta.numpy_dtype.kind == "O":
        return arr
    persisted = cf_fill_value(meta.attrs, meta.numpy_dtype, meta.fill_value)
    if reads_as_storage_fill(persisted, meta.fill_value, meta.numpy_dtype):
        return arr
    filters = tuple(dict(f) for f in meta.filters)
    if meta.compressor is not None:
        filters += (dict(meta.compressor),)
    if not manifest.n_stored and not manifest.n_inline:
        filters = tuple(dict(f) for f in _NEVER_WRITTEN_PIPELINE)
    encoded = _encode_fill_chunk(arr, filters, fill_raw)
    total = len(encoded) * manifest.n_missing
    if total > limit:
        fail(
            ErrorKind.TOO_LARGE_TO_MATERIALIZE,
            f"{manifest.n_missing} never-written chunk(s) must be stored in the sidecar "
            f"({total} bytes) so that Zarr readers read them as the HDF5 fill value "
            f"{meta.fill_value!r}, over the materialize limit of {limit} bytes; raise "
            "IndexSettings.materialize_limit to keep this variable",
        )
    codes = np.array(manifest.codes)
    lengths = np.array(manifest.lengths)
    missing = codes == MISSING
    inline = dict(manifest.inline)
    inline.update(dict.fromkeys(np.flatnonzero(missing.reshape(-1)).tolist(), encoded))
    codes[missing] = INLINE
    lengths[missing] = len(encoded)
    new_manifest = ChunkManifest.from_arrays(
        urls=manifest.urls if np.any(codes >= 0) else (),
        codes=codes,
        offsets=manifest.offsets,
        lengths=lengths,
        inline=inline,
    )
    new_meta = dataclasses.replace(meta, filters=filters, compressor=None)
    why = (
        f"{int(missing.sum())} never-written chunk(s) stored in the sidecar as the HDF5 fill "
        f"value {meta.fill_value!r} (Zarr readers would read fill_value {persisted!r})"
    )
    status: Literal["virtual", "inlined"] = "virtual" if new_manifest.n_stored else "inlined"
    note = "; ".join(p for p in (arr.note, why) if p)
    return dataclasses.replace(arr, meta=new_meta, manifest=new_manifest, status=status, note=note)


def _encode_fill_chunk(arr: ArrayRefs, filters: tuple[dict[str, Any], ...], fill_raw: bytes | None) -> bytes:
    import numcodecs

    dtype = arr.meta.numpy_dtype
    n = math.prod(arr.meta.chunks)
    if fill_raw is not None and len(fill_raw) == dtype.itemsize:
        one = np.frombuffer(fill_raw, dtype=dtype)
        chunk = np.broadcast_to(one, (n,)).copy()
    else:
        chunk = np.zeros(n, dtype=dtype)
    data: Any = chunk.reshape(arr.meta.chunks)
    try:
        for config in filters:
            data = numcodecs.get_codec(dict(config)).encode(data)
    except (NotImplementedError, ValueError, TypeError, RuntimeError) as exc:
        fail(
            ErrorKind.UNSUPPORTED_FILTER,
            f"never-written chunks must be stored in the sidecar as the HDF5 fill value "
            f"{arr.meta.fill_value!r}, but codec pipeline {list(filters)!r} cannot encode: {exc}",
        )
    return bytes(np.asarray(data).tobytes() if isinstance(data, np.ndarray) else data)
