"""Loading many arrays at once: :func:`read_arrays` (NumPy) and :func:`load` (xarray objects).

Both hand whole batches to the granule's :class:`~h5sidecar.read.native._batch_reader.NativeReader`, so
every chunk they need shares one coalesced fetch plan and decoding runs in parallel threads.

:func:`load` has two paths, and keeps both: variables with nothing between xarray's lazy
wrappers and the batch reader are read in one call per reader (:func:`_direct_reads`), the
others through xarray's own ``load_async``, one per variable.  ``errors="collect"`` takes the
second for every variable, so that a bad chunk fails only its own variable; raising, the first
is the one round of planning and fetching the batch reader is for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Literal, overload

import numpy as np

from h5sidecar.errors import H5SidecarError, did_you_mean
from h5sidecar.read.native._batch_reader import Item

__all__ = ["ArraysRead", "load", "read_arrays"]

#: What ``errors="collect"`` records per array instead of raising: failures of the data (a
#: corrupt chunk, a replaced or unreadable source, a refused URL).  Anything else (a bug, a
#: wrong name or key) still raises.
COLLECTED = (H5SidecarError, OSError)


class ArraysRead(dict[str, np.ndarray]):
    """What ``read_arrays(..., errors="collect")`` returns: path -> array for every array that
    could be read, and ``errors``: path -> the exception of each one that could not."""

    def __init__(self, arrays: Mapping[str, np.ndarray], errors: Mapping[str, BaseException]):
        super().__init__(arrays)
        self.errors: dict[str, BaseException] = dict(errors)


@overload
def read_arrays(
    ref: Any,
    selections: Iterable[str] | Mapping[str, Any],
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: Any = None,
    mask_and_scale: bool = False,
    errors: Literal["raise"] = "raise",
) -> dict[str, np.ndarray]: ...


@overload
def read_arrays(
    ref: Any,
    selections: Iterable[str] | Mapping[str, Any],
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: Any = None,
    mask_and_scale: bool = False,
    errors: Literal["collect"],
) -> ArraysRead: ...


def read_arrays(
    ref: Any,
    selections: Iterable[str] | Mapping[str, Any],
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: Any = None,
    mask_and_scale: bool = False,
    errors: Literal["raise", "collect"] = "raise",
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
        As for :class:`~h5sidecar.read.zarr.store.SidecarStore`.
    mask_and_scale : bool
        Apply each array's CF ``_FillValue``/``missing_value`` masking and
        ``scale_factor``/``add_offset`` as the xarray engine does (the values of
        ``open_dataset(..., decode_times=False)[name].values``); default: stored values.
    errors : "raise" or "collect"
        ``"raise"`` (default): the first array that cannot be read (a corrupt chunk, a replaced
        or unreadable source) fails the call.  ``"collect"``: return every array that can be
        read, and the others' exceptions in the result's ``errors`` (an :class:`ArraysRead`);
        a failing array costs the others one more fetch of their chunks, nothing else.

    Returns
    -------
    dict
        Path -> array (numbers in native byte order).  Arrays of Python objects are read
        through zarr, with the same values.  With ``errors="collect"``, an :class:`ArraysRead`.

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
    from h5sidecar.read._granule_reader import GranuleReader
    from h5sidecar.read.zarr.store import SidecarStore

    given = ref if isinstance(ref, SidecarStore) else None
    reader = given.reader if given is not None else GranuleReader.open(
        ref, storage_options=storage_options, remote_options=remote_options, settings=settings
    )

    def zarr_array(path: str) -> Any:
        # arrays of Python objects only: zarr reads them, through the store given or the Zarr
        # v2 view over the same reader (its fetcher and caches)
        return (given or SidecarStore.for_reader(reader)).zarr_array(path)

    wanted = dict(selections) if isinstance(selections, Mapping) else dict.fromkeys(selections)
    items: list[Item] = []
    others: dict[str, Any] = {}
    for path, key in wanted.items():
        arr = reader.refs.arrays.get(path)
        if arr is None:
            # the sidecar the user passed, when known: the source's name is not what they typed
            where = reader.sidecar or f"the sidecar of {reader.refs.source.url}"
            raise KeyError(f"no array {path!r} in {where}; "
                           + did_you_mean(path, reader.refs.arrays))
        key = () if key is None else key if isinstance(key, tuple) else (key,)
        full = (*key, *(slice(None),) * (len(arr.meta.shape) - len(key)))
        if reader.native.supports(path):
            items.append((path, full))
        else:
            reader.native.codec(path)  # a codec numcodecs cannot build: InvalidReferenceError
            others[path] = full
    if errors == "collect":
        return _read_collecting(reader, zarr_array, wanted, items, others, mask_and_scale)
    if errors != "raise":
        raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
    out = dict(zip([p for p, _ in items], reader.native.read_sync(items), strict=True))
    for path, key in others.items():
        out[path] = np.asarray(zarr_array(path)[key])
    if mask_and_scale:
        return {p: cf_decoded(reader.refs, p, out[p]) for p in wanted}
    return {p: out[p] for p in wanted}


def _read_collecting(reader: Any, zarr_array: Any, wanted: Mapping[str, Any], items: list[Item],
                     others: Mapping[str, Any], mask_and_scale: bool) -> ArraysRead:
    """Every item as its own request of one batch: the batch reader serves them together and,
    when the batch fails, each alone, so only the arrays that need a bad chunk fail."""
    from h5sidecar._compat.fsspec import run_sync

    async def each() -> list[Any]:
        return await asyncio.gather(*(reader.native.read([it]) for it in items),
                                    return_exceptions=True)

    got: dict[str, Any] = {}
    results = run_sync(each) if items else []
    for (path, _), res in zip(items, results, strict=True):
        got[path] = res if isinstance(res, BaseException) else res[0]
    for path, key in others.items():
        try:
            got[path] = np.asarray(zarr_array(path)[key])
        except COLLECTED as exc:
            got[path] = exc
    failed = {p: v for p, v in got.items() if isinstance(v, BaseException)}
    for error in failed.values():
        if not isinstance(error, COLLECTED):
            raise error  # a bug or a bad key is not a data failure: never collected
    arrays = {p: got[p] for p in wanted if p not in failed}
    if mask_and_scale:
        arrays = {p: cf_decoded(reader.refs, p, v) for p, v in arrays.items()}
    return ArraysRead(arrays, {p: failed[p] for p in wanted if p in failed})


def cf_decoded(refs: Any, path: str, values: np.ndarray) -> np.ndarray:
    """``values`` of array ``path`` masked and scaled by its CF attributes, through xarray's own
    coder with the attributes typed as the xarray engine types them (so the result equals the
    engine's ``decode_times=False`` values)."""
    from xarray import Variable
    from xarray.conventions import decode_cf_variable

    from h5sidecar.read.xarray._zarr_data_store import cf_attributes

    meta = refs.arrays[path].meta
    hints = refs.extra.get("attribute_dtypes", {}).get(path, {})
    var = Variable(tuple(f"dim_{i}" for i in range(np.ndim(values))), values,
                   cf_attributes(meta, hints))
    decoded = decode_cf_variable(path, var, concat_characters=False, mask_and_scale=True,
                                 decode_times=False, decode_timedelta=False,
                                 stack_char_dim=False)
    return np.asarray(decoded.values)


def load(obj: Any, *, errors: Literal["raise", "collect"] = "raise") -> Any:
    """Load every lazy variable of ``obj`` (Dataset, DataArray or DataTree) in one batch.

    xarray's ``load()`` reads variables one after another (one round trip each); this awaits
    every variable's ``load_async()`` together, so the batch reader merges them into one
    coalesced fetch plan.  Runs on fsspec's I/O loop, so it also works where an event loop is
    already running (Jupyter).  Dask-backed variables are computed in one ``dask.compute``
    first.  Returns ``obj``, loaded in place.

    With ``errors="collect"`` a variable that cannot be read (a corrupt chunk, a replaced or
    unreadable source) does not fail the others: they are loaded, it stays lazy, and the call
    returns ``{name: exception}`` of the variables left unloaded (``"group/var"`` paths for a
    DataTree; empty when everything loaded) instead of ``obj``.

    Examples
    --------
    >>> tree = h5sidecar.open_datatree("ATL03_x.h5.parq", chunks=None)   # doctest: +SKIP
    >>> h5sidecar.load(tree)                                              # doctest: +SKIP
    """
    import xarray as xr

    from h5sidecar._compat.fsspec import run_sync

    if errors not in ("raise", "collect"):
        raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
    named: list[tuple[str, Any]]
    if isinstance(obj, xr.DataTree):
        named = [(f"{node.path.strip('/')}/{k}".lstrip("/"), v)
                 for node in obj.subtree for k, v in node.variables.items()]
    elif isinstance(obj, xr.DataArray):
        named = [(str(obj.name), obj.variable), *obj.coords.variables.items()]
    elif isinstance(obj, xr.Dataset):
        named = [(str(k), v) for k, v in obj.variables.items()]
    else:
        raise TypeError(f"load() takes a Dataset, DataArray or DataTree, not {type(obj).__name__}")
    failed: dict[str, BaseException] = {}
    is_chunked = {id(v): _is_chunked(v) for _, v in named}
    chunked = [(n, v) for n, v in named if is_chunked[id(v)]]
    if chunked:
        import dask

        try:
            datas = dask.compute(*(v.data for _, v in chunked))
        except COLLECTED:
            if errors == "raise":
                raise
            datas = tuple(_compute_or_error(v) for _, v in chunked)
        for (n, v), data in zip(chunked, datas, strict=True):
            if isinstance(data, BaseException):
                failed[n] = data
            else:
                v.data = data
    lazy: dict[int, tuple[str, Any]] = {}
    for n, v in named:  # a coordinate shared by many: loaded once, named once
        if not is_chunked[id(v)]:
            lazy.setdefault(id(v), (n, v))

    async def _one(v: Any) -> Any:
        try:
            return await v.load_async()
        except NotImplementedError:
            # some of xarray's decoding wrappers (NativeEndiannessArray, for a big-endian
            # field of a compound) have no async path: load those in a thread instead
            return await asyncio.to_thread(v.load)

    # raising: variables straight over the batch reader are read in one call per reader, not
    # through xarray's per-variable chain (collecting keeps one read per variable, so a bad
    # chunk fails only its own)
    direct = _direct_reads([v for _, v in lazy.values()]) if errors == "raise" else {}
    rest = [(n, v) for n, v in lazy.values() if id(v) not in direct]

    async def _all() -> list[Any]:
        readers = _by_reader(direct)
        # every read runs to its end before load returns or raises: a read left running after
        # the first failure would still swap variables' data in under a later load() (or the
        # user's own code) that has already looked at them
        return await asyncio.gather(*(_read_direct(r, group) for r, group in readers),
                                    *(_one(v) for _, v in rest), return_exceptions=True)

    results = run_sync(_all)
    if errors == "raise":
        for res in results:
            if isinstance(res, BaseException):
                raise res
        return obj
    for (n, _), res in zip(rest, results, strict=True):
        if isinstance(res, BaseException):
            if not isinstance(res, COLLECTED):
                raise res  # a bug is not a data failure: never collected
            failed[n] = res
    return failed


def _is_chunked(v: Any) -> bool:
    """``v.chunks is not None``, without xarray's runtime Protocol check for the lazy and
    in-memory arrays the engine gives (that check costs ~30 us a variable: a DataTree of a
    thousand variables spent more on it than on opening them)."""
    from h5sidecar._compat.xarray import is_in_memory_or_cached

    if is_in_memory_or_cached(v):
        return False
    return v.chunks is not None


def _direct_reads(variables: list[Any]) -> dict[int, tuple[Any, Any, Any, Any]]:
    """``id(variable) -> (variable, SidecarArray, raw key, in-memory indexer)`` for the
    variables xarray would load with nothing between its lazy wrappers and the batch reader
    (no CF decoding step): a SidecarArray and a basic key in xarray's lazy wrappers, as the
    engine opens them (:func:`h5sidecar._compat.xarray.cached_lazy_array`)."""
    from xarray.core import indexing as ix

    from h5sidecar._compat.xarray import cached_lazy_array, split_basic_key
    from h5sidecar.read.xarray._lazy_array import SidecarArray

    out = {}
    for v in variables:
        lazy = cached_lazy_array(v)
        if lazy is None or not isinstance(lazy.array, SidecarArray):
            continue
        if not isinstance(lazy.key, ix.BasicIndexer):
            continue
        # what xarray's explicit_indexing_adapter does with the key, split in two
        raw, in_memory = split_basic_key(lazy.key, lazy.array.shape)
        out[id(v)] = (v, lazy.array, raw, in_memory)
    return out


def _by_reader(direct: Mapping[int, tuple[Any, Any, Any, Any]]) -> list[tuple[Any, list[Any]]]:
    groups: dict[int, tuple[Any, list[Any]]] = {}
    for entry in direct.values():
        reader = entry[1].reader
        groups.setdefault(id(reader), (reader, []))[1].append(entry)
    return list(groups.values())


async def _read_direct(reader: Any, entries: list[tuple[Any, Any, Any, Any]]) -> None:
    """Load ``entries`` (see :func:`_direct_reads`) in one batch and set each variable's data
    exactly as ``Variable.load_async`` would (the shared in-memory cache included)."""
    from h5sidecar._compat.xarray import apply_in_memory_key, set_loaded_data

    # every variable is asked for: reading ahead would only decode arrays twice
    with reader.opening():
        arrays = await reader.read([(sarr.path, raw.tuple) for _, sarr, raw, _ in entries])
    for (v, _, _, in_memory), result in zip(entries, arrays, strict=True):
        if in_memory.tuple:
            result = apply_in_memory_key(result, in_memory)
        set_loaded_data(v, result)


def _compute_or_error(v: Any) -> Any:
    import dask

    try:
        return dask.compute(v.data)[0]
    except COLLECTED as exc:
        return exc
