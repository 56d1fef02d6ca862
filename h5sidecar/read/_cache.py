"""A thread-safe LRU cache bounded by bytes, not by entries.

The read path caches three kinds of things whose sizes differ by orders of magnitude: parsed
sidecars (:class:`~h5sidecar.references.GranuleRefs`, megabytes), synthesized metadata documents
(kilobytes) and hot chunks.  Bounding by entry count would let a few large sidecars exhaust
memory, so every entry is charged its size in bytes and the least recently used entries are
evicted until the total fits.  No cache in h5sidecar is unbounded (DESIGN.md, rule 8).
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from h5sidecar.read._identity import sidecar_group
from h5sidecar.read._process import process_settings

__all__ = [
    "CHUNKS",
    "SIDECARS",
    "ByteLRU",
    "CacheStats",
    "load_refs",
    "range_cache_key",
    "sidecar_identity",
    "sizeof",
]

V = TypeVar("V")


def sizeof(value: Any) -> int:
    """Bytes charged for ``value``: ``len`` of bytes-likes, else its ``nbytes``, else 1 KiB."""
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    # Small Python objects (metadata dicts): a flat charge keeps them from being free.
    return 1024


@dataclass(frozen=True, slots=True)
class CacheStats:
    """A snapshot of a cache's counters."""

    hits: int
    misses: int
    evictions: int
    entries: int
    current_bytes: int
    max_bytes: int


class ByteLRU(Generic[V]):
    """Least-recently-used mapping whose values together stay under ``max_bytes``.

    Parameters
    ----------
    max_bytes : int
        Upper bound of the summed sizes of the cached values.  ``0`` disables caching (every
        ``get`` misses, ``put`` stores nothing).  A single value larger than the bound is not
        cached at all (it would evict everything else and then itself).
    size : callable, optional
        ``value -> bytes`` charged for a value (default :func:`sizeof`).
    group : callable, optional
        ``key -> hashable or None``: entries are counted per group, so :meth:`has_group`
        answers in constant time whether any entry of a group is held (for the sidecar cache:
        any version of one sidecar, see :func:`sidecar_group`).
    """

    def __init__(self, max_bytes: int, *, size: Callable[[V], int] = sizeof,
                 group: Callable[[Hashable], Hashable | None] | None = None) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._size = size
        self._data: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._lock = threading.Lock()
        self.group = group
        self._groups: Counter[Hashable] = Counter()

    def _counted(self, key: Hashable, delta: int) -> None:
        """Count ``key`` in (``delta`` 1) or out (-1) of its group; called under the lock."""
        g = None if self.group is None else self.group(key)
        if g is not None:
            self._groups[g] += delta
            if self._groups[g] <= 0:
                del self._groups[g]

    def _evict_oldest(self) -> None:
        key, (_, evicted) = self._data.popitem(last=False)
        self._bytes -= evicted
        self._evictions += 1
        self._counted(key, -1)

    def get(self, key: Hashable) -> V | None:
        """The cached value (marked most recently used), or ``None``."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self._misses += 1
                return None
            self._data.move_to_end(key)
            self._hits += 1
            return item[0]

    def put(self, key: Hashable, value: V, nbytes: int | None = None) -> None:
        """Cache ``value`` under ``key``, evicting least recently used entries to fit.

        ``nbytes``: the charge when the caller knows it better than the size function (at
        least the size function's).
        """
        nbytes = max(int(self._size(value)), nbytes or 0)
        if nbytes > self.max_bytes or not self.max_bytes:  # 0 disables, even for empty values
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
                self._counted(key, -1)
            self._data[key] = (value, nbytes)
            self._bytes += nbytes
            self._counted(key, 1)
            while self._bytes > self.max_bytes:
                self._evict_oldest()

    def get_or_create(self, key: Hashable, factory: Callable[[], V]) -> V:
        """The cached value, or ``factory()`` (then cached).  ``factory`` runs unlocked."""
        value = self.get(key)
        if value is None:
            value = factory()
            self.put(key, value)
        return value

    def resize(self, max_bytes: int) -> None:
        """Change the bound, evicting least recently used entries until the total fits."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self.max_bytes = int(max_bytes)
            while self._data and (self._bytes > self.max_bytes or not self.max_bytes):
                self._evict_oldest()

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        with self._lock:
            self._data.clear()
            self._bytes = 0
            self._groups.clear()

    def has_group(self, group: Hashable) -> bool:
        """Whether an entry of ``group`` (see ``group`` above) is held; counts no hit."""
        with self._lock:
            return group in self._groups

    def key_snapshot(self) -> list[Hashable]:
        """A snapshot of the keys (least recently used first); counts no hit or miss."""
        with self._lock:
            return list(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    @property
    def stats(self) -> CacheStats:
        """Hit/miss/eviction counters and current size."""
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                entries=len(self._data),
                current_bytes=self._bytes,
                max_bytes=self.max_bytes,
            )

    def __repr__(self) -> str:
        s = self.stats
        return f"ByteLRU({s.current_bytes}/{s.max_bytes} bytes, {s.entries} entries)"


# -- the process-wide sidecar cache --------------------------------------------------------------

#: Parsed sidecars shared by every store, filesystem and xarray dataset of this process (a Dask
#: worker re-opening the same sidecar for each task parses it once).  Entries are keyed by the
#: sidecar's identity (size + ETag/mtime), so a re-indexed sidecar is never served stale.
SIDECARS: ByteLRU[Any] = ByteLRU(256 * 2**20, group=sidecar_group)


#: Recently read chunks (encoded bytes) of every store in this process, keyed by source
#: identity + byte range, so a re-indexed (changed) source never hits old entries.  xarray reads
#: some chunks twice when it opens a dataset (the first and last value of each time variable to
#: choose its dtype, then the whole coordinate to index it); this makes those re-reads free.
CHUNKS: ByteLRU[bytes] = ByteLRU(64 * 2**20)


def range_cache_key(url: str, offset: int, length: int, source: Any) -> tuple[Any, ...]:
    """The :data:`CHUNKS` key of a byte range: the range plus the recorded identity of the object
    it is read from (``SourceInfo``: ``GranuleRefs.identity_of(url)``), so a changed, re-indexed
    source -- or a replaced member of a datacube -- never hits."""
    return (url, offset, length, *source.key)


def sidecar_identity(path: str, storage_options: Mapping[str, Any] | None = None) -> tuple:
    """A hashable identity of the sidecar at ``path``: location + size + ETag/mtime.

    For a Parquet sidecar (a directory) the identity is that of its ``.zmetadata``, which the
    writer writes last (its commit marker).

    Raises
    ------
    NotIndexedError
        When nothing exists at ``path``.
    """
    import fsspec

    from h5sidecar.credentials._s3_chain import fsspec_options
    from h5sidecar.errors import NotIndexedError

    options = dict(storage_options or {})
    fs, p = fsspec.core.url_to_fs(path, **fsspec_options(str(path), options))
    try:
        info = _parquet_commit_info(fs, p)
        if info is not None:
            p = f"{p.rstrip('/')}/.zmetadata"
        else:
            info = fs.info(p)
    except FileNotFoundError as exc:
        raise NotIndexedError(
            f"no sidecar at {path!r}: index the granule first (h5sidecar index SOURCE -o DEST) "
            "or check the path and storage options"
        ) from exc
    from h5sidecar.read._identity import key_from_info

    return key_from_info(fs, p, info, options)


def _parquet_commit_info(fs: Any, path: str) -> dict[str, Any] | None:
    """``info`` of ``path/.zmetadata``, or None when ``path`` is not a Parquet sidecar.

    Asked first (unless the name says JSON): on an object store it is one HEAD, where asking
    about the directory itself costs a HEAD and a listing before that.
    """
    if path.endswith(".json"):
        return None
    try:
        return fs.info(f"{path.rstrip('/')}/.zmetadata")
    except (FileNotFoundError, NotADirectoryError):
        return None


def load_refs(
    path: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    cache: ByteLRU[Any] | None = SIDECARS,
    identity: tuple | None = None,
) -> Any:
    """Read the sidecar at ``path`` (JSON or Parquet) as ``GranuleRefs``, through ``cache``.

    A Parquet sidecar on an object store that ``cache`` holds no entry for is opened in one
    round of concurrent requests: its identity, ``.zmetadata`` and all-arrays manifests file
    (see :mod:`h5sidecar.read._cold_open`); otherwise its identity is asked first (the key),
    and the sidecar read on a miss.

    Parameters
    ----------
    path : str or path-like
        Local path or URL (``s3://bucket/x.h5.parq``) of the sidecar.
    storage_options : mapping, optional
        fsspec options to read the sidecar (``endpoint_url``, ``key``, ``secret``, ...).
    cache : ByteLRU or None
        Where parsed sidecars are kept (the process-wide :data:`SIDECARS` by default).
    identity : tuple, optional
        ``sidecar_identity(path, storage_options)`` when the caller just asked for it (one
        stat or HEAD less); the cache key.

    Raises
    ------
    NotIndexedError
        When no sidecar exists at ``path``.
    InvalidReferenceError
        When the sidecar is malformed.
    """
    from h5sidecar.references import read_refs

    path = os.fspath(path)
    options = dict(storage_options or {})
    if cache is SIDECARS:
        fit_shared_caches()
    if cache is None:
        return read_refs(path, storage_options=options)
    if identity is None:
        from h5sidecar.read._cold_open import open_cold

        # no entry for this sidecar yet: its identity, metadata and manifests in one round
        cold = open_cold(path, options, cache)
        if cold is not None:
            return cold[1]
    key = identity if identity is not None else sidecar_identity(path, options)
    return cache.get_or_create(key, lambda: read_refs(path, storage_options=options))


def fit_shared_caches() -> None:
    """Size :data:`SIDECARS` and :data:`CHUNKS` as the process-wide settings say (evicting
    least recently used entries when they shrink); called whenever a reader picks them."""
    settings = process_settings()
    if SIDECARS.max_bytes != settings.sidecar_cache_bytes:
        SIDECARS.resize(settings.sidecar_cache_bytes)
    if CHUNKS.max_bytes != settings.chunk_cache_bytes:
        CHUNKS.resize(settings.chunk_cache_bytes)
