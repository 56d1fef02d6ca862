"""Indexing a granule from its NASA DMR++ document instead of its HDF5 metadata.

* :mod:`._dmrpp_document` -- the parsed document (groups, dimensions, variables, attributes, chunks),
  as written: the model that conversion, auditing and writing DMR++ share;
* :mod:`._dmrpp_parse` -- DMR++ XML -> the model;
* :mod:`._dap_types` -- DAP4 types and attribute values -> NumPy / JSON;
* :mod:`._dmrpp_variable`, :mod:`._dmrpp_granule` -- the model -> :class:`~h5sidecar.references.GranuleRefs`;
* :mod:`._index_dmrpp` -- :func:`index_dmrpp`: read the document, resolve and check its data URLs.
"""

from h5sidecar.indexer.dmrpp._dmrpp_document import (
    DRIFT,
    DmrAttribute,
    DmrChunks,
    DmrDim,
    DmrGroup,
    DmrppDocument,
    DmrVariable,
)
from h5sidecar.indexer.dmrpp._dmrpp_granule import DMRPP_KEY, dmrpp_refs
from h5sidecar.indexer.dmrpp._dmrpp_parse import parse_dmrpp
from h5sidecar.indexer.dmrpp._index_dmrpp import (
    PLACEHOLDER,
    index_dmrpp,
    index_dmrpp_document,
    resolve_href,
)

__all__ = [
    "DMRPP_KEY",
    "DRIFT",
    "PLACEHOLDER",
    "DmrAttribute",
    "DmrChunks",
    "DmrDim",
    "DmrGroup",
    "DmrVariable",
    "DmrppDocument",
    "dmrpp_refs",
    "index_dmrpp",
    "index_dmrpp_document",
    "parse_dmrpp",
    "resolve_href",
]
