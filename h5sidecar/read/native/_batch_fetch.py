"""Serving one batch of :class:`~h5sidecar.read.native._batch_reader.NativeReader`: the targets
and plan of its selections, then each group of the plan fetched (chunk-cache hits first, one
planned fetch of the rest) and decoded in the process-wide decode pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from h5sidecar.read._byte_lru import ByteLRU
from h5sidecar.read._shared_caches import range_cache_key
from h5sidecar.read.native._batch_parts import Target as _Target
from h5sidecar.read.native._batch_parts import check_plain_lengths as _check_plain_lengths
from h5sidecar.read.native._batch_parts import decode_all as _decode_all
from h5sidecar.read.native._batch_parts import flat_numbers as _flat_numbers
from h5sidecar.read.native._batch_parts import in_pool as _in_pool
from h5sidecar.read.native._batch_parts import load_manifests as _load_manifests
from h5sidecar.read.native._batch_plan import BatchPlan, Fetched, plan_batch
from h5sidecar.read.native._batch_plan import decode_span as _decode_span
from h5sidecar.read.native._selection import Selection
from h5sidecar.references import INLINE, MISSING, ArrayRefs, GranuleRefs
from h5sidecar.sources import ChunkFetcher, _gather_or_cancel

__all__ = ["fetch_and_decode", "fetch_rows", "read_batch"]

#: Bounds of one fetch-then-decode group (bytes of stored chunks).  Each group is at least one
#: request, so the floor sets the requests of batches under 32 x 2 MiB: with 1 MiB, the read-ahead
#: batches of a per-variable loop (about 20 MB stored each) made twice the requests of one
#: batch of the whole granule (whose groups are 2 MiB), and an endpoint that charges per request
#: (or shares the client's cores) pays for each.
_GROUP_MIN = 2 * 2**20
_GROUPS_PER_BATCH = 32


async def read_batch(reader: Any, prepared: list[tuple[str, ArrayRefs, Selection]],
                     outs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """Read the ``prepared`` selections of one batch of ``reader`` (a ``NativeReader``; into
    ``outs`` when given): targets, the plan of their stored chunks, fetched and decoded group by
    group; inline chunks decoded and unstored ones filled on the way."""
    await _load_manifests([arr for _, arr, _ in prepared])
    targets: list[_Target] = []
    stored: list[np.ndarray] = []  # per target: rows of its stored chunks
    inline_jobs: list[tuple[_Target, tuple[int, ...], bytes]] = []
    # each manifest once: a lazy array's property asks its loader every time
    manifests = [arr.manifest for _, arr, _ in prepared]
    flats = [_flat_numbers(sel.grid, arr.meta.grid_shape) for _, arr, sel in prepared]
    for (path, _, _), man, flat in zip(prepared, manifests, flats, strict=True):
        _check_plain_lengths(path, reader.codec(path), man, flat)  # before any allocation
    for k, ((path, _, sel), man) in enumerate(zip(prepared, manifests, strict=True)):
        codec = reader.codec(path)
        assert codec is not None  # _array checked
        t = _Target(path, codec, sel, None if outs is None else outs[k])
        targets.append(t)
        flat = flats[k]
        codes = man.codes.reshape(-1)[flat]
        is_stored = codes >= 0
        if is_stored.all():  # the usual array: no unwritten or inline chunk to look for
            stored.append(np.arange(codes.size))
            continue
        for row in np.flatnonzero(codes == MISSING).tolist():
            t.place(sel.grid[row], codec.fill)
        inline_jobs.extend(
            (t, tuple(sel.grid[row]), man.inline[int(flat[row])])
            for row in np.flatnonzero(codes == INLINE).tolist()
        )
        stored.append(np.flatnonzero(is_stored))
    settings = reader.fetcher.settings
    plan = plan_batch(
        targets, manifests, [arr.meta.shape for _, arr, _ in prepared], stored,
        group_min=_GROUP_MIN, groups=_GROUPS_PER_BATCH, max_request=settings.max_request,
        max_gap=settings.max_gap, subchunk_fraction=settings.subchunk_fraction,
    )  # fmt: skip
    # scan resistance: a batch larger than a quarter of the chunk cache would only evict
    # what other reads keep hot, so its chunks are not kept
    keep = reader.chunk_cache is not None and plan.total <= reader.chunk_cache.max_bytes // 4
    jobs = [fetch_and_decode(reader.refs, reader.fetcher, reader.chunk_cache, plan, lo, hi, keep)
            for lo, hi in plan.bounds]
    if inline_jobs:
        jobs.append(_in_pool(_decode_all, inline_jobs))
    if jobs:
        await _gather_or_cancel(jobs)
    return [t.result() for t in targets]


async def fetch_and_decode(refs: GranuleRefs, fetcher: ChunkFetcher, cache: ByteLRU[bytes] | None,
                           plan: BatchPlan, lo: int, hi: int, keep: bool) -> None:
    """Fetch rows ``lo:hi`` of ``plan`` (chunk-cache hits aside; ``keep``: whole chunks read
    are put in ``cache``) and decode them in the decode pool."""
    urls = plan.urls
    got = Fetched(hi - lo)
    missing: Sequence[int] = range(hi - lo)
    hit_urls: set[str] = set()
    if cache is not None and len(cache):  # an empty cache (a cold read) is not asked
        misses: list[int] = []
        identity_of = refs.identity_of
        for j, (u, o, n) in enumerate(zip(plan.url[lo:hi].tolist(), plan.offset[lo:hi].tolist(),
                                          plan.length[lo:hi].tolist(), strict=True)):  # fmt: skip
            data = cache.get(range_cache_key(urls[u], o, n, identity_of(urls[u])))
            if data is None:
                misses.append(j)
                continue
            got.datas[j] = data
            hit_urls.add(urls[u])
            fetcher.stats.record_cache_hit(len(data))
            if lo + j in plan.sub:  # the whole chunk: decode it as usual
                got.whole.add(lo + j)
        missing = misses
    if missing:
        await fetch_rows(fetcher, plan, lo, missing, got)
        if keep and cache is not None:
            for j in missing:
                if lo + j not in plan.sub:
                    u = urls[int(plan.url[lo + j])]
                    o, n = int(plan.offset[lo + j]), int(plan.length[lo + j])
                    cache.put(range_cache_key(u, o, n, refs.identity_of(u)),
                              bytes(got.data(j, n)))  # fmt: skip
    if hit_urls:
        # cached bytes are served only for a source seen unchanged recently (the fetch
        # above counts): else one HEAD/stat, StaleReferenceError if it changed
        await fetcher.revalidate(hit_urls)
    await _in_pool(_decode_span, plan, lo, hi, got)

async def fetch_rows(fetcher: ChunkFetcher, plan: BatchPlan, lo: int, rows: Sequence[int],
                     got: Fetched) -> None:
    """Fetch rows ``lo + rows`` of ``plan`` into ``got``: a whole chunk is left in its
    span's bytes (cut where it is decoded, no view per chunk held meanwhile); a chunk read
    in runs gets the list of its runs' bytes (those never go to the whole-chunk cache)."""
    at = lo + np.asarray(rows, dtype=np.int64)
    codes, offsets, lengths = plan.url[at], plan.offset[at], plan.length[at]
    whole = np.ones(at.size, bool)
    runs = ([(k, plan.sub[i]) for k, i in enumerate(at.tolist()) if i in plan.sub]
            if plan.sub else [])
    if runs:  # each such chunk's runs are asked after the whole chunks
        whole[[k for k, _ in runs]] = False
        parts = [(codes[k:k + 1].repeat(s.starts.size), offsets[k] + s.starts,
                  s.stops - s.starts) for k, s in runs]  # fmt: skip
        codes = np.concatenate([codes[whole], *(p[0] for p in parts)])
        offsets = np.concatenate([offsets[whole], *(p[1] for p in parts)])
        lengths = np.concatenate([lengths[whole], *(p[2] for p in parts)])
    io = fetcher.plan_coded(plan.urls, codes, offsets, lengths)
    got.spans = await fetcher.fetch_spans(io)
    n_whole = int(whole.sum())
    rows_whole = at[whole] - lo
    got.span[rows_whole] = io.range_span[:n_whole]
    got.start[rows_whole] = io.range_offset[:n_whole]
    if runs:
        views = io.slice_spans(got.spans, copy=False)[n_whole:]
        i = 0
        for k, s in runs:
            got.datas[int(at[k]) - lo] = views[i : i + s.starts.size]
            i += s.starts.size
