"""Loading many arrays at once: :func:`read_arrays` (NumPy) and :func:`load` (xarray objects).

Both hand whole batches to the store's :class:`~h5sidecar.read._batch.NativeReader`, so
every chunk they need shares one coalesced fetch plan and decoding runs in parallel threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from h5sidecar.errors import did_you_mean
from h5sidecar.read._batch import Item

__all__ = ["load", "read_arrays"]


def read_arrays(
    ref: Any,
    selections: Iterable[str] | Mapping[str, Any],
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: Any = None,
    mask_and_scale: bool = False,
) -> dict[str, np.ndarray]:
    """Read many arrays (or basic selections of them) of one granule into NumPy, in one batch.

    Parameters
    ----------
    ref : str, path-like, GranuleRefs or SidecarStore
        The sidecar (``x.h5.parq`` / ``x.h5.json``, local or ``s3://``) or an open store.
    selections : iterable of str, or mapping
        Array paths to read whole, or ``{path: key}`` with ``key`` an int, a slice or a tuple of
        them (one per leading axis; missing axes are read whole).
    storage_options, remote_options, settings
        As for :class:`~h5sidecar.read.store.SidecarStore`.
    mask_and_scale : bool
        Apply each array's CF ``_FillValue``/``missing_value`` masking and
        ``scale_factor``/``add_offset`` as the xarray engine does (the values of
        ``open_dataset(..., decode_times=False)[name].values``); default: stored values.

    Returns
    -------
    dict
        Path -> array (numbers in native byte order).  Arrays of Python objects are read
        through zarr, with the same values.

    Notes
    -----
    This is the cheapest way from a sidecar to the values of a few named arrays: it builds
    no Zarr hierarchy and no xarray Dataset, and reads every selection in one coalesced batch
    (with a lazily parsed sidecar, only the named arrays' chunk references are decoded).

    Examples
    --------
    >>> out = read_arrays("ATL03_x.h5.parq", {"gt1l/heights/h_ph": slice(0, 10_000),
    ...                                       "gt1l/heights/lat_ph": slice(0, 10_000)})  # doctest: +SKIP
    """
    from h5sidecar.read.store import SidecarStore

    store = ref if isinstance(ref, SidecarStore) else SidecarStore(
        ref, storage_options=storage_options, remote_options=remote_options, settings=settings
    )
    wanted = dict(selections) if isinstance(selections, Mapping) else dict.fromkeys(selections)
    items: list[Item] = []
    others: dict[str, Any] = {}
    for path, key in wanted.items():
        arr = store.refs.arrays.get(path)
        if arr is None:
            raise KeyError(
                f"no array {path!r} in the sidecar of {store.refs.source.url}; "
                + did_you_mean(path, store.refs.arrays)
            )
        key = () if key is None else key if isinstance(key, tuple) else (key,)
        full = (*key, *(slice(None),) * (len(arr.meta.shape) - len(key)))
        if store.native.supports(path):
            items.append((path, full))
        else:
            others[path] = full
    out = dict(zip([p for p, _ in items], store.native.read_sync(items), strict=True))
    for path, key in others.items():
        out[path] = np.asarray(store.zarr_root()[path][key])
    if mask_and_scale:
        return {p: cf_decoded(store.refs, p, out[p]) for p in wanted}
    return {p: out[p] for p in wanted}


def cf_decoded(refs: Any, path: str, values: np.ndarray) -> np.ndarray:
    """``values`` of array ``path`` masked and scaled by its CF attributes, through xarray's own
    coder with the attributes typed as the xarray engine types them (so the result equals the
    engine's ``decode_times=False`` values)."""
    from xarray import Variable
    from xarray.conventions import decode_cf_variable

    from h5sidecar.read._xr_store import cf_attributes

    meta = refs.arrays[path].meta
    hints = refs.extra.get("attribute_dtypes", {}).get(path, {})
    var = Variable(tuple(f"dim_{i}" for i in range(np.ndim(values))), values,
                   cf_attributes(meta, hints))
    decoded = decode_cf_variable(path, var, concat_characters=False, mask_and_scale=True,
                                 decode_times=False, decode_timedelta=False,
                                 stack_char_dim=False)
    return np.asarray(decoded.values)


def load(obj: Any) -> Any:
    """Load every lazy variable of ``obj`` (Dataset, DataArray or DataTree) in one batch.

    xarray's ``load()`` reads variables one after another (one round trip each); this awaits
    every variable's ``load_async()`` together, so the batch reader merges them into one
    coalesced fetch plan.  Runs on fsspec's I/O loop, so it also works where an event loop is
    already running (Jupyter).  Dask-backed variables are computed in one ``dask.compute``
    first.  Returns ``obj``, loaded in place.

    Examples
    --------
    >>> tree = h5sidecar.open_datatree("ATL03_x.h5.parq", chunks=None)   # doctest: +SKIP
    >>> h5sidecar.load(tree)                                              # doctest: +SKIP
    """
    import fsspec.asyn
    import xarray as xr

    if isinstance(obj, xr.DataTree):
        variables = [v for node in obj.subtree for v in node.variables.values()]
    elif isinstance(obj, xr.DataArray):
        variables = [obj.variable, *obj.coords.variables.values()]
    elif isinstance(obj, xr.Dataset):
        variables = list(obj.variables.values())
    else:
        raise TypeError(f"load() takes a Dataset, DataArray or DataTree, not {type(obj).__name__}")
    chunked = [v for v in variables if v.chunks is not None]
    if chunked:
        import dask

        for v, data in zip(chunked, dask.compute(*(v.data for v in chunked)), strict=True):
            v.data = data
    lazy = {id(v): v for v in variables if v.chunks is None}  # a coordinate shared by many

    async def _all() -> None:
        await asyncio.gather(*(v.load_async() for v in lazy.values()))

    fsspec.asyn.sync(fsspec.asyn.get_loop(), _all)
    return obj
