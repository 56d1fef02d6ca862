"""Sub-chunk reads: only the byte runs of a plain chunk that a selection needs.

A chunk stored without compressor or filters is its values' bytes in C order, so the part of it
a selection's bounding box covers is a set of contiguous byte runs: one run per index of the
leading axes, each spanning the box along the first axis that the box cuts and every trailing
axis it covers whole.  One time step of a ``(2688, 372)`` int16 chunk is one 744-byte run
instead of the chunk's 2 MB.

:func:`plan_subchunk` decides, for one chunk and one box, whether to read runs or the whole
chunk: runs closer than ``max_gap`` are merged (as the fetch planner would), and runs are read
only when the merged ranges move at most ``subchunk_fraction`` of the chunk's bytes.
:func:`gather_box` turns the fetched ranges into the box's values (a strided view of the
fetched buffer when one range covers the box, else one copy).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5sidecar.read.native._decode import ChunkCodec
from h5sidecar.read.native._selection import Selection, chunk_boxes

__all__ = [
    "SubRead",
    "gather_box",
    "plan_subchunk",
    "qualifies",
    "subchunk_read",
]

#: above this many index bytes a multi-range chunk is copied run by run instead of gathered
_GATHER_INDEX_BYTES = 2**22


@dataclass(frozen=True, slots=True)
class SubRead:
    """The byte runs of one chunk a box needs, and the ranges that fetch them.

    Attributes
    ----------
    starts, stops : numpy.ndarray
        int64: the ranges to fetch, in bytes from the chunk's first byte (runs merged where the
        gap between them is at most ``max_gap``), sorted.
    runs : numpy.ndarray
        int64: start of each run (C order of the box's leading axes), from the chunk's start.
    run_len : int
        Bytes of each run.
    box : tuple of int
        Shape of the box in the chunk (elements).
    strides : tuple of int
        Byte strides of the chunk (C order).
    dst : tuple of slice
        Where the box lands in the selection's output box (set by :func:`subchunk_read`).
    """

    starts: np.ndarray
    stops: np.ndarray
    runs: np.ndarray
    run_len: int
    box: tuple[int, ...]
    strides: tuple[int, ...]
    dst: tuple[slice, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes the ranges move."""
        return int((self.stops - self.starts).sum())

    def requests(self, url: str, offset: int) -> list[tuple[str, int, int]]:
        """The ``(url, offset, length)`` ranges to fetch, for a chunk stored at ``offset``."""
        return [
            (url, offset + a, b - a)
            for a, b in zip(self.starts.tolist(), self.stops.tolist(), strict=True)
        ]


def qualifies(codec: ChunkCodec, length: int) -> bool:
    """True when a stored chunk of ``length`` bytes is its values' plain C-order bytes: no
    compressor and no filters, fixed-size values, and stored at its full decoded size."""
    return (
        not codec.codecs
        and codec.order == "C"
        and not codec.dtype.hasobject
        and codec.dtype.itemsize > 0
        and len(codec.chunks) > 0
        and length == codec.chunk_nbytes
    )


def subchunk_read(
    codec: ChunkCodec,
    sel: Selection,
    shape: Sequence[int],
    index: Sequence[int],
    length: int,
    *,
    max_gap: int,
    fraction: float,
    memo: dict[Any, SubRead | None] | None = None,
) -> SubRead | None:
    """How to read chunk ``index`` (stored in ``length`` bytes) of an array of ``shape`` for
    ``sel``: its runs, or None for the whole chunk (it does not :func:`qualifies`, the
    selection wants every value it holds, or the runs would move too much; see
    :func:`plan_subchunk`).  ``memo`` (a dict kept for one batch) reuses the runs of chunks of
    the same codec that the selection cuts alike (every inner chunk of a thin selection)."""
    if fraction <= 0 or not qualifies(codec, length):
        return None
    dst, src = chunk_boxes(sel, codec.chunks, index)
    if all(
        s.start == 0 and s.stop == min(c, n - i * c)
        for s, c, n, i in zip(src, codec.chunks, shape, index, strict=True)
    ):
        return None  # all its values are wanted (an edge chunk's padding aside): read it whole
    key = (id(codec), tuple((x.start, x.stop) for x in src), length, max_gap, fraction)
    if memo is not None and key in memo:
        sub = memo[key]
    else:
        sub = plan_subchunk(codec, src, length, max_gap=max_gap, fraction=fraction)
        if memo is not None:
            memo[key] = sub
    return None if sub is None else dataclasses.replace(sub, dst=dst)


def plan_subchunk(
    codec: ChunkCodec, src: Sequence[slice], length: int, *, max_gap: int, fraction: float
) -> SubRead | None:
    """The runs of a plain chunk that the box ``src`` (chunk-local slices) needs, or None when
    the whole chunk should be read (the merged runs would move more than ``fraction`` of
    ``length``, or ``fraction`` is 0).

    Call only for chunks that :func:`qualifies`.
    """
    if fraction <= 0:
        return None
    chunks = codec.chunks
    item = codec.dtype.itemsize
    nd = len(chunks)
    ext = [s.stop - s.start for s in src]
    if 0 in ext:
        return None
    strides = [math.prod(chunks[j + 1 :]) * item for j in range(nd)]
    # k: the first axis the box cuts, counted from the end; every axis after it is whole
    k = nd - 1
    while k > 0 and ext[k] == chunks[k]:
        k -= 1
    run_len = ext[k] * strides[k]
    n_runs = math.prod(ext[:k])
    if n_runs * run_len > fraction * length:
        return None
    first = sum(s.start * st for s, st in zip(src, strides, strict=True))
    runs = np.array([first], dtype=np.int64)
    for j in range(k):  # C order: outer axes vary slowest
        runs = (runs[:, None] + np.arange(ext[j], dtype=np.int64)[None, :] * strides[j]).reshape(-1)
    ends = runs + run_len
    cut = np.flatnonzero(runs[1:] - ends[:-1] > max_gap) + 1
    starts = runs[np.concatenate(([0], cut))]
    stops = ends[np.concatenate((cut - 1, [runs.size - 1]))]
    if int((stops - starts).sum()) > fraction * length:
        return None
    box = tuple(ext)
    return SubRead(starts, stops, runs, int(run_len), box, tuple(strides))


def gather_box(sub: SubRead, dtype: np.dtype, buffers: Sequence[Any]) -> np.ndarray:
    """The box's values (stored dtype) from the fetched ``buffers`` (one per range of ``sub``,
    in order)."""
    if len(buffers) == 1:
        # one range holds every run: a strided view of it, no copy
        base = int(sub.runs[0] - sub.starts[0])
        return np.ndarray(sub.box, dtype=dtype, buffer=buffers[0], offset=base, strides=sub.strides)
    out = np.empty(sub.runs.size * sub.run_len, dtype=np.uint8)
    seg = np.searchsorted(sub.starts, sub.runs, side="right") - 1
    bounds = np.flatnonzero(np.diff(seg)) + 1
    lo = np.concatenate(([0], bounds)).tolist()
    hi = np.concatenate((bounds, [seg.size])).tolist()
    n = sub.run_len
    for a, b in zip(lo, hi, strict=True):
        m = int(seg[a])
        raw = np.frombuffer(buffers[m], dtype=np.uint8)
        rel = sub.runs[a:b] - sub.starts[m]
        if (b - a) * n * 8 <= _GATHER_INDEX_BYTES:
            out[a * n : b * n] = raw[(rel[:, None] + np.arange(n)[None, :]).reshape(-1)]
        else:
            for i, r in enumerate(rel.tolist(), start=a):
                out[i * n : (i + 1) * n] = raw[r : r + n]
    return out.view(dtype).reshape(sub.box)
