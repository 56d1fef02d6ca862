"""DAP4 types -> NumPy, and DAP4 attribute values -> the JSON values the HDF5 indexer writes.

DAP4 names a numeric type without its byte order; ``dmrpp:chunks byteOrder`` gives that (``LE``
when a document does not say: build_dmrpp has always run on little-endian machines and wrote
``byteOrder`` only for arrays of more than one byte since 2019).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5sidecar.indexer.dmrpp._dmrpp_document import DmrAttribute

__all__ = ["ATOMIC", "attribute_value", "numpy_dtype"]

#: DAP4 atomic numeric types -> NumPy dtypes (native order; see :func:`numpy_dtype`).
ATOMIC: dict[str, np.dtype] = {
    "Byte": np.dtype("u1"),
    "UInt8": np.dtype("u1"),
    "Int8": np.dtype("i1"),
    "Char": np.dtype("S1"),
    "Int16": np.dtype("i2"),
    "UInt16": np.dtype("u2"),
    "Int32": np.dtype("i4"),
    "UInt32": np.dtype("u4"),
    "Int64": np.dtype("i8"),
    "UInt64": np.dtype("u8"),
    "Float32": np.dtype("f4"),
    "Float64": np.dtype("f8"),
}


def numpy_dtype(dap_type: str, byte_order: str | None) -> np.dtype | None:
    """The NumPy dtype of a DAP4 atomic type in the given byte order (``None``: not atomic)."""
    dt = ATOMIC.get(dap_type)
    if dt is None:
        return None
    if dt.itemsize == 1:
        return dt
    return dt.newbyteorder(">" if (byte_order or "LE").upper() == "BE" else "<")


def attribute_value(attr: DmrAttribute) -> tuple[Any, str | None]:
    """``(JSON value, type spec)`` of an attribute, as the HDF5 indexer writes them.

    A single ``Value`` is a scalar, several a list (xarray + h5netcdf show a one-element array
    as its element).  Numbers are converted through their declared type (a ``Float32`` written
    ``-1.120000005`` is the float32 nearest to it) and get the dtype as their type spec (see
    :mod:`h5sidecar.references._typed_attrs`); text has none.

    Raises
    ------
    ValueError
        The type is not an atomic DAP4 type (``Container``, ``null``, ``Opaque``), or a value
        does not parse as its type.
    """
    dt = ATOMIC.get(attr.dap_type)
    if attr.dap_type in ("String", "URL"):
        values: list[Any] = list(attr.values)
        spec = None
    elif dt is not None and dt.kind in "iuf":
        parsed = np.array([_number(v, dt) for v in attr.values], dtype=dt)
        if dt.kind == "f":
            # plain floats, NaN and infinities included, as attributes read from HDF5 are
            # (Zarr's "NaN" spelling is for fill_value; an attribute "NaN" is text)
            values = [float(x) for x in parsed]
        else:
            values = [int(x) for x in parsed]
        spec = dt.newbyteorder("<").str if dt.itemsize > 1 else dt.str
    else:
        raise ValueError(f"DAP4 attribute type {attr.dap_type!r} has no netCDF equivalent")
    if not values:
        raise ValueError("the attribute has no value")
    return (values[0] if len(values) == 1 else values), spec


def _number(text: str, dt: np.dtype) -> Any:
    text = text.strip()
    if dt.kind == "f":
        return float(text)  # "nan", "inf", "-inf" parse too
    value = int(text, 0) if text.lower().startswith("0x") else int(text)
    info = np.iinfo(dt)
    if not info.min <= value <= info.max:
        raise ValueError(f"{text} does not fit {dt}")
    return value
