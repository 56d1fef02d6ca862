"""How CF fill values are persisted so that every Zarr reader masks exactly what netCDF masks.

Two different things are called "fill value":

* the HDF5 **storage** fill value (``ArrayMeta.fill_value``): what chunks that were never
  written hold;
* the CF ``_FillValue`` **attribute**: which values readers replace with NaN.

Zarr readers do not agree on which one ``fill_value`` means.  xarray's zarr backend treats a
Zarr v2 ``fill_value`` as ``_FillValue`` (it masks it, overriding the attribute); for Zarr v3 it
ignores ``fill_value`` for masking and decodes a ``_FillValue`` *attribute* written its own way
(floats as base64 of a little-endian float64).  VirtualiZarr turns a v2 ``null`` into NaN for
floats.  So the sidecars follow these rules (the same as kerchunk's for ``fill_value``):

1. ``.zarray`` ``fill_value`` is the CF ``_FillValue`` cast to the array's dtype when the
   attribute exists, else ``null`` (nothing is masked: h5netcdf masks nothing either).  A
   byte-string (``|S``) variable whose ``_FillValue`` is text also gets ``null``: xarray +
   h5netcdf compares the bytes with that text and masks nothing.
2. ``.zattrs`` ``_FillValue`` is kept, encoded as xarray encodes it for Zarr (floats as base64
   of ``<f8``, complex as two such strings, integers as integers).  Zarr v2 readers mask with
   ``fill_value`` (rule 1, the same value); Zarr v3 readers (VirtualiZarr, Icechunk, the
   gateway's v3 views) decode this attribute.  :func:`decode_fill_attr` turns it back into a
   number when a sidecar is read, so the model always holds plain values.
3. Chunks never written must read as the *storage* fill value.  When the persisted
   ``fill_value`` would give anything else (another value, or ``null`` for floats), the indexer
   stores those chunks in the sidecar (``h5sidecar.indexer`` materializes them).
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import numpy as np

__all__ = [
    "cf_fill_value",
    "decode_fill_attr",
    "encode_fill_attr",
    "fill_json",
    "json_float",
    "reads_as_storage_fill",
]


def _b64_f8(x: float) -> str:
    return base64.standard_b64encode(struct.pack("<d", float(x))).decode("ascii")


def _f8_b64(s: str) -> float | None:
    try:
        raw = base64.b64decode(s.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    return struct.unpack("<d", raw)[0] if len(raw) == 8 else None


def encode_fill_attr(value: Any, dtype: np.dtype) -> Any:
    """The ``_FillValue`` attribute in xarray's Zarr encoding (see rule 2 of the module)."""
    if dtype.kind == "f" and _is_real(value):
        return _b64_f8(float(np.asarray(value).reshape(-1)[0]))
    if dtype.kind == "c" and np.size(value) == 1:
        c = complex(np.asarray(value).reshape(-1)[0])
        return [_b64_f8(c.real), _b64_f8(c.imag)]
    return value


def decode_fill_attr(value: Any, dtype: np.dtype) -> Any:
    """Inverse of :func:`encode_fill_attr` (plain numbers of older sidecars pass unchanged)."""
    if dtype.kind == "f" and isinstance(value, str):
        x = _f8_b64(value)
        return value if x is None else x
    if dtype.kind == "c" and isinstance(value, list) and len(value) == 2:
        parts = [_f8_b64(v) if isinstance(v, str) else None for v in value]
        if parts[0] is not None and parts[1] is not None:
            return complex(parts[0], parts[1])
    return value


def _is_real(value: Any) -> bool:
    arr = np.asarray(value)
    return arr.size == 1 and arr.dtype.kind in "biuf"


def json_float(x: float) -> float | str:
    """A float in Zarr v2 ``fill_value`` form (``"NaN"``, ``"Infinity"``, ``"-Infinity"``)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float(x)


def fill_json(value: Any, dtype: np.dtype) -> Any:
    """A scalar in Zarr v2 ``fill_value`` JSON form for ``dtype`` (``None`` if not castable)."""
    if dtype.kind not in "biufcSU" or dtype.fields is not None:
        return None
    try:
        arr = np.asarray(value)
        if arr.size != 1:
            return None
        if dtype.kind == "S":
            raw = arr.reshape(()).astype(dtype).tobytes()
            return base64.standard_b64encode(raw).decode("ascii")
        with np.errstate(over="ignore", invalid="ignore"):
            scalar = arr.reshape(()).astype(dtype)[()]
    except (TypeError, ValueError, OverflowError):
        return None
    if dtype.kind == "b":
        return bool(scalar)
    if dtype.kind in "iu":
        return int(scalar)
    if dtype.kind == "f":
        return json_float(float(scalar))
    if dtype.kind == "c":
        return [json_float(float(scalar.real)), json_float(float(scalar.imag))]
    return str(scalar)


def cf_fill_value(attrs: Any, dtype: np.dtype, storage_fill: Any) -> Any:
    """The ``.zarray`` ``fill_value`` of rule 1: the CF ``_FillValue`` cast to ``dtype``.

    ``None`` when there is no ``_FillValue``.  Structured types keep the storage fill value
    (xarray masks no structured values; the attribute is informative only).
    """
    if "_FillValue" not in attrs:
        return None
    if dtype.fields is not None:
        return storage_fill
    if dtype.kind == "S" and isinstance(attrs["_FillValue"], str):
        # h5netcdf gives a byte-string variable's _FillValue as text, which xarray compares
        # with the bytes values and so masks nothing; a v2 fill_value (bytes) would mask
        return None
    value = fill_json(decode_fill_attr(attrs["_FillValue"], dtype), dtype)
    return storage_fill if value is None else value


def reads_as_storage_fill(persisted: Any, storage_fill: Any, dtype: np.dtype) -> bool:
    """True when every reader gives ``storage_fill`` for a chunk that is not stored.

    ``persisted`` is the ``.zarray`` ``fill_value``.  ``null`` reads as zeros in zarr but as NaN
    in VirtualiZarr for floats, so ``null`` is only safe for non-float types whose storage fill
    value is zero.
    """
    if persisted is not None:
        return _same_json(persisted, storage_fill) or (
            storage_fill is None and _is_zero(persisted)
        )
    return dtype.kind not in "fc" and (storage_fill is None or _is_zero(storage_fill))


def _is_zero(v: Any) -> bool:
    if isinstance(v, bool):
        return v is False
    if isinstance(v, (int, float)):
        return v == 0 and math.copysign(1.0, float(v)) > 0
    if isinstance(v, str):  # base64 of raw bytes (|S, |V, structured)
        try:
            return not any(base64.standard_b64decode(v))
        except ValueError:
            return False
    if isinstance(v, list):
        return all(_is_zero(x) for x in v)
    return False


def _same_json(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b) and type(a) is type(b)
