"""numpy / h5py values -> JSON-ready Python values (attributes and Zarr v2 fill values).

Two encodings are needed:

* **Attributes** follow what zarr-python writes to ``.zattrs``: plain JSON values, with NaN and
  infinities kept as floats (serialised as the ``NaN``/``Infinity`` literals zarr and fsspec
  read back), complex numbers as ``[real, imag]``, bytes decoded to text, object references as
  the target's path, compound values as ``{field: value}``.
* **Fill values** follow the Zarr v2 spec for ``.zarray``: special floats as the strings
  ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; bytes, structured and raw values as base64 of their
  bytes; complex as ``[real, imag]``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from h5sidecar.references import json_float

__all__ = ["NotJSONable", "decode_text", "fill_bytes", "fill_value_json", "json_float", "to_json"]


class NotJSONable(ValueError):
    """A value JSON cannot hold faithfully (opaque bytes, region references, ...)."""


#: Resolves an object reference to the target's path (``None`` for a null reference).
Deref = Callable[[h5py.Reference], "str | None"]


def decode_text(raw: bytes) -> str:
    """Bytes -> str: UTF-8, else Latin-1 (every byte maps to one character, nothing is lost)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def text_without_surrogates(text: str) -> str:
    """h5py decodes invalid UTF-8 in a string with ``surrogateescape`` (lone U+DC80..U+DCFF),
    which no JSON or Parquet writer can encode.  Get the bytes back and decode them as
    :func:`decode_text` does (UTF-8, else Latin-1: nothing is lost)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return decode_text(text.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:  # other lone surrogates: no bytes behind them
            return text.encode("utf-8", "replace").decode("utf-8")
    return text




def fill_bytes(dset: h5py.Dataset) -> bytes:
    """The raw bytes of one element of ``dset``'s storage fill value (h5py's dtype).

    For an HDF5 array element type (``("<f8", (n,))``) this is one *base* element: the fill
    of the whole array element is expressed per scalar in Zarr.
    """
    dt = dset.dtype
    base = dt.subdtype[0] if dt.subdtype is not None else dt
    # in h5py's own dtype: a fixed-width bytes fill comes back as a shorter numpy bytes_
    return (
        np.asarray(dset.fillvalue, dtype=base).reshape(-1)[:1].tobytes().ljust(base.itemsize, b"\0")
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def fill_value_json(value: Any, dtype: np.dtype) -> Any:
    """Encode an HDF5 fill value (a scalar of ``dtype``) the way Zarr v2 ``.zarray`` expects.

    Parameters
    ----------
    value : numpy scalar, 0-d array or None
        The fill value as h5py reports it (``Dataset.fillvalue``).
    dtype : numpy.dtype
        The Zarr dtype of the array (after any flattening of compound types).

    Returns
    -------
    Any
        A JSON-ready value; ``None`` when there is no value.
    """
    if value is None:
        return None
    arr = np.asarray(value)
    if dtype.kind == "O":
        return None
    if dtype.fields is not None or dtype.kind in "SV":
        raw = arr.tobytes()
        # h5py may report the fill of a padded/flattened type in another (same-size) layout
        if len(raw) != dtype.itemsize:
            raw = raw[: dtype.itemsize].ljust(dtype.itemsize, b"\0")
        return _b64(raw)
    scalar = arr.reshape(()).astype(dtype).item() if arr.size else 0
    kind = dtype.kind
    if kind == "b":
        return bool(scalar)
    if kind in "iu":
        return int(scalar)
    if kind == "f":
        return json_float(float(scalar))
    if kind == "c":
        return [json_float(float(scalar.real)), json_float(float(scalar.imag))]
    if kind in "mM":
        return int(arr.reshape(()).view(np.int64))
    if kind == "U":
        return str(scalar)
    raise NotJSONable(f"no Zarr v2 fill value encoding for dtype {dtype}")


def _scalar_to_json(value: Any, deref: Deref) -> Any:
    if isinstance(value, h5py.RegionReference):
        raise NotJSONable("a region reference (a selection inside a dataset) has no JSON form")
    if isinstance(value, h5py.Reference):
        return deref(value) if value else None
    if isinstance(value, (bytes, np.bytes_)):
        return decode_text(bytes(value))
    if isinstance(value, (str, np.str_)):
        return text_without_surrogates(str(value))
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (complex, np.complexfloating)):
        return [float(value.real), float(value.imag)]
    if isinstance(value, np.void):
        return _void_to_json(value, deref)
    if isinstance(value, np.ndarray):
        return _array_to_json(value, deref)
    if isinstance(value, (np.datetime64, np.timedelta64)):
        return str(value)
    if value is None:
        return None
    raise NotJSONable(f"values of type {type(value).__name__} have no JSON form")


def _void_to_json(value: np.void, deref: Deref) -> Any:
    fields = value.dtype.names
    if not fields:
        raise NotJSONable(f"opaque value ({value.dtype.itemsize} raw bytes) has no JSON form")
    return {name: _scalar_to_json(value[name], deref) for name in fields}


def _array_to_json(arr: np.ndarray, deref: Deref) -> Any:
    kind = arr.dtype.kind
    if kind in "biuf" and arr.dtype.itemsize <= 8:
        return arr.tolist()
    if kind == "f":  # long double: JSON numbers are doubles anyway
        return arr.astype(np.float64).tolist()
    if kind == "V" and arr.dtype.names is None:
        raise NotJSONable(f"opaque values ({arr.dtype.itemsize} raw bytes each) have no JSON form")
    if arr.ndim == 0:
        return _scalar_to_json(arr[()], deref)
    # iterating an object array yields its Python objects; other arrays yield numpy scalars
    return [
        _array_to_json(a, deref) if isinstance(a, np.ndarray) else _scalar_to_json(a, deref)
        for a in arr
    ]


def to_json(value: Any, deref: Deref, *, unpack_single: bool = True) -> Any:
    """Convert an attribute value read by h5py to a JSON-ready Python value.

    Parameters
    ----------
    value : Any
        What ``h5py.AttributeManager.__getitem__`` returned (numpy scalar or array, bytes,
        ``h5py.Empty``, references, object arrays of strings or of vlen sequences), or a list
        of such values.
    deref : callable
        Maps an object reference to the target's path.
    unpack_single : bool
        One-element arrays become scalars, as netCDF readers (netCDF4-python, xarray) do.

    Raises
    ------
    NotJSONable
        For values JSON cannot hold faithfully.
    """
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, np.ndarray):
        if unpack_single and value.size == 1 and value.dtype.kind != "O":
            return _scalar_to_json(value.reshape(())[()], deref)
        if unpack_single and value.size == 1:
            return _scalar_to_json(value.reshape(-1)[0], deref)
        return _array_to_json(value, deref)
    if isinstance(value, list):  # netCDF readers give string arrays as lists
        return [to_json(v, deref, unpack_single=False) for v in value]
    return _scalar_to_json(value, deref)
