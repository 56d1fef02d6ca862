"""One group of a granule as an xarray data store served straight from the references.

Opening a group through xarray's ``ZarrStore`` builds a zarr Group and a zarr Array per variable
(metadata objects, codec pipelines, a members listing, hops to zarr's event loop), only for the
engine to replace most of what they give: attributes, the lazy data and the preferred chunks.
A DataTree of an ATL03-like granule opens ~140 groups and ~1,000 variables that way, which cost
more than reading all of its data.  :class:`RefsGroupStore` hands xarray the same variables --
dimensions, typed CF attributes, the encoding zarr would give (``chunks``, ``preferred_chunks``,
``compressors``, ``filters``, ``shards``) and lazy data read by the native batch reader -- from
the parsed references alone; xarray's own CF decoding then decodes them as before (see
:mod:`h5sidecar.read.xarray._dataset_build`).  Arrays the batch reader does not decode (Python objects)
still get a zarr Array, read through xarray's ``ZarrArrayWrapper``.

The xarray engine uses this store for Zarr v2 views with ``native=True`` (the default); the
tests check that its Datasets (variables, attributes, encodings, values) equal those of the
zarr path and h5py's values.

Why two data stores (this one and xarray's ``ZarrStore`` in
:mod:`h5sidecar.read.xarray._zarr_data_store`): ``native=False`` promises zarr's reader for
every array, and a Zarr v3 view's encodings (codecs, dtypes) are zarr's to give; the zarr path is
also the oracle the tests hold this one to.  This one is the default because it opens the
groups of a granule several times faster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xarray import Variable
from xarray.backends import AbstractDataStore
from xarray.core import indexing

from h5sidecar._compat.xarray import ZARR_DIMENSION_KEY as DIMENSION_KEY
from h5sidecar._compat.xarray import FrozenDict, ZarrArrayWrapper
from h5sidecar.read._granule_reader import GranuleReader
from h5sidecar.read.native._decode import numcodec
from h5sidecar.read.xarray._attributes import aligned_chunks, cf_attributes, group_attributes
from h5sidecar.read.xarray._lazy_array import SidecarArray
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs

__all__ = ["RefsGroupStore", "group_members"]


def group_members(refs: GranuleRefs, groups: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Paths of the arrays directly in each group (all groups, or ``groups``), from one pass
    over the arrays, in the order zarr lists a group's members: the consolidated metadata's
    sorted keys (``<path>/.zarray``), which xarray keeps as the order of the variables."""
    out: dict[str, list[str]] = {g: [] for g in (refs.groups if groups is None else groups)}
    for path in sorted(refs.arrays, key=lambda p: p + "/"):
        members = out.get(path.rpartition("/")[0])
        if members is not None:
            members.append(path)
    return out


class RefsGroupStore(AbstractDataStore):
    """xarray's view of one group of a granule, without zarr objects (see the module docstring).

    Parameters
    ----------
    reader : GranuleReader
        The granule; data are read through its
        :class:`~h5sidecar.read.native._batch_reader.NativeReader`.
    group : str
        Group path (``""`` for the root).
    members : list of str
        The paths of the group's arrays (see :func:`group_members`).
    chunk_bytes : int
        Target size of the preferred (Dask) chunks, see :func:`aligned_chunks`.
    """

    __slots__ = ("chunk_bytes", "group", "members", "reader")

    def __init__(self, reader: GranuleReader, group: str, members: list[str],
                 chunk_bytes: int) -> None:
        self.reader = reader
        self.group = group
        self.members = members
        self.chunk_bytes = chunk_bytes

    def get_variables(self) -> Mapping[str, Variable]:
        return FrozenDict((p.rpartition("/")[2], self._variable(p)) for p in self.members)

    def get_attrs(self) -> dict[str, Any]:
        # as xarray's ZarrStore: NCZarr's bookkeeping attributes are not the group's
        refs = self.reader.refs
        attrs = refs.groups[self.group]
        hints = refs.extra.get("attribute_dtypes", {}).get(self.group, {})
        kept = {k: v for k, v in attrs.items() if not k.lower().startswith("_nc")}
        return group_attributes(kept, hints)

    def get_dimensions(self) -> dict[str, int]:
        dims: dict[str, int] = {}
        for path in self.members:
            meta = self.reader.refs.arrays[path].meta
            for d, s in zip(meta.dimension_names, meta.shape, strict=True):
                if dims.setdefault(d, s) != s:
                    raise ValueError(
                        f"found conflicting lengths for dimension {d} ({s} != {dims[d]})"
                    )
        return dims

    def _variable(self, path: str) -> Variable:
        refs, reader = self.reader.refs, self.reader.native
        meta = refs.arrays[path].meta
        dims = meta.dimension_names
        if len(dims) != len(meta.shape):  # what xarray's ZarrStore raises for such an array
            raise KeyError(
                f"Zarr object is missing the attribute `{DIMENSION_KEY}`, which is required "
                "for xarray to determine variable dimensions."
            )
        codec = reader.codec(path) if reader.supports(path) else None
        data: Any
        if codec is not None and (codec.dtype == meta.numpy_dtype or codec.strings):
            # (strings: read natively as zarr reads them, without opening a zarr array)
            data = indexing.LazilyIndexedArray(SidecarArray(reader, path))
        else:  # Python objects: zarr's reader, as on the zarr path
            # (the granule's Zarr v2 view, sharing this reader's fetcher and caches)
            wrapper = ZarrArrayWrapper(SidecarStore.for_reader(self.reader).zarr_array(path))
            native = codec is not None and wrapper.dtype == codec.dtype
            data = indexing.LazilyIndexedArray(SidecarArray(reader, path) if native else wrapper)
        hints = refs.extra.get("attribute_dtypes", {}).get(path, {})
        chunks = tuple(int(c) for c in meta.chunks)
        aligned = aligned_chunks(meta.shape, chunks, meta.numpy_dtype.itemsize, self.chunk_bytes)
        # the keys and values xarray's ZarrStore puts there for a Zarr v2 array
        encoding: dict[str, Any] = {
            "chunks": chunks,
            "preferred_chunks": dict(zip(dims, aligned, strict=True)),
        }
        if data.dtype.kind == "T":  # as ZarrStore: zarr's own string dtype is kept
            encoding["dtype"] = data.dtype
        encoding["compressors"] = _codecs([meta.compressor] if meta.compressor else [])
        encoding["filters"] = _codecs(meta.filters)
        encoding["shards"] = None
        return Variable(dims, data, cf_attributes(meta, hints), encoding)


def _codecs(configs: Iterable[Mapping[str, Any]]) -> tuple[Any, ...]:
    return tuple(numcodec(c) for c in configs)
