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
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import fsspec.asyn

from h5sidecar._stores import identity_from_stat, resolve_store
from h5sidecar.errors import (
    NotHDF5Error,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
)
from h5sidecar.indexer import _source_hints as hints
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

if TYPE_CHECKING:
    import asyncio

    from h5sidecar.references import SourceInfo

__all__ = ["LocalSource", "RemoteSource", "SourceStats", "open_source"]

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

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
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
    """A local file opened read-only, read with ``os.pread`` (no shared file position)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        self.identity = identity_from_stat(path, os.fstat(self._fd))
        self._counters = Counters()
        super().__init__(self.identity.size)

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

    def __init__(self, fetcher: Fetcher, loop: asyncio.AbstractEventLoop) -> None:
        assert fetcher.identity is not None
        self._fetcher, self._loop = fetcher, loop
        self.identity = fetcher.identity
        self._counters = fetcher.counters
        super().__init__(self.identity.size)

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
            data = fsspec.asyn.sync(self._loop, fetcher.demand, start, stop)
        if data is None:  # evicted while waiting (a tiny cache): fetch all of it again
            data = fsspec.asyn.sync(self._loop, fetcher.demand, start, stop, True)
        assert data is not None
        return data

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of many ``(offset, length)`` ranges, fetched concurrently in coalesced,
        ``If-Match``-pinned requests (bypassing the metadata cache)."""
        if self._fetcher.fault is not None:
            raise self._fetcher.fault
        return fsspec.asyn.sync(self._loop, self._fetcher.fetch_ranges, list(ranges))

    def close(self) -> None:
        """Stop the crawl and cancel requests still in flight."""
        if not self.closed:
            fsspec.asyn.sync(self._loop, self._fetcher.aclose)
        super().close()


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
        ``metadata_block_size`` caps the size of one prefetch request.
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
    SourceReadError
        The store could not be read (network, permissions); the message says what to check.

    Examples
    --------
    >>> with open_source("s3://bucket/ATL03.h5", storage_options={"anon": True}) as f:  # doctest: +SKIP
    ...     with h5py.File(f, "r") as h5:
    ...         print(list(h5), f.identity.etag, f.stats.requests)
    """
    store, location = resolve_store(url, storage_options, retry_config=RETRY_CONFIG)
    if location.kind == "local":
        with _open_local(location.url) as local:
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
    fsspec.asyn.sync(loop, fetcher.open)
    with RemoteSource(fetcher, loop) as remote:
        layout, found = _find_superblock(remote)
        fetcher.layout = layout
        if prefetch:
            loop.call_soon_threadsafe(fetcher.seed, found)
        yield remote


@contextmanager
def _open_local(path: str) -> Iterator[LocalSource]:
    try:
        source = LocalSource(path)
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
