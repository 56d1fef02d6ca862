"""h5sidecar: read archival HDF5/netCDF4 granules as cloud-native Zarr through sidecar references.

Index once (:func:`index_granule`, ``h5sidecar index``), then read as Zarr: the ``h5sidecar``
xarray engine, fsspec protocol, zarr store and HTTP gateway.  Heavy modules load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports
from h5sidecar._version import __version__

# public name -> module that defines it (imported lazily so `import h5sidecar` stays cheap)
_LAZY = {
    "index_granule": "h5sidecar.indexer",
    "index_dmrpp": "h5sidecar.indexer",
    "check_dmrpp": "h5sidecar.workflows",
    "GranuleRefs": "h5sidecar.references",
    "ChunkManifest": "h5sidecar.references",
    "read_refs": "h5sidecar.references",
    "write_json": "h5sidecar.references",
    "write_parquet": "h5sidecar.references",
    "write_dmrpp": "h5sidecar.references",
    "open_dataset": "h5sidecar.read",
    "open_datatree": "h5sidecar.read",
    "open_mfdataset": "h5sidecar.read",
    "read_arrays": "h5sidecar.read",
    "load": "h5sidecar.read",
    "open_item": "h5sidecar.catalog",
}

__all__ = [
    "__version__",
    "ChunkManifest",
    "GranuleRefs",
    "check_dmrpp",
    "index_dmrpp",
    "index_granule",
    "load",
    "open_dataset",
    "open_datatree",
    "open_item",
    "open_mfdataset",
    "read_arrays",
    "read_refs",
    "write_dmrpp",
    "write_json",
    "write_parquet",
]


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.catalog import open_item as open_item
    from h5sidecar.indexer import index_dmrpp as index_dmrpp
    from h5sidecar.indexer import index_granule as index_granule
    from h5sidecar.read import load as load
    from h5sidecar.read import open_dataset as open_dataset
    from h5sidecar.read import open_datatree as open_datatree
    from h5sidecar.read import open_mfdataset as open_mfdataset
    from h5sidecar.read import read_arrays as read_arrays
    from h5sidecar.references import ChunkManifest as ChunkManifest
    from h5sidecar.references import GranuleRefs as GranuleRefs
    from h5sidecar.references import read_refs as read_refs
    from h5sidecar.references import write_dmrpp as write_dmrpp
    from h5sidecar.references import write_json as write_json
    from h5sidecar.references import write_parquet as write_parquet
    from h5sidecar.workflows import check_dmrpp as check_dmrpp


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
