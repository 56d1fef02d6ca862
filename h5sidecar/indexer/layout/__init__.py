"""Where each chunk's bytes are: the storage layouts and their quirks.

:mod:`._chunk_table` builds one columnar table per dataset (chunked, contiguous, compact);
:mod:`._external` handles ``H5Pset_external`` raw files; :mod:`._earray` the extensible-array
chunk coordinates; :mod:`._fillchunks` the never-written chunks; :mod:`._refcheck` the chunk
references checked against their object's size.
"""
