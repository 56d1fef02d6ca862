"""The attributes and chunking the xarray engine gives each variable, from its references.

Shared by the two ways a group is opened (:mod:`h5sidecar.read._xr_refs`, straight from the
references; :mod:`h5sidecar.read._xr_store`, through xarray's Zarr store): CF attributes get
their numeric types back (see :func:`cf_attributes`) and Dask chunks are aligned to whole
source chunks (:func:`aligned_chunks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.references import ArrayMeta

__all__ = ["DEFAULT_CHUNK_BYTES", "aligned_chunks", "cf_attributes", "is_cf_time"]

#: Target decoded size of one Dask chunk when aligning to source chunks.
DEFAULT_CHUNK_BYTES = 64 * 2**20

_VARIABLE_TYPED = ("_FillValue", "missing_value", "valid_min", "valid_max", "valid_range")
_PACKING = ("scale_factor", "add_offset")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_UNSURE = object()


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


def _nonfinite(value: Any) -> Any:
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [_nonfinite(v) for v in value]
    return value


def _lossless(value: Any, dtype: np.dtype) -> Any | None:
    """``value`` as ``dtype`` (numpy scalar or array), or None if that would change it."""
    if type(value) in (int, float) and dtype.kind in "biuf":
        fast = _lossless_number(value, dtype)
        if fast is not _UNSURE:
            return fast
    try:
        src = np.asarray(_nonfinite(value))
        if src.dtype.kind not in "biuf":
            return None
        with np.errstate(invalid="ignore", over="ignore"):
            cast = src.astype(dtype)
        if not np.array_equal(cast.astype(src.dtype), src, equal_nan=src.dtype.kind == "f"):
            return None
    except (TypeError, ValueError, OverflowError):
        return None
    return cast[()] if cast.ndim == 0 else cast


def _lossless_number(value: float, dtype: np.dtype) -> Any | None:
    """:func:`_lossless` of one Python int or float (most attributes), through one 0-d cast
    instead of the general path's conversions and checks: the same cast, and the same round trip through the type NumPy gives the value
    (int64 or float64); ~10x cheaper, which counts over a granule's thousand variables."""
    src = np.int64 if type(value) is int else np.float64
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            cast = np.asarray(value, dtype=src).astype(dtype)[()]
            back = src(cast)
    except (TypeError, ValueError, OverflowError):  # an int beyond int64: the array path
        return _UNSURE
    if back == value or (src is np.float64 and math.isnan(value) and math.isnan(back)):
        return cast
    return None


def _packing_value(value: Any) -> Any:
    value = _nonfinite(value)
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
    """The attributes of an array with CF numeric types restored (see the module docstring)."""
    attrs = dict(meta.attrs)
    hints = hints or {}
    dtype = meta.numpy_dtype
    native = dtype.newbyteorder("=") if dtype.kind in "biuf" else None
    for name, value in attrs.items():
        if name in hints:
            typed = _lossless(value, np.dtype(hints[name]))
            attrs[name] = typed if typed is not None else _nonfinite(value)
        elif name in _VARIABLE_TYPED and native is not None:
            typed = _lossless(value, native)
            attrs[name] = typed if typed is not None else _packing_value(value)
        elif name in _PACKING:
            attrs[name] = _packing_value(value)
    return attrs


def is_cf_time(attrs: Mapping[str, Any]) -> bool:
    """Whether attributes describe a CF time variable (``units`` of the form ``"<u> since <t>"``)."""
    return isinstance(attrs.get("units"), str) and " since " in attrs["units"]
