"""The framework-free core of the HTTP gateway (``h5sidecar serve``).

:class:`Gateway` turns a request path into bytes: it finds the granule's sidecar under DEST
(:mod:`h5sidecar.gateway._dest`), opens it as a :class:`~h5sidecar.read.zarr.store.SidecarStore`
per Zarr view (v2, v3), resolves the key with the store's key space, and reads chunk bytes with
the store's :class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher`.  The web layer
(:mod:`h5sidecar.gateway.app`) only maps this to HTTP.

Views of one granule:

* ``View(2)`` -- Zarr v2: ``.zmetadata`` (consolidated), ``.zgroup``/``.zattrs``/``.zarray``
  and chunk keys answered with the original (compressed) chunk bytes;
* ``View(3)`` -- Zarr v3: ``zarr.json`` documents (synthesized by :mod:`~h5sidecar.read.zarr._v3_metadata`),
  same chunk keys;
* ``View(3, shard=K)`` -- Zarr v3 whose ``sharding_indexed`` shards each hold K consecutive
  chunks along the first dimension (:mod:`~h5sidecar.gateway._shard`);
* ``View(N, rechunk=spec)`` -- Zarr v2/v3 whose uncompressed arrays have smaller virtual chunks,
  each a few byte runs of one stored chunk (:mod:`~h5sidecar.gateway._rechunk_view`).

Every group's metadata is served consolidated (``g/.zmetadata`` in v2, inline
``consolidated_metadata`` in each group's ``zarr.json`` in v3), so a client can open any group
directly (``xr.open_zarr(url, group="gt1l/heights")``) without listing.

Cubes (combined references of many granules, ``h5sidecar cube``) are served the same way, under
their names, in every view: a cube's fetcher may read only its members (each checked against its
own recorded identity, so a replaced member is a stale-reference error), and the gateway's
allow-list applies on top, as for granules.

Bounded memory: parsed sidecars, synthesized documents and hot chunks live in byte-bounded LRU
caches sharing ``GatewaySettings.cache_bytes``.  Bounded upstream work: every read that touches a
source holds an :class:`~h5sidecar.gateway._http_rules.Admission` slot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from h5sidecar.dest import RecordAllowList
from h5sidecar.errors import H5SidecarError, NotIndexedError
from h5sidecar.gateway._dest import DestIndex, DestSnapshot
from h5sidecar.gateway._entry_load import load_entry
from h5sidecar.gateway._http_rules import Admission, BadRequestError, etag_of
from h5sidecar.gateway._metrics import GatewayMetrics
from h5sidecar.gateway._reads import UpstreamReads
from h5sidecar.gateway._rechunk_view import rechunk_document
from h5sidecar.gateway._resolve_chunk import chunk_resolved
from h5sidecar.gateway._shard import MAX_SHARD_FACTOR
from h5sidecar.gateway._views import GranuleEntry, Resolved, View
from h5sidecar.gateway._warming import Warming
from h5sidecar.read import ByteLRU, cube_names
from h5sidecar.settings import GatewaySettings, ReadSettings, RecordSettings
from h5sidecar.sources import AllowList

__all__ = ["MAX_SHARD_FACTOR", "Gateway", "Resolved", "View"]

log = logging.getLogger("h5sidecar.gateway")

#: A miss on an unknown granule re-lists DEST at most this often (seconds).
MISS_REFRESH_SECONDS = 2.0


class Gateway:
    """Serve every granule indexed under ``dest`` as Zarr stores.

    Parameters
    ----------
    settings : GatewaySettings
        Limits, caches, allow-list extension, CORS, token (see the README, "HTTP gateway").
    dest : str
        Folder or ``s3://`` prefix of sidecars written by ``h5sidecar index``.
    storage_options : mapping, optional
        fsspec/s3fs options to list DEST, read sidecars and read sources (credentials may come
        from the standard AWS environment instead; they never appear in responses or logs).
    read_settings : ReadSettings, optional
        Fetch settings (coalescing, retries, freshness guard).  Its ``allowed_prefixes`` are
        added to the allow-list.
    refresh_seconds : float
        DEST is re-listed (and the report re-read) when the listing is older than this.
    revalidate_seconds : float
        A cached sidecar's identity (size + ETag/mtime) is re-checked at most this often, so a
        re-indexed granule is picked up without a restart.
    cubes : mapping or sequence, optional
        Datacubes to serve beside the granules: name -> URL of the cube's references, or
        ``"[NAME=]PATH"`` strings (named after the file by default; see
        :func:`h5sidecar.read._cube_view.cube_names`).  Their members must be readable under the
        allow-list, as every granule's source must.
    record_settings : RecordSettings, optional
        The record cache of an object-store DEST (default: ``from_env(RecordSettings)``; with
        the cache off the gateway keeps a private one until :meth:`close`).
    """

    def __init__(
        self,
        settings: GatewaySettings,
        dest: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        read_settings: ReadSettings | None = None,
        refresh_seconds: float = 30.0,
        revalidate_seconds: float = 10.0,
        cubes: Mapping[str, str] | Sequence[str] | None = None,
        record_settings: RecordSettings | None = None,
    ) -> None:
        self.settings = settings
        self.storage_options = dict(storage_options or {})
        self.read_settings = read_settings if read_settings is not None else ReadSettings()
        self.dest = DestIndex(dest, storage_options=self.storage_options,
                              refresh_seconds=refresh_seconds, cubes=cube_names(cubes),
                              record_settings=record_settings)  # fmt: skip
        self.revalidate_seconds = revalidate_seconds
        self.metrics = GatewayMetrics()
        budget = settings.cache_bytes
        self._entries: ByteLRU[GranuleEntry] = ByteLRU(budget // 2, size=lambda e: e.nbytes)
        self._docs: ByteLRU[bytes] = ByteLRU(budget // 8)
        self.reads = UpstreamReads(settings, self.read_settings, self.metrics,
                                   ByteLRU(budget - budget // 2 - budget // 8))  # fmt: skip
        self._snap: DestSnapshot | None = None
        self._listing: asyncio.Future[DestSnapshot] | None = None
        self._loading: dict[str, asyncio.Future[GranuleEntry]] = {}
        self._health: tuple[float, str] = (-1e9, "")
        self.warming = Warming(self.dest)  # the first look at DEST, in a thread

    def start(self) -> None:
        """Start the first look at DEST in a thread (the app does as it starts): requests
        answered meanwhile get 503 and ``Retry-After`` rather than waiting for it."""
        self.warming.start()

    def close(self) -> None:
        """Release what DEST's view holds on disk (a private record cache)."""
        self.dest.close()

    # -- DEST ------------------------------------------------------------------------------------
    @property
    def allowed_prefixes(self) -> tuple[str, ...]:
        """Source prefixes that may be read: the report's sources, ``allow``, read settings."""
        return self._allow.prefixes

    async def snapshot(self, *, max_age: float | None = None) -> DestSnapshot:
        """The listing of DEST, refreshed in a thread when older than ``max_age``."""
        limit = self.dest.refresh_seconds if max_age is None else max_age
        snap = self._snap
        if snap is None:  # the first look is the warm-up's (WarmingError until it is taken)
            snap = await self.warming.first()
            if self._snap is None:
                self._install(snap)
            snap = self._snap
        if snap is not None and time.monotonic() - snap.listed_at <= limit:
            return snap
        if self._listing is None:  # single flight: one listing for all waiting requests
            self._listing = asyncio.ensure_future(
                asyncio.to_thread(self.dest.snapshot, max_age=limit)
            )
        listing = self._listing
        try:
            snap = await asyncio.shield(listing)
        finally:
            if listing.done() and self._listing is listing:
                self._listing = None
        self._install(snap)
        return snap

    def _install(self, snap: DestSnapshot) -> None:
        prefixes = tuple(dict.fromkeys(
            (*snap.sources, *self.settings.allow, *self.read_settings.allowed_prefixes)))
        recorded = isinstance(self._allow, RecordAllowList)
        if prefixes != self._allow.prefixes or recorded != (snap.record is not None):
            # with a record, a granule's own source is allowed by a lookup, not by a list of
            # every source (a million URLs)
            self._allow = (AllowList(prefixes) if snap.record is None
                           else RecordAllowList(prefixes, snap.record))  # fmt: skip
            self._entries.clear()  # fetchers carry the allow-list: rebuild them
        if not prefixes and snap.record is None and snap is not self._snap:
            log.warning("no %s in DEST and no --allow: every chunk read will be refused (403); "
                        "pass --allow PREFIX for the sources", "run report")  # fmt: skip
        self._snap = snap
        count = self.count(snap)
        if count is not None:
            self.metrics.set("h5sidecar_granules", count)
        self.metrics.set("h5sidecar_cubes", len(snap.cubes))

    async def page(self, after: str = "", limit: int = 1000, *, prefix: str = "",
                   contains: str = "") -> list[str]:
        """Up to ``limit`` granule names after ``after``, in code-point order (see
        :meth:`DestIndex.page`); run in a thread (a substring search scans the record)."""
        snap = await self.snapshot()
        return await asyncio.to_thread(self.dest.page, snap, after, limit, prefix=prefix,
                                       contains=contains)  # fmt: skip

    def count(self, snap: DestSnapshot) -> int | None:
        """Granules served: listed, or as the record was last counted (None before then;
        counting a record runs in the background and lands between two snapshots)."""
        return snap.count if snap.record is None else self.dest.counted

    async def cubes(self) -> list[str]:
        """Names of the cubes served."""
        return list((await self.snapshot()).cubes)

    async def _find(self, path: str, max_age: float | None = None) -> tuple[str, str, str | None] | None:
        snap = await self.snapshot(max_age=max_age)
        if snap.record is None:
            return self.dest.find(snap, path)  # dictionary look-ups
        return await asyncio.to_thread(self.dest.find, snap, path)

    async def split(self, path: str) -> tuple[str, str]:
        """``(granule, key)`` of ``"<granule>/<key>"``; re-lists DEST once on a miss.

        Raises
        ------
        NotIndexedError
            No granule of that name is indexed under DEST.
        """
        found = await self._find(path)
        if found is None and (await self.snapshot()).relist_on_miss:
            found = await self._find(path, MISS_REFRESH_SECONDS)
        if found is None:
            raise NotIndexedError(
                f"no granule or cube matches {path!r}: list them at /api/granules, or index "
                "the granule (h5sidecar index SOURCE -o DEST)"
            )
        return found[0], found[1]

    async def known(self, name: str) -> str:
        """``name`` if it is a granule or cube served, else :class:`NotIndexedError`."""
        found = await self._find(name)
        if found is None or found[0] != name:
            raise NotIndexedError(f"no granule or cube {name!r} is served (see /api/granules)")
        return name

    async def health(self) -> dict[str, Any]:
        """``/healthz``'s answer: ``{"status": "ok"}``; ``"warming"`` while the first look at
        DEST is taken (with its progress, see :class:`~h5sidecar.gateway._warming.Warming`);
        ``"degraded"`` with the ``reason`` it cannot serve now (DEST or its record gone,
        unreadable or damaged).  Never waits for the warm-up.

        Probes DEST (at most once a second, in a thread): a removed or corrupt record is seen
        at once, not at the next refresh; DEST is not listed again for it.
        """
        if self._snap is None and (warming := self.warming.health()) is not None:
            return warming
        reason = await self._probe()
        return {"status": "degraded", "reason": reason} if reason else {"status": "ok"}

    async def _probe(self) -> str:
        now = time.monotonic()
        if now - self._health[0] >= 1.0:
            try:
                snap = await self.snapshot()
                await asyncio.to_thread(self.dest.probe, snap)
                reason = ""
            except H5SidecarError as exc:
                reason = str(exc)
            self._health = (time.monotonic(), reason)
        return self._health[1]

    # -- sidecars -----------------------------------------------------------------------------------
    async def entry(self, name: str) -> GranuleEntry:
        """The parsed sidecar of granule ``name`` (cached; revalidated every few seconds)."""
        cached = self._entries.get(name)
        self.metrics.inc("h5sidecar_cache_" + ("hits" if cached else "misses") + "_total",
                         cache="sidecar")  # fmt: skip
        if cached is not None and time.monotonic() - cached.checked_at < self.revalidate_seconds:
            return cached
        pending = self._loading.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._load(name, cached))
            self._loading[name] = pending
            pending.add_done_callback(lambda _: self._loading.pop(name, None))
        return await asyncio.shield(pending)

    async def _load(self, name: str, cached: GranuleEntry | None) -> GranuleEntry:
        snap = await self.snapshot()
        located = (self.dest.locate(snap, name) if snap.record is None
                   else await asyncio.to_thread(self.dest.locate, snap, name))  # fmt: skip
        if located is None:
            raise NotIndexedError(f"granule {name!r} is no longer indexed under DEST")
        url, source = located
        entry = await load_entry(name, url, source, cached, is_cube_name=name in snap.cubes,
                                 read=self.read_settings, allowed=self._allow.prefixes,
                                 storage_options=self.storage_options,
                                 max_bytes=self._entries.max_bytes)  # fmt: skip
        self._entries.put(name, entry)
        return entry

    async def view_of(self, entry: GranuleEntry, view: View) -> Any:
        """The entry's keys for ``view`` (building a v3 view takes a thread: ~1 ms/array)."""
        if not entry.has_view(view.zarr_format):
            await asyncio.to_thread(entry.keys, view.zarr_format)
            self._entries.put(entry.name, entry)  # re-charge: the entry grew
        return entry.keys(view.zarr_format)

    # -- keys -------------------------------------------------------------------------------------
    async def resolve(self, path: str, view: View) -> Resolved:
        """What ``"<granule>/<key>"`` holds in ``view`` (no source I/O).

        Raises
        ------
        NotIndexedError
            Unknown granule, or no such key.  Chunks that are not stored are absent too
            (Zarr reads them as the fill value).
        """
        name, key = await self.split(path)
        if not key:
            # zarr never asks for an empty key; fsspec's HTTP client sends one when a group or
            # variable name holds '#' or '?' (the rest of the key becomes a fragment or a query
            # the server never sees).  404 would make zarr read fill values silently.
            raise BadRequestError(
                f"no Zarr key after the granule {name!r}: names containing '#' or '?' cannot be "
                "read over HTTP with clients that do not percent-encode them (fsspec); read "
                "them through the sidecar (engine='h5sidecar' or reference://)"
            )
        entry = await self.entry(name)
        key = entry.model_key(key)  # escaped names sent as their HDF5 names
        keys = await self.view_of(entry, view)
        doc = self._document(entry, view, key)
        if doc is not None:
            return Resolved(name, key, view, "metadata", len(doc), etag_of(entry.identity, doc),
                            data=doc)  # fmt: skip
        await keys.load_manifests([key])  # a lazy sidecar's array: its records, off the loop
        return chunk_resolved(name, entry, keys, key, view, self.settings.max_response_bytes)

    def _document(self, entry: GranuleEntry, view: View, key: str) -> bytes | None:
        ck = (entry.name, entry.identity, view.name, key)
        doc = self._docs.get(ck)
        if doc is not None:
            return doc
        doc = entry.document(view, key)
        if doc is not None and view.rechunk is not None:
            doc = rechunk_document(entry.keys(view.zarr_format), key, doc, view.rechunk)
        if doc is not None and (view.rechunk is not None or entry.is_synthesized(view, key)):
            self._docs.put(ck, doc)
        return doc

    def compressed(self, res: Resolved, compress: Callable[[bytes], bytes]) -> bytes:
        """``compress(res.data)`` for a metadata document, cached beside the documents."""
        assert res.data is not None
        ck = ("gz", res.etag)
        out = self._docs.get(ck)
        if out is None:
            out = compress(res.data)
            self._docs.put(ck, out)
        return out

    # -- reads -------------------------------------------------------------------------------------
    async def read(self, res: Resolved, start: int = 0, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of the value of ``res`` (see :meth:`UpstreamReads.read`)."""
        return await self.reads.read(res, start, stop)

    def upstream(self, name: str) -> AbstractAsyncContextManager[None]:
        """Hold an upstream slot for granule ``name`` (see :meth:`UpstreamReads.upstream`)."""
        return self.reads.upstream(name)

    @property
    def admission(self) -> Admission:
        """The gateway-wide upstream slots (``max_upstream``, ``max_pending``)."""
        return self.reads.admission

    @property
    def _allow(self) -> AllowList:
        return self.reads.allow

    @_allow.setter
    def _allow(self, allow: AllowList) -> None:
        self.reads.allow = allow

    def check_sources(self, urls: Sequence[str]) -> None:
        """Raise :class:`~h5sidecar.errors.ForbiddenSourceError` unless every URL is allowed."""
        for url in urls:
            self._allow.check(url)

    def cache_stats(self) -> dict[str, Any]:
        """Byte-bounded caches: entries, bytes, hits, misses, evictions."""
        out = {}
        for name, cache in (("sidecar", self._entries), ("metadata", self._docs),
                            ("chunk", self.reads.chunks)):  # fmt: skip
            s = cache.stats
            out[name] = dataclasses.asdict(s)
            self.metrics.set("h5sidecar_cache_bytes", s.current_bytes, cache=name)
        return out
