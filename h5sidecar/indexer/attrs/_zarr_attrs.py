"""HDF5 attributes -> JSON-ready Zarr attributes.

Every attribute whose value JSON can hold is kept (CF attributes verbatim, ``_FillValue``
included); the bookkeeping HDF5 and netCDF-4 write for themselves is dropped, and so are the
``CLASS``/``NAME`` attributes netCDF readers hide (the attributes seen are h5netcdf's).  An attribute that
cannot be read or has no JSON form never fails the granule: it is left out and reported.
Values are those netCDF readers show (empty strings, one-element arrays unpacked, see
:func:`~h5sidecar.indexer.attrs._netcdf_types.netcdf_view`); the type JSON loses is recorded as a spec
(:func:`~h5sidecar.indexer.attrs._netcdf_types.type_spec`) for h5sidecar's readers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from h5sidecar.indexer._failures import H5PY_ERRORS, describe_h5_error, reraise_io_failure
from h5sidecar.indexer._values import NotJSONable, decode_text, text_without_surrogates, to_json
from h5sidecar.indexer._walk import escape_name
from h5sidecar.indexer.attrs._native import NativeAttrs
from h5sidecar.indexer.attrs._netcdf_types import netcdf_view, type_spec

__all__ = ["ALWAYS_DROPPED", "AttrResult", "read_attrs"]

#: Written by the HDF5 dimension-scale API and by netCDF-C / h5netcdf for their own use.
ALWAYS_DROPPED = frozenset(
    {
        "DIMENSION_LIST",
        "REFERENCE_LIST",
        "DIMENSION_LABELS",
        "_Netcdf4Dimid",
        "_Netcdf4Coordinates",
        "_nc3_strict",
        "_NCProperties",
        "_IsNetcdf4",
        "_SuperblockVersion",
        "_ARRAY_DIMENSIONS",  # we write our own
    }
)

#: On dimension scales the scale API's markers (dropped silently); elsewhere (PyTables'
#: ``CLASS``, an image's ``CLASS``) netCDF readers hide them too (h5netcdf's hidden
#: attributes), so they are left out with that reason: readers must see what h5netcdf shows.
SCALE_MARKERS = frozenset({"CLASS", "NAME"})


@dataclass
class AttrResult:
    """Attributes of one object and the ones that had to be left out (with why)."""

    attrs: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    #: names kept in escaped form (not valid UTF-8, see :func:`escape_name`)
    escaped: list[str] = field(default_factory=list)
    #: name -> the type spec JSON loses (see :mod:`h5sidecar.references._typed_attrs`)
    types: dict[str, str] = field(default_factory=dict)
    #: name -> HDF5 type (as h5py maps it) of the attributes kept, where known without asking
    #: HDF5 again
    dtypes: dict[str, np.dtype] = field(default_factory=dict)

    def note(self) -> str:
        """A sentence for ``ArrayRefs.note`` listing dropped and escaped attributes ("" when
        none)."""
        notes = []
        if self.dropped:
            parts = "; ".join(f"{k!r} ({v})" for k, v in self.dropped.items())
            notes.append(f"attributes left out: {parts}")
        if self.escaped:
            names = ", ".join(repr(k) for k in self.escaped)
            notes.append(f"attribute names that are not UTF-8 kept %-escaped: {names}")
        return "; ".join(notes)


def _attr_names(obj: h5py.HLObject) -> list[str | bytes]:
    # Iterating the AttributeManager yields names without reading values, so a broken value
    # cannot hide the names of the others.
    return list(obj.attrs)


def _listing(
    obj: h5py.HLObject, native: NativeAttrs | None
) -> list[tuple[str | bytes, Any, np.dtype | None]]:
    """(name, value, dtype) of every attribute, in h5py's order: decoded from the metadata
    bytes where :class:`NativeAttrs` can, else ``(name, None, None)`` (read through h5py)."""
    decoded = native.read(obj) if native is not None else None
    if decoded is None:
        return [(name, None, None) for name in _attr_names(obj)]
    return [(d.name, d.value, d.dtype) for d in decoded]


def _is_scale_marker(name: str, value: Any) -> bool:
    if name == "CLASS":
        text = (
            value
            if isinstance(value, str)
            else decode_text(bytes(value))
            if isinstance(value, bytes)
            else str(value)
        )
        return text.rstrip("\0") == "DIMENSION_SCALE"
    return True


def read_attrs(
    obj: h5py.HLObject,
    deref: Callable[[h5py.Reference], str | None],
    *,
    is_scale: bool = False,
    native: NativeAttrs | None = None,
) -> AttrResult:
    """Read and convert every attribute of ``obj``.

    Parameters
    ----------
    obj : h5py.Group or h5py.Dataset
    deref : callable
        Maps an object reference to its target's path (references become paths).
    is_scale : bool
        ``obj`` is a dimension scale: its ``CLASS``/``NAME`` markers are dropped too.
    native : NativeAttrs, optional
        Decodes attributes from the granule's metadata bytes (the same values and types
        h5py reads, at a fraction of the cost); what it cannot decode is read through h5py.

    Returns
    -------
    AttrResult
        The JSON-ready attributes and a ``{name: reason}`` of those left out.
    """
    result = AttrResult()
    try:
        listing = _listing(obj, native)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        result.dropped["*"] = f"the attribute table cannot be read ({describe_h5_error(exc)})"
        return result
    taken = {n for n, _, _ in listing if isinstance(n, str)}
    for raw, value, dtype in listing:
        if raw in ALWAYS_DROPPED:
            continue
        name = escape_name(raw)
        if isinstance(raw, bytes):  # not UTF-8: kept under its escaped name unless taken
            if name in taken:
                result.dropped[name] = (
                    f"the HDF5 name {raw!r} is not UTF-8 and its escaped form is the name of "
                    "another attribute"
                )
                continue
            taken.add(name)
            result.escaped.append(name)
        if value is None:
            try:
                value = obj.attrs[raw]
            except H5PY_ERRORS as exc:
                reraise_io_failure(exc)
                result.dropped[name] = f"HDF5 cannot read it: {describe_h5_error(exc)}"
                continue
        if name in SCALE_MARKERS:
            if not (is_scale and _is_scale_marker(name, value)):
                result.dropped[name] = "hidden, as netCDF readers (h5netcdf) hide it"
            continue
        if type(value) is str:  # variable-length text, most attributes: shown as read
            if _text_as_read(result, name, value, dtype):
                continue
        elif isinstance(value, np.number) and value.dtype.kind in "iuf" and value.itemsize <= 8:
            result.attrs[name], spec = _number_json(value.dtype.str, value.tobytes())
            if dtype is not None:
                result.dtypes[name] = dtype
            if spec is not None:
                result.types[name] = spec
            continue
        try:
            view = netcdf_view(
                name, value, dtype if dtype is not None else _hdf5_dtype(obj, raw, value)
            )
            result.attrs[name] = to_json(view, deref)
        except NotJSONable as exc:
            result.dropped[name] = str(exc)
            continue
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            result.dropped[name] = f"HDF5 cannot read its type: {describe_h5_error(exc)}"
            continue
        if dtype is not None:
            result.dtypes[name] = dtype
        spec = type_spec(name, view, result.attrs[name])
        if spec is not None:
            result.types[name] = spec
    return result


def _text_as_read(result: AttrResult, name: str, value: str, dtype: np.dtype | None) -> bool:
    """Record a ``str`` value without the general conversion (what it gives for ``str``:
    netCDF readers show it as it is, its JSON form is itself) unless it holds surrogate
    escapes, which the general path types; ``False``: take that path."""
    stored = text_without_surrogates(value)
    if stored is not value:
        return False
    result.attrs[name] = value
    if dtype is not None:
        result.dtypes[name] = dtype
    return True


@functools.lru_cache(maxsize=4096)
def _number_json(dtype: str, raw: bytes) -> tuple[Any, str | None]:
    """The JSON form and type spec of a numeric scalar attribute (those of its netCDF view,
    which is the scalar itself), by its type and bytes: the granule's arrays repeat a few
    hundred values (fill values, valid ranges, scale factors) over thousands of attributes."""
    view = np.frombuffer(raw, dtype=dtype)[0]
    stored = to_json(view, _no_references)
    return stored, type_spec("", view, stored)


def _no_references(ref: h5py.Reference) -> str | None:  # never called: a number holds none
    return None


def _hdf5_dtype(obj: h5py.HLObject, raw: str | bytes, value: Any) -> np.dtype:
    """The attribute's type as far as :func:`netcdf_view` needs it.  h5py's value loses a
    fixed string's length and encoding (a scalar ``np.bytes_`` drops trailing NULs), so HDF5 is
    asked, except in the common cases where the value says enough (opening every attribute
    again costs ~25% of indexing a granule of a thousand variables)."""
    if isinstance(value, str):  # variable-length text: h5py decoded it, nothing more to do
        return _NO_STRING
    if isinstance(value, np.bytes_) and len(value) > 1 and value.isascii():
        return _ASCII  # longer than one character: decoded, and ASCII in any encoding
    if isinstance(value, np.ndarray | h5py.Empty) and value.dtype.kind not in "SOU":
        return value.dtype
    if isinstance(value, np.generic) and not isinstance(value, np.bytes_ | np.str_):
        return value.dtype
    return obj.attrs.get_id(raw).dtype


_NO_STRING = np.dtype(object)
_ASCII = h5py.string_dtype("ascii", 2)
