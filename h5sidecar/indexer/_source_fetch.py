"""The async core of the remote source reader: a page cache filled by pinned, coalesced GETs.

Runs on fsspec's I/O loop (one async core for the package).  Two kinds of request fill the cache:

* **demand** requests, for a read HDF5 is blocked on (sent at once, plus a little read-ahead);
* **prefetch** requests, for metadata structures the crawl located before HDF5 asked
  (:mod:`h5sidecar.indexer._source_hints`).  Wanted pages wait in a pool; whenever a request
  slot is free the pool is cut into runs (pages closer than ``max_gap`` share one request, up to
  ``max_request`` bytes) and the run holding the oldest wanted page goes out.  So requests stay
  few and large while ``concurrency`` of them are in flight.

Every request after the first carries ``If-Match`` on the first response's ETag (or
``If-Unmodified-Since`` when the store gives no ETag), and every response's size and ETag are
compared with the first one's: a server that ignores the condition cannot mix two versions.

The crawl is bounded, because a corrupt file's structures claim any length: a structure is
parsed from at most ``max_request`` bytes (a longer one is left to HDF5's own reads), a
structure waiting for its bytes is parked on one missing page at a time (so it is parsed again
at most once per request that brings its bytes), and the crawl stops after
``max_crawl_steps`` parses.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import obstore

from h5sidecar.errors import (
    NotHDF5Error,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
)
from h5sidecar.indexer import _source_hints as hints
from h5sidecar.sources._stores import (
    STORE_ERRORS,
    http_status,
    identity_from_meta,
    translate_store_error,
)

if TYPE_CHECKING:
    from h5sidecar.references import SourceInfo
    from h5sidecar.sources._stores import SourceLocation

__all__ = [
    "CACHE_BYTES",
    "CONCURRENCY",
    "MAX_GAP",
    "PAGE",
    "FetchOptions",
    "Fetcher",
    "PageCache",
    "SourceStats",
    "coalesce",
]

PAGE = 4096  # cache granularity: HDF5 metadata blocks and its speculative reads fit in pages
CACHE_BYTES = 256 * 2**20
CONCURRENCY = 16
MAX_GAP = 64 * 1024


@dataclass(frozen=True, slots=True)
class FetchOptions:
    """Tuning of the remote reader (see :func:`h5sidecar.indexer._source.open_source`)."""

    first_request: int = 256 * 1024
    cache_bytes: int = CACHE_BYTES
    prefetch_bytes: int = CACHE_BYTES // 2
    concurrency: int = CONCURRENCY
    readahead: int = 64 * 1024
    max_gap: int = MAX_GAP
    max_request: int = 4 * 2**20
    max_crawl_steps: int = 200_000


@dataclass(frozen=True, slots=True)
class SourceStats:
    """What reading a source cost so far.

    Attributes
    ----------
    requests : int
        Requests sent (ranged GETs; ``pread`` calls for local files).
    bytes_fetched : int
        Bytes received from the store (read from the file, for local files).
    bytes_read_by_hdf5 : int
        Bytes HDF5 asked for (repeats included).
    reads_by_hdf5 : int
        Read calls HDF5 made.
    waits : int
        HDF5 reads that had to wait for the network (the others were served from the cache).
    prefetch_requests : int
        Requests sent ahead of HDF5 for metadata the crawl located (part of ``requests``).
    structures_found : int
        Metadata structures the crawl located.
    """

    requests: int = 0
    bytes_fetched: int = 0
    bytes_read_by_hdf5: int = 0
    reads_by_hdf5: int = 0
    waits: int = 0
    prefetch_requests: int = 0
    structures_found: int = 0


class Counters:
    """Mutable counters behind :class:`SourceStats` (statistics only; no lock needed)."""

    def __init__(self) -> None:
        self.values = {f.name: 0 for f in fields(SourceStats)}

    def add(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self.values[name] += n

    def snapshot(self) -> SourceStats:
        """The counters as an immutable record."""
        return SourceStats(**self.values)


class PageCache:
    """Fetched bytes by page, evicting whole fetched blocks least-recently-used first."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._pages: dict[int, tuple[int, memoryview]] = {}  # page -> (block id, bytes)
        self._blocks: OrderedDict[int, tuple[int, int, int]] = OrderedDict()  # id -> span, size
        self._bytes = 0
        self._next_id = 0
        self._lock = threading.Lock()  # HDF5's thread reads while the loop thread writes

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


def coalesce(
    pages: list[int],
    max_gap: int,
    max_request: int,
    bridgeable: Callable[[int, int], bool] = lambda first, last: True,
) -> Iterator[tuple[int, int]]:
    """Runs ``(first, last)`` over sorted ``pages``: a run bridges a gap of at most ``max_gap``
    bytes when ``bridgeable(gap_first, gap_last)`` allows it, and spans at most ``max_request``
    bytes."""
    first = last = -1
    for page in pages:
        gap = page - last - 1
        if (
            first >= 0
            and gap * PAGE <= max_gap
            and (page - first + 1) * PAGE <= max_request
            and (gap == 0 or bridgeable(last + 1, page - 1))
        ):
            last = page
            continue
        if first >= 0:
            yield first, last
        first = last = page
    if first >= 0:
        yield first, last


def _assemble(start: int, stop: int, fetched: dict[int, Any], cache: PageCache) -> bytes | None:
    """``[start, stop)`` from the blocks just fetched, or the cache for pages not among them."""
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


class Fetcher:
    """Pinned ranged GETs into a :class:`PageCache`, plus the metadata crawl (loop thread only,
    except :attr:`cache`, :attr:`fault` and :attr:`counters`, which HDF5's thread reads)."""

    def __init__(self, store: Any, location: SourceLocation, options: FetchOptions) -> None:
        self.store, self.path, self.url = store, location.path, location.url
        self.opts = options
        self.cache = PageCache(options.cache_bytes)
        self.counters = Counters()
        self.identity: SourceInfo | None = None
        self.layout: hints.Layout | None = None
        self.fault: BaseException | None = None  # a changed/vanished object, seen in background
        self._pin: dict[str, Any] = {}
        self._inflight: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._queue: deque[hints.Hint] = deque()
        self._seen: set[tuple[str, int]] = set()
        self._waiting: dict[int, list[hints.Hint]] = {}
        self._wanted: dict[int, None] = {}  # pages to prefetch, oldest first
        self._prefetching = 0
        self._prefetched = 0
        self._steps = 0
        self._closed = False

    # -- requests -------------------------------------------------------------------------------
    async def open(self) -> None:
        """GET the head of the object: its first bytes, and its identity from the response."""
        try:
            result = await obstore.get_async(
                self.store, self.path, options={"range": (0, self.opts.first_request)}
            )
            data = bytes(await result.bytes_async())
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"{self.url} does not exist; check the URL") from exc
        except STORE_ERRORS as exc:
            if http_status(exc) == 416:  # an empty object has no byte 0 to range over
                raise NotHDF5Error(f"{self.url} is empty, not an HDF5 file") from exc
            raise translate_store_error(exc, self.url, "GET") from exc
        meta = result.meta
        self.identity = identity_from_meta(self.url, meta)
        etag = meta.get("e_tag")
        self._pin = {"if_match": etag} if etag else {"if_unmodified_since": meta["last_modified"]}
        self._record(0, data, prefetch=False)

    def _record(self, start: int, data: bytes, *, prefetch: bool) -> None:
        self.cache.put(start, data)
        self.counters.add("requests")
        self.counters.add("prefetch_requests", int(prefetch))
        self.counters.add("bytes_fetched", len(data))

    async def _get(self, start: int, stop: int) -> bytes:
        assert self.identity is not None
        try:
            options = {"range": (start, stop), **self._pin}
            result = await obstore.get_async(self.store, self.path, options=options)  # type: ignore[arg-type]
            data = bytes(await result.bytes_async())
        except STORE_ERRORS as exc:
            raise translate_store_error(exc, self.url, f"GET bytes {start}-{stop - 1} of") from exc
        if int(result.meta["size"]) != self.identity.size:
            raise StaleReferenceError(
                f"{self.url} changed size while it was being read; index it again", url=self.url
            )
        etag = identity_from_meta(self.url, result.meta).etag
        if self.identity.etag is not None and etag != self.identity.etag:
            # a server that ignores If-Match answers with another version's bytes: refuse them
            raise StaleReferenceError(
                f"{self.url} changed while it was being read (ETag {etag!r} in a response, "
                f"{self.identity.etag!r} when it was opened); index it again",
                url=self.url,
            )
        if len(data) != stop - start:
            raise SourceReadError(
                f"short read from {self.url}: {len(data)} of {stop - start} bytes at {start}; the "
                "connection was cut: retry",
                url=self.url,
            )
        return data

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
            data = await self._get(start, stop)
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
        if error is None:
            for page in range(first, last + 1):
                self._queue.extend(self._waiting.pop(page, ()))
        self._crawl()

    async def demand(self, start: int, stop: int, refetch: bool = False) -> bytes | None:
        """Fetch ``[start, stop)`` now (HDF5 is waiting), with some read-ahead; return its bytes.

        ``None`` means a page cached before the wait was evicted meanwhile (a cache too small for
        the prefetch): ask again with ``refetch``, which fetches even cached pages.

        A failed prefetch of these pages is retried once as a demand request; a changed or
        vanished object raises at once.
        """
        needed = range(start // PAGE, (stop - 1) // PAGE + 1)
        for attempt in (0, 1):
            self._launch_free(needed, self.opts.readahead if attempt == 0 else 0, refetch)
            pending = {p: self._inflight[p] for p in needed if p in self._inflight}
            outcomes = await asyncio.gather(*pending.values(), return_exceptions=True)
            if self.fault is not None:
                raise self.fault
            errors = [e for e in outcomes if isinstance(e, BaseException)]
            if not errors:
                fetched = dict(zip(pending, outcomes, strict=True))
                return self.cache.read(start, stop) or _assemble(start, stop, fetched, self.cache)
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

    # -- the crawl -------------------------------------------------------------------------------
    def seed(self, found: list[hints.Hint]) -> None:
        """Start crawling from the superblock's hints."""
        self._enqueue(found)
        self._crawl()

    def _enqueue(self, found: list[hints.Hint]) -> None:
        for hint in found:
            key = (hint.kind, hint.addr)
            if key not in self._seen:
                self._seen.add(key)
                self._queue.append(hint)
                self.counters.add("structures_found")

    def _view(self, start: int, stop: int) -> bytes:
        if stop - start > self.opts.max_request:  # a corrupt length, or a huge structure
            raise hints.BadStructure(f"{stop - start} bytes at {start}: too long to prefetch")
        data = self.cache.read(start, stop) if stop > start else b""
        if data is None:
            raise hints.Missing(start, stop)
        return data

    def _crawl(self) -> None:
        """Parse every queued structure whose bytes are here; want the pages of the others."""
        if self._closed or self.layout is None or self.fault is not None:
            return
        while self._queue and self._steps < self.opts.max_crawl_steps:
            hint = self._queue.popleft()
            self._steps += 1
            try:
                self._enqueue(hints.expand(hint, self._view, self.layout))
            except hints.Missing as missing:
                self._park(hint, min(missing.start, hint.addr), max(missing.stop, hint.addr + hint.size))
            except hints.BadStructure:
                pass  # a wrong guess: HDF5 reads what it really needs on demand
        if self._steps >= self.opts.max_crawl_steps:
            self._queue.clear()  # enough: HDF5's own reads are fetched on demand
        self._pump()

    def _park(self, hint: hints.Hint, lo: int, hi: int) -> None:
        """Want the missing pages of ``[lo, hi)``; ``hint`` waits for the first of them only.

        Waiting on every page would parse the hint again as each one arrives, each time
        parking it again on all the pages still missing: work that grows without bound.
        """
        hi = min(hi, lo + self.opts.max_request)
        parked = False
        for page in range(lo // PAGE, (hi - 1) // PAGE + 1):
            if not self.cache.has(page):
                if not parked:
                    self._waiting.setdefault(page, []).append(hint)
                    parked = True
                if page not in self._inflight:
                    self._wanted[page] = None

    def _pump(self) -> None:
        """Send prefetch requests while slots are free: the run of the oldest wanted page."""
        while (
            self._prefetching < self.opts.concurrency
            and self._prefetched < self.opts.prefetch_bytes
        ):
            for page in [p for p in self._wanted if self._taken(p)]:
                del self._wanted[page]  # fetched on demand meanwhile
            if not self._wanted:
                return
            oldest = next(iter(self._wanted))
            runs = coalesce(
                sorted(self._wanted),
                self.opts.max_gap,
                self.opts.max_request,
                lambda a, b: not any(self._taken(p) for p in range(a, b + 1)),
            )
            first, last = next((a, b) for a, b in runs if a <= oldest <= b)
            self._prefetched += (last - first + 1) * PAGE
            self._launch(first, last, prefetch=True)

    def _taken(self, page: int) -> bool:
        """Whether ``page`` is cached or being fetched."""
        return page in self._inflight or self.cache.has(page)

    async def fetch_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Bytes of many ``(offset, length)`` ranges at once: ranges within ``max_gap`` of each
        other share a request (up to ``max_request`` bytes); ``concurrency`` requests run at a
        time.  Chunk data, so the cache is left alone."""
        assert self.identity is not None
        order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        groups: list[list[int]] = []
        for i in order:
            start, length = ranges[i]
            if not 0 <= start <= start + length <= self.identity.size:
                raise SourceReadError(
                    f"range {start}+{length} lies outside {self.url} ({self.identity.size} bytes)",
                    url=self.url,
                )
            if groups:
                first = ranges[groups[-1][0]][0]
                end = max(ranges[j][0] + ranges[j][1] for j in groups[-1])
                if (
                    start - end <= self.opts.max_gap
                    and start + length - first <= self.opts.max_request
                ):
                    groups[-1].append(i)
                    continue
            groups.append([i])
        slots = asyncio.Semaphore(self.opts.concurrency)
        out: list[bytes] = [b""] * len(ranges)

        async def one(group: list[int]) -> None:
            first = ranges[group[0]][0]
            stop = max(ranges[j][0] + ranges[j][1] for j in group)
            async with slots:
                data = await self._get(first, stop) if stop > first else b""
            self.counters.add("requests")
            self.counters.add("bytes_fetched", len(data))
            for j in group:
                offset = ranges[j][0] - first
                out[j] = data[offset : offset + ranges[j][1]]

        await asyncio.gather(*(one(g) for g in groups))
        return out

    async def aclose(self) -> None:
        """Stop crawling and cancel background requests."""
        self._closed = True
        self._wanted.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
