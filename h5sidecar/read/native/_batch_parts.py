"""The pieces of a batch read (:mod:`h5sidecar.read.native._batch_reader`): the output box of each selection,
the stored chunks a batch reads, and their decoding in the process-wide decode pool."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read.native._decode import ChunkCodec, decode_executor
from h5sidecar.read.native._selection import Selection, place_chunk
from h5sidecar.references import ArrayRefs, ChunkManifest

__all__ = ["Target", "check_plain_lengths", "decode_all", "flat_numbers", "in_pool",
           "load_manifests", "out_dtype"]


def out_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype reads return: numbers in this machine's byte order (as xarray and h5py give
    them), structured and byte-string types as stored."""
    return dtype.newbyteorder("=") if dtype.fields is None and dtype.kind in "biufc" else dtype


class Target:
    """One selection being read: its output box and how chunks land in it."""

    __slots__ = ("codec", "flat", "out", "path", "sel")

    def __init__(self, path: str, codec: ChunkCodec, sel: Selection,
                 out: np.ndarray | None = None) -> None:
        self.path = path
        self.codec = codec
        self.sel = sel
        dtype = out_dtype(codec.dtype)
        if out is None:
            out = np.empty(sel.shape, dtype=dtype, order=codec.order)  # type: ignore[call-overload]
        elif (out.shape != tuple(sel.shape) or out.dtype != dtype or not out.flags.writeable
              or not (out.flags.c_contiguous if codec.order == "C" else out.flags.f_contiguous)):
            raise ValueError(f"{path}: an output array for this read must be a writable, "
                             f"{codec.order}-contiguous {dtype} array of shape {tuple(sel.shape)}, "
                             f"got {out.dtype} {out.shape}")
        self.out = out
        #: the output's bytes, where chunks decoded in place land (C-contiguous outputs of
        #: numbers only: strings are copied)
        self.flat = (out.reshape(-1).view(np.uint8)
                     if out.flags.c_contiguous and not codec.strings else None)

    def place(self, index: Sequence[int], chunk: Any) -> None:
        place_chunk(self.out, self.sel, self.codec.chunks, index, chunk)

    def decode_place(self, index: Sequence[int], data: Any) -> None:
        dest = self.direct(index)
        chunk = self.codec.decode(data, where=f"{self.path} {tuple(index)}", dest=dest)
        if dest is None:
            self.place(index, chunk)

    def direct(self, index: Sequence[int]) -> np.ndarray | None:
        """The bytes of the output a whole chunk maps to, when the chunk can be decoded
        straight into them (it lies wholly inside the selection, the region is contiguous and
        the output keeps the stored byte order), else None."""
        codec = self.codec
        if codec.order != "C" or self.out.dtype != codec.dtype or codec.strings:
            return None
        dst = []
        for i, c, a, n in zip(index, codec.chunks, self.sel.lo, self.sel.shape, strict=True):
            start = i * c - a
            if start < 0 or start + c > n:
                return None  # an edge chunk, or one the selection cuts
            dst.append(slice(start, start + c))
        region = self.out[tuple(dst)] if dst else self.out  # out[()] of a 0-d array copies
        if not region.flags.c_contiguous:
            return None
        return region.reshape(-1).view(np.uint8)

    def result(self) -> np.ndarray:
        res = self.out[self.sel.post] if self.sel.post else self.out
        if self.codec.strings and not isinstance(res, np.ndarray):
            # one string taken by integers: a 0-d array of the strings' dtype, as zarr gives
            res = np.array(res, dtype=self.out.dtype)
        return res  # type: ignore[no-any-return]


def decode_all(jobs: list[tuple[Target, tuple[int, ...], Any]]) -> None:
    for target, index, data in jobs:
        target.decode_place(index, data)


async def in_pool(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(decode_executor(), fn, *args)


def check_plain_lengths(path: str, codec: ChunkCodec | None, manifest: ChunkManifest,
                        flat: np.ndarray) -> None:  # fmt: skip
    """Refuse stored chunks of an array without codecs whose length is not one chunk's.

    Such a chunk's bytes *are* the values, so its length is known (edge chunks are stored
    whole): a planted sidecar declaring 4 GB chunks stored in 384 bytes is refused here, before
    the batch allocates its outputs, and a sub-chunk read never runs past a short chunk.

    Raises
    ------
    InvalidReferenceError
        When a chunk of ``flat`` (flat chunk numbers) is stored in another number of bytes.
    """
    if codec is None or codec.codecs or not flat.size:
        return
    codes = manifest.codes.reshape(-1)[flat]
    lengths = manifest.lengths.reshape(-1)[flat][codes >= 0]
    wrong = np.flatnonzero(lengths != codec.chunk_nbytes)
    if wrong.size:
        raise InvalidReferenceError(
            f"{path}: a chunk is stored in {int(lengths[wrong[0]])} bytes but the array has no "
            f"codec, so each chunk is {codec.chunk_nbytes} bytes ({codec.chunks} x "
            f"{codec.dtype}); the sidecar is corrupt: re-index the granule"
        )


def flat_numbers(grid: np.ndarray, grid_shape: tuple[int, ...]) -> np.ndarray:
    """Flat (C-order) chunk numbers of grid indices (``[n, ndim]``)."""
    if not grid_shape:
        return np.zeros(grid.shape[0], dtype=np.int64)
    return np.ravel_multi_index(tuple(grid.T), grid_shape).astype(np.int64)


#: Threads that load the manifests a batch needs (each takes the next array until none is left)
MANIFEST_THREADS = 8


async def load_manifests(arrays: list[ArrayRefs]) -> None:
    """Load, concurrently in threads, the manifests not in memory yet (lazy sidecars).

    A few threads share the work, each loading the next array until none is left: a batch of
    a thousand arrays costs a few hops to a thread, not a thousand (a compact sidecar's
    manifests are built from one file in memory, which is CPU work), while manifests that
    each need a fetch (record files) still load several at a time.
    """
    pending = deque({id(a): a for a in arrays if not getattr(a, "manifest_loaded", True)}.values())
    if pending:
        workers = min(len(pending), MANIFEST_THREADS)
        await asyncio.gather(*(asyncio.to_thread(_touch_all, pending) for _ in range(workers)))


def _touch_all(pending: deque[ArrayRefs]) -> None:
    while True:
        try:
            arr = pending.popleft()  # atomic: each array is taken by one thread
        except IndexError:
            return
        arr.manifest  # noqa: B018 - the access loads it
