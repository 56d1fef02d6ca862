"""High-level openers: ``open_dataset``, ``open_datatree`` and a *safe* ``open_mfdataset``.

All three go through the xarray engine ``"h5sidecar"``.  ``open_datatree`` opens every group of
a granule, renaming a dimension that clashes with an ancestor group's in the child group only
(see :mod:`h5sidecar.read.xarray._datatree`).

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

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.read._sidecar_open import load_refs
from h5sidecar.read.xarray._attributes import require_dask
from h5sidecar.read.xarray._zarr_data_store import is_cf_time
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs

__all__ = ["check_combinable", "open_dataset", "open_datatree", "open_mfdataset"]

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


def _chunks(chunks: Any) -> Any:
    """The default chunks for ``...``; other chunks checked by :func:`require_dask`."""
    if chunks is ...:
        return _default_chunks()
    require_dask(chunks)
    return chunks


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

    chunks = _chunks(chunks)
    return xr.open_dataset(ref, engine="h5sidecar", group=group, chunks=chunks, **kwargs)


def open_datatree(ref: Any, *, chunks: Any = ..., **kwargs: Any) -> Any:
    """Open every group of a granule as an :class:`xarray.DataTree` (see module docstring).

    The dimension coordinates xarray indexes (unless ``create_default_indexes=False``) and the
    ends of CF time variables it peeks at are read in one batch first, not one by one.  With
    ``chunks=None`` the tree is assembled once, not rebuilt as ``xarray.open_datatree`` does
    (see :mod:`h5sidecar.read.xarray._datatree_direct`); the result is the same.
    """
    import xarray as xr

    from h5sidecar.read.xarray import _datatree_direct

    chunks = _chunks(chunks)
    indexes = kwargs.get("create_default_indexes", True) is not False
    if chunks is None and _datatree_direct.AVAILABLE and _datatree_direct.DIRECT_OPTIONS.issuperset(kwargs):
        return _datatree_direct.open_tree_direct(ref, _prefetch_indexes=indexes, **kwargs)
    return xr.open_datatree(
        ref, engine="h5sidecar", chunks=chunks, _prefetch_indexes=indexes, **kwargs
    )


# -- safe multi-granule combine ---------------------------------------------------------------
def _name(ref: Any) -> str:
    if isinstance(ref, GranuleRefs):
        return ref.source.url
    return os.fspath(ref) if isinstance(ref, str | os.PathLike) else repr(ref)


def _granule_refs(ref: Any, storage_options: Mapping[str, Any] | None) -> GranuleRefs:
    if isinstance(ref, GranuleRefs):
        return ref
    if isinstance(ref, SidecarStore):
        return ref.refs
    return load_refs(ref, storage_options)


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
            time_attr = attr in TIME_ATTRS and any(is_cf_time(a) for _, a in present)
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
    loaded = [_granule_refs(r, storage_options) for r in refs]
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

