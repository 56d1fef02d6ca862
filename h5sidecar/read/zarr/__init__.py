"""A granule as Zarr keys: the zarr v3 ``Store``, the fsspec filesystem and what they share.

:mod:`.store` (``SidecarStore``, its reads in :mod:`._key_reads`) and :mod:`.filesystem`
(``H5SidecarFileSystem``, fsspec protocol ``"h5sidecar"``) serve the key space of
:mod:`._keyspace` (Zarr v2 documents, or v3 ones synthesized by :mod:`._v3_metadata`);
:mod:`._virtual_chunks` is the geometry of the finer virtual chunk grids the gateway serves.  The public names are exported by
:mod:`h5sidecar.read`.
"""
