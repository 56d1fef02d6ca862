"""Which chunk index a chunked dataset uses, asked of the HDF5 library h5py is linked to.

h5py does not expose ``H5Dget_chunk_index_type`` (needed by ``_earray``); the call goes
through :func:`h5sidecar._compat.h5py.chunk_index_code`, which finds h5py's own copy of the
library and holds h5py's global lock.
"""

from __future__ import annotations

import h5py

from h5sidecar._compat.h5py import chunk_index_code

__all__ = ["CHUNK_INDEX_NAMES", "chunk_index_type"]

#: ``H5D_chunk_index_t`` values (H5Dpublic.h).
CHUNK_INDEX_NAMES = {
    0: "btree_v1",
    1: "single_chunk",
    2: "implicit",
    3: "fixed_array",
    4: "extensible_array",
    5: "btree_v2",
}


def chunk_index_type(dset: h5py.Dataset) -> str | None:
    """The chunk index of a chunked dataset (``"extensible_array"``, ...), ``None`` if unknown."""
    if dset.chunks is None:
        return None
    code = chunk_index_code(dset.id)
    return None if code is None else CHUNK_INDEX_NAMES.get(code)
