"""Pure, vectorised read planning: coalesce byte ranges into few, bounded requests.

:func:`plan_reads` turns ``n`` byte ranges ``(url, offset, length)`` into a :class:`ReadPlan`:

* **spans** -- contiguous byte windows of one object; ranges of the same object whose gap is at
  most ``max_gap`` bytes (adjacent and overlapping ranges included) share a span, as long as the
  span stays within ``max_request`` bytes;
* **requests** -- what is actually fetched: one per span, except that a span longer than
  ``max_request`` (only possible for a single range larger than it) is split into equal parts
  that can be fetched in parallel;
* for every input range, the span holding it and its offset inside the span's bytes, so each
  input is a slice ``span_bytes[offset : offset + length]``.

No I/O happens here, and no Python object is made per range: the work is a lexsort plus a few
numpy passes, O(n log n).  The only Python loop runs once per *request* of a cluster that must be
cut to respect ``max_request``, and such requests each carry about ``max_request`` bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError

__all__ = ["ReadPlan", "plan_coded", "plan_reads"]

_I64 = np.int64


@dataclass(frozen=True, slots=True, eq=False)
class ReadPlan:
    """The result of :func:`plan_reads` (immutable; all arrays are read-only).

    Attributes
    ----------
    urls : tuple of str
        The distinct objects read; ``*_url`` arrays index into it.
    span_url, span_start, span_stop : numpy.ndarray
        int32 / int64 / int64 [n_spans]: the contiguous window ``[start, stop)`` of each span.
    request_span, request_start, request_stop : numpy.ndarray
        int64 [n_requests]: the requests to issue, ordered by span then offset; the requests of
        one span tile it exactly.
    range_span, range_offset, range_length : numpy.ndarray
        int64 [n_ranges], in *input* order: the span holding each input range (-1 for an empty
        range, which needs no I/O) and its offset inside the span's bytes.
    """

    urls: tuple[str, ...]
    span_url: np.ndarray
    span_start: np.ndarray
    span_stop: np.ndarray
    request_span: np.ndarray
    request_start: np.ndarray
    request_stop: np.ndarray
    range_span: np.ndarray
    range_offset: np.ndarray
    range_length: np.ndarray

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False

    @property
    def n_ranges(self) -> int:
        """Number of input ranges."""
        return int(self.range_length.size)

    @property
    def n_spans(self) -> int:
        """Number of coalesced spans."""
        return int(self.span_start.size)

    @property
    def n_requests(self) -> int:
        """Number of requests the plan issues."""
        return int(self.request_start.size)

    @property
    def bytes_requested(self) -> int:
        """Bytes the requests transfer."""
        return int((self.request_stop - self.request_start).sum())

    @property
    def bytes_used(self) -> int:
        """Bytes of the input ranges (duplicates counted each time)."""
        return int(self.range_length.sum())

    @property
    def over_read_ratio(self) -> float:
        """``bytes_requested / bytes_used`` (1.0 when nothing is used)."""
        used = self.bytes_used
        return self.bytes_requested / used if used else 1.0

    def request_url(self, i: int) -> str:
        """URL of request ``i``."""
        return self.urls[int(self.span_url[self.request_span[i]])]

    def iter_requests(self) -> Iterator[tuple[str, int, int]]:
        """``(url, start, stop)`` of every request, in plan order."""
        urls = [self.urls[c] for c in self.span_url[self.request_span].tolist()]
        yield from zip(urls, self.request_start.tolist(), self.request_stop.tolist(), strict=True)

    def slice_spans(
        self, span_bytes: Sequence[bytes | memoryview], *, copy: bool = True
    ) -> list[Any]:
        """Cut each input range out of its span's bytes (input order).

        ``span_bytes[i]`` must hold exactly ``span_stop[i] - span_start[i]`` bytes.  With
        ``copy=False`` the ranges are read-only memoryviews into the spans (no copy; each keeps
        its whole span alive).
        """
        views = [memoryview(b) for b in span_bytes]
        out: list[Any] = []
        for s, o, n in zip(
            self.range_span.tolist(),
            self.range_offset.tolist(),
            self.range_length.tolist(),
            strict=True,
        ):
            if s < 0:
                out.append(b"")
                continue
            view = views[s]
            if o == 0 and n == len(view) and isinstance(span_bytes[s], bytes):
                out.append(span_bytes[s])  # whole span: no copy
            elif copy:
                out.append(view[o : o + n].tobytes())
            else:
                out.append(view[o : o + n])
        return out


def plan_reads(
    urls: Sequence[str],
    offsets: Sequence[int] | np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    *,
    max_gap: int,
    max_request: int,
) -> ReadPlan:
    """Coalesce byte ranges into bounded requests (pure; no I/O).

    Parameters
    ----------
    urls : sequence of str
        The object of each range.
    offsets, lengths : sequences or arrays of int
        Byte offset and length of each range (non-negative; zero-length ranges need no I/O).
    max_gap : int
        Ranges of one object separated by at most this many bytes are merged (0 merges only
        adjacent or overlapping ranges).
    max_request : int
        No merged request grows beyond this many bytes; a single range longer than this is split
        into ``ceil(length / max_request)`` equal parallel parts.

    Returns
    -------
    ReadPlan

    Raises
    ------
    InvalidReferenceError
        When a range has a negative offset or length, or the inputs differ in length.
    ValueError
        When ``max_gap < 0`` or ``max_request < 1``.

    Examples
    --------
    >>> p = plan_reads(["s3://b/k"] * 3, [0, 100, 10_000], [100, 50, 10],
    ...                max_gap=1000, max_request=1 << 20)
    >>> list(p.iter_requests())
    [('s3://b/k', 0, 150), ('s3://b/k', 10000, 10010)]
    """
    n = len(urls)
    if n == 0:
        table: tuple[str, ...] = ()
        codes = np.zeros(0, dtype=np.int32)
    else:
        table_arr, inverse = np.unique(
            np.asarray(urls, dtype=object).astype(str), return_inverse=True
        )
        table = tuple(str(u) for u in table_arr.tolist())
        codes = inverse.astype(np.int32).reshape(-1)
    return plan_coded(table, codes, offsets, lengths, max_gap=max_gap, max_request=max_request)


def plan_coded(
    url_table: Sequence[str],
    codes: Sequence[int] | np.ndarray,
    offsets: Sequence[int] | np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    *,
    max_gap: int,
    max_request: int,
) -> ReadPlan:
    """:func:`plan_reads` for ranges whose objects are given as codes into ``url_table``.

    This is the form chunk manifests already hold (``codes`` / ``offsets`` / ``lengths``), so a
    store can plan a selection without building one string per chunk.
    """
    if max_gap < 0:
        raise ValueError(f"max_gap must be >= 0, got {max_gap}")
    if max_request < 1:
        raise ValueError(f"max_request must be >= 1, got {max_request}")
    codes_a, off, length = _validated_columns(url_table, codes, offsets, lengths)
    n = off.size
    range_span = np.full(n, -1, dtype=_I64)
    range_offset = np.zeros(n, dtype=_I64)

    live = np.flatnonzero(length > 0)
    # by object, then start, then longest first: a range is then either "dominated" (inside
    # the bytes of the ranges before it) or extends the covered region to the right
    order = live[np.lexsort((-length[live], off[live], codes_a[live]))]
    code_s, start_s = codes_a[order], off[order]
    stop_s = start_s + length[order]
    kept = ~_dominated(code_s, stop_s)
    k_code, k_start, k_stop = code_s[kept], start_s[kept], stop_s[kept]
    first = _span_starts(k_code, k_start, k_stop, max_gap=max_gap, max_request=max_request)

    heads = np.flatnonzero(first)
    tails = np.append(heads[1:], first.size)[: heads.size] - 1
    span_start, span_stop = k_start[heads], k_stop[tails]
    span_url = k_code[heads].astype(np.int32)
    # a dominated range lies inside the last kept range before it, so it joins that range's span
    kept_span = np.cumsum(first) - 1
    sorted_span = kept_span[np.cumsum(kept) - 1] if kept.size else kept_span
    range_span[order] = sorted_span
    range_offset[order] = start_s - span_start[sorted_span]

    req_span, req_start, req_stop = _split_requests(span_start, span_stop, max_request)
    # only the objects read: a datacube's table lists every member (100,000 URLs), of which a
    # selection reads a few, and the executor checks each URL of the plan
    used = np.unique(span_url)
    return ReadPlan(
        urls=tuple(url_table[i] for i in used.tolist()),
        span_url=np.searchsorted(used, span_url).astype(np.int32),
        span_start=span_start,
        span_stop=span_stop,
        request_span=req_span,
        request_start=req_start,
        request_stop=req_stop,
        range_span=range_span,
        range_offset=range_offset,
        range_length=length,
    )


def _validated_columns(
    url_table: Sequence[str],
    codes: Sequence[int] | np.ndarray,
    offsets: Sequence[int] | np.ndarray,
    lengths: Sequence[int] | np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        codes_a = np.asarray(codes, dtype=_I64).reshape(-1)
        off = np.asarray(offsets, dtype=_I64).reshape(-1)
        length = np.asarray(lengths, dtype=_I64).reshape(-1)
    except OverflowError as exc:
        raise InvalidReferenceError(f"byte range does not fit in int64: {exc}") from exc
    if not codes_a.size == off.size == length.size:
        raise InvalidReferenceError(
            f"{codes_a.size} urls, {off.size} offsets and {length.size} lengths: "
            "every range needs one of each"
        )
    if off.size and (off.min() < 0 or length.min() < 0):
        bad = int(np.flatnonzero((off < 0) | (length < 0))[0])
        raise InvalidReferenceError(
            f"range {bad} has offset {int(off[bad])} and length {int(length[bad])}; "
            "offsets and lengths must be non-negative (the reference is corrupt: re-index)"
        )
    if codes_a.size and (codes_a.min() < 0 or codes_a.max() >= len(url_table)):
        raise InvalidReferenceError(f"url codes must lie in [0, {len(url_table)})")
    return codes_a, off, length


def _segmented_cummax(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarted wherever ``codes`` changes (codes sorted).

    Done in rank space so it stays one vectorised pass: ranking the ``(code, value)`` pairs puts
    every pair of a later code above all pairs of earlier codes, so a plain cumulative maximum of
    the ranks never carries over from one object to the next.
    """
    if values.size == 0:
        return values.copy()
    by_pair = np.lexsort((values, codes))
    rank = np.empty_like(by_pair)
    rank[by_pair] = np.arange(by_pair.size)
    return values[by_pair][np.maximum.accumulate(rank)]


def _dominated(codes: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Mask of sorted ranges ending no later than some earlier range of the same object.

    Such a range adds no byte to the covered region, so it is served from the span of the last
    non-dominated range before it (which starts no later and ends no earlier).  What remains has
    strictly increasing starts *and* stops per object, which makes span cutting exact below.
    """
    out = np.zeros(stops.size, dtype=bool)
    if stops.size > 1:
        reach = _segmented_cummax(codes, stops)
        out[1:] = (codes[1:] == codes[:-1]) & (stops[1:] <= reach[:-1])
    return out


def _span_starts(
    codes: np.ndarray, starts: np.ndarray, stops: np.ndarray, *, max_gap: int, max_request: int
) -> np.ndarray:
    """Boolean mask of the (non-dominated, sorted) ranges that open a new span.

    First, *clusters*: a range opens one when its object changes or it begins more than
    ``max_gap`` bytes after the previous range ends.  Clusters no longer than ``max_request``
    are spans.  Longer ones are cut greedily: a span opened at range ``i`` takes every following
    range that ends within ``starts[i] + max_request`` (a ``searchsorted``, since stops increase),
    and at least range ``i`` itself -- so two neighbouring spans could never have been one.
    """
    n = starts.size
    first = np.ones(n, dtype=bool)
    if n == 0:
        return first
    first[1:] = (codes[1:] != codes[:-1]) | (starts[1:] - stops[:-1] > max_gap)
    heads = np.flatnonzero(first)
    ends = np.append(heads[1:], n)
    too_long = stops[ends - 1] - starts[heads] > max_request
    for h, e in zip(heads[too_long].tolist(), ends[too_long].tolist(), strict=True):
        i = h
        while i < e:
            j = i + int(np.searchsorted(stops[i:e], starts[i] + max_request, side="right")) - 1
            first[i] = True
            i = max(j, i) + 1
    return first


def _split_requests(
    span_start: np.ndarray, span_stop: np.ndarray, max_request: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Requests tiling each span: one per span, or equal parts when it exceeds ``max_request``."""
    extent = span_stop - span_start
    parts = np.maximum(-(-extent // max_request), 1)
    part_len = -(-extent // parts)
    req_span = np.repeat(np.arange(span_start.size, dtype=_I64), parts)
    # index of each part inside its span: position minus the position of the span's first part
    firsts = np.cumsum(parts) - parts
    k = np.arange(req_span.size, dtype=_I64) - np.repeat(firsts, parts)
    req_start = span_start[req_span] + k * part_len[req_span]
    req_stop = np.minimum(req_start + part_len[req_span], span_stop[req_span])
    return req_span, req_start, req_stop
