"""Counters of everything that moves bytes (requests, bytes, retries, cache hits, reads).

The package's one stats record.  One :class:`FetchStats` belongs to one
:class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher`; the readers above it (the zarr store and the
batch reader, serving from the chunk cache) record their cache hits into the same object so a
single ``stats`` tells the whole story of a read.  The indexer's ranged reader
(:mod:`h5sidecar.sources.fetch._ranged`) counts into one too, including the reads made through its file
object and the requests sent ahead of them; the indexer shows those under its own names
(:class:`h5sidecar.indexer.crawl._source_file.SourceStats`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["FetchStats"]


@dataclass
class FetchStats:
    """Cumulative counters (thread-safe updates; read them any time).

    Attributes
    ----------
    requests : int
        Requests that returned data (retried attempts are not counted again).
    bytes_fetched : int
        Bytes those requests transferred.
    bytes_used : int
        Bytes handed back to callers (each input range counted once per request of it).
    retries : int
        Attempts repeated after a retryable failure (throttling, 5xx, reset, short read).
    cache_hits : int
        Ranges served from a cache without I/O (recorded by the caching layer).
    freshness_checks : int
        Source identities confirmed against the sidecar (at most one per source per fetcher
        for local files; free on S3, where every response carries the ETag).
    revalidations : int
        HEAD requests / ``stat`` calls made to confirm a source before serving cached chunks of
        it (see ``ReadSettings.revalidate_seconds``); not counted in ``requests``.
    reads : int
        Read calls made through a ranged file object (e.g. HDF5's reads while indexing).
    bytes_read : int
        Bytes those read calls asked for (repeats included).
    waits : int
        Reads through a ranged file object that had to wait for the network (the others were
        served from its page cache).
    prefetch_requests : int
        Requests sent ahead of the reader, for locations it was told it will need (part of
        ``requests``).
    hints_found : int
        Such locations handed to the ranged reader (for the indexer: metadata structures its
        crawl located).
    """

    requests: int = 0
    bytes_fetched: int = 0
    bytes_used: int = 0
    retries: int = 0
    cache_hits: int = 0
    freshness_checks: int = 0
    revalidations: int = 0
    reads: int = 0
    bytes_read: int = 0
    waits: int = 0
    prefetch_requests: int = 0
    hints_found: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def over_read_ratio(self) -> float:
        """``bytes_fetched / bytes_used``: how much coalescing read beyond what was asked (>= 1)."""
        return self.bytes_fetched / self.bytes_used if self.bytes_used else 1.0

    def add(self, **counts: int) -> None:
        """Increase counters atomically, e.g. ``stats.add(requests=1, bytes_fetched=n)``."""
        with self._lock:
            for name, value in counts.items():
                if name.startswith("_") or not hasattr(self, name):
                    raise AttributeError(f"FetchStats has no counter {name!r}")
                setattr(self, name, getattr(self, name) + value)

    def record_cache_hit(self, nbytes: int) -> None:
        """Record one range served from a cache (counts as used bytes, not fetched ones)."""
        self.add(cache_hits=1, bytes_used=nbytes)

    def snapshot(self) -> dict[str, Any]:
        """A plain dict of the counters and the over-read ratio (for reports and logs)."""
        with self._lock:
            out: dict[str, Any] = {name: getattr(self, name) for name in _COUNTERS}
        out["over_read_ratio"] = (
            out["bytes_fetched"] / out["bytes_used"] if out["bytes_used"] else 1.0
        )
        return out

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            for name in _COUNTERS:
                setattr(self, name, 0)

    def __getstate__(self) -> dict[str, Any]:
        return self.snapshot()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
        for k in _COUNTERS:
            setattr(self, k, int(state.get(k, 0)))


#: The counter fields, in declaration order.
_COUNTERS = tuple(f.name for f in fields(FetchStats) if not f.name.startswith("_"))
