"""Every group of a granule at once: the Datasets of a DataTree, aligned with their ancestors.

xarray's DataTree requires each group to align with its ancestors: a dimension name may not have
two sizes along a branch, and an inherited index may not change its values.  HDF5 products break
this (a ``delta_time`` of photons under a group whose parent has a ``delta_time`` of segments;
phony dimensions reused with other lengths), which makes plain xarray-over-kerchunk fail on many
groups.  Here a clashing dimension is renamed in the *child* group only (``delta_time`` ->
``delta_time_<group>``, together with its coordinate variable), and the renaming is recorded in
that node's ``encoding["h5sidecar_renamed"]``.

The xarray engine's ``open_groups_as_dict`` / ``open_datatree`` call into this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.errors import H5SidecarError
from h5sidecar.read.xarray._lazy_array import Box, held_peeks
from h5sidecar.read.xarray._refs_data_store import group_members
from h5sidecar.read.xarray._zarr_data_store import (
    is_cf_time,
    open_group_dataset,
    open_reader,
    reader_of,
)

__all__ = ["assemble_tree", "build_datatree", "keep_renamings", "open_groups",
           "resolve_dimension_clashes"]


def open_groups(ref: Any, *, group: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Every group at or below ``group`` as a Dataset, keyed by absolute path (``"/"``, ...)."""
    store_kw = {
        k: kwargs.pop(k) for k in ("storage_options", "remote_options", "settings") if k in kwargs
    }
    indexes = kwargs.pop("_prefetch_indexes", False)
    source = open_reader(ref, **store_kw)
    reader = reader_of(source)
    root = (group or "").strip("/")
    groups = [
        g
        for g in sorted(reader.refs.groups, key=lambda p: (p.count("/") if p else -1, p))
        if not root or g == root or g.startswith(root + "/")
    ]
    peeks: dict[str, list[Box]] = {}
    if kwargs.get("native", True):
        with reader.native.opening():  # opening reads never trigger read-ahead
            peeks = _prefetch_for_open(reader, groups, indexes,
                                       kwargs.get("decode_times", True) is not False)
    members = group_members(reader.refs, groups)  # one pass over the arrays, not one per group
    out: dict[str, Any] = {}
    with held_peeks(reader.native, peeks):
        for g in groups:
            rel = g[len(root) :].strip("/") if root else g
            out["/" + rel] = open_group_dataset(source, group=g, _members=members[g], **kwargs)
    return out


def _prefetch_for_open(reader: Any, groups: list[str], indexes: bool,
                       times: bool) -> dict[str, list[Box]]:
    """Read in one batch what xarray reads one variable at a time while opening every group:
    dimension coordinates (when it will index them) and the ends of CF time variables (when it
    decodes times).  Without this, opening a granule's 140 groups waits for ~100 sequential
    round trips.

    Returns the first and last chunk's box of every CF time variable, decoded (one more call
    to the reader, served from the chunk cache), for :func:`held_peeks`: xarray's peeks at
    them then cost no hop to the I/O loop each."""
    wanted = set(groups)
    whole, edges = [], []
    for path, arr in reader.refs.arrays.items():
        group, _, name = path.rpartition("/")
        if group not in wanted or not arr.meta.shape:
            continue
        if indexes and len(arr.meta.shape) == 1 and arr.meta.dimension_names[:1] == (name,):
            whole.append(path)
        if times and is_cf_time(arr.meta.attrs) and reader.native.supports(path):
            edges.append(path)
    if whole or edges:
        reader.native.prefetch(whole, edges)
    out: dict[str, list[Box]] = {}
    boxes = []
    for path in edges:
        held = reader.native.held(path)  # a time coordinate held whole: peeked at, not taken
        if held is not None:
            out[path] = [((0,) * held.ndim, held)]
        else:
            boxes += [(path, box) for box in _edge_boxes(reader.refs.arrays[path].meta)]
    if boxes:
        try:
            values = reader.native.read_sync(
                [(p, tuple(slice(a, b) for a, b in box)) for p, box in boxes])
        except (H5SidecarError, OSError):
            return out  # a chunk that cannot be read fails xarray's own peek, as it always did
        for (path, box), value in zip(boxes, values, strict=True):
            out.setdefault(path, []).append((tuple(a for a, _ in box), value))
    return out


def _edge_boxes(meta: Any) -> list[tuple[tuple[int, int], ...]]:
    """The first and the last chunk of an array, as ``(start, stop)`` per axis (one box when
    they are the same chunk; none for an empty array)."""
    shape, chunks = meta.shape, meta.chunks
    if not all(shape):
        return []
    first = tuple((0, min(c, s)) for s, c in zip(shape, chunks, strict=True))
    last = tuple(((s - 1) // c * c, s) for s, c in zip(shape, chunks, strict=True))
    return [first] if first == last else [first, last]


def _ancestors(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts))]


def _clashes(ds: Any, inherited: Mapping[str, Any]) -> list[str]:
    """Dimensions of ``ds`` that would not align with the datasets of its ancestors.

    A clash is a dimension with another size in an ancestor, or a dimension coordinate whose
    values differ from the ancestor's (DataTree indexes both and requires them equal).
    """
    out = []
    for dim, size in ds.sizes.items():
        for anc in inherited.values():
            if dim not in anc.sizes:
                continue
            if anc.sizes[dim] != size or (
                dim in ds.variables
                and dim in anc.variables
                and ds[dim].dims == (dim,)
                and anc[dim].dims == (dim,)
                and not np.array_equal(ds[dim].values, anc[dim].values, equal_nan=True)
            ):
                out.append(dim)
                break
    return out


def resolve_dimension_clashes(groups: Mapping[str, Any]) -> dict[str, Any]:
    """Rename dimensions that clash with an ancestor group's (child side only, recorded).

    Parameters
    ----------
    groups : mapping
        Absolute group path (``"/"``, ``"/gt1l"``...) -> Dataset.

    Returns
    -------
    dict
        The same datasets, clashing dimensions renamed ``<dim>_<group name>`` (plus a counter
        if needed), with ``encoding["h5sidecar_renamed"] = {new: old}``.
    """
    out: dict[str, Any] = {}
    for path in sorted(groups, key=lambda p: (p.rstrip("/").count("/"), p)):
        ds = groups[path]
        inherited = {a: out[a] for a in _ancestors(path) if a in out and a != path}
        clashes = _clashes(ds, inherited)
        if clashes:
            taken = set(ds.variables) | set(ds.sizes)
            for anc in inherited.values():
                taken |= set(anc.variables) | set(anc.sizes)
            base = path.rstrip("/").rpartition("/")[2] or "root"
            renames: dict[str, str] = {}
            for dim in clashes:
                new, i = f"{dim}_{base}", 1
                while new in taken:
                    i += 1
                    new = f"{dim}_{base}{i}"
                taken.add(new)
                renames[dim] = new
            encoding = dict(ds.encoding)
            with_vars = {d: n for d, n in renames.items() if d in ds.variables}
            ds = ds.rename(with_vars).rename_dims(
                {d: n for d, n in renames.items() if d not in with_vars}
            )
            encoding["h5sidecar_renamed"] = {n: d for d, n in renames.items()}
            ds.encoding = encoding
        out[path] = ds
    return out


def build_datatree(ref: Any, *, group: str | None = None, **kwargs: Any) -> Any:
    """The backend's DataTree: every group opened, clashes resolved, assembled."""
    groups = resolve_dimension_clashes(open_groups(ref, group=group, **kwargs))
    return keep_renamings(assemble_tree(groups), groups)


def keep_renamings(tree: Any, groups: Mapping[str, Any]) -> Any:
    """``tree`` with each renaming group's encoding (``h5sidecar_renamed``) on its node: a
    node's encoding is its own, not its Dataset's, once attached."""
    for path, ds in groups.items():
        if "h5sidecar_renamed" in ds.encoding:
            tree[path].encoding = {**tree[path].encoding, **ds.encoding}
    return tree


def assemble_tree(groups: Mapping[str, Any]) -> Any:
    """``xarray.DataTree.from_dict(groups)`` for datasets keyed by absolute path, without its
    copies.

    ``from_dict`` wraps every Dataset in a node, then copies that node again to attach it
    (about a fifth of the CPU time of opening a granule's 140 groups).  Here each node is made
    once and attached through the public ``children`` setter, parents before their children
    and siblings in the order given, so every node passes xarray's own checks on attaching
    (alignment with its ancestors, inherited indexes deduplicated) exactly as in ``from_dict``;
    groups missing between a path and the root become empty nodes, as there.
    """
    import xarray as xr

    groups = {"/" + p.strip("/"): ds for p, ds in groups.items()}  # "/" for the root
    nodes: dict[str, Any] = {"/": xr.DataTree(dataset=groups.get("/"))}
    kids: dict[str, dict[str, Any]] = {}

    def node(path: str) -> Any:
        found = nodes.get(path)
        if found is None:
            parent, _, name = path.rpartition("/")
            parent = parent or "/"
            node(parent)  # ancestors first: their children lists are in from_dict's order
            found = nodes[path] = xr.DataTree(dataset=groups.get(path))
            kids.setdefault(parent, {})[name] = found
        return found

    for path in sorted(groups, key=lambda p: len(_ancestors(p))):  # from_dict's order
        node(path)
    # attach top-down: a node joins the tree before its own children do, so each attach
    # checks one node against its ancestors (as from_dict), not a whole subtree
    for parent in sorted(kids, key=lambda p: len(_ancestors(p))):
        nodes[parent].children = kids[parent]
    return nodes["/"]
