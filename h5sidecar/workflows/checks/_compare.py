"""Compare values decoded through a sidecar with what h5py reads from the source.

Each HDF5 quirk that makes the two representations differ in form but not in meaning is a named
helper: variable-length strings (h5py: bytes, Zarr: str), object references (h5py: Reference,
Zarr: the target's path), structured types (compared field by field), NaN (equal to itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

import h5py
import numpy as np

__all__ = ["h5_dataset", "read_h5_region", "values_equal"]


def h5_dataset(f: h5py.File, path: str) -> h5py.Dataset:
    """Open dataset ``path`` with external raw-data files looked up beside the HDF5 file.

    HDF5 resolves ``H5Pset_external`` file names against the working directory unless the
    dataset access property ``efile_prefix`` says otherwise; ``${ORIGIN}`` means "the folder of
    the HDF5 file", which is where the indexer found them too.
    """
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_efile_prefix(b"${ORIGIN}")
    # the sidecar's names a Zarr key space cannot hold are %XX-escaped (every "%" of an HDF5
    # name too), so unquoting gives the HDF5 name's bytes back
    return h5py.Dataset(h5py.h5d.open(f.id, unquote_to_bytes(path), dapl=dapl))


def read_h5_region(dset: h5py.Dataset, region: tuple[slice, ...]) -> np.ndarray:
    """Read ``region`` of ``dset``; trailing dimensions beyond the dataset's rank (H5T_ARRAY
    element dimensions, which Zarr holds as extra array dimensions) are sliced after reading."""
    if dset.shape is None:  # null dataspace
        return np.empty((0,), dtype=dset.dtype)
    lead, trail = region[: dset.ndim], region[dset.ndim :]
    if dset.id.get_type().get_class() == h5py.h5t.OPAQUE:
        out = _read_opaque(dset, lead)
    else:
        out = np.asarray(dset[lead] if dset.ndim else dset[()])
    if trail:
        out = out[(slice(None),) * dset.ndim + trail]
    return out


def _read_opaque(dset: h5py.Dataset, lead: tuple[slice, ...]) -> np.ndarray:
    """Read an opaque dataset with its own file type as the memory type.

    h5py reads opaque data with an untagged memory type, and HDF5 has no conversion between
    opaque types with different tags ("no appropriate function for conversion path"); with the
    file's type there is nothing to convert and the bytes arrive as stored.
    """
    shape = tuple(s.stop - s.start for s in lead)
    out = np.empty(shape, dtype=dset.dtype)
    if not dset.ndim:
        dset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, out, mtype=dset.id.get_type())
        return out
    fspace = dset.id.get_space()
    fspace.select_hyperslab(tuple(s.start for s in lead), shape)
    mspace = h5py.h5s.create_simple(shape)
    dset.id.read(mspace, fspace, out, mtype=dset.id.get_type())
    return out


def values_equal(expected: np.ndarray, actual: np.ndarray, *, file: h5py.File) -> bool:
    """True when ``actual`` (decoded through the sidecar) means the same as ``expected`` (h5py)."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if expected.shape != actual.shape:
        return False
    if expected.dtype.names is not None:
        return _structured_equal(expected, actual, file)
    if expected.dtype.kind == "O" or actual.dtype.kind in "OTU":
        return _objects_equal(expected, actual, file)
    if expected.dtype.kind in "fc":
        return bool(np.array_equal(expected, actual, equal_nan=True))
    return bool(np.array_equal(expected, actual))


def _structured_equal(expected: np.ndarray, actual: np.ndarray, file: h5py.File) -> bool:
    """Compound types: every field equal, by name, or else by byte offset.

    The indexer may *flatten* a compound zarr cannot read (nested members, array members) and
    make its padding explicit, keeping h5py's in-memory layout; then the members are found at
    the same byte offsets under other names.
    """
    names = expected.dtype.names or ()
    if actual.dtype.names is not None and set(names) == set(actual.dtype.names):
        return all(values_equal(expected[n], actual[n], file=file) for n in names)
    if actual.dtype.names is None or expected.dtype.itemsize != actual.dtype.itemsize:
        return False
    if expected.dtype.hasobject or actual.dtype.hasobject:
        return False  # object members have no byte layout to compare
    exp = np.ascontiguousarray(expected)
    act = np.ascontiguousarray(actual)
    for offset, leaf in _compound_leaves(expected.dtype):
        e = _view(exp, offset, leaf)
        a = _view(act, offset, leaf)
        if not values_equal(e, a, file=file):
            return False
    return True


def _compound_leaves(dtype: np.dtype, base: int = 0) -> list[tuple[int, np.dtype]]:
    """``(byte offset, scalar dtype)`` of every member of a compound, nested and array members
    expanded element by element."""
    out: list[tuple[int, np.dtype]] = []
    fields: Mapping[str, tuple[Any, ...]] = dtype.fields or {}
    for name in dtype.names or ():
        member, offset = fields[name][:2]
        out += _member_leaves(member, base + offset)
    return out


def _member_leaves(member: np.dtype, offset: int) -> list[tuple[int, np.dtype]]:
    if member.subdtype is not None:
        elem, shape = member.subdtype
        return [
            leaf
            for k in range(int(np.prod(shape)))
            for leaf in _member_leaves(elem, offset + k * elem.itemsize)
        ]
    if member.names is not None:
        return _compound_leaves(member, offset)
    return [(offset, member)]


def _view(arr: np.ndarray, offset: int, leaf: np.dtype) -> np.ndarray:
    """The member of every element of ``arr`` found at ``offset`` with type ``leaf``."""
    return np.ndarray(arr.shape, dtype=leaf, buffer=arr, offset=offset, strides=arr.strides)


def _objects_equal(expected: np.ndarray, actual: np.ndarray, file: h5py.File) -> bool:
    """Variable-length strings and references, compared as Python ``str``."""
    exp = [_as_text(v, file) for v in expected.reshape(-1).tolist()]
    act = [_as_text(v, file) for v in actual.reshape(-1).tolist()]
    if any(isinstance(v, h5py.Reference) for v in expected.reshape(-1).tolist()):
        # references are materialised as target paths; "/a/b" and "a/b" name the same object,
        # and the sidecar's paths are %XX-escaped where a name cannot be a Zarr key
        act = [unquote(v.lstrip("/")) if isinstance(v, str) else v for v in act]
    return exp == act


def _as_text(value: Any, file: h5py.File) -> Any:
    if isinstance(value, h5py.Reference):
        return _reference_target(value, file)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    return value


def _reference_target(ref: h5py.Reference, file: h5py.File) -> str:
    """An object reference as its target's path (relative, like the sidecar's), '' if null."""
    if not ref:
        return ""
    name = file[ref].name or ""
    return name.lstrip("/")
