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

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports

_LAZY = {
    "SidecarStore": "h5sidecar.read.zarr.store",
    "H5SidecarFileSystem": "h5sidecar.read.zarr.filesystem",
    "H5SidecarBackend": "h5sidecar.read.xarray.backend",
    "ChunkFetcher": "h5sidecar.sources",
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
    # for h5sidecar's own layers (served by the front, not advertised in __all__):
    "drop_queued_decodes": "h5sidecar.read.native._decode",
    "ChunkRef": "h5sidecar.read.zarr._keyspace",
    "GranuleKeys": "h5sidecar.read.zarr._keyspace",
    "GranuleReader": "h5sidecar.read._granule_reader",
    "MASK_AND_SCALE_ATTRS": "h5sidecar.read.xarray._openers",
    "RechunkSpec": "h5sidecar.read.zarr._virtual_chunks",
    "TIME_ATTRS": "h5sidecar.read.xarray._openers",
    "array_metadata_v3": "h5sidecar.read.zarr._v3_metadata",
    "cf_decoded": "h5sidecar.read.native._load",
    "cube_names": "h5sidecar.read._cube_view",
    "cube_summary": "h5sidecar.read._cube_view",
    "group_metadata_v3": "h5sidecar.read.zarr._v3_metadata",
    "is_cube": "h5sidecar.read._cube_view",
    "member_fetcher": "h5sidecar.read.native._vectors",
    "out_dtype": "h5sidecar.read.native._batch_reader",
    "read_vectors": "h5sidecar.read.native._vectors",
    "sidecar_identity": "h5sidecar.read._sidecar_open",
    "source_key": "h5sidecar.read._cube_view",
    "vector_codecs": "h5sidecar.read.native._vectors",
    "virtual_chunk_shape": "h5sidecar.read.zarr._virtual_chunks",
    "virtual_runs": "h5sidecar.read.zarr._virtual_chunks",
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


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.read._byte_lru import ByteLRU as ByteLRU
    from h5sidecar.read._cube_view import cube_names as cube_names
    from h5sidecar.read._cube_view import cube_summary as cube_summary
    from h5sidecar.read._cube_view import is_cube as is_cube
    from h5sidecar.read._cube_view import source_key as source_key
    from h5sidecar.read._granule_reader import GranuleReader as GranuleReader
    from h5sidecar.read._sidecar_open import load_refs as load_refs
    from h5sidecar.read._sidecar_open import sidecar_identity as sidecar_identity
    from h5sidecar.read._tuning import cache_stats as cache_stats
    from h5sidecar.read._tuning import clear_caches as clear_caches
    from h5sidecar.read._tuning import configure as configure
    from h5sidecar.read.native._batch_reader import out_dtype as out_dtype
    from h5sidecar.read.native._decode import drop_queued_decodes as drop_queued_decodes
    from h5sidecar.read.native._load import ArraysRead as ArraysRead
    from h5sidecar.read.native._load import cf_decoded as cf_decoded
    from h5sidecar.read.native._load import load as load
    from h5sidecar.read.native._load import read_arrays as read_arrays
    from h5sidecar.read.native._vectors import member_fetcher as member_fetcher
    from h5sidecar.read.native._vectors import read_vectors as read_vectors
    from h5sidecar.read.native._vectors import vector_codecs as vector_codecs
    from h5sidecar.read.xarray._openers import MASK_AND_SCALE_ATTRS as MASK_AND_SCALE_ATTRS
    from h5sidecar.read.xarray._openers import TIME_ATTRS as TIME_ATTRS
    from h5sidecar.read.xarray._openers import check_combinable as check_combinable
    from h5sidecar.read.xarray._openers import open_dataset as open_dataset
    from h5sidecar.read.xarray._openers import open_datatree as open_datatree
    from h5sidecar.read.xarray._openers import open_mfdataset as open_mfdataset
    from h5sidecar.read.xarray.backend import H5SidecarBackend as H5SidecarBackend
    from h5sidecar.read.zarr._keyspace import ChunkRef as ChunkRef
    from h5sidecar.read.zarr._keyspace import GranuleKeys as GranuleKeys
    from h5sidecar.read.zarr._v3_metadata import array_metadata_v3 as array_metadata_v3
    from h5sidecar.read.zarr._v3_metadata import group_metadata_v3 as group_metadata_v3
    from h5sidecar.read.zarr._v3_metadata import register_numcodecs_v3 as register_numcodecs_v3
    from h5sidecar.read.zarr._virtual_chunks import RechunkSpec as RechunkSpec
    from h5sidecar.read.zarr._virtual_chunks import virtual_chunk_shape as virtual_chunk_shape
    from h5sidecar.read.zarr._virtual_chunks import virtual_runs as virtual_runs
    from h5sidecar.read.zarr.filesystem import H5SidecarFileSystem as H5SidecarFileSystem
    from h5sidecar.read.zarr.store import SidecarStore as SidecarStore
    from h5sidecar.sources import ChunkFetcher as ChunkFetcher


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
