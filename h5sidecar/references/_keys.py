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
    rank = max(len(grid_shape), 1)
    if n <= _FEW:
        idx = _parse_few(names, rank, array_path)
    else:
        idx = _parse_many(names, rank, array_path)
    grid = np.asarray(grid_shape or (1,), dtype=np.int64)
    outside = np.any(idx >= grid, axis=1)
    if np.any(outside):
        raise InvalidReferenceError(
            f"{array_path}: chunk key {names[int(np.argmax(outside))]!r} lies outside the chunk "
            f"grid {tuple(grid_shape)}; the sidecar does not match its .zarray"
        )
    flat = np.ravel_multi_index(tuple(idx.T), tuple(grid)).astype(np.int64)
    ordered = np.sort(flat)
    if np.any(ordered[1:] == ordered[:-1]):
        raise InvalidReferenceError(f"{array_path}: two chunk keys denote the same chunk")
    return flat


#: Up to this many chunk names are parsed in Python: the Arrow kernels' fixed cost (~0.2 ms a
#: call sequence) exceeds the per-name work for the few chunks most arrays have.
_FEW = 64


def _parse_few(names: Sequence[str], rank: int, array_path: str) -> np.ndarray:
    """``int64[n, rank]`` chunk indices of a few names (same checks as :func:`_parse_many`)."""
    rows = []
    for name in names:
        parts = name.split(".")
        if len(parts) != rank:
            raise InvalidReferenceError(
                f"{array_path}: chunk key {name!r} does not have {rank} dot-separated indices; "
                "keys must match the array's rank (Zarr v2, '.' separator)"
            )
        if not all(p.isascii() and p.isdigit() for p in parts):
            raise InvalidReferenceError(
                f"{array_path}: chunk keys must be non-negative integers, got {name!r}; "
                "re-create the sidecar"
            )
        rows.append([int(p) for p in parts])
    try:
        return np.array(rows, dtype=np.int64).reshape(len(names), rank)
    except OverflowError as exc:  # more digits than int64 holds
        raise InvalidReferenceError(f"{array_path}: chunk index out of range ({exc})") from exc


def _parse_many(names: Sequence[str], rank: int, array_path: str) -> np.ndarray:
    """``int64[n, rank]`` chunk indices of many names, with Arrow string kernels."""
    n = len(names)
    parts = pc.split_pattern(pa.array(names, type=pa.string()), ".")
    wrong_rank = pc.list_value_length(parts).to_numpy() != rank
    if np.any(wrong_rank):
        raise InvalidReferenceError(
            f"{array_path}: chunk key {names[int(np.argmax(wrong_rank))]!r} does not have {rank} "
            "dot-separated indices; keys must match the array's rank (Zarr v2, '.' separator)"
        )
    pieces = pc.list_flatten(parts)
    not_digits = pc.invert(pc.match_substring_regex(pieces, r"^[0-9]+$")).to_numpy(
        zero_copy_only=False
    )
    if np.any(not_digits):
        raise InvalidReferenceError(
            f"{array_path}: chunk keys must be non-negative integers, got "
            f"{names[int(np.argmax(not_digits)) // rank]!r}; re-create the sidecar"
        )
    try:
        idx: np.ndarray = pc.cast(pieces, pa.int64()).to_numpy().reshape(n, rank)
    except pa.ArrowInvalid as exc:  # more digits than int64 holds
        raise InvalidReferenceError(f"{array_path}: chunk index out of range ({exc})") from exc
    return idx
