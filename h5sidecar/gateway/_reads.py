"""The gateway's reads from sources: chunk and shard bytes, the hot-chunk cache, upstream slots.

:class:`UpstreamReads` is the part of :class:`~h5sidecar.gateway.core.Gateway` that touches
sources.  Every read checks its URLs against the allow-list before any I/O, holds one of its
granule's ``max_per_granule`` slots and then one of the gateway's ``max_upstream`` (so requests
queued behind a stalled source never hold gateway-wide slots), and goes through the granule's
:class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher` (coalescing, retries, freshness guard).  Whole
chunks up to :data:`CHUNK_CACHE_ITEM` bytes are kept in a byte-bounded LRU; a hit is served only
while its source was seen unchanged within ``revalidate_seconds``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from h5sidecar.gateway._http_rules import Admission, ResponseTooLargeError
from h5sidecar.gateway._metrics import GatewayMetrics
from h5sidecar.gateway._shard import ShardLayout
from h5sidecar.gateway._views import Resolved
from h5sidecar.read import ByteLRU, ChunkRef
from h5sidecar.settings import GatewaySettings, ReadSettings
from h5sidecar.sources import AllowList

__all__ = ["CHUNK_CACHE_ITEM", "UpstreamReads"]

#: Chunks up to this size are kept in the hot-chunk cache.
CHUNK_CACHE_ITEM = 4 * 2**20


class UpstreamReads:
    """Bytes of resolved keys, read from their sources under the gateway's limits.

    Parameters
    ----------
    settings : GatewaySettings
        ``max_upstream``, ``max_per_granule``, ``max_pending``, ``queue_timeout``,
        ``max_response_bytes``.
    read_settings : ReadSettings
        The read path's settings (kept for the fetchers).
    metrics : GatewayMetrics
        Where upstream requests/bytes and chunk-cache hits/misses are counted.
    chunks : ByteLRU
        The hot-chunk cache.
    """

    def __init__(self, settings: GatewaySettings, read_settings: ReadSettings,
                 metrics: GatewayMetrics, chunks: ByteLRU[bytes]) -> None:  # fmt: skip
        self.settings = settings
        self.read_settings = read_settings
        self.metrics = metrics
        self.chunks = chunks
        #: replaced by the gateway whenever DEST's sources change
        self.allow = AllowList(())
        self.admission = Admission(settings.max_upstream, settings.max_pending,
                                   wait_timeout=settings.queue_timeout)  # fmt: skip
        # per-granule upstream gates (created on demand, dropped when idle): one slow or
        # blocking source holds at most max_per_granule of the max_upstream slots
        self._per_granule: dict[str, Admission] = {}

    async def read(self, res: Resolved, start: int = 0, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of the value of ``res`` (the whole value by default).

        Raises
        ------
        ResponseTooLargeError
            More than ``max_response_bytes`` asked for.
        ForbiddenSourceError
            The reference points outside the allow-list (nothing is fetched).
        StaleReferenceError, SourceReadError
            From the fetcher (the source changed; reads kept failing).
        """
        stop = res.size if stop is None else stop
        if stop - start > self.settings.max_response_bytes:
            raise ResponseTooLargeError(
                f"{res.key!r} is {stop - start} bytes, more than max_response_bytes="
                f"{self.settings.max_response_bytes}: request it in parts with a Range header"
                + (" or use fewer chunks per shard" if res.kind == "shard" else "")
            )
        if res.data is not None:
            return res.data[start:stop]
        if res.ref is not None:
            return await self._read_chunk(res, res.ref, start, stop)
        assert res.layout is not None
        return await self._read_shard(res, res.layout, start, stop)

    async def _cached_chunk(self, res: Resolved, ref: ChunkRef) -> bytes | None:
        data = self.chunks.get((res.source_id, *ref))
        self.metrics.inc("h5sidecar_cache_" + ("hits" if data else "misses") + "_total",
                         cache="chunk")  # fmt: skip
        if data is not None:
            # a hit is served only while the source was seen unchanged within
            # revalidate_seconds (else one HEAD/stat; StaleReferenceError -> 409)
            assert res.fetcher is not None
            await res.fetcher.revalidate([ref[0]])
        return data

    def _keep_chunk(self, res: Resolved, ref: ChunkRef, data: bytes) -> None:
        if len(data) <= CHUNK_CACHE_ITEM:
            self.chunks.put((res.source_id, *ref), data)

    async def _read_chunk(self, res: Resolved, ref: ChunkRef, start: int, stop: int) -> bytes:
        cached = await self._cached_chunk(res, ref)
        if cached is not None:
            return cached[start:stop]
        url, offset, _ = ref
        (data,) = await self._fetch(res, [(url, offset + start, stop - start)])
        if start == 0 and stop == ref[2]:
            self._keep_chunk(res, ref, data)
        return data

    async def _read_shard(self, res: Resolved, layout: ShardLayout, start: int, stop: int) -> bytes:
        parts: list[bytes | None] = []
        wanted: list[ChunkRef] = []
        where: list[int] = []
        for piece in layout.pieces(start, stop):
            if piece.ref is None:
                parts.append(piece.data)
                continue
            assert piece.chunk is not None
            cached = await self._cached_chunk(res, piece.chunk)
            if cached is not None:
                parts.append(cached[piece.skip : piece.skip + piece.ref[2]])
                continue
            where.append(len(parts))
            parts.append(None)
            wanted.append(piece.ref)
        if wanted:
            # one batch: the fetcher plans it, so neighbouring chunks become one upstream read
            fetched = await self._fetch(res, wanted)
            for i, ref, data in zip(where, wanted, fetched, strict=True):
                parts[i] = data
                self._keep_chunk(res, ref, data)  # a chunk fetched whole is cached whole
        return b"".join(p for p in parts if p is not None)

    async def _fetch(self, res: Resolved, requests: list[ChunkRef]) -> list[bytes]:
        for url, _, _ in requests:
            self.allow.check(url)  # before any I/O, whatever the sidecar says
        assert res.fetcher is not None
        async with self.upstream(res.granule):
            plan = res.fetcher.plan(requests)
            self.metrics.inc("h5sidecar_upstream_requests_total", plan.n_requests)
            self.metrics.inc("h5sidecar_upstream_bytes_total",
                             float((plan.request_stop - plan.request_start).sum()))  # fmt: skip
            data = await res.fetcher.fetch_plan(plan)
        return [bytes(d) for d in data]

    @asynccontextmanager
    async def upstream(self, name: str) -> AsyncIterator[None]:
        """Hold an upstream slot for granule ``name``: one of its ``max_per_granule``, then one
        of the gateway's ``max_upstream`` (the granule's gate first, so requests queued behind
        a stalled source never hold gateway-wide slots).  Up to ``max_pending`` requests wait at
        each gate, for ``queue_timeout`` seconds in all.

        Raises
        ------
        SaturatedError
            ``max_pending`` requests already wait (503, ``Retry-After: 1``), or the slots did
            not come within ``queue_timeout`` (503, ``Retry-After: 2``).
        """
        gate = self._per_granule.get(name)
        if gate is None:
            s = self.settings
            gate = self._per_granule[name] = Admission(s.max_per_granule, s.max_pending,
                                                       wait_timeout=s.queue_timeout)  # fmt: skip
        # one deadline for both queues: queue_timeout bounds the whole wait for slots (not
        # request_timeout, which bounds an upstream attempt once a slot is held)
        deadline = asyncio.get_running_loop().time() + self.settings.queue_timeout
        try:
            async with gate.slot(deadline), self.admission.slot(deadline):
                yield
        finally:
            if gate.active == 0 and gate.waiting == 0 and self._per_granule.get(name) is gate:
                del self._per_granule[name]

