"""The indexer's view of a granule: a read-only file object h5py opens, fed by few large requests.

:func:`open_source` yields a seekable, read-only file object for ``h5py.File(f, "r")``, one of
the ranged files of :mod:`h5sidecar.sources.fetch._ranged`:

* **local files**: the file itself, read with ``os.pread`` (identity from ``os.fstat``);
* **S3 objects**: reads served from a page cache filled by ranged GETs through obstore
  (:class:`~h5sidecar.sources.fetch._pinned.PinnedFetcher`).  The first GET (the file's head) gives
  the object's identity (size, ETag, mtime); every later GET carries ``If-Match`` on that ETag,
  so an object replaced mid-scan raises :class:`~h5sidecar.errors.StaleReferenceError` instead
  of mixing two versions.

HDF5 reads metadata as a chain of small dependent reads (superblock -> object header -> B-tree ->
symbol node -> object header ...), each one a network round trip if served naively.  The
indexer instead *crawls ahead* of h5py (:class:`MetadataCrawl`, the one HDF5-specific part): it
parses each metadata structure as soon as its bytes arrive (:mod:`h5sidecar.indexer.crawl._hints`),
learns where the next structures are, and asks the fetcher for them, which sends a whole level
of the tree at once in few coalesced requests that run concurrently.  h5py still reads
everything through the cache, so a wrong guess costs bytes, never correctness; a read the crawl
did not foresee is fetched on demand with a little read-ahead.

The crawl is bounded, because a corrupt file's structures claim any length: a structure is
parsed from at most one request's bytes (a longer one is left to HDF5's own reads), a structure
waiting for its bytes is parked on one missing page at a time (so it is parsed again at most
once per request that brings its bytes), and the crawl stops after ``max_crawl_steps`` parses.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from h5sidecar._compat.fsspec import io_loop
from h5sidecar.errors import NotHDF5Error, SourceNotFoundError, SourceReadError
from h5sidecar.indexer.crawl import _hints as hints
from h5sidecar.indexer.crawl._budget import Budget
from h5sidecar.settings import IndexSettings
from h5sidecar.sources import (
    NO_RETRY,
    PAGE,
    FetchStats,
    LocalRangedFile,
    PinnedFetcher,
    RangedFile,
    RemoteRangedFile,
    resolve_store,
    sync_within,
)

__all__ = ["LocalSource", "MetadataCrawl", "RemoteSource", "SourceStats", "open_source"]


@dataclass(frozen=True, slots=True)
class SourceStats:
    """What reading a source cost so far: a frozen view of the reader's
    :class:`~h5sidecar.sources._stats.FetchStats`, under the names of the index report.

    Attributes
    ----------
    requests : int
        Requests sent (ranged GETs; ``pread`` calls for local files).
    bytes_fetched : int
        Bytes received from the store (read from the file, for local files).
    bytes_read_by_hdf5 : int
        Bytes HDF5 asked for (repeats included); ``FetchStats.bytes_read``.
    reads_by_hdf5 : int
        Read calls HDF5 made; ``FetchStats.reads``.
    waits : int
        HDF5 reads that had to wait for the network (the others were served from the cache).
    prefetch_requests : int
        Requests sent ahead of HDF5 for metadata the crawl located (part of ``requests``).
    structures_found : int
        Metadata structures the crawl located; ``FetchStats.hints_found``.
    """

    requests: int = 0
    bytes_fetched: int = 0
    bytes_read_by_hdf5: int = 0
    reads_by_hdf5: int = 0
    waits: int = 0
    prefetch_requests: int = 0
    structures_found: int = 0

    @classmethod
    def of(cls, stats: FetchStats) -> SourceStats:
        """The view of ``stats`` now."""
        s = stats.snapshot()
        return cls(
            requests=s["requests"],
            bytes_fetched=s["bytes_fetched"],
            bytes_read_by_hdf5=s["bytes_read"],
            reads_by_hdf5=s["reads"],
            waits=s["waits"],
            prefetch_requests=s["prefetch_requests"],
            structures_found=s["hints_found"],
        )


class LocalSource(LocalRangedFile):
    """A local granule (see :class:`~h5sidecar.sources.fetch._ranged.LocalRangedFile`)."""

    @property
    def stats(self) -> SourceStats:
        """Requests and bytes so far."""
        return SourceStats.of(self.fetch_stats)


class RemoteSource(RemoteRangedFile):
    """A granule on an object store (see :class:`~h5sidecar.sources.fetch._ranged.RemoteRangedFile`)."""

    @property
    def stats(self) -> SourceStats:
        """Requests and bytes so far."""
        return SourceStats.of(self.fetch_stats)


#: Parses one loop callback makes before it gives the loop back (continuing with ``call_soon``):
#: requests' completions, their time limits and the reader's demand reads are served between
#: slices.  A crawl that parsed its whole queue in one callback (up to ``max_crawl_steps``) once
#: held the loop for minutes while HDF5 waited on a read.
SLICE_STEPS = 1000


class MetadataCrawl:
    """Parses HDF5 metadata structures as their bytes arrive and asks ``fetcher`` for the pages
    of the structures they point at (runs on the loop thread, driven by the fetcher's
    ``on_fetched``)."""

    def __init__(self, fetcher: PinnedFetcher, layout: hints.Layout, max_steps: int) -> None:
        self.fetcher, self.layout, self.max_steps = fetcher, layout, max_steps
        self._queue: deque[hints.Hint] = deque()
        self._seen: set[tuple[str, int]] = set()
        self._waiting: dict[int, list[hints.Hint]] = {}
        self._steps = 0
        self._resuming = False  # a continuation of the crawl is scheduled on the loop
        # a paged file's pages are wanted whole (HDF5 reads them whole): those wanted so far;
        # pages larger than one request are left to HDF5's own reads
        self._file_page = layout.page if 0 < layout.page <= fetcher.max_request else 0
        self._file_pages: set[int] = set()
        fetcher.on_fetched = self._fetched

    def seed(self, found: list[hints.Hint]) -> None:
        """Start crawling from the superblock's hints."""
        self._enqueue(found)
        self._crawl()

    def _fetched(self, first: int, last: int, ok: bool) -> None:
        if ok:
            for page in range(first, last + 1):
                self._queue.extend(self._waiting.pop(page, ()))
        self._crawl()

    def _enqueue(self, found: list[hints.Hint]) -> None:
        for hint in found:
            key = (hint.kind, hint.addr)
            if key not in self._seen:
                self._seen.add(key)
                self._queue.append(hint)
                self.fetcher.stats.add(hints_found=1)

    def _view(self, start: int, stop: int) -> bytes:
        if stop - start > self.fetcher.max_request:  # a corrupt length, or a huge structure
            raise hints.BadStructure(f"{stop - start} bytes at {start}: too long to prefetch")
        data = self.fetcher.cache.read(start, stop) if stop > start else b""
        if data is None:
            raise hints.Missing(start, stop)
        return data

    def _crawl(self) -> None:
        """Parse every queued structure whose bytes are here; want the pages of the others."""
        fetcher = self.fetcher
        if fetcher.closed or fetcher.fault is not None:
            return
        sliced = 0
        while self._queue and self._steps < self.max_steps:
            if sliced >= SLICE_STEPS:  # give the loop back; go on after what is waiting
                if not self._resuming:
                    self._resuming = True
                    asyncio.get_running_loop().call_soon(self._resume)
                break
            sliced += 1
            hint = self._queue.popleft()
            self._steps += 1
            if self._file_page:
                self._want_file_pages(hint)
            try:
                self._enqueue(hints.expand(hint, self._view, self.layout))
            except hints.Missing as missing:
                self._park(hint, min(missing.start, hint.addr), max(missing.stop, hint.addr + hint.size))
            except hints.BadStructure:
                pass  # a wrong guess: HDF5 reads what it really needs on demand
        if self._steps >= self.max_steps:
            self._queue.clear()  # enough: HDF5's own reads are fetched on demand
        fetcher.pump()

    def _resume(self) -> None:
        self._resuming = False
        self._crawl()

    def _want_file_pages(self, hint: hints.Hint) -> None:
        """Want the whole file-space pages ``hint`` lies in.

        HDF5's page buffer reads a paged file's metadata a page at a time: fetching only the
        structures located left the rest of each page to HDF5's first read of it, one round
        trip after another (26-29 in a row on a granule with 1 MiB pages).
        """
        size, base, fetcher = self._file_page, self.layout.base, self.fetcher
        stop = min(hint.addr + max(hint.size, 1), self.layout.size)
        for page in range((hint.addr - base) // size, (stop - 1 - base) // size + 1):
            if page in self._file_pages:
                continue
            self._file_pages.add(page)
            start = base + page * size
            for cached in range(start // PAGE, (min(start + size, self.layout.size) - 1) // PAGE + 1):
                if not fetcher.taken(cached):
                    fetcher.want(cached)

    def _park(self, hint: hints.Hint, lo: int, hi: int) -> None:
        """Want the missing pages of ``[lo, hi)``; ``hint`` waits for the first of them only.

        Waiting on every page would parse the hint again as each one arrives, each time
        parking it again on all the pages still missing: work that grows without bound.
        """
        hi = min(hi, lo + self.fetcher.max_request)
        parked = False
        for page in range(lo // PAGE, (hi - 1) // PAGE + 1):
            if not self.fetcher.cache.has(page):
                if not parked:
                    self._waiting.setdefault(page, []).append(hint)
                    parked = True
                self.fetcher.want(page)


@contextmanager
def open_source(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings = IndexSettings(),  # noqa: B008 - frozen, immutable default
    prefetch: bool = True,
    cache_bytes: int | None = None,
    concurrency: int | None = None,
) -> Iterator[LocalSource | RemoteSource]:
    """Open a granule for indexing as a read-only file object that ``h5py.File`` accepts.

    Parameters
    ----------
    url : str or path-like
        ``s3://bucket/key``, a local path or a ``file://`` URL.
    storage_options : mapping, optional
        s3fs-style options for S3 (``key``, ``secret``, ``token``, ``endpoint_url``, ``anon``,
        ``client_kwargs={"region_name": ...}``); ``AWS_*`` variables fill what is missing.
    settings : IndexSettings
        ``metadata_block_size`` caps the size of one request; the ``source_*`` fields tune the
        remote reader (cache, concurrency, read-ahead, gap, retries) and ``max_crawl_steps`` the
        crawl; ``max_granule_seconds``, ``max_hdf5_reads`` and ``max_hdf5_read_bytes`` bound
        what reading the granule may cost.
    prefetch : bool
        Crawl metadata ahead of HDF5 (default).  ``False`` fetches only what HDF5 asks for,
        plus a little read-ahead (useful to measure what the crawl saves).
    cache_bytes : int, optional
        Override ``settings.source_cache_bytes``: the bytes kept in the read cache (least
        recently used blocks go first); prefetching stops after half of it.
    concurrency : int, optional
        Override ``settings.source_concurrency``: prefetch requests in flight at once.

    Yields
    ------
    LocalSource or RemoteSource
        Seekable and read-only.  ``.identity`` is the :class:`~h5sidecar.references.SourceInfo`
        of the bytes read (from the first response for S3, ``os.fstat`` for files), ``.stats``
        a :class:`SourceStats`.

    Raises
    ------
    SourceNotFoundError
        The object or file does not exist.
    NotHDF5Error
        The object has no HDF5 signature, or is shorter than its superblock says (truncated).
    StaleReferenceError
        The object changed while it was being read.
    GranuleLimitError, GranuleTimeoutError
        A per-granule bound was reached (most likely a corrupt file).
    SourceReadError
        The store could not be read (network, permissions); the message says what to check.

    Examples
    --------
    >>> with open_source("s3://bucket/ATL03.h5", storage_options={"anon": True}) as f:  # doctest: +SKIP
    ...     with h5py.File(f, "r") as h5:
    ...         print(list(h5), f.identity.etag, f.stats.requests)
    """
    # the client's own retries are off: the fetcher retries (the package's one policy)
    store, location = resolve_store(url, storage_options, retry_config=NO_RETRY)
    budget = Budget.start(location.url, settings)
    if location.kind == "local":
        with _open_local(location.url, budget) as local:
            yield local
        return
    loop = io_loop()
    fetcher = PinnedFetcher(store, location, settings, prefetch=prefetch,
                            cache_bytes=cache_bytes, concurrency=concurrency)  # fmt: skip
    sync_within(loop, budget, fetcher.open)
    with RemoteSource(fetcher, loop, budget) as remote:
        layout, found = _find_superblock(remote)
        if prefetch:
            # HDF5 reads the superblock extension next, so its page size costs no round trip
            layout = replace(layout, page=hints.file_space_page(remote.view, layout))
            crawl = MetadataCrawl(fetcher, layout, settings.max_crawl_steps)
            loop.call_soon_threadsafe(crawl.seed, found)
        yield remote


@contextmanager
def _open_local(path: str, budget: Budget) -> Iterator[LocalSource]:
    try:
        source = LocalSource(path, budget)
    except FileNotFoundError as exc:
        raise SourceNotFoundError(f"{path} does not exist; check the path") from exc
    except OSError as exc:
        raise SourceReadError(f"cannot open {path}: {exc.strerror or exc}", url=path) from exc
    with source:
        _find_superblock(source)
        yield source
        source.check_unchanged()


def _find_superblock(source: RangedFile) -> tuple[hints.Layout, list[hints.Hint]]:
    """The superblock's layout and first hints; :class:`NotHDF5Error` when there is none."""
    if source.size == 0:
        raise NotHDF5Error(f"{source.url} is empty, not an HDF5 file")
    return hints.find_superblock(source.view, source.size)
