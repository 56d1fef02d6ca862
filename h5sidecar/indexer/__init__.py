"""The indexer: one HDF5 / netCDF-4 granule -> :class:`~h5sidecar.references.GranuleRefs`.

:func:`index_granule` reads the granule's metadata once with h5py and returns the references of
every variable (chunk byte ranges, or values held in the sidecar when HDF5's bytes cannot be
decoded by Zarr), the group tree with attributes, and the variables that could not be
represented, each with a reason.  It never writes files: pass the result to
:func:`h5sidecar.references.write_json` / ``write_parquet``.

What is supported, and how each HDF5 quirk is handled, is described in the README section
"Indexing: what is supported".
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Protocol

from h5sidecar.errors import SourceNotFoundError
from h5sidecar.indexer._checksums import chunk_hash
from h5sidecar.indexer._granule import index_open_granule, skip_loses_data
from h5sidecar.indexer._summary import SUMMARY_KEY as COORDINATE_SUMMARY_KEY
from h5sidecar.indexer._summary import longitude_arc
from h5sidecar.indexer.crawl._h5file import open_granule
from h5sidecar.indexer.crawl._source_file import open_source
from h5sidecar.indexer.dmrpp import DMRPP_KEY, index_dmrpp, index_dmrpp_document
from h5sidecar.indexer.dmrpp import DRIFT as DMRPP_DRIFT
from h5sidecar.indexer.dtypes._dtype_plan import ENUMS_KEY, REFERENCES_KEY
from h5sidecar.indexer.filters import (
    chunk_pipeline,
    chunk_pipeline_differs,
    partial_edge_chunks_unfiltered,
    pipeline_for,
)
from h5sidecar.references import GranuleRefs, gc_paused
from h5sidecar.settings import IndexSettings
from h5sidecar.sources import read_object, source_identity

#: Settings used when none are given (frozen, so sharing one instance is safe).
DEFAULT_SETTINGS = IndexSettings()

__all__ = [
    "COORDINATE_SUMMARY_KEY",
    "DMRPP_DRIFT",
    "DMRPP_KEY",
    "FromDmrpp",
    "ENUMS_KEY",
    "REFERENCES_KEY",
    "Indexer",
    "chunk_hash",
    "chunk_pipeline",
    "chunk_pipeline_differs",
    "index_dmrpp",
    "index_granule",
    "index_source",
    "longitude_arc",
    "open_source",
    "partial_edge_chunks_unfiltered",
    "pipeline_for",
    "skip_loses_data",
]


class Indexer(Protocol):
    """Anything that turns a granule URL into references (``index_granule`` is one).

    Workflows accept an ``Indexer`` so tests and alternative backends can be swapped in.
    """

    def __call__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = ...,
        settings: IndexSettings = ...,
    ) -> GranuleRefs: ...


def index_granule(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings = DEFAULT_SETTINGS,
) -> GranuleRefs:
    """Index one HDF5 / netCDF-4 granule.

    Parameters
    ----------
    url : str
        ``s3://bucket/key``, a local path or a ``file://`` URL.  Local sources are recorded as
        absolute paths, S3 sources as ``s3://bucket/key``.
    storage_options : mapping, optional
        s3fs-style options (``key``, ``secret``, ``token``, ``endpoint_url``, ``anon``, ...).
    settings : IndexSettings
        ``on_unsupported`` ("skip" records unsupported variables in ``GranuleRefs.skipped``,
        "raise" raises), ``inline_threshold``, ``contiguous_chunk_bytes``,
        ``materialize_limit``, ``checksums``.

    Returns
    -------
    GranuleRefs
        Source identity, groups with attributes, one ``ArrayRefs`` per variable and the skipped
        variables with their reasons.

    Raises
    ------
    NotHDF5Error
        The object is not HDF5 (e.g. netCDF-3), or is truncated or corrupt.
    UnsupportedFeatureError
        With ``on_unsupported="raise"``, at the first variable that cannot be represented.
    SourceNotFoundError, SourceReadError, StaleReferenceError
        The source cannot be read, or changed while being read.

    Examples
    --------
    >>> refs = index_granule("s3://bucket/ATL03_x.h5", storage_options={"anon": True})
    ... # doctest: +SKIP
    >>> [(s.path, s.reason) for s in refs.skipped]  # doctest: +SKIP
    """
    # indexing makes tens of Python objects per dataset, attribute and chunk, all freed by
    # reference counting (a 70 MB granule of ~1,000 arrays leaves no cyclic garbage): the
    # collections their allocations triggered found nothing, 6% of the index CPU
    with gc_paused(), open_granule(url, storage_options=storage_options,
                                   settings=settings) as granule:  # fmt: skip
        return index_open_granule(granule, settings, storage_options)


#: Where :func:`index_source` takes a granule's references from.
FromDmrpp = Literal["auto", "only", "never"]


def index_source(
    url: str,
    *,
    from_dmrpp: FromDmrpp = "never",
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings = DEFAULT_SETTINGS,
) -> GranuleRefs:
    """Index one granule from its HDF5 metadata, or from the DMR++ document beside it.

    Parameters
    ----------
    url : str
        The granule.
    from_dmrpp : "auto", "only" or "never"
        ``never``: crawl the HDF5 (:func:`index_granule`); ``only``: index from ``url +
        ".dmrpp"`` (:func:`index_dmrpp`; a missing document fails the granule); ``auto``: from
        the DMR++ where it exists, else crawl the HDF5.
    storage_options, settings
        As for :func:`index_granule`.

    Raises
    ------
    SourceNotFoundError
        With ``only``, when the document does not exist (and as :func:`index_granule`).
    InvalidDmrppError, ForbiddenSourceError
        A document that cannot be used (never crawled around: a bad document is reported).
    """
    if from_dmrpp == "never":
        return index_granule(url, storage_options=storage_options, settings=settings)
    # the document and the granule's identity are asked for at once: one round trip, not two
    with ThreadPoolExecutor(2) as pool:
        granule = pool.submit(source_identity, url, storage_options)
        try:
            data, identity = read_object(url + ".dmrpp", storage_options)
        except SourceNotFoundError:
            if from_dmrpp == "only":
                raise
            return index_granule(url, storage_options=storage_options, settings=settings)
        source = granule.result()
    return index_dmrpp_document(data, identity, url, settings=settings,
                                storage_options=storage_options, source=source)  # fmt: skip
