"""The metadata crawl: a granule opened for h5py through few, large, predicted reads.

:mod:`._h5file` opens the granule for h5py; :mod:`._source_file` is the file object it reads
(fed by the ranged readers of :mod:`h5sidecar.sources`); :mod:`._hints`, :mod:`._dense_hints` and
:mod:`._hint_records` predict where HDF5 reads next; :mod:`._budget` bounds a granule's time,
calls and bytes.
"""
