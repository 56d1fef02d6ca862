"""Batch reads that bypass zarr: one fetch plan per batch, chunks decoded in threads.

:class:`NativeReader` reads basic selections (integers and slices) of any number of a granule's
arrays at once:

1. the manifests the batch needs are loaded concurrently (lazy Parquet sidecars);
2. every stored chunk the selections touch becomes one row of a plan made of arrays
   (:mod:`~h5sidecar.read.native._batch_plan`: source, offset, length, selection, where it lands),
   sorted by position in the source and cut into groups of a few MiB;
3. each group is fetched by the shared :class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher`
   (coalesced, concurrent, retried, freshness-checked) and, as soon as its bytes arrive, decoded
   in the process-wide decode pool (:func:`~h5sidecar.read.native._decode.decode_executor`), one task
   per group, straight into the output arrays -- so decoding overlaps the network and uses
   every core;
4. unstored chunks read as the fill value and inline chunks are decoded from the sidecar.

Values are those zarr returns for the same Zarr v2 metadata (the codec chain and fill value are
parsed from the very ``.zarray`` the store serves), with numbers in native byte order; the tests
compare both with h5py.  Whole chunks that lie inside a selection are inflated straight into
the output (no intermediate buffer).  The xarray engine's arrays
(:class:`~h5sidecar.read.xarray._lazy_array.SidecarArray`), :func:`~h5sidecar.read.native._load.read_arrays`
and :func:`~h5sidecar.read.native._load.load` read through this path, variable-length UTF-8
strings included (materialised by the indexer; read as zarr reads them, ``StringDType``); other
arrays of Python objects are read through zarr.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError, did_you_mean
from h5sidecar.read._byte_lru import ByteLRU
from h5sidecar.read._shared_caches import range_cache_key
from h5sidecar.read.native._batch_fetch import read_batch
from h5sidecar.read.native._batch_parts import out_dtype
from h5sidecar.read.native._decode import ChunkCodec
from h5sidecar.read.native._prefetch import is_whole, is_whole_key, plan_ahead, plan_refill
from h5sidecar.read.native._selection import Selection, chunk_selection
from h5sidecar.references import ArrayRefs, GranuleRefs
from h5sidecar.sources import ChunkFetcher

__all__ = ["NativeReader", "out_dtype"]


Item = tuple[str, tuple[Any, ...]]


class NativeReader:
    """Read selections of a granule's arrays without zarr (see the module docstring).

    Parameters
    ----------
    refs : GranuleRefs
    fetcher : ChunkFetcher
        Shared with the store that owns this reader (its counters count these reads).
    chunk_cache : ByteLRU or None
        Whole encoded chunks kept between reads (the store's cache); None disables it.
    """

    def __init__(
        self, refs: GranuleRefs, fetcher: ChunkFetcher, chunk_cache: ByteLRU[bytes] | None = None
    ) -> None:
        self.refs = refs
        self.fetcher = fetcher
        self.chunk_cache = chunk_cache
        self._codecs: dict[str, ChunkCodec | None] = {}
        self._pending: dict[asyncio.AbstractEventLoop,
                           list[tuple[list[Any], asyncio.Future[Any], bool]]]
        self._pending = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._prefetched: dict[str, np.ndarray] = {}  # see prefetch() and _plan_ahead()
        self._ahead_inflight: dict[str, asyncio.Future[Any]] = {}  # see _read_ahead()
        #: arrays opened as lazy variables through this reader, in order (read-ahead candidates)
        self.opened: dict[str, None] = {}
        self._ahead_done: set[str] = set()  # read, or read ahead, once already
        #: (len(opened), opened arrays not in _ahead_done then): see _prefetch.not_read_yet
        self._not_read_memo: tuple[int, list[str]] | None = None
        self._small_reads = 0  # whole reads of small arrays served in earlier batches
        self._large_reads = 0  # and of larger ones in a row (see read.native._prefetch.follow_on)
        self._refilling = False  # a loop over small arrays read ahead: see plan_refill
        self._opening = 0  # > 0 while xarray opens datasets over this reader (see opening())

    def __reduce__(self) -> tuple[Any, ...]:
        # what travels to a Dask worker: the references and the fetcher (no credentials, see
        # ChunkFetcher); a worker uses its own process-wide chunk cache, never a pickled one
        return (_rebuild, (self.refs, self.fetcher, self.chunk_cache is not None))

    def codec(self, path: str) -> ChunkCodec | None:
        """The codec of array ``path``, or None when it must be read through zarr (arrays of
        Python objects other than variable-length UTF-8 strings)."""
        if path not in self._codecs:
            arr = self.refs.arrays[path]
            zarray = arr.meta.zarray(fill_value=arr.zarray_fill_value())
            self._codecs[path] = ChunkCodec.for_array(zarray, arr.meta.numpy_dtype,
                                                      strings=True)
        return self._codecs[path]

    def held(self, path: str) -> np.ndarray | None:
        """The whole array ``path`` when read-ahead or :meth:`prefetch` holds it (without
        taking it: its next whole read still gets it), else None."""
        return self._prefetched.get(path)

    def supports(self, path: str) -> bool:
        """True when array ``path`` can be read by this reader (False for arrays of Python
        objects other than UTF-8 strings, and for codecs numcodecs cannot build: zarr then
        reports those on read)."""
        try:
            return path in self.refs.arrays and self.codec(path) is not None
        except InvalidReferenceError:
            return False

    def read_sync(self, items: Sequence[Item]) -> list[np.ndarray]:
        """Blocking :meth:`read`, run on fsspec's I/O loop (call it from any thread but that
        loop's own)."""
        from h5sidecar._compat.fsspec import run_sync

        held = self._take_held(items)
        if held is not None:
            return held
        return run_sync(self.read, items)  # type: ignore[no-any-return]

    def _take_held(self, items: Sequence[Item]) -> list[np.ndarray] | None:
        """The arrays of a read that read-ahead holds whole, taken on the calling thread: a
        loop over variables then costs no hop to the I/O loop per variable (the loop thread
        only adds to :attr:`_prefetched`; ``in`` and ``pop`` are atomic).  None when any item
        is not held."""
        if not self._prefetched:
            return None
        for path, key in items:
            arr = self.refs.arrays.get(path)
            if path not in self._prefetched or arr is None:
                return None
            if not is_whole_key(key, arr.meta.shape):
                return None
        taken = [(p, self._prefetched.pop(p, None)) for p, _ in items]
        if any(a is None for _, a in taken):  # another thread took one first: put back, read
            for p, a in taken:
                if a is not None:
                    self._prefetched.setdefault(p, a)
            return None
        if self._refilling and not self._ahead_inflight:
            from h5sidecar._compat.fsspec import io_loop

            # the decision and the read-ahead belong to the I/O loop (they touch its batch)
            io_loop().call_soon_threadsafe(self._refill, taken[-1][0])
        return [a for _, a in taken]  # type: ignore[misc]

    def _refill(self, handed: str) -> None:
        """Start the next read-ahead of a loop that took ``handed`` from what is held
        (:func:`~h5sidecar.read.native._prefetch.plan_refill`); runs on the event loop."""
        ahead = plan_refill(self, handed)
        if ahead:
            self._read_ahead(ahead)

    async def read(self, items: Sequence[Item]) -> list[np.ndarray]:
        """Read ``(array path, key)`` selections; ``key`` holds one int or slice per axis.
        Numbers come back in native byte order (:func:`out_dtype`).

        Reads requested in the same event-loop turn (``Dataset.load_async`` awaits every
        variable at once; Dask threads call :meth:`read_sync` concurrently) are served as one
        batch, so their chunks share one coalesced fetch plan.

        Raises
        ------
        KeyError, TypeError
            For an array the sidecar does not have, or one this reader does not decode (see
            :meth:`supports`).
        IndexError
            For an out-of-range integer or a key of the wrong length.
        ChunkDecodeError, StaleReferenceError, SourceReadError, ForbiddenSourceError
            As the fetch and decode steps raise them.
        """
        # checked here, so a bad key fails its own caller and never a shared batch
        prepared: list[tuple[str, ArrayRefs, Selection]] = []
        done: dict[int, np.ndarray] = {}
        waiting: dict[int, tuple[str, ArrayRefs, Selection]] = {}
        handed = None
        for i, (path, key) in enumerate(items):
            arr = self._array(path)
            sel = chunk_selection(arr.meta.shape, arr.meta.chunks, key)
            if is_whole(sel, arr.meta.shape):
                if path in self._prefetched:
                    done[i] = self._prefetched.pop(path)  # read ahead: handed out once
                    handed = path
                    continue
                if path in self._ahead_inflight:  # being read ahead: wait, never decode twice
                    waiting[i] = (path, arr, sel)
                    continue
            prepared.append((path, arr, sel))
        fut = None
        if handed is not None:
            self._refill(handed)
        if prepared:
            ahead = plan_ahead(self, prepared)
            fut = self._enqueue(prepared, optional=False)
            if ahead:
                self._read_ahead(ahead)
        if waiting:
            # a read-ahead that failed, or whose array another read took first: read it now
            paths = {p for p, _, _ in waiting.values()}
            await asyncio.gather(*(asyncio.shield(self._ahead_inflight[p]) for p in paths),
                                 return_exceptions=True)
            again = []
            for i, (path, _, _) in waiting.items():
                if path in self._prefetched:
                    done[i] = self._prefetched.pop(path)
                else:
                    again.append(i)
            if again:
                rest = await self._enqueue([waiting[i] for i in again], optional=False)
                done.update(zip(again, rest, strict=True))
        read = iter(await fut if fut is not None else ())
        return [done[i] if i in done else next(read) for i in range(len(items))]

    async def read_into(self, items: Sequence[Item], outs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """:meth:`read` decoding into ``outs`` (one per item: a writable, contiguous array of
        the selection's shape and :func:`out_dtype`), as one batch of its own.  A caller that
        reads block after block into the same arrays allocates (and page-faults) nothing per
        block.  Returns the selections (views of ``outs``).

        Raises
        ------
        ValueError
            When ``outs`` does not hold one array of the right shape and dtype per item.
        """
        if len(outs) != len(items):
            raise ValueError(f"{len(items)} selections but {len(outs)} output arrays")
        prepared = []
        for path, key in items:
            arr = self._array(path)
            prepared.append((path, arr, chunk_selection(arr.meta.shape, arr.meta.chunks, key)))
        return await self._read_batch(prepared, outs)

    def _read_ahead(self, ahead: list[tuple[str, ArrayRefs, Selection]]) -> None:
        """Add whole reads of small arrays to this turn's batch; when they arrive they are held
        for their own reads (:attr:`_prefetched`), which until then wait for them
        (:attr:`_ahead_inflight`) instead of reading them again."""
        fut = self._enqueue(ahead, optional=True)
        paths = [p for p, _, _ in ahead]
        self._ahead_inflight.update(dict.fromkeys(paths, fut))

        def arrived(f: asyncio.Future[Any]) -> None:
            for p in paths:
                if self._ahead_inflight.get(p) is f:
                    del self._ahead_inflight[p]
            arrays = None if f.cancelled() or f.exception() is not None else f.result()
            if arrays is not None:  # None: a neighbour failed; it raises when read itself
                self._prefetched.update(zip(paths, arrays, strict=True))

        # registered first, so the arrays are held before any waiting read resumes
        fut.add_done_callback(arrived)

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        """Reads made inside this block (xarray reading coordinates and small variables while
        it opens a Dataset) neither trigger nor count towards reading ahead."""
        self._opening += 1
        try:
            yield
        finally:
            self._opening -= 1

    def _enqueue(self, prepared: list[Any], *, optional: bool) -> asyncio.Future[Any]:
        """Park selections for the batch of this event-loop turn; the future gets their arrays
        (for ``optional`` read-ahead: None if the batch failed with them)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        pending.append((prepared, fut, optional))
        return fut

    def prefetch(self, whole: Iterable[str] = (), edges: Iterable[str] = ()) -> None:
        """Read in one batch what xarray is about to read one small request at a time while it
        opens groups (blocking; call it from outside fsspec's loop).

        ``whole`` arrays (the dimension coordinates xarray indexes) are kept decoded until they
        are read once, whole; the first and last chunks of ``edges`` (CF time variables, whose
        first and last values xarray peeks at to choose a dtype) go to the chunk cache.
        """
        from h5sidecar._compat.fsspec import run_sync

        whole = [p for p in dict.fromkeys(whole) if self.supports(p)]
        edge_refs: list[tuple[str, int, int]] = []
        for path in dict.fromkeys(edges):
            man = self.refs.arrays[path].manifest
            grid = man.grid_shape
            if self.chunk_cache is None or (grid and 0 in grid):
                continue
            for index in {tuple(0 for _ in grid), tuple(g - 1 for g in grid)}:
                ref = man.get(index)
                if isinstance(ref, tuple):
                    edge_refs.append(ref)

        async def both() -> None:
            keys = [(p, (slice(None),) * len(self.refs.arrays[p].meta.shape)) for p in whole]
            arrays, datas = await asyncio.gather(
                self.read(keys) if keys else asyncio.sleep(0, []),
                self.fetcher.fetch(edge_refs) if edge_refs else asyncio.sleep(0, []),
            )
            self._prefetched.update(zip(whole, arrays, strict=True))
            for ref, data in zip(edge_refs, datas, strict=True):
                self.chunk_cache.put(range_cache_key(*ref, self.refs.identity_of(ref[0])), data)  # type: ignore[union-attr]

        run_sync(both)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = [x for x in self._pending.pop(loop, []) if not x[1].done()]
        if batch:
            task = loop.create_task(self._serve(batch))
            self._tasks.add(task)  # tasks are weakly held: keep it until done
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, batch: list[tuple[list[Any], asyncio.Future[Any], bool]]) -> None:
        try:
            results = await self._read_batch([x for prepared, _, _ in batch for x in prepared])
        except BaseException as exc:
            optional = [x for x in batch if x[2]]
            if optional and isinstance(exc, Exception):
                # a read-ahead array must never fail the reads that asked for others: serve
                # those alone (the failing array raises when it is itself read)
                for _, fut, _ in optional:
                    if not fut.done():
                        fut.set_result(None)
                required = [x for x in batch if not x[2]]
                if required:
                    await self._serve(required)
                return
            if len(batch) > 1 and isinstance(exc, Exception):
                # independent callers shared the batch: serve each alone, so a bad chunk fails
                # only the reads that need it (the others' chunks are fetched once more)
                await asyncio.gather(*(self._serve([x]) for x in batch))
                return
            for _, fut, _ in batch:  # not swallowed: every waiting caller re-raises it
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        i = 0
        for prepared, fut, _ in batch:
            if not fut.done():
                fut.set_result(results[i : i + len(prepared)])
            i += len(prepared)

    async def _read_batch(self, prepared: list[tuple[str, ArrayRefs, Selection]],
                          outs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        return await read_batch(self, prepared, outs)

    # -- internals -----------------------------------------------------------------------------
    def _array(self, path: str) -> ArrayRefs:
        arr = self.refs.arrays.get(path)
        if arr is None:
            raise KeyError(
                f"no array {path!r} in the sidecar of {self.refs.source.url}; "
                + did_you_mean(path, self.refs.arrays)
            )
        if self.codec(path) is None:
            raise TypeError(
                f"{path} holds Python objects ({arr.meta.dtype}); read it through zarr "
                "(SidecarStore) instead"
            )
        return arr


def _rebuild(refs: GranuleRefs, fetcher: ChunkFetcher, cached: bool) -> NativeReader:
    from h5sidecar.read._shared_caches import CHUNKS, fit_shared_caches

    if cached:
        fit_shared_caches()  # this process's sizes (a worker's own environment)
    return NativeReader(refs, fetcher, CHUNKS if cached else None)
