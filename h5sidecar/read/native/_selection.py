"""Basic selections (integers and slices) as chunks: which chunks a selection touches, and
where each lands in the output.

* :func:`chunk_selection` -- the chunks a basic selection touches and where each lands;
* :func:`place_chunk` -- copy the part of one decoded chunk that the selection wants into the
  output;
* :func:`chunk_boxes` -- the output and chunk boxes of one chunk of a selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Selection", "chunk_boxes", "chunk_selection", "place_chunk"]


@dataclass(frozen=True, slots=True)
class Selection:
    """The chunks a basic selection touches and where each goes.

    Attributes
    ----------
    shape : tuple of int
        Shape of the bounding box read (before steps and integer axes are applied).
    grid : numpy.ndarray
        int64 [n, ndim]: chunk grid indices touched, in C order.
    post : tuple
        Index applied to the bounding box to give the result (steps, dropped integer axes).
    lo : tuple of int
        Start of the bounding box in array coordinates.
    """

    shape: tuple[int, ...]
    grid: np.ndarray
    post: tuple[Any, ...]
    lo: tuple[int, ...]


def chunk_selection(
    shape: Sequence[int], chunks: Sequence[int], key: tuple[Any, ...]
) -> Selection:
    """Chunks touched by ``key`` (a tuple of ints and slices, one per axis, as xarray's
    ``BasicIndexer`` gives).

    Raises
    ------
    IndexError
        When an integer is out of bounds or ``key`` has the wrong length.
    """
    if len(key) != len(shape):
        raise IndexError(f"selection {key!r} has {len(key)} axes, the array {len(shape)}")
    lo: list[int] = []
    hi: list[int] = []
    post: list[Any] = []
    for k, size in zip(key, shape, strict=True):
        if isinstance(k, slice):
            r = range(*k.indices(size))
            if not r:
                lo.append(0)
                hi.append(0)
                post.append(slice(0, 0))
                continue
            first, last = min(r[0], r[-1]), max(r[0], r[-1])
            lo.append(first)
            hi.append(last + 1)
            end = r[-1] - first + (1 if r.step > 0 else -1)
            post.append(slice(r[0] - first, None if end < 0 else end, r.step))
        else:
            i = int(k)
            if i < -size or i >= size:
                raise IndexError(f"index {i} is out of bounds for an axis of size {size}")
            i %= size
            lo.append(i)
            hi.append(i + 1)
            post.append(0)
    ranges = [
        np.arange(a // c, -(-b // c), dtype=np.int64) if b > a else np.empty(0, np.int64)
        for a, b, c in zip(lo, hi, chunks, strict=True)
    ]
    if len(ranges) == 1:  # most arrays: no meshgrid (a batch selects a thousand of them)
        grid = ranges[0].reshape(-1, 1)
    elif ranges:
        mesh = np.meshgrid(*ranges, indexing="ij")
        grid = np.stack([m.reshape(-1) for m in mesh], axis=1)
    else:
        grid = np.zeros((1, 0), dtype=np.int64)
    box = tuple(b - a for a, b in zip(lo, hi, strict=True))
    return Selection(box, grid, tuple(post), tuple(lo))


def place_chunk(
    out: np.ndarray,
    sel: Selection,
    chunks: Sequence[int],
    index: Sequence[int],
    chunk: np.ndarray | Any,
) -> None:
    """Copy the part of ``chunk`` (an array, or a scalar fill value) at grid ``index`` that
    falls in the selection's bounding box into ``out`` (the box)."""
    dst, src = chunk_boxes(sel, chunks, index)
    if isinstance(chunk, np.ndarray):
        out[dst] = chunk[src]
    else:
        out[dst] = chunk


def chunk_boxes(
    sel: Selection, chunks: Sequence[int], index: Sequence[int]
) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Where chunk ``index`` meets the selection's bounding box: ``(dst, src)``, the slices of
    the output box and of the chunk."""
    dst: list[slice] = []
    src: list[slice] = []
    for i, c, a, n in zip(index, chunks, sel.lo, sel.shape, strict=True):
        c0 = i * c
        start, stop = max(c0, a), min(c0 + c, a + n)
        dst.append(slice(start - a, stop - a))
        src.append(slice(start - c0, stop - c0))
    return tuple(dst), tuple(src)
