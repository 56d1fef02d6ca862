"""Compare values decoded through a sidecar with what h5py reads from the source.

Each HDF5 quirk that makes the two representations differ in form but not in meaning is a named
helper: variable-length strings (h5py: bytes, Zarr: str), object references (h5py: Reference,
Zarr: the target's path), structured types (compared field by field), NaN (equal to itself).
"""

from __future__ import annotations

from typing import Any

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
    return h5py.Dataset(h5py.h5d.open(f.id, path.encode(), dapl=dapl))


def read_h5_region(dset: h5py.Dataset, region: tuple[slice, ...]) -> np.ndarray:
    """Read ``region`` of ``dset``; trailing dimensions beyond the dataset's rank (H5T_ARRAY
    element dimensions, which Zarr holds as extra array dimensions) are sliced after reading."""
    if dset.shape is None:  # null dataspace
        return np.empty((0,), dtype=dset.dtype)
    lead, trail = region[: dset.ndim], region[dset.ndim :]
    out = dset[lead] if dset.ndim else dset[()]
    out = np.asarray(out)
    if trail:
        out = out[(slice(None),) * dset.ndim + trail]
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
    """Compound types: every field equal (fields may have been renamed by nothing but order)."""
    names = expected.dtype.names or ()
    if actual.dtype.names is None or set(names) != set(actual.dtype.names):
        return False
    return all(values_equal(expected[n], actual[n], file=file) for n in names)


def _objects_equal(expected: np.ndarray, actual: np.ndarray, file: h5py.File) -> bool:
    """Variable-length strings and references, compared as Python ``str``."""
    exp = [_as_text(v, file) for v in expected.reshape(-1).tolist()]
    act = [_as_text(v, file) for v in actual.reshape(-1).tolist()]
    if any(isinstance(v, h5py.Reference) for v in expected.reshape(-1).tolist()):
        # references are materialised as target paths; "/a/b" and "a/b" name the same object
        act = [v.lstrip("/") if isinstance(v, str) else v for v in act]
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
