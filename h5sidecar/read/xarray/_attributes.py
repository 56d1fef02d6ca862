"""The attributes and chunking the xarray engine gives each variable, from its references.

Shared by the two ways a group is opened (:mod:`h5sidecar.read.xarray._refs_data_store`, straight from the
references; :mod:`h5sidecar.read.xarray._zarr_data_store`, through xarray's Zarr store): attributes get
their types back (see :func:`cf_attributes`, :func:`group_attributes`) and Dask chunks are
aligned to whole source chunks (:func:`aligned_chunks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.errors import require_extra
from h5sidecar.references import ArrayMeta, nonfinite, typed_value

__all__ = [
    "DEFAULT_CHUNK_BYTES", "aligned_chunks", "cf_attributes", "group_attributes", "is_cf_time",
    "require_dask",
]  # fmt: skip

#: Target decoded size of one Dask chunk when aligning to source chunks.
DEFAULT_CHUNK_BYTES = 64 * 2**20

_VARIABLE_TYPED = ("_FillValue", "missing_value", "valid_min", "valid_max", "valid_range")
_PACKING = ("scale_factor", "add_offset")


def aligned_chunks(
    shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, chunk_bytes: int
) -> tuple[int, ...]:
    """Whole multiples of ``chunks`` (slowest axis grown first) of about ``chunk_bytes``.

    Every returned chunk covers complete source chunks, so no source chunk is read by two Dask
    tasks.  ``chunk_bytes <= 0`` returns the source chunks.
    """
    out = list(chunks)
    nbytes = max(itemsize, 1) * math.prod(chunks)
    if chunk_bytes <= 0 or nbytes >= chunk_bytes:
        return tuple(chunks)
    for ax, (size, chunk) in enumerate(zip(shape, chunks, strict=True)):
        n = max(-(-size // chunk), 1)
        k = max(1, min(n, chunk_bytes // nbytes))
        out[ax] = min(chunk * k, size) if size else chunk
        nbytes *= k
        if k < n:
            break
    return tuple(out)


def _packing_value(value: Any) -> Any:
    value = nonfinite(value)
    if isinstance(value, bool) or not isinstance(value, int | float | list):
        return value
    arr = np.asarray(value)
    out: np.ndarray
    if arr.dtype.kind in "iu":
        out = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        as32 = arr.astype(np.float32)
        exact = np.array_equal(as32.astype(np.float64), arr, equal_nan=True)
        out = as32 if exact else arr.astype(np.float64)
    else:
        return value
    return out[()] if out.ndim == 0 else out


def cf_attributes(meta: ArrayMeta, hints: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The attributes of an array with their types restored: the types the indexer recorded
    (``hints``, see :func:`h5sidecar.references.typed_value`), else CF numeric types by the
    rules of the module docstring."""
    attrs = dict(meta.attrs)
    hints = hints or {}
    dtype = meta.numpy_dtype
    native = dtype.newbyteorder("=").str if dtype.kind in "biuf" else None
    for name, value in attrs.items():
        if name in hints:
            typed = typed_value(value, hints[name])
            attrs[name] = typed if typed is not None else nonfinite(value)
        elif name in _VARIABLE_TYPED and native is not None:
            typed = typed_value(value, native)
            attrs[name] = typed if typed is not None else _packing_value(value)
        elif name in _PACKING:
            attrs[name] = _packing_value(value)
    return attrs


def group_attributes(attrs: Mapping[str, Any], hints: Mapping[str, str] | None = None
                     ) -> dict[str, Any]:  # fmt: skip
    """A group's attributes with the types the indexer recorded (``hints``) restored, as
    :func:`cf_attributes` restores an array's."""
    out = dict(attrs)
    for name, spec in (hints or {}).items():
        if name in out:
            typed = typed_value(out[name], spec)
            if typed is not None:
                out[name] = typed
    return out


def is_cf_time(attrs: Mapping[str, Any]) -> bool:
    """Whether attributes describe a CF time variable (``units`` of the form ``"<u> since <t>"``)."""
    return isinstance(attrs.get("units"), str) and " since " in attrs["units"]


def require_dask(chunks: Any) -> None:
    """Any other chunking than ``None`` needs Dask, said so (xarray's own error,
    "unrecognized chunk manager dask", names no package to install)."""
    if chunks is not None:
        require_extra("dask", "dask", feature="chunks= (Dask arrays; chunks=None reads without)")
