"""HDF5 filter pipelines -> numcodecs codec configs (and the per-chunk exceptions to them).

:func:`pipeline_for` maps a dataset's whole pipeline to Zarr v2 ``filters`` (encode order);
:func:`chunk_pipeline_differs` / :func:`chunk_pipeline` handle chunks that HDF5 encoded with
less than the declared pipeline.  The custom codecs live in :mod:`h5sidecar.codecs`.
"""

from h5sidecar.indexer.filters._mappers import HDF5Filter, hdf5_filters, pipeline_for
from h5sidecar.indexer.filters._per_chunk import (
    chunk_pipeline,
    chunk_pipeline_differs,
    decode_chunk,
    filter_mask_differs,
    partial_edge_chunks_unfiltered,
)

__all__ = [
    "HDF5Filter",
    "chunk_pipeline",
    "chunk_pipeline_differs",
    "decode_chunk",
    "filter_mask_differs",
    "hdf5_filters",
    "partial_edge_chunks_unfiltered",
    "pipeline_for",
]
