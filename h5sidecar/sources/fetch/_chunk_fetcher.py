"""The concurrent fetch executor: plan, then read byte ranges with bounded concurrency.

:class:`ChunkFetcher` is the one place the read path touches sources.  For each batch of
``(url, offset, length)`` requests it

1. refuses, before any I/O, URLs outside the allow-list, ranges longer than
   ``max_range_bytes`` and ranges past the end of a source's recorded size
   (:mod:`._request_checks`);
2. coalesces the ranges with :func:`~._plan.plan_reads`;
3. issues the plan's requests concurrently (:mod:`._source_requests`), at most
   ``max_concurrency`` at a time per fetcher (and, in a lane of their own,
   ``max_small_concurrency`` requests of at most 64 KiB), through one connection pool per
   bucket/host (obstore) or ``os.pread`` in threads;
4. retries throttling, 5xx, resets, timeouts and short bodies with exponential backoff and full
   jitter (the package's one retry policy, :mod:`._retry`), and raises
   :class:`~h5sidecar.errors.SourceReadError` when retries run out;
5. confirms, before serving any byte, that the object is the one the sidecar describes (size and
   ETag or mtime, from the very response that carried the bytes) -- else
   :class:`~h5sidecar.errors.StaleReferenceError` (:mod:`._freshness`).

There is one async core (:meth:`ChunkFetcher.fetch`) and one sync bridge
(:meth:`ChunkFetcher.fetch_sync`) that runs it on fsspec's I/O loop: no third event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from h5sidecar.credentials import scrub_credentials
from h5sidecar.references import MemberTable, SourceInfo
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._allow import AllowList, MemberAllowList, MemberSourceIndex, SourceIndex
from h5sidecar.sources._stats import FetchStats
from h5sidecar.sources.fetch._freshness import FreshnessGuard
from h5sidecar.sources.fetch._plan import ReadPlan, plan_coded, plan_reads
from h5sidecar.sources.fetch._request_checks import check_plan, check_read_settings
from h5sidecar.sources.fetch._source_requests import SourceRequests
from h5sidecar.sources.stores._urls import parse_url

__all__ = ["ChunkFetcher"]


class ChunkFetcher:
    """Fetch byte ranges of allowed sources, concurrently, with retries and a freshness guard.

    Parameters
    ----------
    settings : ReadSettings
        Coalescing limits, concurrency, retries, allow-list (see the README, "Read path:
        tuning", for the ``H5SIDECAR_*`` variables).
    storage_options : mapping, optional
        s3fs-style options for object stores (``endpoint_url``, ``key``, ``secret``, ``token``,
        ``anon``, ``client_kwargs``).  Credentials are *not* pickled: a fetcher sent to a Dask
        worker resolves them again there from the worker's environment (``AWS_*`` variables,
        instance profile), keeping only non-secret options such as ``endpoint_url``.
    sources : iterable of SourceInfo
        Identities recorded at index time.  When ``settings.allowed_prefixes`` is empty, exactly
        these URLs may be fetched; with ``settings.check_freshness`` their size/ETag/mtime is
        compared with every response.
    lazy_allow_list : bool
        The allowed prefixes are many exact URLs (a datacube's members): each is normalised
        when first read rather than all now (see :class:`~h5sidecar.sources._allow.AllowList`).
    members : MemberTable, optional
        A datacube's members, in place of ``sources``: each chunk is checked against its own
        member's identity, made when the member is first read; with no
        ``settings.allowed_prefixes`` exactly their URLs may be fetched, and
        ``member_companions`` beside them (see
        :class:`~h5sidecar.sources._allow.MemberAllowList`).  Nothing is done per member now.
    member_companions : iterable of str
        The cube's chunk URLs other than its members' (candidate companion files).

    Attributes
    ----------
    stats : FetchStats
        Requests, bytes fetched/used, over-read ratio, retries, cache hits.

    Examples
    --------
    >>> fetcher = ChunkFetcher(ReadSettings(), sources=refs_list)         # doctest: +SKIP
    >>> a, b = fetcher.fetch_sync([(url, 4096, 1000), (url, 9000, 200)])  # doctest: +SKIP
    """

    def __init__(
        self,
        settings: ReadSettings,
        *,
        storage_options: Mapping[str, Any] | None = None,
        sources: Iterable[SourceInfo] = (),
        lazy_allow_list: bool = False,
        members: MemberTable | None = None,
        member_companions: Iterable[str] = (),
    ) -> None:
        self.settings = settings
        self.lazy_allow_list = lazy_allow_list
        self.members = members
        self.member_companions = tuple(member_companions)
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.sources: tuple[SourceInfo, ...] = tuple(sources)
        self.stats = FetchStats()
        self._setup()

    def _setup(self) -> None:
        check_read_settings(self.settings)
        self.allow_list: AllowList
        self._known: SourceIndex
        if self.members is not None:  # a cube: its members looked up in their table, when read
            self.allow_list = (
                AllowList(self.settings.allowed_prefixes, lazy=self.lazy_allow_list)
                if self.settings.allowed_prefixes
                else MemberAllowList(self.members, self.member_companions))
            self._known = MemberSourceIndex(self.members)
        else:
            prefixes = self.settings.allowed_prefixes or tuple(s.url for s in self.sources)
            # the sources' own URLs are normalised when read, not all now
            self.allow_list = AllowList(
                prefixes, lazy=self.lazy_allow_list or not self.settings.allowed_prefixes)
            self._known = SourceIndex(self.sources)
        self._fresh = FreshnessGuard(self.settings, self._known, self.stats)
        self._requests = SourceRequests(self.settings, self.storage_options, self._fresh,
                                        self.stats)  # fmt: skip

    # -- pickling: no credentials, no live clients ---------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "storage_options": scrub_credentials(self.storage_options),
            "sources": self.sources,
            "lazy_allow_list": self.lazy_allow_list,
            "members": self.members,  # a lazy table travels as its loader
            "member_companions": self.member_companions,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.settings = state["settings"]
        self.storage_options = dict(state["storage_options"])
        self.sources = tuple(state["sources"])
        self.lazy_allow_list = bool(state.get("lazy_allow_list"))
        self.members = state.get("members")
        self.member_companions = tuple(state.get("member_companions", ()))
        self.stats = FetchStats()
        self._setup()

    def __repr__(self) -> str:
        allowed = self.allow_list if self.members is not None else list(self.allow_list.prefixes)
        return f"ChunkFetcher(allowed={allowed!r}, stats={self.stats!r})"

    # -- public API ------------------------------------------------------------------------------
    def plan(self, requests: Sequence[tuple[str, int, int]]) -> ReadPlan:
        """Validate ``requests`` (allow-list, size limits) and plan them; no I/O."""
        urls = [r[0] for r in requests]
        offsets = np.fromiter((r[1] for r in requests), dtype=np.int64, count=len(requests))
        lengths = np.fromiter((r[2] for r in requests), dtype=np.int64, count=len(requests))
        plan = plan_reads(
            urls,
            offsets,
            lengths,
            max_gap=self.settings.max_gap,
            max_request=self.settings.max_request,
        )
        check_plan(plan, offsets, lengths, allow_list=self.allow_list,
                   max_range_bytes=self.settings.max_range_bytes, size_of=self._size_of)
        return plan

    def plan_coded(self, urls: Sequence[str], codes: np.ndarray, offsets: np.ndarray,
                   lengths: np.ndarray) -> ReadPlan:  # fmt: skip
        """:meth:`plan` for ranges given as columns: ``codes`` index ``urls`` (no tuple and no
        URL string per range: a batch of thousands of chunks plans in a few array passes)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        plan = plan_coded(urls, codes, offsets, lengths, max_gap=self.settings.max_gap,
                          max_request=self.settings.max_request)  # fmt: skip
        check_plan(plan, offsets, lengths, allow_list=self.allow_list,
                   max_range_bytes=self.settings.max_range_bytes, size_of=self._size_of)
        return plan

    async def fetch(
        self, requests: Sequence[tuple[str, int, int]], *, copy: bool = True
    ) -> list[Any]:
        """Read ``(url, offset, length)`` ranges; the bytes come back in input order
        (``copy=False``: as read-only memoryviews into the fetched buffers, no copy).

        Raises
        ------
        ForbiddenSourceError
            A URL is outside the allow-list (nothing is fetched).
        InvalidReferenceError
            A range is negative, longer than ``max_range_bytes`` or past the recorded size.
        StaleReferenceError
            A source no longer matches the identity recorded at index time: re-index it.
        SourceReadError
            A request kept failing after ``settings.retries`` retries.
        """
        plan = self.plan(requests)
        return await self.fetch_plan(plan, copy=copy)

    def fetch_sync(self, requests: Sequence[tuple[str, int, int]]) -> list[bytes]:
        """Blocking :meth:`fetch`, run on fsspec's I/O event loop (not from inside a loop)."""
        from h5sidecar._compat.fsspec import run_sync

        return run_sync(self.fetch, requests)  # type: ignore[no-any-return]

    async def fetch_plan(self, plan: ReadPlan, *, copy: bool = True) -> list[Any]:
        """Execute an already validated plan (from :meth:`plan`); bytes in input order."""
        return plan.slice_spans(await self.fetch_spans(plan), copy=copy)

    async def fetch_spans(self, plan: ReadPlan) -> list[Any]:
        """Execute an already validated plan; the bytes of each of its *spans* (range ``i`` is
        ``spans[plan.range_span[i]][plan.range_offset[i]:][:plan.range_length[i]]``), for a
        caller that cuts thousands of ranges where it uses them instead of holding one view
        per range."""
        if plan.n_requests == 0:
            self.stats.add(bytes_used=plan.bytes_used)
            return []
        locations = [self.allow_list.check(u) for u in plan.urls]
        jobs = [
            self._requests.get(locations[int(plan.span_url[s])], start, stop)
            for s, start, stop in zip(
                plan.request_span.tolist(),
                plan.request_start.tolist(),
                plan.request_stop.tolist(),
                strict=True,
            )
        ]
        parts = await _gather_or_cancel(jobs)
        spans = _assemble_spans(plan, parts)
        self.stats.add(bytes_used=plan.bytes_used)
        return spans

    # -- internals -----------------------------------------------------------------------------
    def _size_of(self, url: str) -> int:
        info = self._known.get(parse_url(url, untrusted=True).url)
        return -1 if info is None else info.size

    async def revalidate(self, urls: Iterable[str]) -> None:
        """Confirm that the sources ``urls`` are still the objects their sidecar describes,
        before a cached chunk of theirs is served.

        A source counts as confirmed for ``settings.revalidate_seconds`` after any response of
        it matched (a fetch) or after one HEAD/``stat`` here; a fetcher starts with nothing
        confirmed, so each opened store checks at least once.  Whatever any fetcher of this
        process last saw of a source (:data:`~h5sidecar.sources._seen.SEEN`) is compared
        first, without I/O: once one reader has seen a source change, no reader serves its
        cached chunks.  No-op when ``settings.check_freshness`` is off.

        Raises
        ------
        StaleReferenceError
            A source changed or is gone since it was indexed.
        SourceReadError
            The source could not be asked (after retries).
        """
        if not self.settings.check_freshness:
            return
        due = self._fresh.due(urls, self.allow_list)
        if due:
            await _gather_or_cancel([self._requests.stat(loc) for loc in due])


async def _gather_or_cancel(jobs: list[Any]) -> list[Any]:
    """Run coroutines concurrently; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        # let cancelled tasks finish so no "exception was never retrieved" is left behind
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _assemble_spans(plan: ReadPlan, parts: list[Any]) -> list[Any]:
    """One buffer per span: the single request's bytes, or its parts joined in order."""
    counts = np.bincount(plan.request_span, minlength=plan.n_spans)
    if (counts == 1).all():
        return parts
    out: list[Any] = []
    i = 0
    for c in counts.tolist():
        out.append(parts[i] if c == 1 else b"".join(bytes(p) for p in parts[i : i + c]))
        i += c
    return out

