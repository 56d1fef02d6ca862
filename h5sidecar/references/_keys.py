"""Vectorised Zarr v2 chunk-key helpers shared by the JSON and Parquet formats.

Chunk keys are built and parsed for whole arrays at once (pyarrow / numpy string kernels), never
one Python string operation per chunk in the writers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import InvalidReferenceError

__all__ = ["chunk_names", "ints_as_text", "parse_chunk_names"]


def ints_as_text(values: np.ndarray) -> pa.StringArray:
    """Decimal text of an integer array, as a pyarrow string array (C++ kernel)."""
    return pc.cast(pa.array(np.ascontiguousarray(values)), pa.string())


def chunk_names(grid_shape: tuple[int, ...], flat: np.ndarray) -> pa.StringArray:
    """Zarr v2 chunk names (``"i.j.k"``; ``"0"`` for 0-d arrays) of flat C-order chunk indices.

    Parameters
    ----------
    grid_shape : tuple of int
        Shape of the chunk grid.
    flat : numpy.ndarray
        Flat C-order indices of the chunks to name.
    """
    flat = np.asarray(flat, dtype=np.int64)
    if not grid_shape:
        return pa.array(["0"] * len(flat), type=pa.string())
    parts = [ints_as_text(ax) for ax in np.unravel_index(flat, grid_shape)]
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, ".")


def parse_chunk_names(
    names: Sequence[str], grid_shape: tuple[int, ...], array_path: str
) -> np.ndarray:
    """Flat C-order indices of Zarr v2 chunk names, validated against the chunk grid.

    Raises
    ------
    InvalidReferenceError
        When a name is not ``ndim`` dot-separated non-negative integers, lies outside the grid,
        or two names denote the same chunk (``"01"`` and ``"1"``).
    """
    n = len(names)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ndim = len(grid_shape)
    text = np.asarray(names, dtype=np.dtypes.StringDType())
    expected_dots = max(ndim - 1, 0)
    bad = np.strings.count(text, ".") != expected_dots
    if np.any(bad):
        raise InvalidReferenceError(
            f"{array_path}: chunk key {names[int(np.argmax(bad))]!r} does not have {max(ndim, 1)} "
            "dot-separated indices; keys must match the array's rank (Zarr v2, '.' separator)"
        )
    pieces = np.asarray("\x00".join(names).replace(".", "\x00").split("\x00"))
    if len(pieces) != n * max(ndim, 1) or not np.all(np.strings.isdigit(pieces)):
        raise InvalidReferenceError(
            f"{array_path}: chunk keys must be non-negative integers, got e.g. "
            f"{names[0]!r}; re-create the sidecar"
        )
    idx = pieces.astype(np.int64).reshape(n, max(ndim, 1))
    grid = np.asarray(grid_shape or (1,), dtype=np.int64)
    outside = np.any(idx >= grid, axis=1)
    if np.any(outside):
        raise InvalidReferenceError(
            f"{array_path}: chunk key {names[int(np.argmax(outside))]!r} lies outside the chunk "
            f"grid {tuple(grid_shape)}; the sidecar does not match its .zarray"
        )
    flat = np.ravel_multi_index(tuple(idx.T), tuple(grid)).astype(np.int64)
    if len(np.unique(flat)) != n:
        raise InvalidReferenceError(f"{array_path}: two chunk keys denote the same chunk")
    return flat
