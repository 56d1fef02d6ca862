"""One granule opened for reading: its references, fetcher, chunk cache and batch reader.

Every reader of a granule wraps one :class:`GranuleReader`: the zarr store
(:class:`~h5sidecar.read.zarr.store.SidecarStore`), the fsspec filesystem, the xarray engine,
:func:`~h5sidecar.read.native._load.read_arrays` and the HTTP gateway.  It holds what they share
and nothing Zarr-, fsspec- or xarray-specific:

* the parsed references (:class:`~h5sidecar.references.GranuleRefs`) and where they came from;
* the one :class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher` allowed to read exactly the objects
  the references need (one allow-list, one freshness state, one set of counters);
* the chunk cache and the batch reader over them
  (:class:`~h5sidecar.read.native._batch_reader.NativeReader`, built on first use);
* the Zarr key space of each view (:class:`~h5sidecar.read.zarr._keyspace.GranuleKeys`, built
  on first use: the batch reader needs none, and one costs ~10 ms per thousand arrays).

The xarray engine opens a granule reader directly and reads through its batch reader; a zarr
store over the same reader is built only for what zarr must read (arrays of Python objects,
``native=False``, a Zarr v3 view).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from h5sidecar.read._byte_lru import ByteLRU
from h5sidecar.read._granule_fetch import make_fetcher
from h5sidecar.read._shared_caches import CHUNKS, fit_shared_caches, range_cache_key
from h5sidecar.read._sidecar_open import load_refs
from h5sidecar.read.native._batch_reader import NativeReader
from h5sidecar.read.zarr._keyspace import ChunkRef, GranuleKeys, ZarrFormat
from h5sidecar.references import GranuleRefs
from h5sidecar.settings import ReadSettings

__all__ = ["GranuleReader"]


class GranuleReader:
    """A granule's references, fetcher, chunk cache, batch reader and key spaces.

    Parameters
    ----------
    refs : GranuleRefs
        The granule's references.
    settings : ReadSettings, optional
        Fetch settings (coalescing, concurrency, retries, allow-list, freshness check).
    storage_options : mapping, optional
        fsspec options the sidecar was read with (kept for pickling the readers over this one).
    remote_options : mapping, optional
        Options for reading the source objects (default: ``storage_options``).
    chunk_cache : ByteLRU or None
        Where whole chunks just read are kept (the process-wide one by default, sized by the
        process-wide settings); ``None`` disables caching.
    sidecar : str, optional
        Path/URL of the sidecar ``refs`` were read from.
    """

    def __init__(
        self,
        refs: GranuleRefs,
        *,
        settings: ReadSettings | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_options: Mapping[str, Any] | None = None,
        chunk_cache: ByteLRU[bytes] | None = CHUNKS,
        sidecar: str | None = None,
    ) -> None:
        self.refs = refs
        self.sidecar = sidecar
        self.settings = settings if settings is not None else ReadSettings()
        self.storage_options = dict(storage_options or {})
        self.remote_options = (
            dict(remote_options) if remote_options is not None else dict(self.storage_options)
        )
        self.chunk_cache = chunk_cache
        if chunk_cache is CHUNKS:
            fit_shared_caches()
        self.fetcher = make_fetcher(refs, self.settings, self.remote_options)
        self._native: NativeReader | None = None
        self._keys: dict[ZarrFormat, GranuleKeys] = {}
        #: the zarr stores over this reader, per Zarr format (see ``SidecarStore.for_reader``)
        self.zarr_stores: dict[ZarrFormat, Any] = {}

    @classmethod
    def open(
        cls,
        ref: GranuleRefs | str | os.PathLike[str],
        *,
        settings: ReadSettings | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_options: Mapping[str, Any] | None = None,
        chunk_cache: ByteLRU[bytes] | None = CHUNKS,
    ) -> GranuleReader:
        """A reader of the sidecar at ``ref`` (parsed once per process, see
        :func:`~h5sidecar.read._sidecar_open.load_refs`) or of references in memory."""
        if isinstance(ref, GranuleRefs):
            refs, sidecar = ref, None
        else:
            sidecar = os.fspath(ref)
            refs = load_refs(sidecar, storage_options)
        return cls(refs, settings=settings, storage_options=storage_options,
                   remote_options=remote_options, chunk_cache=chunk_cache, sidecar=sidecar)

    @property
    def native(self) -> NativeReader:
        """The batch reader over this granule's fetcher and chunk cache (decodes without zarr)."""
        if self._native is None:
            self._native = NativeReader(self.refs, self.fetcher, self.chunk_cache)
        return self._native

    def keys(self, zarr_format: ZarrFormat = 2) -> GranuleKeys:
        """The Zarr keys and metadata documents of the ``zarr_format`` view (built on first
        use)."""
        keys = self._keys.get(zarr_format)
        if keys is None:
            keys = self._keys[zarr_format] = GranuleKeys(self.refs, zarr_format)
        return keys

    def has_keys(self, zarr_format: ZarrFormat) -> bool:
        """True when the key space of ``zarr_format`` is built already."""
        return zarr_format in self._keys

    def cache_key(self, ref: ChunkRef) -> tuple[Any, ...]:
        """The chunk cache's key of the byte range ``ref`` (the range + its source's identity)."""
        return range_cache_key(*ref, self.refs.identity_of(ref[0]))

    @property
    def where(self) -> str:
        """The sidecar's path/URL, or the source's URL when opened from references."""
        return self.sidecar or self.refs.source.url

    def __repr__(self) -> str:
        return f"GranuleReader({self.where!r})"
