"""High-level openers: ``open_dataset``, ``open_datatree`` and a *safe* ``open_mfdataset``.

``open_datatree`` opens every group of a granule.  xarray's DataTree requires each group to align
with its ancestors: a dimension name may not have two sizes along a branch, and an inherited
index may not change its values.  HDF5 products break this (a ``delta_time`` of photons under a
group whose parent has a ``delta_time`` of segments; phony dimensions reused with other lengths),
which makes plain xarray-over-kerchunk fail on many groups.  Here a clashing dimension is renamed
in the *child* group only (``delta_time`` -> ``delta_time_<group>``, together with its coordinate
variable), and the renaming is recorded in that node's ``encoding["h5sidecar_renamed"]``.

``open_mfdataset`` concatenates granules.  Tools that combine *references* (kerchunk's
MultiZarrToZarr, VirtualiZarr) keep the first granule's ``scale_factor``/``add_offset``/
``_FillValue``/time units for all, silently mis-decoding the others.  Here every granule is
decoded with its own attributes before concatenation; when the caller disabled that decoding
(``mask_and_scale=False`` / ``decode_times=False``) while the attributes differ, or when plain
``units`` differ, :class:`~h5sidecar.errors.IncompatibleGranulesError` names the granules.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.read._cache import load_refs
from h5sidecar.references import GranuleRefs

__all__ = [
    "build_datatree",
    "check_combinable",
    "open_dataset",
    "open_datatree",
    "open_groups",
    "open_mfdataset",
    "resolve_dimension_clashes",
]

#: Attributes xarray's mask/scale decoding consumes.
MASK_AND_SCALE_ATTRS = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")
#: Attributes xarray's time decoding consumes (for variables whose units contain " since ").
TIME_ATTRS = ("units", "calendar")


def _default_chunks() -> dict[str, int] | None:
    try:
        import dask  # noqa: F401
    except ImportError:
        return None
    return {}


def open_dataset(ref: Any, group: str | None = None, *, chunks: Any = ..., **kwargs: Any) -> Any:
    """Open one group of a granule from its sidecar as an :class:`xarray.Dataset`.

    Parameters
    ----------
    ref : str, path-like, GranuleRefs or SidecarStore
        The sidecar (``x.h5.parq`` directory or ``x.h5.json``, local or ``s3://``).
    group : str, optional
        Group path, e.g. ``"gt1l/heights"`` (root by default).
    chunks : dict, "auto" or None
        Dask chunking; the default ``{}`` aligns Dask chunks to whole multiples of the source
        chunks (``None`` without Dask installed: lazy NumPy-backed arrays).
    **kwargs
        xarray decoding options (``mask_and_scale``, ``decode_times``, ...) and the engine's
        ``storage_options``, ``remote_options``, ``settings``, ``chunk_bytes``, ``native``.

    Examples
    --------
    >>> ds = h5sidecar.open_dataset("ATL03_x.h5.parq", group="gt1l/heights")  # doctest: +SKIP
    """
    import xarray as xr

    chunks = _default_chunks() if chunks is ... else chunks
    return xr.open_dataset(ref, engine="h5sidecar", group=group, chunks=chunks, **kwargs)


def open_datatree(ref: Any, *, chunks: Any = ..., **kwargs: Any) -> Any:
    """Open every group of a granule as an :class:`xarray.DataTree` (see module docstring).

    The dimension coordinates xarray indexes (unless ``create_default_indexes=False``) and the
    ends of CF time variables it peeks at are read in one batch first, not one by one.
    """
    import xarray as xr

    chunks = _default_chunks() if chunks is ... else chunks
    indexes = kwargs.get("create_default_indexes", True) is not False
    return xr.open_datatree(
        ref, engine="h5sidecar", chunks=chunks, _prefetch_indexes=indexes, **kwargs
    )


def open_groups(ref: Any, *, group: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Every group at or below ``group`` as a Dataset, keyed by absolute path (``"/"``, ...)."""
    from h5sidecar.read.xarray_backend import H5SidecarBackend, sidecar_store

    store_kw = {
        k: kwargs.pop(k) for k in ("storage_options", "remote_options", "settings") if k in kwargs
    }
    indexes = kwargs.pop("_prefetch_indexes", False)
    store = sidecar_store(ref, **store_kw)
    root = (group or "").strip("/")
    backend = H5SidecarBackend()
    groups = [
        g
        for g in sorted(store.refs.groups, key=lambda p: (p.count("/") if p else -1, p))
        if not root or g == root or g.startswith(root + "/")
    ]
    if kwargs.get("native", True):
        _prefetch_for_open(store, groups, indexes, kwargs.get("decode_times", True) is not False)
    out: dict[str, Any] = {}
    for g in groups:
        rel = g[len(root) :].strip("/") if root else g
        out["/" + rel] = backend.open_dataset(store, group=g, **kwargs)
    return out


def _prefetch_for_open(store: Any, groups: list[str], indexes: bool, times: bool) -> None:
    """Read in one batch what xarray reads one variable at a time while opening every group:
    dimension coordinates (when it will index them) and the ends of CF time variables (when it
    decodes times).  Without this, opening a granule's 140 groups waits for ~100 sequential
    round trips."""
    wanted = set(groups)
    whole, edges = [], []
    for path, arr in store.refs.arrays.items():
        group, _, name = path.rpartition("/")
        if group not in wanted or not arr.meta.shape:
            continue
        if indexes and len(arr.meta.shape) == 1 and arr.meta.dimension_names[:1] == (name,):
            whole.append(path)
        if times and _is_time(arr.meta.attrs) and store.native.supports(path):
            edges.append(path)
    if whole or edges:
        store.native.prefetch(whole, edges)


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
    import xarray as xr

    groups = resolve_dimension_clashes(open_groups(ref, group=group, **kwargs))
    tree = xr.DataTree.from_dict(groups)
    for path, ds in groups.items():
        if "h5sidecar_renamed" in ds.encoding:
            tree[path].encoding = {**tree[path].encoding, **ds.encoding}
    return tree


# -- safe multi-granule combine ---------------------------------------------------------------
def _name(ref: Any) -> str:
    if isinstance(ref, GranuleRefs):
        return ref.source.url
    return os.fspath(ref) if isinstance(ref, str | os.PathLike) else repr(ref)


def _refs_of(ref: Any, storage_options: Mapping[str, Any] | None) -> GranuleRefs:
    from h5sidecar.read.store import SidecarStore

    if isinstance(ref, GranuleRefs):
        return ref
    if isinstance(ref, SidecarStore):
        return ref.refs
    return load_refs(ref, storage_options)


def _is_time(attrs: Mapping[str, Any]) -> bool:
    return isinstance(attrs.get("units"), str) and " since " in attrs["units"]


def check_combinable(
    refs: Sequence[GranuleRefs],
    names: Sequence[str],
    *,
    group: str | None = None,
    mask_and_scale: bool = True,
    decode_times: bool = True,
    on_mismatch: Literal["decode", "raise"] = "decode",
) -> list[str]:
    """Find CF encodings and units that differ between granules; raise when unsafe.

    Returns
    -------
    list of str
        One line per difference that per-granule decoding reconciles (for logs).

    Raises
    ------
    IncompatibleGranulesError
        When a difference is not reconciled: ``on_mismatch="raise"``, decoding of the
        differing attribute disabled, or plain (non-time) ``units`` differ.
    """
    prefix = (group or "").strip("/")
    fatal: list[str] = []
    benign: list[str] = []
    paths = [p for p in refs[0].arrays if p.rpartition("/")[0] == prefix]
    for path in paths:
        per = [r.arrays[path].meta.attrs if path in r.arrays else None for r in refs]
        present = [(n, a) for n, a in zip(names, per, strict=True) if a is not None]
        for attr in (*MASK_AND_SCALE_ATTRS, "units", "calendar"):
            values = {repr(a.get(attr)) for _, a in present}
            if len(values) < 2:
                continue
            time_attr = attr in TIME_ATTRS and any(_is_time(a) for _, a in present)
            detail = ", ".join(f"{n}: {a.get(attr)!r}" for n, a in present)
            line = f"{path}.{attr} differs ({detail})"
            if attr in TIME_ATTRS and not time_attr:
                fatal.append(line + " -- values in different units cannot be concatenated")
            elif on_mismatch == "raise":
                fatal.append(line)
            elif (time_attr and not decode_times) or (not time_attr and not mask_and_scale):
                fatal.append(line + " -- and decoding it is disabled")
            else:
                benign.append(line)
    if fatal:
        raise IncompatibleGranulesError(
            "these granules cannot be concatenated safely:\n  "
            + "\n  ".join(fatal)
            + "\nDecode each granule with its own attributes (mask_and_scale=True, "
            "decode_times=True, on_mismatch='decode'), convert units first, or combine only "
            "granules that agree."
        )
    return benign


def open_mfdataset(
    refs: Iterable[Any],
    *,
    concat_dim: str | None = None,
    combine: Literal["nested", "by_coords"] = "nested",
    group: str | None = None,
    on_mismatch: Literal["decode", "raise"] = "decode",
    chunks: Any = ...,
    mask_and_scale: bool = True,
    decode_times: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    combine_kwargs: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Open several granules' sidecars and concatenate them, decoding each one safely.

    Parameters
    ----------
    refs : iterable
        Sidecar paths/URLs (or GranuleRefs), in concatenation order.
    concat_dim : str, optional
        Dimension to concatenate along (required with ``combine="nested"``).
    combine : "nested" or "by_coords"
        As in :func:`xarray.open_mfdataset`.
    group : str, optional
        Group to open in every granule.
    on_mismatch : "decode" or "raise"
        When CF encodings (``scale_factor``, ``add_offset``, ``_FillValue``, ``missing_value``,
        time ``units``/``calendar``) differ: decode every granule with its own attributes, then
        concatenate (default), or refuse.
    chunks, mask_and_scale, decode_times, storage_options, **kwargs
        Passed to :func:`open_dataset` for every granule.
    combine_kwargs : mapping, optional
        Extra arguments of :func:`xarray.combine_nested` / :func:`xarray.combine_by_coords`.

    Raises
    ------
    IncompatibleGranulesError
        See :func:`check_combinable`.
    """
    import xarray as xr

    refs = list(refs)
    if not refs:
        raise ValueError("open_mfdataset needs at least one sidecar")
    names = [_name(r) for r in refs]
    loaded = [_refs_of(r, storage_options) for r in refs]
    check_combinable(
        loaded,
        names,
        group=group,
        mask_and_scale=mask_and_scale,
        decode_times=decode_times,
        on_mismatch=on_mismatch,
    )
    datasets = [
        open_dataset(
            r,
            group,
            chunks=chunks,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            storage_options=storage_options,
            **kwargs,
        )
        for r in refs
    ]
    options = {"combine_attrs": "drop_conflicts", **(combine_kwargs or {})}
    if combine == "nested":
        if concat_dim is None:
            raise ValueError("combine='nested' needs concat_dim (the dimension to stack along)")
        options.setdefault("data_vars", "all")
        options.setdefault("coords", "different")
        options.setdefault("compat", "no_conflicts")
        options.setdefault("join", "outer")
        return xr.combine_nested(datasets, concat_dim=concat_dim, **options)
    return xr.combine_by_coords(datasets, **options)

