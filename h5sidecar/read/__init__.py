"""Everything that exposes sidecars as Zarr: zarr store, fsspec filesystem, xarray engine.

* :class:`SidecarStore` -- a read-only ``zarr.abc.store.Store`` (Zarr v2 view by default, v3 on
  request);
* :class:`H5SidecarFileSystem` -- fsspec protocol ``"h5sidecar"`` (Zarr v2 keys);
* the xarray engine ``"h5sidecar"`` and :func:`open_dataset`, :func:`open_datatree`,
  :func:`open_mfdataset` (safe multi-granule combine);
* :func:`load` -- load a Dataset / DataTree opened without Dask in one batch;
* :func:`read_arrays` -- many arrays of a granule into NumPy in one batch (no zarr, no xarray);
* the fetch layer under all of them (:class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher`);
* process-wide tuning: :func:`configure` (cache sizes, decode threads), :func:`clear_caches`,
  :func:`cache_stats`, and :func:`register_numcodecs_v3` for Zarr v3 views of sidecars with
  numcodecs codecs zarr has no v3 class for (per-store options are
  :class:`~h5sidecar.settings.ReadSettings`).

Names load on first use so ``import h5sidecar.read`` stays cheap.
"""

from __future__ import annotations

from h5sidecar._lazy import lazy_exports

_LAZY = {
    "SidecarStore": "h5sidecar.read.zarr.store",
    "H5SidecarFileSystem": "h5sidecar.read.zarr.filesystem",
    "H5SidecarBackend": "h5sidecar.read.xarray.backend",
    "ChunkFetcher": "h5sidecar.sources.fetch._chunk_fetcher",
    "open_dataset": "h5sidecar.read.xarray._openers",
    "open_datatree": "h5sidecar.read.xarray._openers",
    "open_mfdataset": "h5sidecar.read.xarray._openers",
    "check_combinable": "h5sidecar.read.xarray._openers",
    "load_refs": "h5sidecar.read._sidecar_open",
    "read_arrays": "h5sidecar.read.native._load",
    "ArraysRead": "h5sidecar.read.native._load",
    "load": "h5sidecar.read.native._load",
    "ByteLRU": "h5sidecar.read._byte_lru",
    "configure": "h5sidecar.read._tuning",
    "clear_caches": "h5sidecar.read._tuning",
    "cache_stats": "h5sidecar.read._tuning",
    "register_numcodecs_v3": "h5sidecar.read.zarr._v3_metadata",
}

__all__ = [
    "ByteLRU",
    "ChunkFetcher",
    "H5SidecarBackend",
    "H5SidecarFileSystem",
    "SidecarStore",
    "cache_stats",
    "check_combinable",
    "clear_caches",
    "configure",
    "load",
    "load_refs",
    "ArraysRead",
    "open_dataset",
    "open_datatree",
    "open_mfdataset",
    "read_arrays",
    "register_numcodecs_v3",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
