"""A page cache of one object's bytes, and the page runs that fill it.

The ranged reader (:mod:`h5sidecar.sources.fetch._pinned`) keeps what it fetched in a
:class:`PageCache`: fixed :data:`PAGE`-byte pages, evicted by whole fetched block, least recently
used first, within a byte limit.  Which pages one request fetches is decided by
:func:`page_runs` / :func:`run_holding`, a thin adapter over the package's one coalescing
algorithm, :func:`~h5sidecar.sources.fetch._plan.plan_coded`: pages become ``PAGE``-byte ranges, and a
gap the caller does not allow to be bridged (it holds pages already cached or coming) separates
them into different "objects" of the plan, which never share a request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from h5sidecar.sources.fetch._plan import plan_coded

__all__ = ["PAGE", "PageCache", "assemble_pages", "page_runs", "run_holding"]

#: Cache granularity in bytes.  Not a tuning knob: HDF5's metadata blocks and its speculative
#: 512-byte reads fit in pages of this size, and every offset computation below relies on it.
PAGE = 4096

Bridgeable = Callable[[int, int], bool]


class PageCache:
    """Fetched bytes by page, evicting whole fetched blocks least-recently-used first.

    Parameters
    ----------
    limit : int
        Bytes kept at most (the newest block is always kept, even when larger).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._pages: dict[int, tuple[int, memoryview]] = {}  # page -> (block id, bytes)
        self._blocks: OrderedDict[int, tuple[int, int, int]] = OrderedDict()  # id -> span, size
        self._bytes = 0
        self._next_id = 0
        self._lock = threading.Lock()  # the reader's thread reads while the loop thread writes

    def put(self, start: int, data: bytes) -> None:
        """Store ``data`` fetched at page-aligned offset ``start``."""
        view = memoryview(data)
        first, count = start // PAGE, -(-len(data) // PAGE)
        with self._lock:
            block = self._next_id
            self._next_id += 1
            for i in range(count):
                self._pages[first + i] = (block, view[i * PAGE : (i + 1) * PAGE])
            self._blocks[block] = (first, count, len(data))
            self._bytes += len(data)
            while self._bytes > self._limit and len(self._blocks) > 1:
                self._evict_oldest()

    def _evict_oldest(self) -> None:
        block, (first, count, nbytes) = self._blocks.popitem(last=False)
        self._bytes -= nbytes
        for page in range(first, first + count):
            if self._pages.get(page, (None,))[0] == block:
                del self._pages[page]

    def has(self, page: int) -> bool:
        """Whether ``page`` is cached."""
        return page in self._pages

    def read(self, start: int, stop: int) -> bytes | None:
        """Bytes ``[start, stop)`` or ``None`` when a page is missing."""
        first, last = start // PAGE, (stop - 1) // PAGE
        with self._lock:
            parts = []
            for page in range(first, last + 1):
                entry = self._pages.get(page)
                if entry is None:
                    return None
                self._blocks.move_to_end(entry[0])
                parts.append(entry[1])
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        offset = start - first * PAGE
        return bytes(data[offset : offset + stop - start])


def page_runs(
    pages: Sequence[int],
    max_gap: int,
    max_request: int,
    bridgeable: Bridgeable = lambda first, last: True,
) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of pages to fetch in one request each, in page order.

    Parameters
    ----------
    pages : sequence of int
        Sorted, distinct page numbers.
    max_gap : int
        Pages at most this many bytes apart share a run ...
    max_request : int
        ... as long as the run spans at most this many bytes ...
    bridgeable : callable, optional
        ... and ``bridgeable(gap_first, gap_last)`` allows fetching the pages between them
        (e.g. not when some are cached already).

    Returns
    -------
    list of (int, int)
        Inclusive page runs covering every page once; the cut is
        :func:`~h5sidecar.sources.fetch._plan.plan_coded`'s (greedy from the left).
    """
    if not pages:
        return []
    arr = np.asarray(pages, dtype=np.int64)
    gaps = np.diff(arr) - 1
    # only gaps short enough to be bridged at all need asking (the planner cuts the others)
    candidates = np.flatnonzero((gaps > 0) & (gaps * PAGE <= max_gap))
    blocked = np.zeros(arr.size, dtype=np.int64)
    for i in candidates.tolist():
        if not bridgeable(int(arr[i]) + 1, int(arr[i + 1]) - 1):
            blocked[i + 1] = 1
    codes = np.cumsum(blocked)  # a blocked gap starts a new "object": never one request
    plan = plan_coded(
        [""] * (int(codes[-1]) + 1),
        codes,
        arr * PAGE,
        np.full(arr.size, PAGE, dtype=np.int64),
        max_gap=max_gap,
        max_request=max(max_request, PAGE),
    )
    firsts = (plan.span_start // PAGE).tolist()
    lasts = (plan.span_stop // PAGE - 1).tolist()
    return sorted(zip(firsts, lasts, strict=True))


def run_holding(
    pages: Sequence[int],
    page: int,
    max_gap: int,
    max_request: int,
    bridgeable: Bridgeable = lambda first, last: True,
) -> tuple[int, int]:
    """The run of :func:`page_runs` that holds ``page`` (one of ``pages``).

    Only the pages of ``page``'s cluster (neighbours closer than ``max_gap``) are planned, which
    gives the same run: clusters never share a request.
    """
    arr = np.asarray(pages, dtype=np.int64)
    at = int(np.searchsorted(arr, page))
    far = np.flatnonzero((np.diff(arr) - 1) * PAGE > max_gap)  # gaps no run bridges
    lo = int(far[far < at][-1]) + 1 if (far < at).any() else 0
    hi = int(far[far >= at][0]) + 1 if (far >= at).any() else arr.size
    for first, last in page_runs(arr[lo:hi].tolist(), max_gap, max_request, bridgeable):
        if first <= page <= last:
            return first, last
    raise ValueError(f"page {page} is not among the pages given")


def assemble_pages(
    start: int, stop: int, fetched: dict[int, tuple[int, Any]], cache: PageCache
) -> bytes | None:
    """``[start, stop)`` from blocks just fetched (``page -> (block start, block bytes)``), or
    from ``cache`` for pages not among them; ``None`` when a page is in neither."""
    parts = []
    for page in range(start // PAGE, (stop - 1) // PAGE + 1):
        if page in fetched:
            block_start, block = fetched[page]
            offset = page * PAGE - block_start
            parts.append(block[offset : offset + PAGE])
        else:
            cached = cache.read(page * PAGE, (page + 1) * PAGE)
            if cached is None:
                return None
            parts.append(cached)
    offset = start - (start // PAGE) * PAGE
    return b"".join(parts)[offset : offset + stop - start]
