"""One request to a source: a byte range (GET, ``os.pread``) or its identity (HEAD, ``stat``).

Each request waits in a concurrency lane (at most ``max_concurrency`` at a time per fetcher,
and, in a lane of their own, ``max_small_concurrency`` requests of at most 64 KiB), runs
within ``request_timeout`` through one connection pool per bucket/host (obstore) or in
threads, is checked against the identity the sidecar records (from the very response that
carried the bytes, :mod:`._freshness`), and is retried on throttling, 5xx, resets, timeouts and
short bodies (the package's one retry policy, :mod:`._retry`) before
:class:`~h5sidecar.errors.SourceReadError` is raised.  :class:`~._chunk_fetcher.ChunkFetcher`
plans the requests and gathers them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from h5sidecar.errors import SourceReadError
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._stats import FetchStats
from h5sidecar.sources.fetch._freshness import FreshnessGuard
from h5sidecar.sources.fetch._retry import retrying
from h5sidecar.sources.stores._backends import (
    LocalReader,
    ObjectStoreReader,
    ObservedIdentity,
    SourceGoneError,
    TransientReadError,
)
from h5sidecar.sources.stores._urls import SourceLocation
from h5sidecar.sources.web._http_store import HttpReader

__all__ = ["SMALL_REQUEST_BYTES", "SourceRequests"]

log = logging.getLogger("h5sidecar.fetch")

#: Requests of at most this many bytes wait in the small lane (``max_small_concurrency``).
SMALL_REQUEST_BYTES = 64 * 2**10


class SourceRequests:
    """Requests to sources, for one fetcher: its lanes, readers, retries and freshness guard.

    Parameters
    ----------
    settings : ReadSettings
        Concurrency, timeout and retries.
    storage_options : mapping
        Options of the object-store and HTTP readers.
    fresh : FreshnessGuard
        Compares each response with the identity recorded at index time.
    stats : FetchStats
        Where requests, bytes fetched, retries and revalidations are counted.
    """

    def __init__(self, settings: ReadSettings, storage_options: Mapping[str, Any],
                 fresh: FreshnessGuard, stats: FetchStats) -> None:  # fmt: skip
        self.settings = settings
        self.stats = stats
        self._fresh = fresh
        self._local = LocalReader()
        self._remote = ObjectStoreReader(storage_options)
        self._http = HttpReader(storage_options)
        self._semaphores: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[asyncio.Semaphore, asyncio.Semaphore]]
        self._semaphores = weakref.WeakKeyDictionary()

    def _semaphore(self, nbytes: int) -> asyncio.Semaphore:
        """The lane a request of ``nbytes`` waits in: small requests are bound by latency, not
        bandwidth, so they have a wider lane of their own (``max_small_concurrency``)."""
        # asyncio primitives belong to one loop; zarr's loop and fsspec's loop each get theirs.
        loop = asyncio.get_running_loop()
        lanes = self._semaphores.get(loop)
        if lanes is None:
            lanes = self._semaphores[loop] = (
                asyncio.Semaphore(self.settings.max_concurrency),
                asyncio.Semaphore(self.settings.max_small_concurrency))
        return lanes[nbytes <= SMALL_REQUEST_BYTES]

    async def get(self, loc: SourceLocation, start: int, stop: int) -> Any:
        """The bytes ``[start, stop)`` of ``loc``, checked against its recorded identity.

        Raises
        ------
        StaleReferenceError
            The object is not the one the sidecar describes (or it is gone).
        SourceReadError
            The request kept failing after ``settings.retries`` retries.
        """
        reader = self._reader(loc)

        async def once() -> Any:
            t0 = time.perf_counter()
            async with self._semaphore(stop - start):
                data, seen = await self._timed(reader.read(loc, start, stop), loc)
            # identity first: a replaced, shorter object is stale, not a flaky network
            self._fresh.check(loc, seen)
            if len(data) != stop - start:
                raise TransientReadError(f"short read: got {len(data)} of {stop - start} bytes")
            log.debug("GET %s [%d, %d) %d bytes in %.1f ms", loc.url, start, stop,
                      len(data), 1e3 * (time.perf_counter() - t0))  # fmt: skip
            return data

        def count(exc: Exception, attempt: int) -> None:
            log.debug("GET %s [%d, %d) attempt %d failed: %s", loc.url, start, stop,
                      attempt + 1, exc)  # fmt: skip
            self.stats.add(retries=1)

        try:
            data = await retrying(once, retries=self.settings.retries,
                                  backoff=self.settings.backoff, retry_if=_transient,
                                  on_retry=count)  # fmt: skip
        except TransientReadError as last:
            log.debug("GET %s [%d, %d) attempt %d failed: %s", loc.url, start, stop,
                      self.settings.retries + 1, last)  # fmt: skip
            raise SourceReadError(
                f"reading bytes [{start}, {stop}) of {loc.url} failed "
                f"{self.settings.retries + 1} times; last error: {last}. The store may be "
                "throttling or unreachable: retry later, lower H5SIDECAR_MAX_CONCURRENCY and "
                "H5SIDECAR_MAX_SMALL_CONCURRENCY, or raise "
                "H5SIDECAR_RETRIES / H5SIDECAR_BACKOFF.",
                url=loc.url,
            ) from last
        except SourceGoneError as exc:
            raise self._fresh.stale(loc, str(exc)) from exc
        self.stats.add(requests=1, bytes_fetched=len(data))
        return data

    def _reader(self, loc: SourceLocation) -> LocalReader | ObjectStoreReader | HttpReader:
        if loc.kind == "local":
            return self._local
        return self._http if loc.kind == "http" else self._remote

    async def _timed(self, aw: Any, loc: SourceLocation) -> Any:
        """``await aw`` within ``settings.request_timeout`` (a timeout is a transient failure)."""
        try:
            # a deadline on this task, not wait_for's extra task per request (3.11), a cost
            # every one of thousands of small requests paid
            async with asyncio.timeout(self.settings.request_timeout):
                return await aw
        except TimeoutError as exc:
            raise TransientReadError(
                f"no answer from {loc.url} within request_timeout="
                f"{self.settings.request_timeout} s"
            ) from exc

    async def stat(self, loc: SourceLocation) -> None:
        """Ask the store (HEAD/``stat``) whether ``loc`` is still the object recorded.

        Raises
        ------
        StaleReferenceError
            It changed or is gone.
        SourceReadError
            The store could not be asked (after retries).
        """
        reader = self._reader(loc)

        async def once() -> ObservedIdentity:
            async with self._semaphore(0):  # a HEAD/stat is a small request
                return await self._timed(reader.stat(loc), loc)  # type: ignore[no-any-return]

        try:
            seen = await retrying(once, retries=self.settings.retries,
                                  backoff=self.settings.backoff, retry_if=_transient,
                                  on_retry=lambda exc, n: self.stats.add(retries=1))  # fmt: skip
        except TransientReadError as exc:
            raise SourceReadError(
                f"checking {loc.url} failed {self.settings.retries + 1} times; last "
                f"error: {exc}. Retry later.",
                url=loc.url,
            ) from exc
        except SourceGoneError as exc:
            raise self._fresh.stale(loc, str(exc)) from exc
        self.stats.add(revalidations=1)
        self._fresh.check(loc, seen)


def _transient(exc: Exception) -> bool:
    """Whether a failed attempt is worth another (throttling, 5xx, reset, timeout, short read)."""
    return isinstance(exc, TransientReadError)
