"""Zarr (v2 form) metadata of one array (:class:`ArrayMeta`), and its ``.zarray`` / ``.zattrs``
documents.

Kept in Zarr v2 form because that is what kerchunk sidecars persist and what fsspec's reference
filesystem serves; readers that want Zarr v3 synthesize it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._cf import encode_fill_attr
from h5sidecar.references._manifest import chunk_grid_shape

__all__ = ["ArrayMeta"]


@dataclass(frozen=True, slots=True)
class ArrayMeta:
    """Zarr (v2 form) metadata of one array.

    Attributes
    ----------
    shape, chunks : tuple of int
        Array and chunk shape (``()`` for scalars).
    dtype : str or list
        Zarr v2 dtype: a numpy type string (``"<f4"``, ``">i2"``, ``"|S8"``, ``"|O"``) or the v2
        list form of a structured dtype.
    fill_value : Any
        The HDF5 *storage* fill value in Zarr v2 JSON encoding: what unallocated chunks read as.
        Not the same thing as the ``_FillValue`` attribute (see ``zarray_fill_value``).
    filters : tuple of dict
        numcodecs configs in *encode* order (decode runs them backwards); the HDF5 pipeline maps
        here entirely, so ``compressor`` is normally ``None``.
    compressor : dict or None
        numcodecs config of the compressor, if the pipeline has a single final compressor.
    dimension_names : tuple of str
        Names of the dimensions (netCDF4 dimensions, dimension scales or phony names).
    attrs : Mapping
        JSON-ready attributes (CF attributes kept verbatim, HDF5 bookkeeping dropped).
    order : "C" or "F"
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str | list[Any]
    fill_value: Any = None
    filters: tuple[Mapping[str, Any], ...] = ()
    compressor: Mapping[str, Any] | None = None
    dimension_names: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    order: Literal["C", "F"] = "C"

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        chunks = tuple(int(c) for c in self.chunks)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "chunks", chunks)
        chunk_grid_shape(shape, chunks)  # validates rank and positivity
        if self.dimension_names and len(self.dimension_names) != len(shape):
            raise InvalidReferenceError(
                f"{len(self.dimension_names)} dimension names for a {len(shape)}-d array"
            )
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))
        object.__setattr__(self, "filters", tuple(MappingProxyType(dict(f)) for f in self.filters))

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle (Dask ships stores to workers): rebuild from dicts.
        return (
            ArrayMeta,
            (
                self.shape,
                self.chunks,
                self.dtype,
                self.fill_value,
                tuple(dict(f) for f in self.filters),
                None if self.compressor is None else dict(self.compressor),
                self.dimension_names,
                dict(self.attrs),
                self.order,
            ),
        )

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Shape of the chunk grid."""
        return chunk_grid_shape(self.shape, self.chunks)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy dtype of the decoded array."""
        if isinstance(self.dtype, list):
            return np.dtype([tuple(f) for f in _as_tuples(self.dtype)])
        return np.dtype(self.dtype)

    def zarray(self, *, fill_value: Any = ...) -> dict[str, Any]:
        """The ``.zarray`` document (``fill_value`` overrides the stored one when given)."""
        return {
            "zarr_format": 2,
            "shape": list(self.shape),
            "chunks": list(self.chunks),
            "dtype": self.dtype,
            "fill_value": self.fill_value if fill_value is ... else fill_value,
            "order": self.order,
            "filters": [dict(f) for f in self.filters] or None,
            "compressor": None if self.compressor is None else dict(self.compressor),
            "dimension_separator": ".",
        }

    def zattrs(self) -> dict[str, Any]:
        """The ``.zattrs`` document: attributes plus ``_ARRAY_DIMENSIONS``.

        ``_FillValue`` is written in xarray's Zarr encoding (floats as base64 of ``<f8``) so Zarr
        v3 readers decode it; :func:`~h5sidecar.references._zmeta.array_meta` reverses it.
        """
        out = dict(self.attrs)
        if "_FillValue" in out and not isinstance(self.dtype, list):
            out["_FillValue"] = encode_fill_attr(out["_FillValue"], self.numpy_dtype)
        out["_ARRAY_DIMENSIONS"] = list(self.dimension_names)
        return out


def _as_tuples(descr: list[Any]) -> list[tuple[Any, ...]]:
    out = []
    for f in descr:
        name, typ, *rest = f
        if isinstance(typ, list):
            typ = np.dtype([tuple(x) for x in _as_tuples(typ)])
        out.append((name, typ, *(tuple(r) for r in rest)))
    return out
