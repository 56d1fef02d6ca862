"""Whole 1-D arrays of many granules in one fetch: what a datacube build reads of each member.

A cube build reads the concat coordinate (``time``) and the small shared coordinates (``lat``,
``lon``) of every granule: thousands of arrays of one or a few chunks each.  The batch reader
(:class:`~h5sidecar.read.native._batch_reader.NativeReader`) plans any selection of any array; per array it
builds a selection grid, an output box, a sub-chunk plan and a decode job, ~0.2 ms of CPU that
is most of a build's read at a thousand granules.  :func:`read_vectors` reads whole 1-D arrays
only: each chunk's byte range straight from its manifest, all ranges in one
:meth:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher.fetch` (the same allow-list, coalescing,
concurrency, retries and freshness guard: every member's bytes are served only from a
response that matches the identity its sidecar recorded), one codec per distinct encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from h5sidecar.errors import UnsupportedFeatureError

# the one way a reader of combined references makes its fetcher (re-exported for the cube build)
from h5sidecar.read._granule_fetch import member_fetcher
from h5sidecar.read.native._batch_parts import out_dtype
from h5sidecar.read.native._decode import ChunkCodec
from h5sidecar.references import INLINE, MISSING, ArrayRefs
from h5sidecar.sources import ChunkFetcher

__all__ = ["member_fetcher", "read_vectors", "vector_codecs"]


def vector_codecs(arrays: Sequence[ArrayRefs]) -> list[ChunkCodec] | None:
    """Each array's codec (one per distinct encoding), or None when one of them is not a
    1-D array of numbers this module decodes (the caller then reads them the general way)."""
    memo: dict[Any, ChunkCodec | None] = {}
    out = []
    for arr in arrays:
        meta = arr.meta
        if len(meta.shape) != 1:
            return None
        fill = arr.zarray_fill_value()
        key = (repr(meta.dtype), meta.chunks, repr(fill), meta.order,
               repr([dict(f) for f in meta.filters]),
               repr(None if meta.compressor is None else dict(meta.compressor)))  # fmt: skip
        if key not in memo:
            try:
                memo[key] = ChunkCodec.for_array(meta.zarray(fill_value=fill), meta.numpy_dtype)
            except UnsupportedFeatureError:
                memo[key] = None
        codec = memo[key]
        if codec is None:
            return None
        out.append(codec)
    return out


def read_vectors(
    arrays: Sequence[ArrayRefs], codecs: Sequence[ChunkCodec], fetcher: ChunkFetcher
) -> list[np.ndarray]:
    """The whole values of 1-D ``arrays`` (manifests loaded, codecs from
    :func:`vector_codecs`), numbers in native byte order, read in one fetch.

    Raises
    ------
    ChunkDecodeError, StaleReferenceError, SourceReadError, ForbiddenSourceError
        As the fetch and decode steps raise them (the first failure: callers that must name
        every failing array read again the general way).
    """
    requests: list[tuple[str, int, int]] = []
    # per array: (chunk number, request index or -1 for inline, inline bytes) of its chunks
    plans: list[list[tuple[int, int, Any]]] = []
    outs: list[np.ndarray] = []
    for arr, codec in zip(arrays, codecs, strict=True):
        man = arr.manifest
        out = np.empty(arr.meta.shape, dtype=out_dtype(codec.dtype))
        outs.append(out)
        plan: list[tuple[int, int, Any]] = []
        codes = man.codes.reshape(-1).tolist()
        offsets = lengths = None
        for k, code in enumerate(codes):
            if code == MISSING:
                _place(out, codec, k, codec.fill)
            elif code == INLINE:
                plan.append((k, -1, man.inline[k]))
            else:
                if offsets is None:
                    offsets = man.offsets.reshape(-1)
                    lengths = man.lengths.reshape(-1)
                plan.append((k, len(requests), None))
                requests.append((man.urls[code], int(offsets[k]), int(lengths[k])))  # type: ignore[index]
        plans.append(plan)
    got = fetcher.fetch_sync(requests) if requests else []
    for arr, codec, out, plan in zip(arrays, codecs, outs, plans, strict=True):
        for k, req, inline in plan:
            data = inline if req < 0 else got[req]
            _place(out, codec, k, codec.decode(data, where=f"{arr.path} ({k},)"))
    return outs


def _place(out: np.ndarray, codec: ChunkCodec, k: int, chunk: Any) -> None:
    """Chunk ``k`` (decoded, edge chunks stored whole; or a fill scalar) into ``out``."""
    c = codec.chunks[0]
    start = k * c
    stop = min(out.shape[0], start + c)
    out[start:stop] = chunk if not isinstance(chunk, np.ndarray) else chunk[: stop - start]
