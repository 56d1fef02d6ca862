"""Pinned ranged GETs of one object into a page cache: the async core of the ranged reader.

Runs on fsspec's I/O loop (one async core for the package).  Three kinds of request:

* **demand** requests, for a read the caller is blocked on (sent at once, plus a little
  read-ahead), cached by page;
* **prefetch** requests, for pages a caller said it will need (:meth:`PinnedFetcher.want`;
  the indexer's metadata crawl does).  Wanted pages wait in a pool; whenever a request slot is
  free the pool is cut into runs (:func:`~._pages.run_holding`: the planner's
  coalescing, never across pages already cached or coming) and the run holding the oldest wanted
  page goes out.  So requests stay few and large while ``concurrency`` of them are in flight;
* **batched ranges** (:meth:`PinnedFetcher.fetch_ranges`, e.g. chunk data), coalesced by the
  read path's planner (:func:`~h5sidecar.sources.fetch._plan.plan_coded`) and not cached.

Every request after the first carries ``If-Match`` on the first response's ETag (or
``If-Unmodified-Since`` when the store gives no ETag), and every response's size and ETag are
compared with the first one's: a server that ignores the condition cannot mix two versions.
Failed attempts are retried by the package's one policy (:mod:`._retry`); the obstore client's
own retries are off.  Each request is one GET of :mod:`._pinned_get`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from h5sidecar.errors import (
    H5SidecarError,
    NotHDF5Error,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
)
from h5sidecar.sources._source_identity import identity_from_meta
from h5sidecar.sources._stats import FetchStats
from h5sidecar.sources.fetch._pages import PAGE, PageCache, assemble_pages, run_holding
from h5sidecar.sources.fetch._pinned_get import (
    ShortRead,
    Stalled,
    answer,
    check_same_object,
    stalled_error,
    transient,
)
from h5sidecar.sources.fetch._plan import plan_coded
from h5sidecar.sources.fetch._retry import retrying
from h5sidecar.sources.stores._store_errors import STORE_ERRORS, http_status, translate_store_error

if TYPE_CHECKING:
    from h5sidecar.references import SourceInfo
    from h5sidecar.settings import IndexSettings
    from h5sidecar.sources.stores._urls import SourceLocation

__all__ = ["PinnedFetcher"]

#: HDF5's format signature: only objects that carry it are fetched whole (see ``open``).
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class PinnedFetcher:
    """Pinned ranged GETs of one object into a :class:`~h5sidecar.sources.fetch._pages.PageCache`
    (loop thread only, except :attr:`cache`, :attr:`fault` and :attr:`stats`, which the
    reader's thread reads).

    Parameters
    ----------
    store : obstore store
        Built with the client's retries off (:data:`~h5sidecar.sources.stores._backends.NO_RETRY`).
    location : SourceLocation
        The object.
    settings : IndexSettings
        ``source_*`` tuning (first request, cache, concurrency, read-ahead, gap, retries);
        ``metadata_block_size`` caps one request.
    prefetch : bool
        Whether :meth:`want` may send requests (``False``: demand requests only).
    cache_bytes, concurrency : int, optional
        Override ``settings.source_cache_bytes`` / ``settings.source_concurrency``.

    Attributes
    ----------
    identity : SourceInfo or None
        From the first response (set by :meth:`open`).
    stats : FetchStats
        Requests, bytes, retries, prefetch requests.
    fault : BaseException or None
        A changed or vanished object seen by a background request: nothing after it is usable.
    on_fetched : callable or None
        Called on the loop as ``on_fetched(first, last, ok)`` after each request for pages
        ``first..last`` ended (``ok``: its bytes are cached), e.g. to parse what arrived and
        :meth:`want` more.
    """

    def __init__(
        self,
        store: Any,
        location: SourceLocation,
        settings: IndexSettings,
        *,
        prefetch: bool = True,
        cache_bytes: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        self.store, self.path, self.url = store, location.path, location.url
        cache_bytes = settings.source_cache_bytes if cache_bytes is None else cache_bytes
        self.first_request = settings.source_first_request
        self.prefetch_bytes = cache_bytes // 2 if prefetch else 0  # half the cache at most
        self.whole_object_bytes = min(settings.source_whole_object_bytes, self.prefetch_bytes)
        self.concurrency = settings.source_concurrency if concurrency is None else concurrency
        self.readahead = settings.source_readahead
        self.max_gap = settings.source_max_gap
        self.max_request = max(settings.metadata_block_size, settings.source_max_gap)
        self.retries, self.backoff = settings.source_retries, settings.source_backoff
        self.request_timeout = settings.source_request_timeout
        self.cache = PageCache(cache_bytes)
        self.stats = FetchStats()
        self.identity: SourceInfo | None = None
        self.fault: BaseException | None = None
        self.on_fetched: Callable[[int, int, bool], None] | None = None
        self.closed = False
        self._pin: dict[str, Any] = {}
        self._inflight: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wanted: dict[int, None] = {}  # pages to prefetch, oldest first
        self._prefetching = 0
        self._prefetched = 0

    # -- requests -------------------------------------------------------------------------------
    async def open(self) -> None:
        """GET the head of the object: its first bytes, and its identity from the response.

        Raises
        ------
        SourceNotFoundError
            No such object.
        NotHDF5Error
            The object is empty.
        SourceReadError
            The store could not be read (after retries for transient failures).
        """

        async def once() -> Any:
            options = {"range": (0, self.first_request)}
            result, data = await answer(self.store, self.path, options, self.request_timeout)
            # obstore checks Content-Range, not the body's length: bytes past the range would
            # be cached as the object's
            if len(data) != min(self.first_request, int(result.meta["size"])):
                raise ShortRead(len(data))
            return result, data

        try:
            result, data = await retrying(once, retries=self.retries, backoff=self.backoff,
                                          retry_if=transient, on_retry=self._count_retry)  # fmt: skip
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"{self.url} does not exist; check the URL") from exc
        except H5SidecarError:
            raise  # already says what happened (e.g. a web source refused the credentials)
        except Stalled as exc:
            raise stalled_error(self.url, exc, "its first bytes", self.retries) from exc
        except ShortRead as exc:
            raise SourceReadError(
                f"{self.url} answered {exc.args[0]} bytes for its first "
                f"{self.first_request}; the connection was cut or the server miscounts: retry",
                url=self.url,
            ) from exc
        except STORE_ERRORS as exc:
            if http_status(exc) == 416:  # an empty object has no byte 0 to range over
                raise NotHDF5Error(f"{self.url} is empty, not an HDF5 file") from exc
            raise translate_store_error(exc, self.url, "GET") from exc
        meta = result.meta
        self.identity = identity_from_meta(self.url, meta)
        etag = meta.get("e_tag")
        self._pin = {"if_match": etag} if etag else {"if_unmodified_since": meta["last_modified"]}
        self._record(0, data, prefetch=False)
        size = self.identity.size
        if len(data) < size <= self.whole_object_bytes and _HDF5_SIGNATURE in data:
            await self._fetch_rest(len(data) // PAGE * PAGE, size)

    async def _fetch_rest(self, start: int, size: int) -> None:
        """Cache bytes ``[start, size)`` (a small object's rest) in concurrent parts of at most
        ``max_request`` bytes: one round trip instead of one per level of its metadata."""
        part = max(PAGE, self.max_request // PAGE * PAGE)
        starts = range(start, size, part)
        parts = await asyncio.gather(*(self.get(a, min(a + part, size)) for a in starts))
        for a, data in zip(starts, parts, strict=True):
            self._record(a, data, prefetch=True)

    def _count_retry(self, exc: Exception, attempt: int) -> None:
        self.stats.add(retries=1)

    def _record(self, start: int, data: bytes, *, prefetch: bool) -> None:
        self.cache.put(start, data)
        self.stats.add(requests=1, prefetch_requests=int(prefetch), bytes_fetched=len(data))

    async def get(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` in one pinned GET (retried), checked against the identity.

        Raises
        ------
        StaleReferenceError
            The object changed (size, ETag, or a failed ``If-Match``).
        SourceNotFoundError
            The object is gone.
        SourceReadError
            The store kept failing, or kept answering short.
        """
        identity = self.identity
        assert identity is not None

        async def once() -> Any:
            options = {"range": (start, stop), **self._pin}
            result, data = await answer(self.store, self.path, options, self.request_timeout)
            # a replaced, shorter object is stale, not short
            check_same_object(self.url, identity, result.meta)
            if len(data) != stop - start:
                raise ShortRead(len(data))
            return data

        try:
            return await retrying(once, retries=self.retries, backoff=self.backoff,  # type: ignore[no-any-return]
                                  retry_if=transient, on_retry=self._count_retry)  # fmt: skip
        except H5SidecarError:
            raise  # the object changed: not a store failure to translate
        except Stalled as exc:
            raise stalled_error(self.url, exc, f"bytes {start}-{stop - 1}", self.retries) from exc
        except ShortRead as exc:
            raise SourceReadError(
                f"short read from {self.url}: {exc.args[0]} of {stop - start} bytes at {start}; "
                "the connection was cut: retry",
                url=self.url,
            ) from exc
        except STORE_ERRORS as exc:
            raise translate_store_error(exc, self.url, f"GET bytes {start}-{stop - 1} of") from exc

    def _launch(self, first: int, last: int, *, prefetch: bool) -> None:
        """Fetch pages ``first..last`` (inclusive) in one background request."""
        loop = asyncio.get_running_loop()
        for page in range(first, last + 1):
            self._inflight[page] = loop.create_future()
            self._wanted.pop(page, None)
        self._prefetching += prefetch
        task = loop.create_task(self._fetch(first, last, prefetch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fetch(self, first: int, last: int, prefetch: bool) -> None:
        assert self.identity is not None
        start, stop = first * PAGE, min((last + 1) * PAGE, self.identity.size)
        error: BaseException | None = None
        data = b""
        try:
            data = await self.get(start, stop)
            self._record(start, data, prefetch=prefetch)
        except (StaleReferenceError, SourceNotFoundError) as exc:
            error = exc
            self.fault = self.fault or exc  # the object changed: nothing after this is usable
        except SourceReadError as exc:
            error = exc  # a network fault: whoever needs these pages asks again
        finally:
            self._prefetching -= prefetch
            for page in range(first, last + 1):
                future = self._inflight.pop(page, None)
                if future is not None and not future.done():
                    if error is None:
                        future.set_result((start, data))  # survives an eviction from the cache
                    else:
                        future.set_exception(error)
                        future.exception()  # mark retrieved: a prefetch may have no awaiter
        if self.on_fetched is not None:
            self.on_fetched(first, last, error is None)

    async def demand(self, start: int, stop: int, refetch: bool = False) -> bytes | None:
        """Fetch ``[start, stop)`` now (the reader is waiting), with some read-ahead.

        ``None`` means a page cached before the wait was evicted meanwhile (a cache too small for
        the prefetch): ask again with ``refetch``, which fetches even cached pages.

        A failed prefetch of these pages is retried once as a demand request; a changed or
        vanished object raises at once.
        """
        needed = range(start // PAGE, (stop - 1) // PAGE + 1)
        for attempt in (0, 1):
            self._launch_free(needed, self.readahead if attempt == 0 else 0, refetch)
            pending = {p: self._inflight[p] for p in needed if p in self._inflight}
            outcomes = await asyncio.gather(*pending.values(), return_exceptions=True)
            if self.fault is not None:
                raise self.fault
            errors = [e for e in outcomes if isinstance(e, BaseException)]
            if not errors:
                fetched = dict(zip(pending, outcomes, strict=True))
                return self.cache.read(start, stop) or assemble_pages(
                    start, stop, fetched, self.cache  # type: ignore[arg-type]
                )
            if attempt == 1:
                raise errors[0]
        return None  # pragma: no cover - the loop returns or raises

    def _launch_free(self, needed: range, readahead: int, refetch: bool = False) -> None:
        """Demand-fetch the pages of ``needed`` neither cached (unless ``refetch``) nor coming,
        extended by up to ``readahead`` bytes of such pages."""
        assert self.identity is not None
        end = max(needed.stop, -(-min(self.identity.size, needed.stop * PAGE + readahead) // PAGE))
        run: list[int] = []
        for page in range(needed.start, end):
            cached = self.cache.has(page) and not (refetch and page < needed.stop)
            if not cached and page not in self._inflight:
                run.append(page)
                continue
            if run:
                self._launch(run[0], run[-1], prefetch=False)
                run = []
            if page >= needed.stop:
                break  # read-ahead ends at the first page already cached or coming
        if run:
            self._launch(run[0], run[-1], prefetch=False)

    # -- prefetch --------------------------------------------------------------------------------
    def want(self, page: int) -> None:
        """Add ``page`` to the prefetch pool (unless it is being fetched); see :meth:`pump`."""
        if page not in self._inflight:
            self._wanted[page] = None

    def taken(self, page: int) -> bool:
        """Whether ``page`` is cached or being fetched."""
        return page in self._inflight or self.cache.has(page)

    def pump(self) -> None:
        """Send prefetch requests while slots are free: the run of the oldest wanted page."""
        while self._prefetching < self.concurrency and self._prefetched < self.prefetch_bytes:
            for page in [p for p in self._wanted if self.taken(p)]:
                del self._wanted[page]  # fetched on demand meanwhile
            if not self._wanted:
                return
            oldest = next(iter(self._wanted))
            first, last = run_holding(
                sorted(self._wanted),
                oldest,
                self.max_gap,
                self.max_request,
                lambda a, b: not any(self.taken(p) for p in range(a, b + 1)),
            )
            self._prefetched += (last - first + 1) * PAGE
            self._launch(first, last, prefetch=True)

    # -- batched ranges --------------------------------------------------------------------------
    async def fetch_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Bytes of many ``(offset, length)`` ranges at once, coalesced by
        :func:`~h5sidecar.sources.fetch._plan.plan_coded` (``max_gap`` / ``max_request``) with one
        pinned GET per planned span (a range longer than ``max_request`` is one GET of its own);
        ``concurrency`` requests run at a time.  Chunk data, so the cache is left alone.

        Raises
        ------
        SourceReadError
            A range lies outside the object, or the store kept failing.
        StaleReferenceError
            The object changed.
        """
        assert self.identity is not None
        for start, length in ranges:
            if not 0 <= start <= start + length <= self.identity.size:
                raise SourceReadError(
                    f"range {start}+{length} lies outside {self.url} ({self.identity.size} bytes)",
                    url=self.url,
                )
        plan = plan_coded(
            [self.url],
            np.zeros(len(ranges), dtype=np.int64),  # one object: no URL per range to sort
            [r[0] for r in ranges],
            [r[1] for r in ranges],
            max_gap=self.max_gap,
            max_request=self.max_request,
        )
        slots = asyncio.Semaphore(self.concurrency)

        async def one(start: int, stop: int) -> bytes:
            async with slots:
                data = await self.get(start, stop)
            self.stats.add(requests=1, bytes_fetched=len(data))
            return data

        spans = await asyncio.gather(
            *(one(a, b) for a, b in zip(plan.span_start.tolist(), plan.span_stop.tolist(), strict=True))
        )
        return plan.slice_spans(spans)  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Stop prefetching and cancel background requests."""
        self.closed = True
        self._wanted.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
