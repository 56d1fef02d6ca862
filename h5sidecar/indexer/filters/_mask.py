"""Chunks stored with a different pipeline than the array's: choose the pipeline, list the rest.

HDF5 records per chunk which declared filters were *not* applied (the filter mask: an optional
filter that failed, e.g. a compressor that could not shrink the chunk).  Partial edge chunks of
a dataset created with ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS`` are stored unfiltered although
their mask says 0.  Zarr has one pipeline per array, so:

1. compute every stored chunk's *effective* mask;
2. take the most common one as the array's pipeline (ties: the one applying more filters), so
   a dataset where a filter was skipped for *every* chunk stays fully virtual, without that
   filter (even when no codec exists for it);
3. the chunks with another mask are decoded by h5py and re-encoded (see ``_materialize``).
"""

from __future__ import annotations

import h5py
import numpy as np

from h5sidecar.indexer.filters import partial_edge_chunks_unfiltered
from h5sidecar.indexer.layout._chunk_table import ChunkTable

__all__ = ["describe_mask", "effective_masks", "partial_edge_mask", "pick_mask"]


def partial_edge_mask(
    grid: tuple[int, ...], chunks: tuple[int, ...], shape: tuple[int, ...]
) -> np.ndarray:
    """bool[grid]: chunks that extend past the array's current shape in some dimension."""
    out = np.zeros(grid, dtype=bool)
    for axis, (g, c, s) in enumerate(zip(grid, chunks, shape, strict=True)):
        if g and g * c > s:
            index: list[slice | int] = [slice(None)] * len(grid)
            index[axis] = g - 1
            out[tuple(index)] = True
    return out


def effective_masks(dset: h5py.Dataset, table: ChunkTable, n_filters: int) -> np.ndarray:
    """uint32[grid]: the filters actually skipped for each stored chunk (bit i = filter i)."""
    all_bits = np.uint32((1 << n_filters) - 1)
    masks = table.masks & all_bits
    if n_filters and partial_edge_chunks_unfiltered(dset):
        edge = partial_edge_mask(table.grid, table.chunks, tuple(dset.shape))
        masks = np.where(edge & (table.codes >= 0), all_bits, masks).astype(np.uint32)
    return masks


def pick_mask(masks: np.ndarray, stored: np.ndarray) -> int:
    """The most common mask among stored chunks (ties: fewest skipped filters, then lowest)."""
    chosen = masks[stored]
    if chosen.size and not np.any(chosen != chosen[0]):  # the usual case: one mask for all
        return int(chosen[0])
    values, counts = np.unique(chosen, return_counts=True)
    if not len(values):
        return 0
    best = max(
        zip(values.tolist(), counts.tolist(), strict=True),
        key=lambda vc: (vc[1], -int(vc[0]).bit_count(), -vc[0]),
    )
    return int(best[0])


def describe_mask(mask: int, names: list[str]) -> str:
    """Human-readable list of the filters a mask skips."""
    skipped = [names[i] if i < len(names) else f"#{i}" for i in range(len(names)) if mask >> i & 1]
    return ", ".join(skipped)
