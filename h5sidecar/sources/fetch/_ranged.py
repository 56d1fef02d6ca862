"""Ranged readers: read-only, seekable file objects over one source, and a reader of byte
ranges of a source and its companion files.

* :class:`LocalRangedFile` -- a local regular file, read with ``os.pread`` (identity from
  ``os.fstat``);
* :class:`RemoteRangedFile` -- an object, read through a page cache filled by pinned ranged GETs
  (:class:`~h5sidecar.sources.fetch._pinned.PinnedFetcher`): a read whose pages are cached returns at
  once, any other waits for a demand request;
* :class:`RangeReader` -- many ``(offset, length)`` ranges of the opened source (coalesced and
  concurrent on object stores) or of other files beside it.

The file objects are what a format library opens (the indexer hands them to ``h5py.File``); they
count every read into their :class:`~h5sidecar.sources._stats.FetchStats` and, given
:class:`ReadLimits`, stop a reader whose reads never end (a corrupt file whose structures loop).
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import obstore
from fsspec.exceptions import FSTimeoutError

from h5sidecar._compat.fsspec import run_sync
from h5sidecar.errors import NotHDF5Error, SourceReadError, StaleReferenceError
from h5sidecar.sources._source_identity import identity_from_stat, source_identity
from h5sidecar.sources._stats import FetchStats
from h5sidecar.sources.fetch._retry import retrying
from h5sidecar.sources.stores._backends import NO_RETRY, transient_store_error
from h5sidecar.sources.stores._store_cache import resolve_store
from h5sidecar.sources.stores._store_errors import STORE_ERRORS, translate_store_error

if TYPE_CHECKING:
    from h5sidecar.references import SourceInfo
    from h5sidecar.sources.fetch._pinned import PinnedFetcher

__all__ = [
    "LocalRangedFile",
    "RangeReader",
    "RangedFile",
    "ReadLimits",
    "RemoteRangedFile",
    "open_regular",
    "sync_within",
]

log = logging.getLogger("h5sidecar.sources")

#: Seconds to wait for background requests to cancel when a source is closed.
_CLOSE_SECONDS = 10.0


class ReadLimits(Protocol):
    """What bounds the reads through a ranged file (the indexer's per-granule budget)."""

    def check(self, reads: int, nbytes: int) -> None:
        """Raise when ``reads`` read calls of ``nbytes`` bytes in all are too many."""

    def remaining(self) -> float | None:
        """Seconds left to wait for the network (``None``: no limit)."""

    def timeout(self) -> BaseException:
        """The error to raise when that time ran out."""


class RangedFile(io.RawIOBase):
    """Read-only, seekable raw file over ``view(start, stop)``; h5py's ``fileobj`` driver calls
    ``seek``/``tell``/``readinto`` for every read."""

    identity: SourceInfo
    fetch_stats: FetchStats

    def __init__(self, size: int, limits: ReadLimits | None = None) -> None:
        super().__init__()
        self.size = size
        self.budget = limits
        self._pos = 0

    @property
    def url(self) -> str:
        """The normalised source URL (absolute path, or ``s3://bucket/key``)."""
        return self.identity.url

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
        stats = self.fetch_stats
        stats.add(reads=1, bytes_read=len(data))
        if self.budget is not None:  # a corrupt file whose metadata loops stops here
            self.budget.check(stats.reads, stats.bytes_read)
        return len(data)

    def view(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the source."""
        raise NotImplementedError

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of many ``(offset, length)`` ranges (e.g. chunks to inline or checksum),
        read together: concurrently and coalesced for object stores.  Does not move the
        position."""
        out = [self.view(start, start + length) for start, length in ranges]
        for (start, length), data in zip(ranges, out, strict=True):
            if len(data) != length:
                raise SourceReadError(
                    f"range {start}+{length} lies outside {self.url} ({self.size} bytes)",
                    url=self.url,
                )
        return out


class LocalRangedFile(RangedFile):
    """A local file opened read-only, read with ``os.pread`` (no shared file position).

    Only regular files are read: a FIFO or a device would block or never end, so they are
    refused with :class:`NotHDF5Error` (opened non-blocking, so a FIFO without a writer does
    not hang the open either).
    """

    def __init__(self, path: str, limits: ReadLimits | None = None) -> None:
        self.path = path
        self._fd = open_regular(path)
        self.identity = identity_from_stat(path, os.fstat(self._fd))
        self.fetch_stats = FetchStats()
        super().__init__(self.identity.size, limits)

    def view(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (one ``pread``)."""
        data = os.pread(self._fd, max(stop - start, 0), start) if stop > start else b""
        self.fetch_stats.add(requests=1, bytes_fetched=len(data))
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


class RemoteRangedFile(RangedFile):
    """A read-only file object over an object, read through a
    :class:`~h5sidecar.sources.fetch._pinned.PinnedFetcher` (already opened) on ``loop``."""

    def __init__(
        self,
        fetcher: PinnedFetcher,
        loop: asyncio.AbstractEventLoop,
        limits: ReadLimits | None = None,
    ) -> None:
        assert fetcher.identity is not None
        self.fetcher, self._loop = fetcher, loop
        self.identity = fetcher.identity
        self.fetch_stats = fetcher.stats
        super().__init__(self.identity.size, limits)

    def _wait(self, func: Any, *args: Any) -> Any:
        """Run ``func(*args)`` on the I/O loop, within what is left of the time limit."""
        return sync_within(self._loop, self.budget, func, *args)

    def view(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)``, waiting for the network if they are not cached yet."""
        if stop <= start:
            return b""
        fetcher = self.fetcher
        if fetcher.fault is not None:
            raise fetcher.fault
        data = fetcher.cache.read(start, stop)
        if data is None:
            self.fetch_stats.add(waits=1)
            data = self._wait(fetcher.demand, start, stop)
        if data is None:  # evicted while waiting (a tiny cache): fetch all of it again
            data = self._wait(fetcher.demand, start, stop, True)
        assert data is not None
        return data

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of many ``(offset, length)`` ranges, fetched concurrently in coalesced,
        ``If-Match``-pinned requests (bypassing the page cache)."""
        if self.fetcher.fault is not None:
            raise self.fetcher.fault
        return self._wait(self.fetcher.fetch_ranges, list(ranges))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop prefetching and cancel requests still in flight."""
        if not self.closed:
            try:
                run_sync(self.fetcher.aclose, loop=self._loop, timeout=_CLOSE_SECONDS)
            except FSTimeoutError:  # the loop is wedged: closing must not wedge the caller too
                log.warning("requests of %s did not cancel within %g s", self.url, _CLOSE_SECONDS)
        super().close()


def sync_within(
    loop: asyncio.AbstractEventLoop, limits: ReadLimits | None, func: Any, *args: Any
) -> Any:
    """:func:`~h5sidecar._compat.fsspec.run_sync` bounded by ``limits``' deadline (``limits.timeout()`` past it)."""
    timeout = None if limits is None else limits.remaining()
    try:
        return run_sync(func, *args, loop=loop, timeout=timeout)
    except FSTimeoutError:
        assert limits is not None
        raise limits.timeout() from None


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
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


class RangeReader:
    """Reads byte ranges of an opened source and of its companion files (external raw data,
    virtual dataset sources), e.g. for inlining small chunks and for checksums.

    The source's ranges go through its ranged file (``read_ranges``: coalesced, concurrent and
    pinned to the version being read on object stores); companion files are read with ``pread``
    locally or obstore's ``get_ranges`` on object stores.

    Parameters
    ----------
    source : RangedFile
        The opened source.
    storage_options : mapping, optional
        s3fs-style options for companion files on object stores.
    retries, backoff : int, float
        The retry policy of companion reads (:func:`~h5sidecar.sources.fetch._retry.retrying`).
    """

    def __init__(
        self,
        source: RangedFile,
        storage_options: Mapping[str, Any] | None = None,
        *,
        retries: int = 4,
        backoff: float = 0.1,
    ) -> None:
        self._source = source
        self._options = dict(storage_options or {})
        self._retries, self._backoff = retries, backoff
        self._fds: dict[str, int] = {}

    def read_many(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of ``(offset, length)`` ranges of ``url`` (short reads raise)."""
        if not ranges:
            return []
        if url == self._source.identity.url:
            out = [bytes(b) for b in self._source.read_ranges(list(ranges))]
        else:
            out = self._companion(url, ranges)
        for (offset, length), data in zip(ranges, out, strict=True):
            if len(data) != length:
                raise SourceReadError(
                    f"{url}: expected {length} bytes at offset {offset}, got {len(data)}; the "
                    "object is shorter than its references say (changed or truncated): index "
                    "it again",
                    url=url,
                )
        return out

    def read(self, url: str, offset: int, length: int) -> bytes:
        """``length`` bytes of ``url`` at ``offset``."""
        return self.read_many(url, [(offset, length)])[0]

    def _companion(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        store, location = resolve_store(url, self._options, retry_config=NO_RETRY)
        if location.kind == "local":
            if url not in self._fds:
                self._fds[url] = open_regular(location.url)  # never a FIFO that blocks
            return [os.pread(self._fds[url], length, offset) for offset, length in ranges]
        starts, lengths = [o for o, _ in ranges], [n for _, n in ranges]
        if location.kind == "http":
            return [store.read_range(o, n) for o, n in ranges]  # type: ignore[union-attr]

        async def once() -> list[Any]:
            return await obstore.get_ranges_async(  # type: ignore[no-any-return]
                store, location.path, starts=starts, lengths=lengths
            )

        try:
            got = run_sync(retrying, once, retries=self._retries, backoff=self._backoff,
                           retry_if=transient_store_error)  # fmt: skip
        except STORE_ERRORS as exc:
            raise translate_store_error(exc, url, "GET") from exc
        return [bytes(b) for b in got]

    def identity(self, url: str) -> dict[str, Any]:
        """``{"size": ...}`` of a companion file (raises SourceNotFoundError when absent)."""
        return source_identity(url, self._options).to_dict()

    def close(self) -> None:
        """Close the companion files opened so far."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

