"""xarray's Zarr data store over a :class:`~h5sidecar.read.zarr.store.SidecarStore`, and one group of
a granule opened through it as a Dataset.

Decoding is delegated to xarray's own Zarr machinery (``ZarrStore`` + the decoding of
``StoreBackendEntrypoint``, see :mod:`h5sidecar.read.xarray._dataset_build`),
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

Data is read by :class:`~h5sidecar.read.xarray._lazy_array.SidecarArray` (the native batch reader:
one coalesced fetch per selection, chunks decoded in parallel threads), not by zarr, except for
arrays of Python objects; ``native=False`` keeps zarr's reader for every array.

Both the xarray engine (:mod:`h5sidecar.read.xarray.backend`) and the all-groups opener
(:mod:`h5sidecar.read.xarray._datatree`) build on this module; it imports neither.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from xarray import Variable
from xarray.core import indexing

from h5sidecar._compat.xarray import ZarrStoreAdapter, variable_data
from h5sidecar.errors import NotIndexedError, did_you_mean
from h5sidecar.read._granule_reader import GranuleReader
from h5sidecar.read.native._batch_reader import NativeReader
from h5sidecar.read.xarray._attributes import (
    DEFAULT_CHUNK_BYTES,
    aligned_chunks,
    cf_attributes,
    group_attributes,
    is_cf_time,
)
from h5sidecar.read.xarray._dataset_build import store_dataset
from h5sidecar.read.xarray._lazy_array import SidecarArray
from h5sidecar.read.xarray._refs_data_store import RefsGroupStore, group_members
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs, from_kerchunk
from h5sidecar.settings import ReadSettings

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "aligned_chunks",
    "cf_attributes",
    "is_cf_time",
    "open_data_store",
    "open_group_dataset",
    "open_reader",
    "open_zarr_store",
    "reader_of",
]


class _SidecarZarrStore(ZarrStoreAdapter):
    """xarray's ZarrStore with typed CF attributes and aligned preferred chunks."""

    h5_refs: GranuleRefs
    h5_chunk_bytes: int
    h5_native: NativeReader | None

    def get_attrs(self) -> dict[str, Any]:
        path = self.zarr_group.path.strip("/")
        hints = self.h5_refs.extra.get("attribute_dtypes", {}).get(path, {})
        return group_attributes(super().get_attrs(), hints)

    def adapt_variable(self, name: str, var: Variable) -> Variable:
        path = f"{self.zarr_group.path}/{name}".strip("/")
        data = variable_data(var)
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
    group = _checked_group(store, group)
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


def _checked_group(source: GranuleReader | SidecarStore, group: str | None) -> str:
    group = (group or "").strip("/")
    refs = source.refs
    if group not in refs.groups:
        where = source.sidecar or refs.source.url
        raise NotIndexedError(
            f"no group {group!r} in the sidecar of {where}; " + did_you_mean(group, refs.groups)
        )
    return group


def open_data_store(
    source: GranuleReader | SidecarStore,
    group: str | None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    native: bool = True,
    members: list[str] | None = None,
) -> Any:
    """The xarray data store for ``group``: served straight from the references
    (:class:`~h5sidecar.read.xarray._refs_data_store.RefsGroupStore`) for a Zarr v2 view read natively, else
    xarray's ZarrStore (:func:`open_zarr_store`); both give xarray the same variables.

    ``source`` is a granule reader (a Zarr v2 view) or a zarr store the caller gave (its view).

    ``members`` (the group's array paths, see :func:`~h5sidecar.read.xarray._refs_data_store.group_members`)
    spares one pass over the granule's arrays per group when many groups are opened.

    Raises
    ------
    NotIndexedError
        When the sidecar has no such group.
    """
    zarr_format = source.zarr_format if isinstance(source, SidecarStore) else 2
    reader = reader_of(source)
    if not native or zarr_format != 2:
        return open_zarr_store(SidecarStore.for_reader(reader, zarr_format), group, chunk_bytes,
                               native)
    group = _checked_group(source, group)
    if members is None:
        members = _all_members(reader)[group]
    return RefsGroupStore(reader, group, members, chunk_bytes)


#: every group's members per granule reader: opening the groups of a granule one
#: ``open_dataset`` at a time then sorts its arrays once, not once per group (140 sorts of a
#: thousand paths cost ~35 ms)
_MEMBERS: weakref.WeakKeyDictionary[GranuleReader, dict[str, list[str]]] = (
    weakref.WeakKeyDictionary()
)


def _all_members(reader: GranuleReader) -> dict[str, list[str]]:
    found = _MEMBERS.get(reader)
    if found is None:
        found = _MEMBERS[reader] = group_members(reader.refs)
    return found


def reader_of(source: GranuleReader | SidecarStore) -> GranuleReader:
    """The granule reader of ``source`` (a zarr store wraps one)."""
    return source.reader if isinstance(source, SidecarStore) else source


def open_reader(
    filename_or_obj: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    settings: ReadSettings | None = None,
) -> GranuleReader | SidecarStore:
    """A granule reader for a path or GranuleRefs; a granule reader or zarr store given is kept
    (a store's view, and the reader it wraps, are the caller's)."""
    if isinstance(filename_or_obj, GranuleReader | SidecarStore):
        return filename_or_obj
    if isinstance(filename_or_obj, Mapping):
        # a JSON sidecar already parsed: what xpystac passes for a references asset
        filename_or_obj = from_kerchunk(filename_or_obj)
    if not isinstance(filename_or_obj, GranuleRefs | str | os.PathLike):
        raise TypeError(
            "engine='h5sidecar' opens a sidecar path/URL (x.h5.parq, x.h5.json), its parsed "
            f"JSON, GranuleRefs or SidecarStore, not {type(filename_or_obj).__name__}"
        )
    return GranuleReader.open(
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
    _members: list[str] | None = None,
) -> Any:
    """One group of a sidecar as a Dataset (lazily; no source bytes are read).

    The body of the engine's ``open_dataset`` (see
    :meth:`h5sidecar.read.xarray.backend.H5SidecarBackend.open_dataset` for the parameters;
    ``_members``: see :func:`open_data_store`).
    """
    source = open_reader(
        filename_or_obj,
        storage_options=storage_options,
        remote_options=remote_options,
        settings=settings,
    )
    zstore = open_data_store(source, group, chunk_bytes, native, _members)
    # what xarray reads while opening is no loop over variables: it never triggers read-ahead
    with reader_of(source).native.opening():
        return store_dataset(
            zstore,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )
