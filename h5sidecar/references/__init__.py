"""The reference model and its persisted formats (kerchunk JSON v1 and kerchunk Parquet).

This package imports neither h5py nor a web framework: everything that reads sidecars depends
on it, and it depends on nothing of h5sidecar but :mod:`h5sidecar.errors` and
:mod:`h5sidecar.credentials` (sidecars on object stores).

Grouped by concept: the model at the root (``_model``, ``_array_meta``, ``_manifest``,
``_source_info``, ...), the two persisted formats in :mod:`~h5sidecar.references.json_sidecar`
and :mod:`~h5sidecar.references.parquet_sidecar`, DMR++ documents written from references in
:mod:`~h5sidecar.references.dmrpp_sidecar`, datacube references (concatenation, member table)
in :mod:`~h5sidecar.references.datacube`, and reading/writing either format in ``_io``.
"""

from h5sidecar.references._array_meta import ArrayMeta

# names imported `as` themselves are served to h5sidecar's own layers, not advertised in __all__
from h5sidecar.references._cf import cf_fill_value as cf_fill_value
from h5sidecar.references._cf import json_float as json_float
from h5sidecar.references._cf import reads_as_storage_fill as reads_as_storage_fill
from h5sidecar.references._extras_versions import EXTRAS_KEY as EXTRAS_KEY
from h5sidecar.references._io import (
    SidecarFormat,
    SidecarLayout,
    read_layout,
    read_refs,
    write_json,
    write_parquet,
    write_refs,
)
from h5sidecar.references._io import parquet_refs as parquet_refs
from h5sidecar.references._manifest import (
    INLINE,
    MISSING,
    ChunkManifest,
    chunk_grid_shape,
    chunk_key,
)
from h5sidecar.references._model import DIMENSION_ONLY_REASON as DIMENSION_ONLY_REASON
from h5sidecar.references._model import (
    ArrayRefs,
    GranuleRefs,
    SkipKind,
    Skipped,
    SourceInfo,
    VariableStatus,
)
from h5sidecar.references._names import MAX_NAME_BYTES, key_problem, key_safe_name
from h5sidecar.references._readers import virtualizarr_unreadable
from h5sidecar.references._rename import renamed
from h5sidecar.references._typed_attrs import nonfinite, typed_value
from h5sidecar.references.datacube._concat import check_shared_meta as check_shared_meta
from h5sidecar.references.datacube._concat import concat_meta as concat_meta
from h5sidecar.references.datacube._concat import (
    concat_refs,
    inline_array,
    member_identities,
    slice_refs,
)
from h5sidecar.references.datacube._member_table import MemberTable
from h5sidecar.references.datacube._member_table import first_rows as first_rows
from h5sidecar.references.datacube._url_column import UrlColumn as UrlColumn
from h5sidecar.references.dmrpp_sidecar._dmrpp_write import dmrpp_document, write_dmrpp
from h5sidecar.references.json_sidecar._kerchunk_json import from_kerchunk, to_kerchunk
from h5sidecar.references.json_sidecar._kerchunk_json import gc_paused as gc_paused
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE as MANIFESTS_FILE
from h5sidecar.references.parquet_sidecar._parquet_lazy import BULK_LOAD_BYTES as BULK_LOAD_BYTES
from h5sidecar.references.parquet_sidecar._parquet_tail import Replacement as Replacement
from h5sidecar.references.parquet_sidecar._parquet_tail import tail_refusal as tail_refusal
from h5sidecar.references.parquet_sidecar._parquet_tail import (
    write_parquet_tail as write_parquet_tail,
)

__all__ = [
    "INLINE",
    "MAX_NAME_BYTES",
    "MISSING",
    "MemberTable",
    "ArrayMeta",
    "ArrayRefs",
    "ChunkManifest",
    "GranuleRefs",
    "SidecarFormat",
    "SidecarLayout",
    "SkipKind",
    "Skipped",
    "SourceInfo",
    "VariableStatus",
    "chunk_grid_shape",
    "chunk_key",
    "concat_refs",
    "from_kerchunk",
    "inline_array",
    "key_problem",
    "key_safe_name",
    "member_identities",
    "nonfinite",
    "read_layout",
    "read_refs",
    "renamed",
    "slice_refs",
    "to_kerchunk",
    "typed_value",
    "write_json",
    "dmrpp_document",
    "write_dmrpp",
    "write_parquet",
    "virtualizarr_unreadable",
    "write_refs",
]
