"""h5py's private names, and calls into the HDF5 library h5py is linked to.

Five uses; :data:`CHECKED` runs from the floor ``pyproject.toml`` declares to the newest
release they were checked on (3.16, with ``tests/test_compat.py``):

- :func:`creation_plist`: h5py's cached creation property list of a ``Dataset``
  (``Dataset._dcpl``).  Public alternative, same result, ~15 us slower per call:
  ``dset.id.get_create_plist()`` (a fresh copy), used outside :data:`CHECKED` or when absent.
  :func:`set_creation_plist` puts the indexer's own (decoded from the dataset's header) in
  that cache; outside :data:`CHECKED` it does nothing and HDF5's list is used.
- :func:`hdf5_library`: the libhdf5 h5py loaded, found through h5py's bundled libraries or,
  for a system-linked h5py, the process's memory map (``/proc/self/maps``), opened with ctypes
  for what h5py does not wrap (``H5Dget_chunk_index_type``, ``H5Pget_chunk_opts``).  No public
  alternative; ``None`` where it cannot be found, and callers say what they cannot do.
- :func:`h5py_lock`: h5py's global lock (``h5py._objects.phil``), held around those ctypes
  calls as h5py holds it around its own.  No public alternative.
- :func:`open_member`: a group's member bound as ``h5py.Group`` / ``h5py.Dataset(oid,
  readonly=...)`` (the keyword h5py's ``Group.__getitem__`` passes).  Public alternative, same
  objects, ~13 us slower per dataset: ``group[name]``, which makes a ``File`` object per
  dataset to learn the file's mode; used outside :data:`CHECKED`.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
from contextlib import AbstractContextManager
from typing import Any

import h5py
from packaging.specifiers import SpecifierSet
from packaging.version import Version

__all__ = [
    "CHECKED",
    "chunk_index_code",
    "chunk_opts",
    "creation_plist",
    "h5py_lock",
    "hdf5_library",
    "open_member",
    "set_creation_plist",
]

#: The h5py versions these uses are known to work on (checked: 3.16).
CHECKED = SpecifierSet(">=3.11,<3.17")
#: Whether the installed h5py is one of them.
IN_CHECKED = Version(h5py.__version__) in CHECKED

_HAS_DCPL = IN_CHECKED and hasattr(h5py.Dataset, "_dcpl")


def creation_plist(dset: h5py.Dataset) -> Any:
    """The creation property list of ``dset``, copied out of HDF5 once per dataset object.

    Each ``DatasetID.get_create_plist()`` copies the list (layout, filters, fill value) in
    HDF5, ~15 us; the indexer asks for it 5-8 times per dataset.  h5py keeps one copy per
    ``Dataset`` object (``Dataset._dcpl``, a cached property its own ``chunks``,
    ``compression`` and ``fillvalue`` read), so that one is shared; a file opened read-only
    cannot change it.
    """
    if _HAS_DCPL:
        return dset._dcpl
    return dset.id.get_create_plist()


def set_creation_plist(dset: h5py.Dataset, plist: Any) -> bool:
    """Make ``plist`` (an object answering as a creation property list) the one h5py's own
    properties (``chunks``, ``fillvalue``, ...) and :func:`creation_plist` use for ``dset``,
    in place of the copy h5py would ask HDF5 for; ``False`` (nothing done) outside
    :data:`CHECKED`."""
    if not _HAS_DCPL:
        return False
    dset.__dict__["_dcpl"] = plist  # where h5py's cached_property keeps its copy
    return True


def open_member(group: h5py.Group, name: bytes, readonly: bool) -> h5py.HLObject:
    """``group[name]`` (a ``Group``, ``Dataset`` or ``Datatype``) for a file whose mode the
    caller knows (``readonly``: opened with ``"r"``)."""
    if not IN_CHECKED:
        return group[name]
    with h5py_lock():
        oid = h5py.h5o.open(group.id, name)
        kind = h5py.h5i.get_type(oid)
        if kind == h5py.h5i.GROUP:
            return h5py.Group(oid)
        if kind == h5py.h5i.DATASET:
            return h5py.Dataset(oid, readonly=readonly)
        if kind == h5py.h5i.DATATYPE:
            return h5py.Datatype(oid)
    raise TypeError("Unknown object type")  # as h5py says it


def h5py_lock() -> AbstractContextManager[Any]:
    """h5py's global lock (``h5py._objects.phil``): every call into libhdf5 holds it."""
    return h5py._objects.phil  # type: ignore[no-any-return]


def _candidate_paths() -> list[str]:
    # Other wheels (netCDF4, hdf5plugin builds) bundle their own libhdf5 and may be mapped into
    # the process too; identifiers are only valid in the copy h5py uses, so h5py's bundled copy
    # comes first (beside the package, or inside it) and the process map (a system-linked h5py)
    # only when there is none.
    pkg = os.path.dirname(h5py.__file__)
    paths = sorted(glob.glob(os.path.join(os.path.dirname(pkg), "h5py.libs", "libhdf5*")))
    paths += sorted(glob.glob(os.path.join(pkg, "**", "libhdf5*"), recursive=True))
    if not paths:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    path = line.rstrip("\n").rpartition(" ")[2]
                    if os.path.basename(path).startswith("libhdf5") and path not in paths:
                        paths.append(path)
        except OSError:
            pass
    return [p for p in paths if not os.path.basename(p).startswith("libhdf5_hl")]


@functools.cache
def hdf5_library() -> ctypes.CDLL | None:
    """The HDF5 shared library h5py uses, or ``None`` when it cannot be located."""
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if all(hasattr(lib, f) for f in
               ("H5Iis_valid", "H5Dget_chunk_index_type", "H5Pget_chunk_opts")):
            lib.H5Iis_valid.argtypes = [ctypes.c_int64]
            lib.H5Iis_valid.restype = ctypes.c_int
            lib.H5Dget_chunk_index_type.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]
            lib.H5Dget_chunk_index_type.restype = ctypes.c_int
            lib.H5Pget_chunk_opts.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint)]
            lib.H5Pget_chunk_opts.restype = ctypes.c_int
            return lib
    return None


def chunk_index_code(dsid: Any) -> int | None:
    """``H5Dget_chunk_index_type`` of a chunked dataset's id (``H5D_chunk_index_t``), ``None``
    when the library cannot be found, is not h5py's copy, or the call fails."""
    lib = hdf5_library()
    if lib is None:
        return None
    value = ctypes.c_int(-1)
    with h5py_lock():
        if lib.H5Iis_valid(dsid.id) <= 0:  # not h5py's copy of the library after all
            return None
        status = lib.H5Dget_chunk_index_type(dsid.id, ctypes.byref(value))
    return value.value if status >= 0 else None


def chunk_opts(plist: Any) -> int | None:
    """``H5Pget_chunk_opts`` of a dataset creation property list (``H5D_CHUNK_*`` bits),
    ``None`` when the library cannot be found or the call fails.  Keep a reference to
    ``plist`` across the call: its id must stay open."""
    lib = hdf5_library()
    if lib is None:
        return None
    opts = ctypes.c_uint(0)
    with h5py_lock():
        status = lib.H5Pget_chunk_opts(plist.id, ctypes.byref(opts))
    return opts.value if status >= 0 else None
