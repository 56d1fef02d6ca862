"""HDF5 datatypes -> Zarr v2 dtypes, and how each variable's values can be carried.

:func:`plan_dtype` inspects a dataset's *file* datatype (not just the numpy dtype h5py maps it
to) and decides one of four modes:

``raw``
    The bytes in the file are exactly the Zarr dtype's bytes: chunks are referenced in place.
``convert``
    HDF5 converts values on read (space-padded strings, integers with unusual precision, custom
    float layouts): the variable is decoded with h5py and its values stored in the sidecar.
``vlen_str``
    Variable-length strings: decoded with h5py and stored as ``vlen-utf8`` / ``vlen-bytes``.
``objref``
    Object references: each is replaced by its target's path (a ``vlen-utf8`` string).

Anything else raises :class:`~h5sidecar.indexer._failures.Skip` with a reason.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import h5py
import numpy as np
from h5py import h5t

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import H5PY_ERRORS, describe_h5_error, fail, reraise_io_failure
from h5sidecar.indexer.dtypes._compound import structured_json

__all__ = [
    "ENUMS_KEY",
    "REFERENCES_KEY",
    "DtypePlan",
    "enum_mapping",
    "plan_dtype",
    "zarr_dtype_json",
]

#: Key of ``GranuleRefs.extra`` (the sidecar's h5sidecar extras, which plain readers ignore)
#: mapping each enumeration variable to its ``{name: value}`` mapping.  Not an attribute:
#: netCDF readers (h5netcdf) show none, and readers must see the attributes they show.
ENUMS_KEY = "enums"
#: Key of ``GranuleRefs.extra`` listing the variables whose object references were replaced
#: by the target's path.
REFERENCES_KEY = "object_references"

Mode = Literal["raw", "convert", "vlen_str", "objref"]


@dataclass(frozen=True)
class DtypePlan:
    """How one dataset's values are represented.

    Attributes
    ----------
    mode : "raw", "convert", "vlen_str" or "objref"
    zarr_dtype : str or list
        Zarr v2 dtype (``"|O"`` for the string modes).
    np_dtype : numpy.dtype
        numpy dtype of the Zarr array's elements.
    extra_shape : tuple of int
        Trailing dimensions contributed by an HDF5 array (``H5T_ARRAY``) element type.
    attrs : dict
        Attributes to add (none today: enumerations and references are described in the
        granule's extras, where plain readers do not show them as attributes).
    note : str
        Why values were transformed ("" for plain raw variables).
    number : bool
        The file type is an HDF5 integer or float: neither an enumeration nor a reference, so
        the granule's extras have nothing to say about it (see :func:`enum_mapping`).
    """

    mode: Mode
    zarr_dtype: str | list[Any]
    np_dtype: np.dtype
    extra_shape: tuple[int, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    number: bool = False


# -- the file type's quirks ------------------------------------------------------------------------
def _ieee_signature(t: h5t.TypeFloatID) -> tuple[Any, ...]:
    return (
        t.get_size(),
        t.get_order(),
        t.get_precision(),
        t.get_offset(),
        t.get_fields(),
        t.get_ebias(),
        t.get_norm(),
    )


_IEEE = {
    (2, h5t.ORDER_LE): h5t.IEEE_F16LE,
    (2, h5t.ORDER_BE): h5t.IEEE_F16BE,
    (4, h5t.ORDER_LE): h5t.IEEE_F32LE,
    (4, h5t.ORDER_BE): h5t.IEEE_F32BE,
    (8, h5t.ORDER_LE): h5t.IEEE_F64LE,
    (8, h5t.ORDER_BE): h5t.IEEE_F64BE,
}


#: The signatures of :data:`_IEEE`'s types (asked of HDF5 once, not per float dataset).
_IEEE_SIGNATURES = {key: _ieee_signature(t) for key, t in _IEEE.items()}


def _custom_float(t: h5t.TypeFloatID) -> str | None:
    """Why a float type is not a plain IEEE binary16/32/64 (``None`` when it is)."""
    ref = _IEEE_SIGNATURES.get((t.get_size(), t.get_order()))
    if ref is not None and _ieee_signature(t) == ref:
        return None
    spos, _epos, esize, _mpos, msize = t.get_fields()
    return (
        f"a custom {t.get_size() * 8}-bit float (sign bit {spos}, {esize}-bit exponent, "
        f"{msize}-bit mantissa, precision {t.get_precision()})"
    )


def _odd_integer(t: h5t.TypeIntegerID | h5t.TypeBitfieldID) -> str | None:
    """Why an integer type is not a plain machine integer (``None`` when it is)."""
    size = t.get_size()
    if not hasattr(t, "get_precision"):  # h5py exposes no precision for bitfields
        return None if size in (1, 2, 4, 8) else f"a {size}-byte bitfield"
    if t.get_precision() == 8 * size and t.get_offset() == 0 and size in (1, 2, 4, 8):
        return None
    return (
        f"a {t.get_precision()}-bit integer at bit offset {t.get_offset()} in {size} bytes "
        "(HDF5 converts it on read)"
    )


def _conversion(t: h5t.TypeID) -> str | None:
    """Why HDF5 converts values of file type ``t`` on read (``None`` when bytes are values)."""
    cls = t.get_class()
    if cls == h5t.STRING and not t.is_variable_str() and t.get_strpad() == h5t.STR_SPACEPAD:
        return "space-padded strings (HDF5 strips the padding on read)"
    if cls in (h5t.INTEGER, h5t.BITFIELD):
        return _odd_integer(t)
    if cls == h5t.FLOAT:
        return _custom_float(t)
    if cls in (h5t.ENUM, h5t.ARRAY):
        return _conversion(t.get_super())
    if cls == h5t.COMPOUND:
        for i in range(t.get_nmembers()):
            why = _conversion(t.get_member_type(i))
            if why:
                return f"member {t.get_member_name(i).decode(errors='replace')!r}: {why}"
    return None


#: NUL-terminated string variables up to this many bytes are read once at index time to find
#: bytes after a terminator (the default ``materialize_limit``: larger ones could not be held
#: in the sidecar anyway).
NULLTERM_CHECK_BYTES = 64 * 2**20


def _bytes_after_terminator(dset: h5py.Dataset, t: h5t.TypeID) -> str | None:
    """Why HDF5 changes the values of a ``NULLTERM`` string dataset on read (``None``: it does
    not).

    HDF5 reads a NUL-terminated string up to its first NUL and drops what follows; Zarr's
    ``|S<n>`` keeps every byte but trailing NULs.  The two agree unless a value has non-NUL
    bytes after a NUL (left by writers that reuse a buffer), which only reading the values shows.
    """
    size = t.get_size()
    nbytes = size * int(np.prod(dset.shape or ()))
    if size < 2 or not nbytes:
        return None
    if nbytes > NULLTERM_CHECK_BYTES:
        return None  # not checked: documented (README "Strings") and noted on the variable
    raw = np.empty(dset.shape, dtype=f"S{size}")
    try:
        dset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=t)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return None  # unreadable values: the variable's own read reports it
    cells = raw.reshape(-1).view(np.uint8).reshape(-1, size) != 0
    # a NUL followed by a non-NUL byte: some later byte is set while an earlier one is not
    after = np.logical_and.accumulate(cells, axis=1)
    if np.any(cells & ~after):
        return "NUL-terminated strings with bytes after the terminator (HDF5 drops them on read)"
    return None


def _unsupported(t: h5t.TypeID, *, top: bool) -> str | None:
    """Why values of file type ``t`` have no Zarr form (``None`` when they have one)."""
    cls = t.get_class()
    if cls == h5t.VLEN:
        return "variable-length sequences (ragged arrays) have no Zarr v2 dtype zarr 3.1 reads"
    if cls == h5t.STRING and t.is_variable_str() and not top:
        return "variable-length strings inside compound or array types have no Zarr form"
    if cls == h5t.REFERENCE:
        if t.equal(h5t.STD_REF_DSETREG):
            return "region references (a selection inside a dataset) have no Zarr equivalent"
        if not top:
            return "object references inside compound or array types have no Zarr form"
    if cls == h5t.TIME:
        return "the HDF5 time class has no Zarr equivalent"
    if cls == h5t.FLOAT and t.get_size() > 8:
        return f"{t.get_size() * 8}-bit (long double) floats have no Zarr dtype"
    if cls == getattr(h5t, "COMPLEX", -99) and t.get_size() > 16:
        return f"{t.get_size() * 8}-bit (long double) complex numbers have no Zarr dtype"
    if cls == h5t.COMPOUND:
        for i in range(t.get_nmembers()):
            why = _unsupported(t.get_member_type(i), top=False)
            if why:
                return f"member {t.get_member_name(i).decode(errors='replace')!r}: {why}"
    if cls in (h5t.ARRAY, h5t.ENUM):
        return _unsupported(t.get_super(), top=top and cls == h5t.ARRAY)
    return None


# -- numpy dtype -> Zarr v2 JSON -------------------------------------------------------------------
def zarr_dtype_json(dt: np.dtype) -> tuple[str | list[Any], np.dtype, str]:
    """The Zarr v2 dtype for numpy dtype ``dt`` (bytes-identical), checked against zarr.

    Returns
    -------
    json : str or list
        The ``.zarray`` dtype.
    np_dtype : numpy.dtype
        The dtype a Zarr reader will produce (same itemsize and bytes as ``dt``).
    note : str
        What had to change (flattened or padded compound types), or "".

    Raises
    ------
    Skip
        When zarr 3.1 cannot read the result.
    """
    json_form: str | list[Any]
    if dt.fields is not None:
        json_form, note = structured_json(dt)
        np_dtype = np.dtype([(f[0], f[1]) for f in json_form])
    else:
        # numpy's type string is the Zarr v2 form ("<f4", ">i2", "|S8", "|b1", "|V3", "<M8[s]")
        json_form, note, np_dtype = dt.str, "", dt
    _check_zarr_reads(json_form)
    if np_dtype.itemsize != dt.itemsize:  # pragma: no cover - structured_json guarantees it
        fail(ErrorKind.UNSUPPORTED_DTYPE, f"dtype {dt} changed size when expressed for Zarr")
    return json_form, np_dtype, note


def _check_zarr_reads(json_form: str | list[Any]) -> None:
    # one check per distinct dtype: a granule has ~1000 datasets and a handful of dtypes
    problem = _zarr_reads(json.dumps(json_form))
    if problem is not None:
        fail(
            ErrorKind.UNSUPPORTED_DTYPE,
            f"zarr 3.1 cannot read the Zarr v2 dtype {json_form!r} ({problem})",
        )


@functools.lru_cache(maxsize=256)
def _zarr_reads(json_text: str) -> str | None:
    """Why zarr cannot read the Zarr v2 dtype ``json_text`` (JSON), or ``None`` when it can."""
    from zarr.dtype import data_type_registry

    try:
        data_type_registry.match_json({"name": json.loads(json_text), "object_codec_id": None},
                                      zarr_format=2)
    except (ValueError, TypeError, KeyError) as exc:
        return str(exc)
    return None


# -- the plan ------------------------------------------------------------------------------------
def _h5py_dtype(dset: h5py.Dataset) -> np.dtype:
    try:
        return dset.dtype
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        fail(
            ErrorKind.UNSUPPORTED_DTYPE, f"h5py cannot map the datatype ({describe_h5_error(exc)})"
        )


def enum_mapping(dset: h5py.Dataset) -> dict[str, int] | None:
    """The ``{name: value}`` mapping of an enumeration dataset (also of an array of enums);
    ``None`` for other types and for h5py's boolean enum (stored as ``|b1``)."""
    try:
        dt = dset.dtype
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return None
    base = dt.subdtype[0] if dt.subdtype is not None else dt
    mapping = h5py.check_enum_dtype(base)
    if not mapping or base.kind == "b":
        return None
    return {str(k): int(v) for k, v in mapping.items()}


#: Plans of integer and float datasets by their encoded file datatype: a granule's ~1,000
#: datasets share a handful of number types, and working one out asks HDF5 a dozen questions
#: (~40 us).  Their plan depends on the datatype alone (strings, whose plan may depend on the
#: values, are not cached).  Plans are frozen and their ``attrs`` empty, so sharing is safe.
_NUMBER_PLANS: dict[bytes, DtypePlan] = {}
_NUMBER_PLANS_MAX = 4096


def plan_dtype(dset: h5py.Dataset) -> DtypePlan:
    """Decide how the values of ``dset`` are carried (see the module docstring).

    Raises
    ------
    Skip
        ``unsupported_dtype`` with the reason when no Zarr form exists.
    """
    tid = dset.id.get_type()
    if tid.get_class() not in (h5t.INTEGER, h5t.FLOAT):
        return _plan(dset, tid)
    key = tid.encode()
    plan = _NUMBER_PLANS.get(key)
    if plan is None:
        # a Skip raised here is not cached: asked again next time
        plan = dataclasses.replace(_plan(dset, tid), number=True)
        if len(_NUMBER_PLANS) >= _NUMBER_PLANS_MAX:
            _NUMBER_PLANS.clear()
        _NUMBER_PLANS[key] = plan
    return plan


def _plan(dset: h5py.Dataset, tid: h5t.TypeID) -> DtypePlan:
    dt = _h5py_dtype(dset)
    why = _unsupported(tid, top=True)
    if why:
        fail(ErrorKind.UNSUPPORTED_DTYPE, f"{why} (HDF5 type {dt})")
    extra: tuple[int, ...] = ()
    base_tid, base_dt = tid, dt
    if tid.get_class() == h5t.ARRAY and dt.subdtype is not None:
        base_dt, extra = dt.subdtype
        base_tid = tid.get_super()
    cls = base_tid.get_class()
    if cls == h5t.STRING and base_tid.is_variable_str():
        return DtypePlan("vlen_str", "|O", np.dtype(object), extra)
    if cls == h5t.REFERENCE:
        return DtypePlan("objref", "|O", np.dtype(object), extra)
    attrs: dict[str, Any] = {}  # enumerations are described in the extras (ENUMS_KEY)
    conversion = _conversion(base_tid)
    nullterm = cls == h5t.STRING and base_tid.get_strpad() == h5t.STR_NULLTERM
    if nullterm and not (conversion or extra):
        conversion = _bytes_after_terminator(dset, base_tid)
    if base_tid.get_size() != base_dt.itemsize and not conversion:
        conversion = f"file elements are {base_tid.get_size()} bytes, h5py reads {base_dt}"
    json_form, np_dtype, note = zarr_dtype_json(base_dt)
    if cls == h5t.OPAQUE:
        note = _join(note, f"opaque type (tag {_opaque_tag(base_tid)!r}) kept as raw bytes")
    if conversion:
        note = _join(f"values decoded by HDF5 and stored in the sidecar: {conversion}", note)
        return DtypePlan("convert", json_form, np_dtype, extra, attrs, note)
    return DtypePlan("raw", json_form, np_dtype, extra, attrs, note)


def _opaque_tag(t: h5t.TypeOpaqueID) -> str:
    tag = t.get_tag()
    return tag.decode("utf-8", "replace") if isinstance(tag, bytes) else str(tag)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
