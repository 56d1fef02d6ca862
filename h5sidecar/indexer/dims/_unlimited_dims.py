"""The length of an unlimited dimension as netCDF readers show it, and the shapes it gives.

netCDF-4 lets a variable on an unlimited dimension hold fewer records than the dimension has
(``t`` written for 3 records, ``val(t, n)`` for 2): HDF5 keeps each dataset's own extent, and
netCDF readers show every variable on the dimension at its length, the records never written
as the fill value.  h5netcdf's rule (``Dimension.size``): a dimension whose scale is unlimited
(``maxshape == (None,)``) is as long as the longest of the scale itself and the axes attached
to it.  The attached axes are found from the walked datasets' ``DIMENSION_LIST`` (the last
scale of an axis, as h5netcdf names it), the inverse of the scale's ``REFERENCE_LIST`` that
h5netcdf reads, without dereferencing every entry of it.

Only chunked and compact datasets are shown longer: their missing records can be referenced as
never-written chunks or decoded into the sidecar.  A contiguous dataset keeps its extent.  So
does a dataset that would gain more than :data:`MAX_ADDED_CHUNKS` chunks: one corrupt extent
(a flipped bit in a dataspace: 4,278,190,083 records where 3 are stored) would otherwise
lengthen every variable on its dimension to billions of fill records, each never-written chunk
held in the sidecar; such a dataset is listed in :attr:`UnlimitedLengths.kept` with the reason,
and the granule's extras say so (``kept_hdf5_extent``).
"""

from __future__ import annotations

from collections.abc import Callable

import h5py
import numpy as np

from h5sidecar.indexer._failures import H5PY_ERRORS, dcpl, reraise_io_failure
from h5sidecar.indexer._walk import DatasetEntry, ObjectKey

__all__ = ["MAX_ADDED_CHUNKS", "UnlimitedLengths", "unlimited_first_axis"]

#: most chunks a dataset may gain by being shown at its unlimited dimension's length
MAX_ADDED_CHUNKS = 10_000

#: layouts whose datasets are shown at their dimensions' length (see the module docstring)
_EXTENSIBLE = (h5py.h5d.CHUNKED, h5py.h5d.COMPACT)


def unlimited_first_axis(dset: h5py.Dataset, *, only_axis: bool = False) -> bool:
    """Whether ``dset``'s first axis is unlimited (``only_axis``: and it has no other axis, as
    an unlimited dimension's scale); False when HDF5 cannot say."""
    try:
        maxshape = tuple(dset.maxshape or ())
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return False
    return bool(maxshape) and maxshape[0] is None and (not only_axis or len(maxshape) == 1)


def _extensible(dset: h5py.Dataset) -> bool:
    try:
        return dcpl(dset).get_layout() in _EXTENSIBLE
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return False


class UnlimitedLengths:
    """Shapes of a file's datasets with unlimited dimensions at their netCDF length.

    Parameters
    ----------
    entries : list of DatasetEntry
        The walked datasets (aliases are skipped: they are the same datasets).
    scales : dict
        :data:`ObjectKey` of each dimension scale -> its name.
    base_shape : callable
        A dataset's own shape (a virtual dataset's worked out from its sources).
    axis_scales : callable
        ``axis_scales(dset, rank)``: the key of the scale naming each axis (``None``: none).
    """

    def __init__(
        self,
        entries: list[DatasetEntry],
        scales: dict[ObjectKey, str],
        base_shape: Callable[[DatasetEntry], tuple[int, ...]],
        axis_scales: Callable[[h5py.Dataset, int], list[ObjectKey | None]],
    ) -> None:
        self._entries = [e for e in entries if e.alias_of is None]
        self._scales = scales
        self._base = base_shape
        self._axis_scales = axis_scales
        self._lengths: dict[ObjectKey, int] | None = None  # unlimited scale -> its length
        self._axes: dict[str, list[ObjectKey | None]] = {}
        #: path -> why the dataset keeps its HDF5 extent (see :data:`MAX_ADDED_CHUNKS`)
        self.kept: dict[str, str] = {}

    def _scale_axes(self, entry: DatasetEntry, rank: int) -> list[ObjectKey | None]:
        """The scale of each axis; a scale's own first axis is its dimension."""
        if entry.path not in self._axes:
            axes = self._axis_scales(entry.dset, rank) if rank else []
            if rank and entry.key in self._scales and axes[0] is None:
                axes[0] = entry.key
            self._axes[entry.path] = axes
        return self._axes[entry.path]

    def _compute(self) -> dict[ObjectKey, int]:
        lengths: dict[ObjectKey, int] = {}
        for entry in self._entries:
            if entry.key in self._scales and unlimited_first_axis(entry.dset, only_axis=True):
                shape = self._base(entry)
                lengths[entry.key] = max(lengths.get(entry.key, 0), shape[0] if shape else 0)
        if not lengths:  # the usual case: no unlimited dimension, nothing else to read
            return lengths
        for entry in self._entries:
            shape = self._base(entry)
            for size, key in zip(shape, self._scale_axes(entry, len(shape)), strict=False):
                if key in lengths:
                    lengths[key] = max(lengths[key], size)
        return lengths

    def shape(self, entry: DatasetEntry) -> tuple[int, ...]:
        """``entry``'s shape with each axis on an unlimited dimension at its length."""
        shape = self._base(entry)
        if self._lengths is None:
            self._lengths = self._compute()
        if not self._lengths or not shape:
            return shape
        lengths = self._lengths
        axes = self._scale_axes(entry, len(shape))
        longer = tuple(max(s, lengths.get(k, 0)) if k is not None else s
                       for s, k in zip(shape, axes, strict=True))  # fmt: skip
        if longer == shape or not _extensible(entry.dset):
            return shape
        added = _added_chunks(entry.dset, shape, longer)
        if added > MAX_ADDED_CHUNKS:
            self.kept[entry.path] = (
                f"kept at its HDF5 extent {list(shape)}: shown at its unlimited dimension's "
                f"length {list(longer)} it would gain {added:,} chunks of fill values (more "
                f"than {MAX_ADDED_CHUNKS:,}); h5netcdf shows it at that length"
            )
            return shape
        return longer


def _added_chunks(dset: h5py.Dataset, shape: tuple[int, ...], longer: tuple[int, ...]) -> int:
    """Chunks ``dset`` gains shown at ``longer`` (a compact dataset is one chunk)."""
    chunks = tuple(dset.chunks or ()) or tuple(max(n, 1) for n in longer)

    def grid(extent: tuple[int, ...]) -> int:
        return int(np.prod([-(-n // c) for n, c in zip(extent, chunks, strict=False)],
                           dtype=np.float64))  # fmt: skip

    return grid(longer) - grid(shape)
