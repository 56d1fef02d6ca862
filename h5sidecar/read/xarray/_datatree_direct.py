"""``h5sidecar.open_datatree(..., chunks=None)`` without rebuilding the tree.

``xarray.open_datatree`` takes the engine's DataTree and, to give every group its default
indexes, maps a function over its datasets and assembles a new tree from the results with
``DataTree.from_dict`` (every node copied twice and re-checked); for a granule of 140 groups
that cost more than opening them.  Here the same steps run on each group's Dataset *before*
the tree is assembled once: variables protected as xarray protects them (copy-on-write, cached
in memory), default indexes created for the dimension coordinates, then the tree assembled by
:func:`h5sidecar.read.xarray._datatree.assemble_tree` (whose attaching removes from a child the indexed
coordinates it inherits, as ``from_dict`` does) and ``encoding["source"]`` set as xarray sets
it.  (Nodes get no closer, as in the engine's tree: reading holds no file open.)  The tests compare the result with ``xarray.open_datatree``'s, node by node.

Only the options of the documented batch path take this way (no Dask chunks, no
``backend_kwargs``/``inline_array``/chunk-manager options); anything else goes through
``xarray.open_datatree`` unchanged.

Why a second DataTree builder beside the engine's (:mod:`h5sidecar.read.xarray._datatree`,
which ``xarray.open_datatree`` calls): both build each group's Dataset and resolve dimension
clashes with the same functions; this one only skips xarray's rebuild of the finished tree,
which cost more than opening the groups, and it needs xarray's private pieces
(:data:`AVAILABLE`): without them every tree goes through the engine's builder.
"""

from __future__ import annotations

import os
from typing import Any

from h5sidecar._compat.xarray import NORMALIZE_PATH, normalize_source_path, protect_variables
from h5sidecar.read.xarray._dataset_build import DIRECT
from h5sidecar.read.xarray._datatree import (
    assemble_tree,
    keep_renamings,
    open_groups,
    resolve_dimension_clashes,
)

__all__ = ["AVAILABLE", "DIRECT_OPTIONS", "open_tree_direct"]

#: True when this xarray has the private pieces the direct way relies on (without them,
#: h5sidecar.open_datatree goes through xarray's own)
AVAILABLE = DIRECT and NORMALIZE_PATH

#: xarray's decoding options, as ``xarray.open_datatree`` resolves them
_DECODERS = ("mask_and_scale", "decode_times", "decode_timedelta", "use_cftime",
             "concat_characters", "decode_coords")
#: the options this way understands (the rest of xarray.open_datatree's go through xarray)
DIRECT_OPTIONS = frozenset((*_DECODERS, "decode_cf", "drop_variables", "cache", "group",
                            "create_default_indexes", "storage_options", "remote_options",
                            "settings", "chunk_bytes", "native", "_prefetch_indexes"))


def _protect(ds: Any, cache: bool) -> None:
    """xarray's ``_protect_dataset_variables_inplace``: lazy variables copy-on-write, and
    cached once read (``cache``)."""
    protect_variables(ds, cache)


def _with_default_indexes(ds: Any) -> Any:
    """xarray's ``_maybe_create_default_indexes``: an index for every dimension coordinate."""
    from xarray import Coordinates

    to_index = {
        name: coord.variable
        for name, coord in ds.coords.items()
        if coord.dims == (name,) and name not in ds.xindexes
    }
    return ds.assign_coords(Coordinates(to_index))


def open_tree_direct(ref: Any, *, decode_cf: bool | None = None, cache: bool | None = None,
                     create_default_indexes: bool = True, **kwargs: Any) -> Any:
    """``xarray.open_datatree(ref, engine="h5sidecar", chunks=None, ...)``: the same tree,
    assembled once (see the module docstring).  ``kwargs``: :data:`DIRECT_OPTIONS`."""
    from h5sidecar.read.xarray.backend import H5SidecarBackend

    cache = True if cache is None else cache  # xarray's default without chunks
    for name in _DECODERS:  # as xarray's _resolve_decoders_kwargs
        if decode_cf is False and name in H5SidecarBackend.open_dataset_parameters:
            kwargs[name] = False
        if kwargs.get(name, 0) is None:
            del kwargs[name]
    groups = resolve_dimension_clashes(open_groups(ref, **kwargs))
    for ds in groups.values():
        _protect(ds, cache)
    if create_default_indexes:
        groups = {path: _with_default_indexes(ds) for path, ds in groups.items()}
    tree = keep_renamings(assemble_tree(groups), groups)  # as the engine's own tree
    source = getattr(ref, "path", ref)
    if "source" not in tree.encoding and isinstance(source, str | os.PathLike):
        tree.encoding["source"] = normalize_source_path(source)
    return tree
