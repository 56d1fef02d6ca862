"""The lazy array behind each variable the xarray engine opens: reads go to the native batch
reader (:mod:`h5sidecar.read._batch`) instead of zarr's per-chunk pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np
from xarray.backends.common import BackendArray
from xarray.core import indexing

from h5sidecar.read._batch import NativeReader, out_dtype

__all__ = ["SidecarArray"]


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
        self.dtype = out_dtype(np.dtype(meta.numpy_dtype))  # xarray wants native byte order
        reader.opened[path] = None  # a candidate for reading ahead (see read._prefetch)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(  # type: ignore[no-any-return]
            key, self.shape, indexing.IndexingSupport.BASIC, self._read
        )

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return await indexing.async_explicit_indexing_adapter(  # type: ignore[no-any-return]
            key, self.shape, indexing.IndexingSupport.BASIC, self._read_async
        )

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        return self.reader.read_sync([(self.path, key)])[0]

    async def _read_async(self, key: tuple[Any, ...]) -> np.ndarray:
        return (await self.reader.read([(self.path, key)]))[0]

    def __repr__(self) -> str:
        return f"SidecarArray({self.path!r}, shape={self.shape}, dtype={self.dtype})"
