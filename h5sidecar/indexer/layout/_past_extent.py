"""A chunked dataset shown longer than its HDF5 extent (a netCDF variable shorter than its
unlimited dimension, see :mod:`h5sidecar.indexer.dims._unlimited_dims`).

Chunks wholly past the extent are never-written (``MISSING``; stored like any other
never-written chunk by :mod:`._fillchunks`).  A stored chunk the extent cuts through may hold
anything past it: the fill value, stale values of a dataset shrunk after writing, or bytes never
initialised (fill time "never").  Nothing proves which, so such a chunk is decoded through h5py
(the part inside the extent), padded with the storage fill value and re-encoded into the
sidecar, as netCDF readers pad it.
"""

from __future__ import annotations

import h5py
import numpy as np

from h5sidecar.indexer._materialize import materialize_chunks
from h5sidecar.indexer.dtypes._dtype_plan import DtypePlan
from h5sidecar.indexer.layout._chunk_table import ChunkTable
from h5sidecar.references import INLINE

__all__ = ["extend_table", "extended_note"]


def extended_note(shape: tuple[int, ...], extent: tuple[int, ...]) -> str:
    """The array's note when it is shown at ``shape``, longer than HDF5's ``extent``."""
    return (
        f"shown at its unlimited dimension's length {list(shape)}, past HDF5's extent "
        f"{list(extent)}, as netCDF readers show it: the records HDF5 does not hold read as "
        "the fill value"
    )


def _cut_by_extent(
    grid: tuple[int, ...], chunks: tuple[int, ...], extent: tuple[int, ...], shape: tuple[int, ...]
) -> np.ndarray:
    """Positions of ``grid`` (HDF5's) whose chunk the extent cuts on an axis shown longer."""
    cut = np.zeros(grid, dtype=bool)
    for axis, (h, n, c) in enumerate(zip(extent, shape, chunks, strict=True)):
        if n > h and h % c:
            index = [slice(None)] * len(grid)
            index[axis] = slice(h // c, h // c + 1)
            cut[tuple(index)] = True
    return cut


def extend_table(
    dset: h5py.Dataset,
    table: ChunkTable,
    shape: tuple[int, ...],
    plan: DtypePlan,
    pipeline: tuple[dict[str, object], ...],
    fill_raw: bytes | None,
) -> ChunkTable:
    """``table`` (on the grid of HDF5's extent) on the grid of ``shape``.

    Parameters
    ----------
    dset : h5py.Dataset
    table : ChunkTable
        The dataset's chunks, its odd ones already re-encoded (``_reconcile_pipeline``).
    shape : tuple of int
        The longer shape (without element-type dimensions).
    plan : DtypePlan
    pipeline : tuple of dict
        The array's codecs, used to re-encode the chunks the extent cuts.
    fill_raw : bytes or None
        One element of the storage fill value (``None``: zeros).

    Raises
    ------
    Skip
        ``unreadable`` or ``unsupported_filter`` when a cut chunk cannot be re-encoded.
    """
    extent = tuple(int(s) for s in dset.shape)
    out = ChunkTable.empty(shape, table.chunks, table.urls)
    inside = tuple(slice(0, g) for g in table.grid)
    out.codes[inside] = table.codes
    out.offsets[inside] = table.offsets
    out.lengths[inside] = table.lengths
    out.masks[inside] = table.masks
    for flat, data in table.inline.items():  # flat positions of HDF5's grid, on the longer one
        moved = np.ravel_multi_index(np.unravel_index(flat, table.grid), out.grid)
        out.inline[int(moved)] = data
    cut = np.argwhere(_cut_by_extent(table.grid, table.chunks, extent, shape) & (table.codes >= 0))
    indices = [tuple(int(i) for i in ix) for ix in cut]
    encoded = materialize_chunks(dset, indices, table.chunks, plan.extra_shape, plan.np_dtype,
                                 pipeline, fill_raw)  # fmt: skip
    for index, data in encoded.items():
        out.codes[index] = INLINE
        out.lengths[index] = len(data)
        out.inline[int(np.ravel_multi_index(index, out.grid))] = data
    notes = [extended_note(shape, extent)]
    if encoded:
        notes.append(
            f"{len(encoded)} chunk(s) the extent cuts were decoded and re-encoded in the sidecar "
            "with the fill value past the extent"
        )
    out.note = "; ".join(p for p in (table.note, *notes) if p)
    return out
