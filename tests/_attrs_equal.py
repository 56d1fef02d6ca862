"""Attribute equality, value and type, against ``xr.open_dataset(engine="h5netcdf")``.

Two strengths, one per kind of reader:

* ``exact`` (h5sidecar's engine and ``open_datatree``): the same value *and* Python/NumPy type
  as h5netcdf gives (``np.float32`` stays ``np.float32``, arrays stay arrays of their dtype,
  ``np.bytes_`` stays bytes, surrogate-escaped text stays surrogate-escaped);
* ``json`` (plain xarray ``engine="zarr"`` over ``reference://``, and every other Zarr
  reader): the truth brought to the JSON form a Zarr ``.zattrs`` holds, then equal value and
  JSON type.  What plain Zarr provably cannot carry (:data:`JSON_EXEMPTIONS`) is exempt.

Both exempt what no sidecar can carry (:data:`EXACT_EXEMPTIONS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import h5py
import numpy as np

Strength = Literal["exact", "json"]

#: What every reader gives differently from h5netcdf, and why (no format can carry it).
EXACT_EXEMPTIONS = {
    "object reference": "an h5py.Reference only means something inside its open file; "
    "sidecars hold the target's path (compared with the path the reference resolves to)",
    "compound value": "a numpy.void of a compound type is given as {field: value} "
    "(compared field by field)",
}

#: What plain Zarr readers give differently, and why: ``.zattrs`` is JSON.
JSON_EXEMPTIONS = {
    "numeric type": "JSON numbers have no width or signedness: np.float32(0.5) reads 0.5 "
    "(a float64 Python float), np.int16(3) reads 3, arrays read as lists",
    "bytes": "JSON has no bytes: a np.bytes_ h5netcdf keeps because it is not UTF-8 reads as "
    "its Latin-1 text",
    "surrogate escapes": "text that is not valid in its declared encoding, which h5netcdf "
    "decodes with surrogate escapes (lone U+DC80..U+DCFF), is stored as its UTF-8-else-Latin-1 "
    "text: lone surrogates are not Unicode scalar values and RFC 8259 section 8.2 leaves their "
    "handling undefined (strict parsers such as serde_json and orjson reject them)",
}


def _decode_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def json_form(value: Any, resolve: Callable[[Any], str] | None = None) -> Any:
    """``value`` as a ``.zattrs`` JSON document holds it (see :data:`JSON_EXEMPTIONS`)."""
    if isinstance(value, h5py.Reference):
        return resolve(value) if resolve is not None and value else None
    if isinstance(value, np.void) and value.dtype.names:
        return {n: json_form(value[n], resolve) for n in value.dtype.names}
    if isinstance(value, np.ndarray):
        return [json_form(v, resolve) for v in value] if value.ndim else json_form(value[()])
    if isinstance(value, list | tuple):
        return [json_form(v, resolve) for v in value]
    if isinstance(value, bytes):  # np.bytes_ included
        return _decode_text(bytes(value))
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _decode_text(value.encode("utf-8", "surrogateescape"))
        return str(value)
    if isinstance(value, complex | np.complexfloating):
        return [float(value.real), float(value.imag)]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _same(got: Any, want: Any) -> bool:
    """Equal value and type; NaN equals NaN; arrays by dtype, shape and values."""
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
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(_same(got[k], want[k]) for k in want)
        )
    if type(got) is not type(want):
        return False
    if isinstance(want, float | np.floating) and math.isnan(want):
        return bool(math.isnan(got))
    return bool(got == want)


def _exempt_exact(value: Any, resolve: Callable[[Any], str] | None) -> Any:
    """The truth with :data:`EXACT_EXEMPTIONS` applied (references -> paths, compounds ->
    mappings); everything else unchanged."""
    if isinstance(value, h5py.Reference) or (isinstance(value, np.void) and value.dtype.names):
        return json_form(value, resolve)
    if isinstance(value, np.ndarray) and (
        value.dtype.names or any(isinstance(v, h5py.Reference) for v in value.flat)
    ):
        return json_form(value, resolve)
    return value


def attr_differences(
    got: Mapping[str, Any],
    want: Mapping[str, Any],
    strength: Strength,
    resolve: Callable[[Any], str] | None = None,
) -> list[str]:
    """One line per attribute that differs from the truth ``want`` (empty when all agree)."""
    out = []
    for name, w in want.items():
        if name not in got:
            out.append(f"{name!r} absent")
            continue
        g = got[name]
        w = _exempt_exact(w, resolve) if strength == "exact" else json_form(w, resolve)
        if not _same(g, w):
            out.append(f"{name!r}: {g!r} ({type(g).__name__}) instead of {w!r} "
                       f"({type(w).__name__})")  # fmt: skip
    out += [f"{name!r}: not an attribute h5netcdf shows" for name in got.keys() - want.keys()]
    return out
