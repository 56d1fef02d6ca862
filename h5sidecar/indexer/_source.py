"""The indexer's view of a granule: a read-only file object h5py opens, fed by few large requests.

:func:`open_source` yields a seekable, read-only file object for ``h5py.File(f, "r")``:

* **local files**: the file itself, read with ``os.pread`` (identity from ``os.fstat``);
* **S3 objects**: reads served from a page cache filled by ranged GETs through obstore
  (:mod:`h5sidecar.indexer._source_fetch`).  The first GET (the file's head) gives the object's
  identity (size, ETag, mtime); every later GET carries ``If-Match`` on that ETag, so an object
  replaced mid-scan raises :class:`~h5sidecar.errors.StaleReferenceError` instead of mixing two
  versions.

HDF5 reads metadata as a chain of small dependent reads (superblock -> object header -> B-tree ->
symbol node -> object header ...), each one a network round trip if served naively.  The remote
reader instead *crawls ahead* of h5py: it parses each metadata structure as soon as its bytes
arrive (:mod:`h5sidecar.indexer._source_hints`), learns where the next structures are, and
fetches a whole level of the tree at once, in few coalesced requests that run concurrently.
h5py still reads everything through the cache, so a wrong guess costs bytes, never correctness;
a read the crawl did not foresee is fetched on demand with a little read-ahead.
"""

from __future__ import annotations

import io
import logging
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import fsspec.asyn
from fsspec.exceptions import FSTimeoutError

from h5sidecar.errors import (
    NotHDF5Error,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
)
from h5sidecar.indexer import _source_hints as hints
from h5sidecar.indexer._budget import Budget
from h5sidecar.indexer._source_fetch import (
    CACHE_BYTES,
    CONCURRENCY,
    MAX_GAP,
    Counters,
    Fetcher,
    FetchOptions,
    SourceStats,
)
from h5sidecar.settings import IndexSettings
from h5sidecar.sources._stores import identity_from_stat, resolve_store

if TYPE_CHECKING:
    import asyncio

    from h5sidecar.references import SourceInfo

__all__ = ["LocalSource", "RemoteSource", "SourceStats", "open_source"]

log = logging.getLogger("h5sidecar.indexer")

#: Seconds to wait for background requests to cancel when a source is closed.
_CLOSE_SECONDS = 10.0

#: obstore retries for the indexer: enough for throttling and resets, short enough that a dead
#: endpoint fails within seconds with a clear message.
RETRY_CONFIG: dict[str, Any] = {
    "max_retries": 4,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)},
    "retry_timeout": timedelta(seconds=30),
}


class _SourceFile(io.RawIOBase):
    """Read-only, seekable raw file over ``view(start, stop)``; h5py's ``fileobj`` driver calls
    ``seek``/``tell``/``readinto`` for every read."""

    identity: SourceInfo
    _counters: Counters

    def __init__(self, size: int, budget: Budget | None = None) -> None:
        super().__init__()
        self.size = size
        self.budget = budget
        self._pos = 0

    @property
    def url(self) -> str:
        """The normalised source URL (absolute path, or ``s3://bucket/key``)."""
        return self.identity.url

    @property
    def stats(self) -> SourceStats:
        """Requests and bytes so far."""
        return self._counters.snapshot()

    def readable(self) -> bool:
        """Always ``True``."""
        return True

    def seekable(self) -> bool:
        """Always ``True``."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position (``SEEK_SET``, ``SEEK_CUR`` or ``SEEK_END``)."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}.get(whence)
        if base is None or base + offset < 0:
            raise ValueError(f"invalid seek (offset={offset}, whence={whence})")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        """Read up to ``len(buffer)`` bytes at the position (fewer at the end of the object)."""
        out = memoryview(buffer).cast("B")
        data = self.view(self._pos, min(self._pos + len(out), self.size))
        out[: len(data)] = data
        self._pos += len(data)
        self._counters.add("reads_by_hdf5")
        self._counters.add("bytes_read_by_hdf5", len(data))
        if self.budget is not None:  # a corrupt file whose metadata loops stops here
            counts = self._counters.values
            self.budget.check(counts["reads_by_hdf5"], counts["bytes_read_by_hdf5"])
        return len(data)

    def view(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the source."""
        raise NotImplementedError

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of many ``(offset, length)`` ranges (e.g. chunks to inline or checksum),
        read together: concurrently and coalesced for S3.  Does not move the position."""
        out = [self.view(start, start + length) for start, length in ranges]
        for (start, length), data in zip(ranges, out, strict=True):
            if len(data) != length:
                raise SourceReadError(
                    f"range {start}+{length} lies outside {self.url} ({self.size} bytes)",
                    url=self.url,
                )
        return out


class LocalSource(_SourceFile):
    """A local file opened read-only, read with ``os.pread`` (no shared file position).

    Only regular files are read: a FIFO or a device would block or never end, so they are
    refused with :class:`NotHDF5Error` (opened non-blocking, so a FIFO without a writer does
    not hang the open either).
    """

    def __init__(self, path: str, budget: Budget | None = None) -> None:
        self.path = path
        self._fd = open_regular(path)
        self.identity = identity_from_stat(path, os.fstat(self._fd))
        self._counters = Counters()
        super().__init__(self.identity.size, budget)

    def view(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (one ``pread``)."""
        data = os.pread(self._fd, max(stop - start, 0), start) if stop > start else b""
        self._counters.add("requests")
        self._counters.add("bytes_fetched", len(data))
        return data

    def close(self) -> None:
        """Close the file descriptor."""
        if not self.closed:
            os.close(self._fd)
        super().close()

    def check_unchanged(self) -> None:
        """Raise :class:`StaleReferenceError` if the file changed since it was opened."""
        if not identity_from_stat(self.path).same_object(self.identity):
            raise StaleReferenceError(
                f"{self.url} changed while it was being indexed (size or mtime differ); index "
                "it again once writers are done",
                url=self.url,
            )


class RemoteSource(_SourceFile):
    """A read-only file object over an object-store source (see the module docstring)."""

    def __init__(
        self, fetcher: Fetcher, loop: asyncio.AbstractEventLoop, budget: Budget | None = None
    ) -> None:
        assert fetcher.identity is not None
        self._fetcher, self._loop = fetcher, loop
        self.identity = fetcher.identity
        self._counters = fetcher.counters
        super().__init__(self.identity.size, budget)

    def _wait(self, func: Any, *args: Any) -> Any:
        """Run ``func(*args)`` on the I/O loop, within what is left of the time limit."""
        return _sync(self._loop, self.budget, func, *args)

    def view(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, waiting for the network if they are not cached yet."""
        if stop <= start:
            return b""
        fetcher = self._fetcher
        if fetcher.fault is not None:
            raise fetcher.fault
        data = fetcher.cache.read(start, stop)
        if data is None:
            self._counters.add("waits")
            data = self._wait(fetcher.demand, start, stop)
        if data is None:  # evicted while waiting (a tiny cache): fetch all of it again
            data = self._wait(fetcher.demand, start, stop, True)
        assert data is not None
        return data

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of many ``(offset, length)`` ranges, fetched concurrently in coalesced,
        ``If-Match``-pinned requests (bypassing the metadata cache)."""
        if self._fetcher.fault is not None:
            raise self._fetcher.fault
        return self._wait(self._fetcher.fetch_ranges, list(ranges))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the crawl and cancel requests still in flight."""
        if not self.closed:
            try:
                fsspec.asyn.sync(self._loop, self._fetcher.aclose, timeout=_CLOSE_SECONDS)
            except FSTimeoutError:  # the loop is wedged: closing must not wedge the caller too
                log.warning("requests of %s did not cancel within %g s", self.url, _CLOSE_SECONDS)
        super().close()


def _sync(loop: asyncio.AbstractEventLoop, budget: Budget | None, func: Any, *args: Any) -> Any:
    """``fsspec.asyn.sync`` bounded by ``budget``'s deadline (:class:`GranuleTimeoutError`)."""
    timeout = None if budget is None else budget.remaining()
    try:
        return fsspec.asyn.sync(loop, func, *args, timeout=timeout)
    except FSTimeoutError:
        assert budget is not None
        raise budget.timeout() from None


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (:class:`NotHDF5Error`
    for a FIFO, socket or device: reading those blocks or never ends)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotHDF5Error(
            f"{path} is not a regular file ({_file_type(mode)}): only regular files are indexed"
        )
    return fd


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


@contextmanager
def open_source(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings = IndexSettings(),  # noqa: B008 - frozen, immutable default
    prefetch: bool = True,
    cache_bytes: int = CACHE_BYTES,
    concurrency: int = CONCURRENCY,
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
        ``metadata_block_size`` caps the size of one prefetch request; ``max_granule_seconds``,
        ``max_hdf5_reads`` and ``max_hdf5_read_bytes`` bound what reading the granule may cost.
    prefetch : bool
        Crawl metadata ahead of HDF5 (default).  ``False`` fetches only what HDF5 asks for,
        plus a little read-ahead (useful to measure what the crawl saves).
    cache_bytes : int
        Upper bound of the bytes kept in the read cache (least recently used blocks go first);
        prefetching stops after half of it.
    concurrency : int
        Prefetch requests in flight at once.

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
    store, location = resolve_store(url, storage_options, retry_config=RETRY_CONFIG)
    budget = Budget.start(location.url, settings)
    if location.kind == "local":
        with _open_local(location.url, budget) as local:
            yield local
        return
    options = FetchOptions(
        cache_bytes=cache_bytes,
        prefetch_bytes=cache_bytes // 2 if prefetch else 0,
        concurrency=concurrency,
        max_request=max(settings.metadata_block_size, MAX_GAP),
    )
    loop = fsspec.asyn.get_loop()
    fetcher = Fetcher(store, location, options)
    _sync(loop, budget, fetcher.open)
    with RemoteSource(fetcher, loop, budget) as remote:
        layout, found = _find_superblock(remote)
        fetcher.layout = layout
        if prefetch:
            loop.call_soon_threadsafe(fetcher.seed, found)
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


def _find_superblock(source: _SourceFile) -> tuple[hints.Layout, list[hints.Hint]]:
    """The superblock's layout and first hints; :class:`NotHDF5Error` when there is none."""
    if source.size == 0:
        raise NotHDF5Error(f"{source.url} is empty, not an HDF5 file")
    return hints.find_superblock(source.view, source.size)
