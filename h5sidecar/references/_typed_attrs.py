"""Attribute types JSON cannot carry, and how h5sidecar's readers give them back.

Attributes are persisted as JSON (``.zattrs``), which has no float32 or int16, no bytes, no
array as opposed to list, and -- as the sidecar writers keep it valid Unicode -- no lone
surrogates.  So for every attribute whose JSON value is not what netCDF readers (xarray +
h5netcdf) show, the indexer records a *type spec* in
``GranuleRefs.extra["attribute_dtypes"][path][name]`` (``path`` is an array's or a group's,
``""`` for the root); h5sidecar's readers apply it with :func:`typed_value`.  Plain Zarr readers
ignore the extras and see the JSON value.

Specs:

* a NumPy dtype string (``"<f4"``, ``">i2"``, ``"|b1"``, ``"<c8"``): a number of that type, or an
  array of them when the JSON value is a list (complex numbers are ``[real, imag]`` pairs);
* ``"bytes"``: the text's Latin-1 bytes, a scalar as ``numpy.bytes_`` and list items as
  ``bytes``: h5netcdf keeps one-character (netCDF ``NC_CHAR``) values as bytes, and xarray
  decodes a scalar to text only when it is UTF-8;
* ``"text:<stored>:<declared>"``: text whose bytes are not valid in their declared encoding.
  The bytes are the JSON text encoded with ``<stored>`` (``utf-8`` or ``latin-1``: how the
  indexer decoded them, see ``decode_text``); they are given back decoded with ``<declared>``
  and ``surrogateescape``, as h5py and h5netcdf decode them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["nonfinite", "typed_value"]

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_UNSURE = object()
_TEXT_CODECS = frozenset({"utf-8", "latin-1", "ascii"})


def nonfinite(value: Any) -> Any:
    """Zarr v2's ``"NaN"``/``"Infinity"``/``"-Infinity"`` strings (also inside lists) as
    floats; anything else unchanged."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [nonfinite(v) for v in value]
    return value


def typed_value(value: Any, spec: str) -> Any | None:
    """The JSON attribute ``value`` with the type ``spec`` gives it (see the module docstring).

    Returns
    -------
    Any or None
        ``None`` when the spec does not apply to the value or would change it (the caller keeps
        the JSON value): a spec never alters what a value says, only its type.
    """
    if spec == "bytes":
        return _each_text(value, _as_bytes)
    if spec.startswith("text:"):
        _, stored, declared = [*spec.split(":"), "", ""][:3]
        if stored not in _TEXT_CODECS or declared not in _TEXT_CODECS:
            return None
        return _each_text(value, lambda s: s.encode(stored).decode(declared, "surrogateescape"))
    try:
        dtype = np.dtype(spec)
    except TypeError:
        return None  # a spec of a newer h5sidecar: keep the JSON value
    if dtype.kind == "c":
        return _complex(value, dtype)
    return _lossless(value, dtype)


def _as_bytes(text: str) -> bytes:
    return text.encode("latin-1")


def _each_text(value: Any, convert: Any) -> Any | None:
    try:
        if isinstance(value, str):
            out = convert(value)
            return np.bytes_(out) if isinstance(out, bytes) else out
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [convert(v) for v in value]
    except (UnicodeEncodeError, UnicodeDecodeError):
        pass
    return None


def _complex(value: Any, dtype: np.dtype) -> Any | None:
    try:
        pairs = np.asarray(nonfinite(value), dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if pairs.ndim == 0 or pairs.shape[-1] != 2:
        return None
    cast = (pairs[..., 0] + 1j * pairs[..., 1]).astype(dtype)
    back = np.stack([cast.real, cast.imag], axis=-1).astype(np.float64)
    if not np.array_equal(back, pairs, equal_nan=True):
        return None
    return cast[()] if cast.ndim == 0 else cast


def _lossless(value: Any, dtype: np.dtype) -> Any | None:
    """``value`` as ``dtype`` (numpy scalar or array), or None if that would change it."""
    if type(value) in (int, float) and dtype.kind in "biuf":
        fast = _lossless_number(value, dtype)
        if fast is not _UNSURE:
            return fast
    try:
        if isinstance(value, list) and dtype.kind in "iu":
            return _exact_ints(value, dtype)
        src = np.asarray(nonfinite(value))
        if src.dtype.kind not in "biuf" or dtype.kind not in "biuf":
            return None
        with np.errstate(invalid="ignore", over="ignore"):
            cast = src.astype(dtype)
        if not np.array_equal(cast.astype(src.dtype), src, equal_nan=src.dtype.kind == "f"):
            return None
    except (TypeError, ValueError, OverflowError):
        return None
    return cast[()] if cast.ndim == 0 else cast


def _exact_ints(value: list[Any], dtype: np.dtype) -> Any | None:
    # straight to ``dtype``: through NumPy's own choice, uint64s beyond int64 become floats
    try:
        cast = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        return None
    return cast if cast.ndim and cast.tolist() == value else None


def _lossless_number(value: float, dtype: np.dtype) -> Any | None:
    """:func:`_lossless` of one Python int or float (most attributes): the same cast and round
    trip through the type NumPy gives the value (int64 or float64), through one 0-d cast
    instead of the general path's conversions; ~10x cheaper, which counts over a granule's
    thousand variables."""
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
