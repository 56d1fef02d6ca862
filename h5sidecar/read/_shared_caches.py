"""The two caches every reader of a process shares: parsed sidecars and recently read chunks.

Both are bounded by bytes (:class:`~h5sidecar.read._byte_lru.ByteLRU`) and sized by the
process-wide settings (:func:`h5sidecar.read.configure` or ``H5SIDECAR_*``), refitted whenever a
reader picks them (:func:`fit_shared_caches`).
"""

from __future__ import annotations

from typing import Any

from h5sidecar.read._byte_lru import ByteLRU
from h5sidecar.read._process_settings import process_settings
from h5sidecar.read._sidecar_key import sidecar_group

__all__ = ["CHUNKS", "SIDECARS", "fit_shared_caches", "range_cache_key"]

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


def fit_shared_caches() -> None:
    """Size :data:`SIDECARS` and :data:`CHUNKS` as the process-wide settings say (evicting
    least recently used entries when they shrink); called whenever a reader picks them."""
    settings = process_settings()
    if SIDECARS.max_bytes != settings.sidecar_cache_bytes:
        SIDECARS.resize(settings.sidecar_cache_bytes)
    if CHUNKS.max_bytes != settings.chunk_cache_bytes:
        CHUNKS.resize(settings.chunk_cache_bytes)
