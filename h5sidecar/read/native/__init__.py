"""The batch reader that bypasses zarr: one fetch plan per batch, chunks decoded in threads.

:class:`~h5sidecar.read.native._batch_reader.NativeReader` reads basic selections of many arrays
of a granule at once (selections as chunks in :mod:`._selection`, one batch's plan in
:mod:`._batch_plan`, served in :mod:`._batch_fetch`, codecs in :mod:`._decode`, whole reads of
small neighbours in :mod:`._prefetch`, byte runs of plain chunks in :mod:`._subchunk`);
:mod:`._vectors` reads whole 1-D arrays of many granules in one fetch and :mod:`._load` is
``read_arrays`` / ``load``.  The public names are exported by :mod:`h5sidecar.read`.
"""
