"""What netCDF readers show for an attribute, and the type spec that gives it back from JSON.

Attributes are persisted as JSON (see :mod:`h5sidecar.references._typed_attrs` for the specs),
and h5sidecar's readers must show what ``xr.open_dataset(file, engine="h5netcdf")`` shows.
:func:`netcdf_view` reproduces h5netcdf's ``Attributes.__getitem__`` (h5netcdf 1.x) and
xarray's ``_read_attributes`` on a value h5py read; :func:`type_spec` finds the spec that turns
the JSON value into that view, and records one only when it provably does.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import h5py
import numpy as np

from h5sidecar.references import typed_value

__all__ = ["netcdf_view", "type_spec"]

#: xarray leaves these bytes undecoded (they are CF encoding, typed by the CF rules instead).
_UNDECODED = frozenset({"_FillValue", "missing_value"})
_TEXT_SPECS = ("text:utf-8:ascii", "text:latin-1:ascii", "text:latin-1:utf-8")


def netcdf_view(name: str, value: Any, dtype: np.dtype) -> Any:
    """``value`` (what h5py read for attribute ``name`` of HDF5 type ``dtype``) as xarray +
    h5netcdf show it.

    * an empty (null dataspace) one-character string reads ``""``; other empty values read as
      empty arrays of their type;
    * fixed-length strings longer than one character are decoded with their declared encoding
      and ``surrogateescape``; one-character ones stay bytes, and xarray decodes a scalar to
      text when it is UTF-8;
    * a value whose first axis has length one loses that axis (``[x]`` reads ``x``).
    """
    info = h5py.check_string_dtype(dtype)
    if isinstance(value, h5py.Empty):
        if info is not None and info.length == 1:
            return ""
        return np.array([], dtype=dtype)
    if info is not None:
        if info.length is not None and info.length > 1:
            if isinstance(value, bytes):
                value = value.decode(info.encoding, "surrogateescape")
            elif isinstance(value, np.ndarray):
                value = [b.decode(info.encoding, "surrogateescape") for b in value.flat]
        elif not np.isscalar(value):
            value = value.tolist()
    if (isinstance(value, list) or (isinstance(value, np.ndarray) and value.ndim)) and len(
        value
    ) == 1:
        value = value[0]
    if isinstance(value, bytes) and name not in _UNDECODED:
        with contextlib.suppress(UnicodeDecodeError):
            value = value.decode("utf-8")
    return value


def type_spec(name: str, view: Any, stored: Any) -> str | None:
    """The spec that turns the JSON value ``stored`` into ``view``, or ``None`` when the JSON
    value already is the view or no spec gives it exactly (values are never altered)."""
    if _same(stored, view):
        return None
    if isinstance(view, np.ndarray | np.generic) and view.dtype.kind in "biufc":
        candidates: tuple[str, ...] = (view.dtype.str,)
    elif name in _UNDECODED:
        return None  # text CF encodings keep the CF rules of the readers
    elif _all_of(view, bytes):
        candidates = ("bytes",)
    elif _all_of(view, str):
        candidates = _TEXT_SPECS
    else:
        return None
    for spec in candidates:
        if _same(typed_value(stored, spec), view):
            return spec
    return None


def _all_of(view: Any, kind: type) -> bool:
    if isinstance(view, list):
        return bool(view) and all(isinstance(v, kind) for v in view)
    return isinstance(view, kind)


def _same(got: Any, want: Any) -> bool:
    """Equal value and exact type (arrays: dtype, shape and values; NaN equals NaN)."""
    if isinstance(want, np.ndarray):
        return (
            isinstance(got, np.ndarray)
            and got.dtype == want.dtype
            and got.shape == want.shape
            and bool(np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"))
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(_same(g, w) for g, w in zip(got, want, strict=True))
        )
    if type(got) is not type(want):
        return False
    if isinstance(want, float | np.floating) and math.isnan(want):
        return bool(math.isnan(got))
    return bool(got == want)
