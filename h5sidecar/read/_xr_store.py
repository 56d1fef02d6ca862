"""xarray's Zarr data store over a :class:`~h5sidecar.read.store.SidecarStore`, and one group of
a granule opened through it as a Dataset.

Decoding is delegated to xarray's own Zarr machinery (``ZarrStore`` + ``StoreBackendEntrypoint``),
with three corrections that make CF decoding identical to opening the HDF5 file with
``engine="h5netcdf"``:

1. **Storage fill values are not masks.**  A Zarr v2 ``fill_value`` is what unallocated chunks
   hold (HDF5's storage fill value); xarray would treat it as ``_FillValue``.  Only the
   ``_FillValue`` *attribute* masks, as with h5netcdf.
2. **CF attributes get their numeric types back.**  JSON keeps no float32/float64/int16
   distinction, but xarray picks the decoded dtype from them (a float32 ``scale_factor`` on
   int16 data decodes to float32).  ``_FillValue``, ``missing_value`` and ``valid_*`` take the
   variable's type (the netCDF rule) when that is lossless; ``scale_factor``/``add_offset`` are
   float32 when their value is exactly a float32, else float64 (integers stay integers).  Exact
   types recorded by the indexer in ``GranuleRefs.extra["attribute_dtypes"][path][name]``
   override this.  Zarr v2 ``"NaN"``/``"Infinity"`` strings become floats.
3. **Dask chunks are aligned.**  ``encoding["preferred_chunks"]`` is a whole multiple of the
   source chunks (up to ``chunk_bytes``), so ``chunks={}`` reads each chunk exactly once.

Data is read by :class:`~h5sidecar.read._lazy_array.SidecarArray` (the native batch reader:
one coalesced fetch per selection, chunks decoded in parallel threads), not by zarr, except for
arrays of Python objects; ``native=False`` keeps zarr's reader for every array.

Both the xarray engine (:mod:`h5sidecar.read.xarray_backend`) and the all-groups opener
(:mod:`h5sidecar.read._groups`) build on this module; it imports neither.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from xarray.backends.store import StoreBackendEntrypoint
from xarray.backends.zarr import ZarrStore
from xarray.core import indexing
from xarray.core.variable import Variable

from h5sidecar.errors import NotIndexedError, did_you_mean
from h5sidecar.read._batch import NativeReader
from h5sidecar.read._lazy_array import SidecarArray
from h5sidecar.read.store import SidecarStore
from h5sidecar.references import ArrayMeta, GranuleRefs
from h5sidecar.settings import ReadSettings

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "aligned_chunks",
    "cf_attributes",
    "is_cf_time",
    "open_group_dataset",
    "open_zarr_store",
    "sidecar_store",
]

#: Target decoded size of one Dask chunk when aligning to source chunks.
DEFAULT_CHUNK_BYTES = 64 * 2**20

_VARIABLE_TYPED = ("_FillValue", "missing_value", "valid_min", "valid_max", "valid_range")
_PACKING = ("scale_factor", "add_offset")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def aligned_chunks(
    shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, chunk_bytes: int
) -> tuple[int, ...]:
    """Whole multiples of ``chunks`` (slowest axis grown first) of about ``chunk_bytes``.

    Every returned chunk covers complete source chunks, so no source chunk is read by two Dask
    tasks.  ``chunk_bytes <= 0`` returns the source chunks.
    """
    out = list(chunks)
    nbytes = max(itemsize, 1) * math.prod(chunks)
    if chunk_bytes <= 0 or nbytes >= chunk_bytes:
        return tuple(chunks)
    for ax, (size, chunk) in enumerate(zip(shape, chunks, strict=True)):
        n = max(-(-size // chunk), 1)
        k = max(1, min(n, chunk_bytes // nbytes))
        out[ax] = min(chunk * k, size) if size else chunk
        nbytes *= k
        if k < n:
            break
    return tuple(out)


def _nonfinite(value: Any) -> Any:
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [_nonfinite(v) for v in value]
    return value


def _lossless(value: Any, dtype: np.dtype) -> Any | None:
    """``value`` as ``dtype`` (numpy scalar or array), or None if that would change it."""
    try:
        src = np.asarray(_nonfinite(value))
        if src.dtype.kind not in "biuf":
            return None
        with np.errstate(invalid="ignore", over="ignore"):
            cast = src.astype(dtype)
        if not np.array_equal(cast.astype(src.dtype), src, equal_nan=src.dtype.kind == "f"):
            return None
    except (TypeError, ValueError, OverflowError):
        return None
    return cast[()] if cast.ndim == 0 else cast


def _packing_value(value: Any) -> Any:
    value = _nonfinite(value)
    if isinstance(value, bool) or not isinstance(value, int | float | list):
        return value
    arr = np.asarray(value)
    out: np.ndarray
    if arr.dtype.kind in "iu":
        out = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        as32 = arr.astype(np.float32)
        exact = np.array_equal(as32.astype(np.float64), arr, equal_nan=True)
        out = as32 if exact else arr.astype(np.float64)
    else:
        return value
    return out[()] if out.ndim == 0 else out


def cf_attributes(meta: ArrayMeta, hints: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The attributes of an array with CF numeric types restored (see the module docstring)."""
    attrs = dict(meta.attrs)
    hints = hints or {}
    dtype = meta.numpy_dtype
    native = dtype.newbyteorder("=") if dtype.kind in "biuf" else None
    for name, value in attrs.items():
        if name in hints:
            typed = _lossless(value, np.dtype(hints[name]))
            attrs[name] = typed if typed is not None else _nonfinite(value)
        elif name in _VARIABLE_TYPED and native is not None:
            typed = _lossless(value, native)
            attrs[name] = typed if typed is not None else _packing_value(value)
        elif name in _PACKING:
            attrs[name] = _packing_value(value)
    return attrs


def is_cf_time(attrs: Mapping[str, Any]) -> bool:
    """Whether attributes describe a CF time variable (``units`` of the form ``"<u> since <t>"``)."""
    return isinstance(attrs.get("units"), str) and " since " in attrs["units"]


class _SidecarZarrStore(ZarrStore):
    """xarray's ZarrStore with typed CF attributes and aligned preferred chunks."""

    h5_refs: GranuleRefs
    h5_chunk_bytes: int
    h5_native: NativeReader | None

    def open_store_variable(self, name: str) -> Variable:
        var = super().open_store_variable(name)
        path = f"{self.zarr_group.path}/{name}".strip("/")
        data = var._data
        native = self.h5_native
        if native is not None and native.supports(path) and data.dtype == native.codec(path).dtype:  # type: ignore[union-attr]
            data = indexing.LazilyIndexedArray(SidecarArray(native, path))
        meta = self.h5_refs.arrays[path].meta
        hints = self.h5_refs.extra.get("attribute_dtypes", {}).get(path, {})
        encoding = dict(var.encoding)
        aligned = aligned_chunks(
            meta.shape, meta.chunks, meta.numpy_dtype.itemsize, self.h5_chunk_bytes
        )
        encoding["preferred_chunks"] = dict(zip(var.dims, aligned, strict=True))
        return Variable(var.dims, data, cf_attributes(meta, hints), encoding)


def open_zarr_store(
    store: SidecarStore,
    group: str | None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    native: bool = True,
) -> _SidecarZarrStore:
    """xarray's data store for ``group`` of a sidecar store (consolidated metadata, mode "r");
    with ``native``, variables read through the store's :class:`NativeReader`.

    Raises
    ------
    NotIndexedError
        When the sidecar has no such group.
    """
    group = (group or "").strip("/")
    if group not in store.refs.groups:
        where = store.sidecar or store.refs.source.url
        raise NotIndexedError(
            f"no group {group!r} in the sidecar of {where}; "
            + did_you_mean(group, store.refs.groups)
        )
    root = store.zarr_root()
    zstore = _SidecarZarrStore(
        root[group] if group else root,
        mode="r",
        # Our attributes replace xarray's; this keeps xarray from parsing _FillValue itself.
        use_zarr_fill_value_as_mask=True,
    )
    zstore.h5_refs = store.refs
    zstore.h5_chunk_bytes = chunk_bytes
    zstore.h5_native = store.native if native else None
    return zstore


def sidecar_store(
    filename_or_obj: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: ReadSettings | None = None,
) -> SidecarStore:
    """A :class:`SidecarStore` for a path, GranuleRefs or an existing store."""
    if isinstance(filename_or_obj, SidecarStore):
        return filename_or_obj
    if not isinstance(filename_or_obj, GranuleRefs | str | os.PathLike):
        raise TypeError(
            "engine='h5sidecar' opens a sidecar path/URL (x.h5.parq, x.h5.json), GranuleRefs "
            f"or SidecarStore, not {type(filename_or_obj).__name__}"
        )
    return SidecarStore(
        filename_or_obj,
        settings=settings,
        storage_options=storage_options,
        remote_options=remote_options,
    )


def open_group_dataset(
    filename_or_obj: Any,
    *,
    drop_variables: str | Iterable[str] | None = None,
    group: str | None = None,
    mask_and_scale: bool = True,
    decode_times: bool = True,
    concat_characters: bool = True,
    decode_coords: bool = True,
    use_cftime: bool | None = None,
    decode_timedelta: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: ReadSettings | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    native: bool = True,
) -> Any:
    """One group of a sidecar as a Dataset (lazily; no source bytes are read).

    The body of the engine's ``open_dataset`` (see
    :meth:`h5sidecar.read.xarray_backend.H5SidecarBackend.open_dataset` for the parameters).
    """
    store = sidecar_store(
        filename_or_obj,
        storage_options=storage_options,
        remote_options=remote_options,
        settings=settings,
    )
    zstore = open_zarr_store(store, group, chunk_bytes, native)
    # what xarray reads while opening is no loop over variables: it never triggers read-ahead
    with store.native.opening():
        return StoreBackendEntrypoint().open_dataset(
            zstore,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )
