"""The lazy array behind each variable the xarray engine opens: reads go to the native batch
reader (:mod:`h5sidecar.read.native._batch_reader`) instead of zarr's per-chunk pipeline."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from h5sidecar.read.native._batch_reader import NativeReader, out_dtype

__all__ = ["Box", "SidecarArray", "held_peeks"]

#: One held box: where it starts, and its values.
Box = tuple[tuple[int, ...], np.ndarray]
#: Boxes of arrays read ahead for xarray's peeks while groups open, per reader:
#: ``{path: [box, ...]}`` (see :func:`held_peeks`).
_PEEKS: weakref.WeakKeyDictionary[NativeReader, dict[str, list[Box]]] = (
    weakref.WeakKeyDictionary()
)


@contextlib.contextmanager
def held_peeks(reader: NativeReader, boxes: Mapping[str, list[Box]]) -> Iterator[None]:
    """Serve reads that fall inside ``boxes`` (``{path: [(starts, values)]}``, values as the
    reader returned them for the box starting at ``starts``) from them, on the calling thread,
    while the block runs.

    xarray peeks at the first and last value of every CF time variable while it opens a group,
    one blocking read each: read in one batch first and held here, ~110 peeks of an ATL03-like
    granule no longer cost a hop to the I/O loop (and to the decoding pool) each.
    """
    _PEEKS[reader] = dict(boxes)
    try:
        yield
    finally:
        _PEEKS.pop(reader, None)


def _from_boxes(boxes: Iterable[Box], key: tuple[Any, ...],
                shape: tuple[int, ...]) -> np.ndarray | None:
    """``key`` (one int or slice per axis of an array of ``shape``, as xarray's basic indexing
    gives it) read from a held box that contains it, as a new array; None when none does."""
    if len(key) != len(shape):
        return None
    for starts, values in boxes:
        rel: list[Any] = []
        for k, dim, start, size in zip(key, shape, starts, values.shape, strict=True):
            if isinstance(k, slice):
                a, b, step = k.indices(dim)
                if step != 1 or not (start <= a <= b <= start + size):
                    break
                rel.append(slice(a - start, b - start))
            elif isinstance(k, int | np.integer) and start <= k < start + size:
                rel.append(int(k) - start)
            else:
                break
        else:
            return np.array(values[tuple(rel)])
    return None


class SidecarArray(BackendArray):  # type: ignore[misc]
    """One array of a granule, read through a :class:`NativeReader` (sync and async).

    Basic selections (integers, slices) are read directly; xarray turns orthogonal and
    vectorised selections into a covering basic read plus an in-memory index.  Dask tasks call
    :meth:`__getitem__` from their threads (each call is one batch: coalesced requests, parallel
    decoding); ``Dataset.load_async()`` awaits :meth:`async_getitem` for every variable at once.
    """

    __slots__ = ("dtype", "path", "reader", "shape")

    def __init__(self, reader: NativeReader, path: str) -> None:
        meta = reader.refs.arrays[path].meta
        self.reader = reader
        self.path = path
        self.shape = tuple(meta.shape)
        # xarray wants native byte order; strings come as zarr reads them (the codec's dtype)
        codec = reader.codec(path) if reader.supports(path) else None
        self.dtype = out_dtype(codec.dtype if codec is not None else np.dtype(meta.numpy_dtype))
        reader.opened[path] = None  # a candidate for reading ahead (see read.native._prefetch)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(  # type: ignore[no-any-return]
            key, self.shape, indexing.IndexingSupport.BASIC, self._read
        )

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return await indexing.async_explicit_indexing_adapter(  # type: ignore[no-any-return]
            key, self.shape, indexing.IndexingSupport.BASIC, self._read_async
        )

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        boxes = _PEEKS.get(self.reader)
        if boxes:
            held = _from_boxes(boxes.get(self.path, ()), key, self.shape)
            if held is not None:
                return held
        return self.reader.read_sync([(self.path, key)])[0]

    async def _read_async(self, key: tuple[Any, ...]) -> np.ndarray:
        return (await self.reader.read([(self.path, key)]))[0]

    def __repr__(self) -> str:
        return f"SidecarArray({self.path!r}, shape={self.shape}, dtype={self.dtype})"
