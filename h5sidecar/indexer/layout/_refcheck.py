"""Chunk references checked against the size of the object they point into.

A corrupt chunk index (a flipped bit in a B-tree or fixed-array block) gives chunk addresses or
sizes past the end of the file.  HDF5 hands them over as they are; indexed as they are, they would
be found only when a reader fetches them.  Every reference into the granule is checked here, at
index time, and the variable is skipped with the first bad reference as its reason (the other
variables of the granule are unaffected).
"""

from __future__ import annotations

import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer.layout._chunk_table import ChunkTable

__all__ = ["check_references"]


def check_references(table: ChunkTable, url: str, size: int) -> None:
    """Skip the variable (``unreadable``) when a chunk of ``url`` lies outside its ``size`` bytes.

    Raises
    ------
    Skip
        Naming the first chunk (in grid order) whose ``offset + length`` passes the end.
    """
    if url not in table.urls:
        return
    mine = table.codes == table.urls.index(url)
    end = np.uint64(size)
    offsets, lengths = table.offsets, table.lengths
    # written so that it cannot overflow: offset > size, or length > size - offset
    outside = mine & ((offsets > end) | (lengths > end - np.minimum(offsets, end)))
    if not outside.any():
        return
    index = tuple(int(i) for i in np.argwhere(outside)[0])
    fail(
        ErrorKind.UNREADABLE,
        f"corrupt chunk index: {int(outside.sum())} chunk reference(s) lie past the end of the "
        f"{size}-byte file, the first, chunk {index}, at bytes {int(offsets[index])}+"
        f"{int(lengths[index])}; re-stage the file from its origin",
    )
