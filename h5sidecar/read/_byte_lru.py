"""A thread-safe LRU cache bounded by bytes, not by entries.

The read path caches three kinds of things whose sizes differ by orders of magnitude: parsed
sidecars (:class:`~h5sidecar.references.GranuleRefs`, megabytes), synthesized metadata documents
(kilobytes) and hot chunks.  Bounding by entry count would let a few large sidecars exhaust
memory, so every entry is charged its size in bytes and the least recently used entries are
evicted until the total fits.  No cache in h5sidecar is unbounded (DESIGN.md, rule 8).

Why not ``cachetools.LRUCache(maxsize, getsizeof=len)``: it bounds by bytes too, but it is not
thread-safe (every reader of a process shares these caches: a lock around it is ours to add),
its bound cannot change (``configure`` resizes the shared caches), it keeps no hit, miss or
eviction counters (``cache_stats``), cannot count entries per group (the cold open asks whether
any version of a sidecar is held) nor take a caller's charge, and it raises on a value larger
than the bound.  Measured with cachetools 6.0 under a lock (get, then put on a miss; 1 MiB of
1-2 KB values, 1 and 4 threads): about as fast on misses, 1.3-2x slower on hits than this class.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["ByteLRU", "CacheStats", "sizeof"]

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
        any version of one sidecar, see :func:`~h5sidecar.read._sidecar_key.sidecar_group`).
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
