"""How every reader of a granule fetches: the allow-listed fetcher, batching of concurrent reads.

Shared by the granule reader (:mod:`h5sidecar.read._granule_reader`), the zarr store, the fsspec
filesystem and the datacube build, so all of them read by the same rules.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from h5sidecar.read.zarr._keyspace import ChunkRef
from h5sidecar.references import ArrayRefs, GranuleRefs, MemberTable, SourceInfo
from h5sidecar.settings import ReadSettings
from h5sidecar.sources import ChunkFetcher

__all__ = [
    "ReadBatcher",
    "make_fetcher",
    "member_fetcher",
    "refs_equal",
]



def _same_dir(url: str, other: str) -> bool:
    return url.rpartition("/")[0] == other.rpartition("/")[0]


def make_fetcher(
    refs: GranuleRefs, settings: ReadSettings, storage_options: Mapping[str, Any] | None
) -> ChunkFetcher:
    """A fetcher allowed to read exactly the objects ``refs`` needs.

    With no explicit ``settings.allowed_prefixes``, the allow-list is the granule itself plus
    companion files beside it (HDF5 external storage keeps raw data in a file next to the
    granule).  A reference to anything else is refused by the fetcher
    (:class:`~h5sidecar.errors.ForbiddenSourceError`) unless its prefix is allowed explicitly.
    A source whose identity is unknown (a sidecar written by plain kerchunk: size -1) is allowed
    but not freshness-checked.  Combined references (a datacube, ``refs.members``) allow exactly
    their members' URLs (and companion files beside them), and each chunk is checked against its
    own member's identity (:func:`member_fetcher`).
    """
    if refs.members:
        return member_fetcher(refs.members, refs.arrays.values(), settings, storage_options)
    src = refs.source
    known = [src] if src.size >= 0 else []
    if not settings.allowed_prefixes:
        urls = {u for arr in refs.arrays.values() for u in arr.urls}  # loads no manifest
        companions = sorted(u for u in urls if u != src.url and _same_dir(u, src.url))
        if companions or not known:
            settings = dataclasses.replace(settings, allowed_prefixes=(src.url, *companions))
    return ChunkFetcher(settings, storage_options=storage_options, sources=known)


def member_fetcher(
    members: Sequence[SourceInfo] | MemberTable, arrays: Iterable[ArrayRefs],
    settings: ReadSettings, storage_options: Mapping[str, Any] | None,
) -> ChunkFetcher:
    """A fetcher for the chunks of ``arrays`` of combined references (a datacube, or the
    granules a cube is built from): with no explicit ``allowed_prefixes``, allowed to read
    exactly the ``members`` and companion files beside them (chunk URLs in a member's folder),
    each chunk checked against its own member's identity.

    Nothing is done per member here: the members are looked up in their table when read
    (:class:`~h5sidecar.sources._allow.MemberAllowList`), and the arrays whose chunk URLs are
    the members' own (a cube's arrays along its dimension) are not listed at all.
    """
    table = members if isinstance(members, MemberTable) else MemberTable.of(members)
    # the other arrays' URLs (held once, not per member): the candidate companions
    others = {u: None for arr in arrays if not arr.urls_are_members for u in arr.urls}
    return ChunkFetcher(settings, storage_options=storage_options, members=table,
                        member_companions=others)


class ReadBatcher:
    """Collects the byte ranges requested in one event-loop turn and fetches them together.

    zarr reads the chunks of a selection with one ``Store.get`` per chunk, issued concurrently.
    Each call parks its range here and awaits a future; a callback scheduled for the end of the
    turn sends all parked ranges to the fetcher in one batch (one plan, so adjacent chunks
    coalesce into one request).  Batches are kept per event loop, since zarr's loop and the
    caller's loop may both use the store.
    """

    def __init__(self, fetch: Callable[[list[ChunkRef]], Awaitable[list[Any]]]) -> None:
        self._fetch = fetch
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[ChunkRef, asyncio.Future]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def read(self, ref: ChunkRef) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        batch = self._pending.get(loop)
        if batch is None:
            batch = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        batch.append((ref, fut))
        return await fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop, [])
        live = [(r, f) for r, f in batch if not f.done()]  # callers cancelled meanwhile
        if live:
            task = loop.create_task(self._run(live))
            self._tasks.add(task)  # keep a reference until done (tasks are weakly held)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[ChunkRef, asyncio.Future]]) -> None:
        try:
            data = await self._fetch([r for r, _ in batch])
        except Exception as exc:  # noqa: BLE001 - not swallowed: every waiting caller re-raises it
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, fut), value in zip(batch, data, strict=True):
            if not fut.done():
                fut.set_result(value)


def refs_equal(a: GranuleRefs, b: GranuleRefs) -> bool:
    """Equality of two GranuleRefs that tolerates checksum arrays (numpy ``==`` is elementwise)."""
    if (a.source, dict(a.groups), a.skipped, a.members) != (
        b.source, dict(b.groups), b.skipped, b.members
    ):
        return False
    if list(a.arrays) != list(b.arrays):
        return False
    for path, x in a.arrays.items():
        y = b.arrays[path]
        if (x.meta, x.manifest, x.status, x.note) != (y.meta, y.manifest, y.status, y.note):
            return False
        if x.checksums is None or y.checksums is None:
            if x.checksums is not y.checksums:
                return False
        elif not np.array_equal(x.checksums, y.checksums):
            return False
    return True
