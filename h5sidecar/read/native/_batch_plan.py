"""The fetch-and-decode plan of one batch (:mod:`h5sidecar.read.native._batch_reader`), made of arrays.

A whole granule is thousands of small stored chunks.  Planning them as one Python object each
(a record, its grid index as a tuple, a list of the selections it lands in, a dict entry) cost
more CPU than inflating them, and those objects, alive for the whole batch, pushed a
whole-granule read into a full garbage collection.  :func:`plan_batch` instead builds one row
per stored chunk in a few numpy columns (source, offset, length, selection, row of its grid
index, byte offset in the output when it can be decoded there), sorted in file order and cut
into fetch groups; :func:`decode_span` walks one group's rows with plain ints.  Only what is
rare gets a Python object: chunks shared by several selections of one array, and chunks read
in runs (:mod:`~h5sidecar.read.native._subchunk`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5sidecar.errors import ChunkDecodeError
from h5sidecar.read.native._batch_parts import Target, flat_numbers
from h5sidecar.read.native._prefetch import is_whole
from h5sidecar.read.native._subchunk import SubRead, gather_box, subchunk_read
from h5sidecar.references import ChunkManifest

__all__ = ["BatchPlan", "Fetched", "decode_span", "plan_batch"]

_I64 = np.int64


@dataclass(frozen=True, slots=True, eq=False)
class BatchPlan:
    """The stored chunks of a batch, one row each (each chunk once), in file order.

    Attributes
    ----------
    targets : list of Target
        The selections of the batch; ``target`` indexes it.
    urls : list of str
        The sources read; ``url`` indexes it.
    url, offset, length, target, row : numpy.ndarray
        int64 [n]: where each chunk is stored, the (first) selection it lands in, and the row of
        its grid index in that selection's ``sel.grid``.
    dest : numpy.ndarray
        int64 [n]: byte offset of the chunk's region in its selection's output when the chunk
        is decoded straight into it (a whole chunk inside the box, a contiguous region, stored
        byte order), else -1.
    shared : dict
        Row -> the further selections (indices into ``targets``) a chunk lands in, for arrays
        read by several selections of one batch.
    sub : dict
        Row -> the runs to read of a chunk of which a selection needs few bytes.
    bounds : list of (int, int)
        The fetch groups: row ranges of about ``total / groups`` bytes each.
    """

    targets: list[Target]
    urls: list[str]
    url: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    target: np.ndarray
    row: np.ndarray
    dest: np.ndarray
    shared: dict[int, list[int]]
    sub: dict[int, SubRead]
    bounds: list[tuple[int, int]]

    @property
    def total(self) -> int:
        """Bytes of the stored chunks (whole)."""
        return int(self.length.sum())


def plan_batch(
    targets: list[Target],
    manifests: Sequence[ChunkManifest],
    shapes: Sequence[tuple[int, ...]],
    stored: Sequence[np.ndarray],
    *,
    group_min: int,
    groups: int,
    max_request: int,
    max_gap: int,
    subchunk_fraction: float,
) -> BatchPlan:
    """Plan the stored chunks of ``targets``: ``stored[k]`` holds the rows (into
    ``targets[k].sel.grid``) of the chunks of selection ``k`` that are stored in the source;
    ``manifests[k]`` and ``shapes[k]`` are its array's.

    Chunks are sorted by source and offset and cut into groups of ``total / groups`` bytes
    (at least ``group_min``, at most ``max_request``); a chunk that several selections of one
    array read is planned once.
    """
    urls: dict[str, int] = {}
    cols: list[tuple[np.ndarray, ...]] = []
    path_ids: dict[str, int] = {}
    for k, (t, man, which) in enumerate(zip(targets, manifests, stored, strict=True)):
        if not which.size:
            continue
        flat = flat_numbers(t.sel.grid[which], man.grid_shape)
        # the plan's URL numbers of the manifest's URLs these chunks use, not of all of them
        # (a cube's manifest lists every member's: a million strings hashed per read)
        used, at = np.unique(man.codes.reshape(-1)[flat], return_inverse=True)
        ids = np.array([urls.setdefault(man.urls[c], len(urls)) for c in used.tolist()], _I64)
        path_id = path_ids.setdefault(t.path, len(path_ids))
        cols.append((ids[at.reshape(-1)], man.offsets.reshape(-1)[flat].astype(_I64),
                     man.lengths.reshape(-1)[flat].astype(_I64), np.full(which.size, k, _I64),
                     which.astype(_I64), flat, np.full(which.size, path_id, _I64)))  # fmt: skip
    if not cols:
        empty = np.zeros(0, _I64)
        return BatchPlan(targets, list(urls), empty, empty, empty, empty, empty, empty, {}, {}, [])
    url, offset, length, target, row, flat, pid = (np.concatenate(c) for c in zip(*cols, strict=True))
    keep, extra = _dedupe(targets, pid, flat, target)
    order = keep[np.lexsort((offset[keep], url[keep]))]
    at = np.empty(url.size, _I64)
    at[order] = np.arange(order.size)
    shared: dict[int, list[int]] = {}
    for first, more in extra:  # rows are renumbered in file order
        shared.setdefault(int(at[first]), []).append(more)
    url, offset, length, target, row = (a[order] for a in (url, offset, length, target, row))
    dest = _direct_offsets(targets, target, row, shared)
    sub = _subchunks(targets, shapes, target, row, length, shared, max_gap, subchunk_fraction)
    cost = length.copy()
    for i, s in sub.items():
        cost[i] = s.nbytes
        dest[i] = -1
    size = min(max(int(cost.sum()) // groups, group_min), max_request)
    return BatchPlan(targets, list(urls), url, offset, length, target, row, dest, shared, sub,
                     _cut(cost, size))  # fmt: skip


def _dedupe(targets: list[Target], pid: np.ndarray, flat: np.ndarray,
            target: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:  # fmt: skip
    """Rows to plan (each chunk once) and ``(kept row, selection)`` of every repeat: the
    further selections of one array that read the same chunk."""
    n = pid.size
    if len(targets) == len({t.path for t in targets}):  # one selection per array: all unique
        return np.arange(n), []
    order = np.lexsort((np.arange(n), flat, pid))
    same = (pid[order][1:] == pid[order][:-1]) & (flat[order][1:] == flat[order][:-1])
    repeat = np.zeros(n, bool)
    repeat[1:] = same
    first = np.maximum.accumulate(np.where(repeat, 0, np.arange(n)))  # run starts
    extra = [(int(order[first[i]]), int(target[order[i]])) for i in np.flatnonzero(repeat)]
    return np.sort(order[~repeat]), extra


def _direct_offsets(targets: list[Target], target: np.ndarray, row: np.ndarray,
                    shared: dict[int, list[int]]) -> np.ndarray:  # fmt: skip
    """:attr:`BatchPlan.dest` of every row, per selection in a few array operations."""
    dest = np.full(target.size, -1, _I64)
    if not target.size:
        return dest
    order = np.argsort(target, kind="stable")
    bounds = np.flatnonzero(np.diff(target[order])) + 1
    for rows in np.split(order, bounds):
        t = targets[int(target[rows[0]])]
        strides = _region_strides(t)
        if strides is None:
            continue
        chunks = np.asarray(t.codec.chunks, _I64)
        start = t.sel.grid[row[rows]] * chunks - np.asarray(t.sel.lo, _I64)
        inside = ((start >= 0) & (start + chunks <= np.asarray(t.sel.shape, _I64))).all(axis=1)
        dest[rows[inside]] = start[inside] @ strides if start.shape[1] else 0
    for i in shared:  # a chunk several selections want is decoded once, then copied to each
        dest[i] = -1
    return dest


def _region_strides(t: Target) -> np.ndarray | None:
    """Byte strides of ``t``'s output when a whole chunk's region in it is one contiguous run
    of bytes that the chunk's decoded bytes fill as they are (C order, stored byte order), else
    None.  A chunk-shaped box is contiguous when the axes before the last one it does not
    span whole have length 1 in the chunk (the axes after it are spanned whole)."""
    codec, out = t.codec, t.out
    if (codec.order != "C" or out.dtype != codec.dtype or not out.flags.c_contiguous
            or codec.strings):
        return None
    chunks, box = codec.chunks, out.shape
    partial = [a for a, (c, n) in enumerate(zip(chunks, box, strict=True)) if c != n]
    if partial and any(chunks[a] != 1 for a in range(partial[-1])):
        return None
    return np.asarray(out.strides, _I64)


def _subchunks(targets: list[Target], shapes: Sequence[tuple[int, ...]], target: np.ndarray,
               row: np.ndarray, length: np.ndarray, shared: dict[int, list[int]],
               max_gap: int, fraction: float) -> dict[int, SubRead]:  # fmt: skip
    """The rows read in runs: chunks without codecs, of one selection only, that it cuts
    (a selection of a whole array wants every value of every chunk: none of those)."""
    sub: dict[int, SubRead] = {}
    if fraction <= 0:
        return sub
    memo: dict[Any, SubRead | None] = {}  # codecs live as long as the reader: ids are safe
    plain = [not t.codec.codecs and not is_whole(t.sel, shapes[k]) for k, t in enumerate(targets)]
    if not any(plain):
        return sub
    for i in np.flatnonzero(np.asarray(plain)[target]).tolist():
        if i in shared:
            continue
        t = targets[int(target[i])]
        s = subchunk_read(t.codec, t.sel, shapes[int(target[i])], t.sel.grid[row[i]],
                          int(length[i]), max_gap=max_gap, fraction=fraction, memo=memo)  # fmt: skip
        if s is not None:
            sub[i] = s
    return sub


def _cut(cost: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Row ranges in order: a group takes rows until it holds ``size`` bytes (the row that
    reaches it included)."""
    ends = np.cumsum(cost)
    bounds = []
    start, base = 0, 0
    while start < cost.size:
        stop = int(np.searchsorted(ends, base + size, side="left")) + 1
        stop = min(max(stop, start + 1), cost.size)
        bounds.append((start, stop))
        base = int(ends[stop - 1])
        start = stop
    return bounds


class Fetched:
    """The bytes of one fetch group's rows, as the decode step takes them.

    A fetched chunk stays in its span's bytes (``span``, ``start``: where; -1 when not in a
    span) and is cut by a memoryview only when it is decoded; ``datas`` holds the rest: chunks
    from the chunk cache, the list of run bytes of a chunk read in runs, and ``b""`` for a
    chunk of no bytes.  ``whole``: rows planned in runs whose whole chunk came from the cache.
    """

    __slots__ = ("datas", "span", "spans", "start", "whole")

    def __init__(self, n: int) -> None:
        self.datas: list[Any] = [b""] * n
        self.spans: list[Any] = []
        self.span = np.full(n, -1, _I64)
        self.start = np.zeros(n, _I64)
        self.whole: set[int] = set()

    def data(self, j: int, length: int) -> Any:
        """The bytes of row ``j`` of the group (``length``: the chunk's)."""
        s = int(self.span[j])
        if s < 0:
            return self.datas[j]
        o = int(self.start[j])
        return memoryview(self.spans[s])[o : o + length]


def decode_span(plan: BatchPlan, lo: int, hi: int, got: Fetched) -> None:
    """Decode rows ``lo:hi`` of ``plan`` (their bytes in ``got``) into their selections'
    outputs; runs in a decode-pool thread."""
    targets, shared, sub, datas, whole = plan.targets, plan.shared, plan.sub, got.datas, got.whole
    views = [memoryview(b) for b in got.spans]
    for i, t_i, r, d, n, sp, o in zip(range(lo, hi), plan.target[lo:hi].tolist(),
                                      plan.row[lo:hi].tolist(), plan.dest[lo:hi].tolist(),
                                      plan.length[lo:hi].tolist(), got.span.tolist(),
                                      got.start.tolist(), strict=True):  # fmt: skip
        data = datas[i - lo] if sp < 0 else views[sp][o : o + n]
        t = targets[t_i]
        if d >= 0:
            codec = t.codec
            try:
                codec.decode_into(data, t.flat[d : d + codec.chunk_nbytes])
            except ChunkDecodeError:
                codec.decode(data, where=_where(t, r))  # again, to name the chunk in the error
                raise
            continue
        s = sub.get(i)
        if s is not None and i not in whole:
            t.out[s.dst] = gather_box(s, t.codec.dtype, data)
            continue
        index = tuple(t.sel.grid[r].tolist())
        chunk = t.codec.decode(data, where=_where(t, r))
        t.place(index, chunk)
        for more in shared.get(i, ()):
            targets[more].place(index, chunk)


def _where(t: Target, row: int) -> str:
    """A chunk, named in errors: its array and grid index."""
    return f"{t.path} {tuple(t.sel.grid[row].tolist())}"
