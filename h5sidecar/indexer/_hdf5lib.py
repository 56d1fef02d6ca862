"""Calls into the HDF5 library h5py is linked to, for what h5py does not expose.

Needed: ``H5Dget_chunk_index_type`` (which chunk index a dataset uses; see ``_earray``).  The
library must be the copy h5py loaded (h5py's object identifiers are only valid there): the one
bundled with h5py's wheel, else the one mapped into the process; every call first checks that
the identifier is valid in it, and holds h5py's global lock.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import h5py

__all__ = ["CHUNK_INDEX_NAMES", "chunk_index_type", "hdf5_library"]

#: ``H5D_chunk_index_t`` values (H5Dpublic.h).
CHUNK_INDEX_NAMES = {
    0: "btree_v1",
    1: "single_chunk",
    2: "implicit",
    3: "fixed_array",
    4: "extensible_array",
    5: "btree_v2",
}


def _candidate_paths() -> list[str]:
    # Other wheels (netCDF4, ...) bundle their own libhdf5 and may be mapped into the process
    # too; identifiers are only valid in the copy h5py uses, so h5py's bundled copy comes first
    # and the process map (a system-linked h5py) only when there is none.
    root = os.path.dirname(os.path.dirname(h5py.__file__))
    paths = sorted(glob.glob(os.path.join(root, "h5py.libs", "libhdf5*")))
    if not paths:
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    path = line.rstrip("\n").rpartition(" ")[2]
                    if os.path.basename(path).startswith("libhdf5") and path not in paths:
                        paths.append(path)
        except OSError:
            pass
    return [p for p in paths if "_hl" not in os.path.basename(p)]


@functools.cache
def hdf5_library() -> ctypes.CDLL | None:
    """The HDF5 shared library h5py uses, or ``None`` when it cannot be located."""
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "H5Dget_chunk_index_type") and hasattr(lib, "H5Iis_valid"):
            lib.H5Iis_valid.argtypes = [ctypes.c_int64]
            lib.H5Iis_valid.restype = ctypes.c_int
            lib.H5Dget_chunk_index_type.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]
            lib.H5Dget_chunk_index_type.restype = ctypes.c_int
            return lib
    return None


def chunk_index_type(dset: h5py.Dataset) -> str | None:
    """The chunk index of a chunked dataset (``"extensible_array"``, ...), ``None`` if unknown."""
    lib = hdf5_library()
    if lib is None or dset.chunks is None:
        return None
    value = ctypes.c_int(-1)
    with h5py._objects.phil:
        if lib.H5Iis_valid(dset.id.id) <= 0:  # not h5py's copy of the library after all
            return None
        status = lib.H5Dget_chunk_index_type(dset.id.id, ctypes.byref(value))
    return CHUNK_INDEX_NAMES.get(value.value) if status >= 0 else None
