"""The indexing run: one granule, many granules on an executor (processes, isolated, Dask), skipping up-to-date ones."""
