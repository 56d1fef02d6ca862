"""The values of a granule's Zarr keys, as the store serves them: metadata documents and inline
chunks from the key space, every other chunk a byte range of the source.

A range is read through the granule's fetcher (coalescing, concurrency, retries, allow-list,
freshness guard): concurrent single reads issued in the same event-loop turn go to it as one
batch (:class:`~h5sidecar.read._granule_fetch.ReadBatcher`), a many-key read is always one
batch, so neighbouring chunks coalesce into few requests; whole chunks are kept in the reader's
chunk cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zarr.abc.store import ByteRequest

from h5sidecar.read._granule_fetch import ReadBatcher
from h5sidecar.read._granule_reader import GranuleReader
from h5sidecar.read.zarr._byte_windows import byte_window
from h5sidecar.read.zarr._keyspace import ChunkRef, GranuleKeys, ZarrFormat

__all__ = ["KeyReads"]


class KeyReads:
    """Reads the values of one Zarr view's keys (``zarr_format``) of ``reader``'s granule.

    Parameters
    ----------
    reader : GranuleReader
        The granule: its key spaces, fetcher and chunk cache.
    zarr_format : 2 or 3
        The view whose keys are read.
    batch_reads : bool
        Coalesce concurrent :meth:`read` calls into one fetch.
    """

    def __init__(self, reader: GranuleReader, zarr_format: ZarrFormat, batch_reads: bool) -> None:
        self.reader = reader
        self.zarr_format: ZarrFormat = zarr_format
        self.fetcher = reader.fetcher
        self._batcher = ReadBatcher(self.fetcher.fetch) if batch_reads else None
        #: chunks served inline / as fill value and metadata documents served
        self.counts = {"inline_chunks": 0, "missing_chunks": 0, "metadata_reads": 0}

    @property
    def keyspace(self) -> GranuleKeys:
        """The Zarr keys and metadata documents of this view (built on first use)."""
        return self.reader.keys(self.zarr_format)

    def _note(self, key: str, value: object) -> None:
        if key in self.keyspace.documents:
            self.counts["metadata_reads"] += 1
        elif value is None:
            if self.keyspace.split_chunk_key(key) is not None:
                self.counts["missing_chunks"] += 1
        elif isinstance(value, bytes):
            self.counts["inline_chunks"] += 1

    async def read(self, key: str, byte_range: ByteRequest | None = None) -> Any:
        """The bytes of ``key`` in ``byte_range`` (``None`` for absent keys and unstored
        chunks)."""
        await self.keyspace.load_manifests([key])
        ref = self.keyspace.resolve(key)
        self._note(key, ref)
        if ref is None:
            return None
        if isinstance(ref, bytes):
            start, stop = byte_window(len(ref), byte_range)
            return ref[start:stop]
        url, offset, length = ref
        start, stop = byte_window(length, byte_range)
        if stop == start:
            return b""
        whole = start == 0 and stop == length
        if whole and self.reader.chunk_cache is not None:
            cached = self.reader.chunk_cache.get(self._cache_key(ref))
            if cached is not None:
                await self.fetcher.revalidate([url])  # the source must still be the indexed one
                self.fetcher.stats.record_cache_hit(len(cached))
                return cached
        request = (url, offset + start, stop - start)
        if self._batcher is not None:
            data = await self._batcher.read(request)
        else:
            (data,) = await self.fetcher.fetch([request])
        if whole and self.reader.chunk_cache is not None:
            self.reader.chunk_cache.put(self._cache_key(ref), bytes(data))
        return data

    def _cache_key(self, ref: ChunkRef) -> tuple[Any, ...]:
        return self.reader.cache_key(ref)

    async def read_many(self, key_ranges: Sequence[tuple[str, ByteRequest | None]]) -> list[Any]:
        """The bytes of many ``(key, byte_range)`` pairs (``None`` as in :meth:`read`), the
        source's ranges fetched in ONE batch (ranges coalesce)."""
        await self.keyspace.load_manifests([k for k, _ in key_ranges])
        out: list[Any] = [None] * len(key_ranges)
        requests: list[ChunkRef] = []
        where: list[int] = []
        for i, (key, byte_range) in enumerate(key_ranges):
            ref = self.keyspace.resolve(key)
            self._note(key, ref)
            if ref is None:
                continue
            if isinstance(ref, bytes):
                start, stop = byte_window(len(ref), byte_range)
                out[i] = ref[start:stop]
                continue
            url, offset, length = ref
            start, stop = byte_window(length, byte_range)
            if stop == start:
                out[i] = b""
                continue
            requests.append((url, offset + start, stop - start))
            where.append(i)
        if requests:
            for i, data in zip(where, await self.fetcher.fetch(requests), strict=True):
                out[i] = data
        return out
