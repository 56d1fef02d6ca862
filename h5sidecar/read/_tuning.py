"""The process-wide part of the read path's tuning: two caches and the decode pool.

Everything else is per store (:class:`~h5sidecar.settings.ReadSettings` given to each store,
filesystem or dataset).  These resources are shared by every reader of a process, so they are
set by one explicit call, :func:`configure`, or by the process's ``H5SIDECAR_*`` variables (read
when a reader first needs them); constructing a reader never changes them.  The HTTP gateway
keeps caches of its own (``GatewaySettings.cache_bytes``) and uses only the decode pool here.
"""

from __future__ import annotations

from h5sidecar.read._byte_lru import CacheStats
from h5sidecar.read._process_settings import set_process_settings
from h5sidecar.read._shared_caches import CHUNKS, SIDECARS, fit_shared_caches
from h5sidecar.read.native._decode import decode_executor
from h5sidecar.settings import ReadSettings

__all__ = ["cache_stats", "clear_caches", "configure"]


def configure(settings: ReadSettings) -> None:
    """Apply the process-wide fields of ``settings`` to this process.

    Resizes the cache of parsed sidecars (``sidecar_cache_bytes``) and the chunk cache
    (``chunk_cache_bytes``), evicting least recently used entries when they shrink, and sizes
    the decode pool (``decode_threads``; work already running finishes in the old pool).  The
    other fields of ``settings`` are per store and are ignored here.  Dask workers are separate
    processes: configure them with ``client.run(configure, settings)`` or their environment.

    Parameters
    ----------
    settings : ReadSettings
        E.g. ``ReadSettings(chunk_cache_bytes=256 * 2**20)`` or ``from_env(ReadSettings)``.

    Raises
    ------
    ValueError
        When a size is negative.

    Examples
    --------
    >>> from h5sidecar.read import configure
    >>> from h5sidecar.settings import ReadSettings
    >>> configure(ReadSettings(chunk_cache_bytes=0, decode_threads=4))  # doctest: +SKIP
    """
    set_process_settings(settings)
    fit_shared_caches()
    decode_executor()


def clear_caches() -> None:
    """Drop every parsed sidecar and every cached chunk of this process (counters are kept).

    The next open parses its sidecar again and every chunk is fetched again.
    """
    SIDECARS.clear()
    CHUNKS.clear()


def cache_stats() -> dict[str, CacheStats]:
    """Counters and sizes of the process-wide caches: ``{"sidecars": ..., "chunks": ...}``
    (hits, misses, evictions, entries, current_bytes, max_bytes)."""
    fit_shared_caches()
    return {"sidecars": SIDECARS.stats, "chunks": CHUNKS.stats}
